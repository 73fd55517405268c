"""Logs of real jobs, recorded under fault injection, run through the whole pipeline.

Each folder under ``tests/recorded/`` holds the logs a real launcher wrote (torchrun ``--tee`` /
``--log-dir``, one file per rank, several torchrun agents as nodes, Lightning, SLURM), a
``README.md`` saying what was injected, the exact command and the versions that ran, and an
``expected.toml`` whose truth comes from the injection plan, never from what the tool prints:

    verdict = "root_cause" | "job_level" | "no_failure" | "undetermined"
    root_rank = 2                          # the rank the fault was injected on
    rule = "python.uncaught-exception"     # when one rule names the injected fault
    rule_any = ["a", "b"]                  # when several rules name it
    tie_ok = true                          # the logs cannot order it: the truth may be in the verdict's tie

``benchmarks/realjobs/record.py`` writes most of them (CI does not rerun the jobs: it reads the
committed recordings).
"""

from __future__ import annotations

from pathlib import Path

import expectations
import one_verdict
import pytest

from correlator.pipeline import Options, analyze

ROOT = Path(__file__).parent / "recorded"
CASES = sorted(p.parent for p in ROOT.glob("*/expected.toml")) if ROOT.is_dir() else []
MAX_CASE_BYTES = 5_000_000


def test_cases_are_complete() -> None:
    assert len(CASES) >= 30
    for case in CASES:
        assert (case / "README.md").is_file(), f"{case.name}: no README.md"
        assert (case / "expected.toml").is_file(), f"{case.name}: no expected.toml"
        files = [p for p in case.rglob("*") if p.is_file()]
        logs = [p for p in files if p.name not in {"README.md", "expected.toml"}]
        assert logs, f"{case.name}: no log file"
        size = sum(p.stat().st_size for p in files)
        assert size < MAX_CASE_BYTES, f"{case.name}: {size} bytes, over 5 MB"


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_recorded_job(case: Path) -> None:
    exp = expectations.read(case)
    report = analyze([str(case)], Options(tz="UTC", workers=1))
    assert expectations.mismatch(report, exp) is None, expectations.mismatch(report, exp)
    one_verdict.check(report, case.name)  # every format states this verdict (issue 15 item 4)
