"""Healthy jobs with benign noise (``tests/healthy_jobs.py``) in four log styles: every one must be
``no_failure`` -- a caught and retried error, a warning, NCCL's teardown and the TCPStore lines of
ranks that outlive rank 0 at exit are no failure of the job."""

from __future__ import annotations

from pathlib import Path

import pytest
from healthy_jobs import STYLES, healthy_job
from metamorphic import write_job

from correlator.model import UNDETERMINED_NOTE
from correlator.pipeline import Options, analyze

SEEDS = range(13)  # x 4 styles = 52 jobs


def said(rep) -> str:
    """What a false alarm said: the verdict, the rule and the line that caused it."""
    rc = rep.root_cause
    if rc is not None:
        ev = rc.evidence[0] if rc.evidence else None
        return (f"{rep.verdict.value} rank {rc.rank} {rc.rule} decided_by={rc.decided_by} at "
                f"{ev.path.rsplit('/', 1)[-1] + ':' + str(ev.line) if ev else '?'}: {ev.text if ev else ''!r}")
    notes = [d.message for d in rep.diagnostics if d.message.startswith(UNDETERMINED_NOTE)]
    seen: dict[str, str] = {}
    for e in rep.timeline:
        if e.role in ("primary", "collateral") and e.rule not in seen:
            seen[e.rule] = f"{e.rule} ({e.role}) rank {e.rank} {e.path.rsplit('/', 1)[-1]}:{e.line}: {e.text[:160]!r}"
    return f"{rep.verdict.value}: {notes}; lines: {list(seen.values())[:4]}"


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("style", sorted(STYLES))
def test_healthy_job_is_no_failure(style: str, seed: int, tmp_path: Path) -> None:
    paths = write_job(healthy_job(seed, style), tmp_path / "job")
    rep = analyze(paths, Options(tz="UTC", workers=1))
    assert rep.verdict.value == "no_failure", said(rep)


def test_healthy_jobs_are_deterministic_and_distinct() -> None:
    for style in STYLES:
        assert healthy_job(3, style) == healthy_job(3, style)
        assert healthy_job(3, style) != healthy_job(4, style)
