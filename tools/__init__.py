"""Development tools of this repository: used by the tests, the benchmarks and ``sample_logs/``.

Nothing here is part of the installed ``correlate`` package (``pyproject.toml`` lists only
``correlator`` packages, and ``tests/test_structure.py`` checks that the wheel holds none of this).
"""
