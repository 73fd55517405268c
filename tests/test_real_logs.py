"""Real logs pasted in public issue threads, run through the whole pipeline.

Each folder under ``tests/real_logs/`` holds the log text as the reporter pasted it (prefixes,
interleaving and mess kept; only trimmed), a ``source.md`` naming the thread and what it
concluded, and an ``expected.toml`` with the verdict the thread establishes:

    verdict = "root_cause" | "job_level" | "no_failure" | "undetermined"
    root_rank = 11                 # when the thread establishes which rank failed first
    rule = "cuda.out-of-memory"    # when one rule should name the failure
    rule_any = ["a", "b"]          # when several rules are acceptable

The expectations are what the thread says happened, never what the tool happens to print.
"""

from __future__ import annotations

from pathlib import Path

import expectations
import one_verdict
import pytest

from correlator.pipeline import Options, analyze

ROOT = Path(__file__).parent / "real_logs"
CASES = sorted(p for p in ROOT.iterdir() if (p / "expected.toml").is_file()) if ROOT.is_dir() else []


def _expected(case: Path) -> dict:
    return expectations.read(case)


def test_cases_are_complete() -> None:
    assert len(CASES) >= 20
    for case in CASES:
        assert (case / "source.md").is_file(), case.name
        assert "https://github.com/" in (case / "source.md").read_text(encoding="utf-8"), case.name
        logs = [p for p in case.rglob("*") if p.is_file() and p.suffix not in {".md", ".toml"}]
        assert logs, f"{case.name}: no log file"
        assert sum(p.stat().st_size for p in logs) < 60_000, f"{case.name}: logs over 60 KB"


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_real_log(case: Path) -> None:
    exp = _expected(case)
    report = analyze([str(case)], Options(tz="UTC", workers=1))
    assert expectations.mismatch(report, exp) is None, expectations.mismatch(report, exp)
    one_verdict.check(report, case.name)  # every format states this verdict (issue 15 item 4)
