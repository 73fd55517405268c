from __future__ import annotations

from correlator.cli import main

main()
