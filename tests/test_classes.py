"""One small job per failure class, built from real message formats, run through the whole pipeline.

Each folder under ``tests/classes/<class-slug>-<n>/`` holds the log files of a made-up job whose
failure/noise lines use the exact formats of the software that prints them, a ``source.md`` naming
that software (repository, file, commit or release tag) for every such line, and an
``expected.toml`` with what really happened in the scenario:

    class = "caught-traceback"     # one of CLASSES below
    verdict = "root_cause" | "job_level" | "no_failure" | "undetermined"
    root_rank = 11                 # the rank that failed first
    node = "gpu-b03"               # instead of root_rank: a node-level failure (no rank is the cause)
    rule = "cuda.out-of-memory"    # when one rule should name the failure
    rule_any = ["a", "b"]          # when several rules are acceptable

The expectations are the scenario's truth, never what the tool happens to print; the verdict model
is being rebuilt against them (issue 12), so some of these are expected to fail until it is.
"""

from __future__ import annotations

import re
from pathlib import Path

import expectations
import pytest

from correlator.pipeline import Options, analyze

ROOT = Path(__file__).parent / "classes"
CASES = sorted(p for p in ROOT.iterdir() if (p / "expected.toml").is_file()) if ROOT.is_dir() else []
CLASSES = (
    "caught-traceback",
    "shutdown-noise",
    "srun-task-is-rank",
    "crash-and-peer-transport",
    "node-signal-wave",
    "multi-pg-seqnum",
    "hang-reports",
    "gloo-hang-mismatch",
    "job-level-ends",
    "signal-deaths",
)


#: "owner/name" followed (after a tag or commit, within a line) by a `path/or.file` in backticks
REPO_FILE = re.compile(r"\b[A-Za-z0-9][\w.-]*/[\w.-]+\b[^\n`]{0,120}`[^`]*[./][^`]*`")


def _expected(case: Path) -> dict:
    return expectations.read(case, frozenset({"class"}))


def test_cases_are_complete() -> None:
    per_class = {c: 0 for c in CLASSES}
    for case in CASES:
        exp = _expected(case)
        assert exp.get("class") in per_class, f"{case.name}: class {exp.get('class')!r} is not one of {CLASSES}"
        assert case.name.startswith(exp["class"] + "-"), f"{case.name}: folder does not start with its class"
        per_class[exp["class"]] += 1
        assert exp.get("verdict") in {"root_cause", "job_level", "no_failure", "undetermined"}, case.name
        assert not ("root_rank" in exp and "node" in exp), f"{case.name}: root_rank and node are exclusive"
        source = case / "source.md"
        assert source.is_file(), f"{case.name}: no source.md"
        text = source.read_text(encoding="utf-8")
        # names at least one repository (owner/name) with a file in backticks, and a commit or a release tag
        assert REPO_FILE.search(text), f"{case.name}: source.md names no repository with a file"
        assert re.search(r"\b(commit [0-9a-f]{7,40}|tag `[^`]+`|release `[^`]+`)", text), f"{case.name}: source.md names no commit or tag"
        logs = [p for p in case.rglob("*") if p.is_file() and p.suffix not in {".md", ".toml"}]
        assert logs, f"{case.name}: no log file"
        assert sum(p.stat().st_size for p in logs) < 60_000, f"{case.name}: logs over 60 KB"
    thin = {c: n for c, n in per_class.items() if n < 2}
    assert not thin, f"classes with fewer than 2 cases: {thin}"


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_class_case(case: Path) -> None:
    exp = _expected(case)
    report = analyze([str(case)], Options(tz="UTC", workers=1))
    assert expectations.mismatch(report, exp) is None, expectations.mismatch(report, exp)


@pytest.mark.parametrize("case", [c for c in CASES if "node" in _expected(c)], ids=lambda c: c.name)
def test_a_node_level_root_reads_as_the_node_in_every_format(case: Path) -> None:
    from correlator.model.evidence import describe
    from correlator.report import RENDERERS, render

    report = analyze([str(case)], Options(tz="UTC", workers=1))
    node = _expected(case)["node"]
    for fmt in RENDERERS:
        text = render(report, fmt)
        assert node in text, fmt
        if fmt in ("terminal", "markdown"):
            assert describe(report.root_cause.decided_by) in text, fmt
            assert "unknown rank" not in text, fmt
