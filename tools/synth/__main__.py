import sys

from tools.synth import main

sys.exit(main())
