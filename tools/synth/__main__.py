"""``python -m tools.synth``: the generator's command line (see ``generate.main``)."""

import sys

from tools.synth.generate import main

sys.exit(main())
