from __future__ import annotations

from correlator.launch import main

main()
