"""The seeded fault-injection generator of realistic job logs (ground truth for tests and benchmarks).

A development package, not shipped in the wheel; it imports nothing from ``correlator`` so that the
analyzer can be measured against it. ``generate_job`` writes one job and returns its ``Truth``;
``generate_suite`` writes the benchmark's varied mix.
"""

from __future__ import annotations

from tools.synth.job import FAULTS, LAYOUTS, PROFILES, FaultKind, Truth, generate_job, generate_suite, main

__all__ = ["FAULTS", "LAYOUTS", "PROFILES", "FaultKind", "Truth", "generate_job", "generate_suite", "main"]
