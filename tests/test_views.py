"""One verdict, rendered the same everywhere (issue 15 item 4): every format of every sample job
states the verdict, rank, rule and time of the report, with the same headline; a hang's culprit
is never called the first failure, and the root rank is never counted as its own collateral. The
recorded and real-log cases run the same check (``one_verdict.check``) in their own tests."""

from __future__ import annotations

from pathlib import Path

import one_verdict
import pytest

from correlator.model import expand_ranks
from correlator.pipeline import Options, analyze
from correlator.report import view as views

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = sorted(p for p in (ROOT / "sample_logs").iterdir() if (p / "expected.toml").exists())


@pytest.fixture(scope="module")
def reports():
    return {p.name: analyze([str(p)], Options(tz="UTC")) for p in SAMPLES}


@pytest.mark.parametrize("sample", SAMPLES, ids=[p.name for p in SAMPLES])
def test_every_format_states_the_same_verdict(sample, reports):
    one_verdict.check(reports[sample.name], sample.name)


def test_the_silent_culprit_is_said_to_hang_in_every_format(reports):
    report = reports["nccl-hang-silent-culprit"]
    v = views.build(report)
    assert v.root is not None and v.root.kind is views.Kind.HANG and v.root.line is None
    assert v.headline.startswith("rank 11 on hgx-01 hung the job: it logged no error")
    # its evidence lines are its peers' timeouts: shown as theirs, never as the root's line
    assert v.root.peer_lines and all("[Rank 11]" not in ev.text for ev in v.root.peer_lines)
    assert v.root.event is None


def test_the_root_ranks_own_later_lines_are_not_collateral(reports):
    """multinode-disagreeing-tables: rank 22's ECC error is followed by its own abort and its
    launcher's report of it; they are the root's, and no collateral group counts rank 22."""
    report = reports["multinode-disagreeing-tables"]
    v = views.build(report)
    assert v.root is not None and v.root.rank == 22
    assert {g.rule for g in v.root_groups} >= {"python.abort-sigabrt"}
    assert all(22 not in expand_ranks(g.ranks) for g in v.collateral if g.ranks)
    assert v.collateral_ranks == 24  # the three other nodes' ranks timed out; gpu-b03's were killed
    terminal = one_verdict.render(report, "terminal", width=10_000)
    collateral = terminal.split("\ncollateral", 1)[1].split("\nroot's own", 1)[0]
    assert ",22," not in collateral and "-22" not in collateral


def test_the_readers_read_what_each_output_says(reports):
    """The check reads every output on its own: an output naming another rank, rule or time, or
    calling a hang's culprit the first failure, reads back as that (so the check would fail)."""
    report = reports["nccl-hang-silent-culprit"]
    md = one_verdict.render(report, "markdown")
    said = one_verdict.read_markdown(md.replace("· rank 11 ·", "· rank 4 ·").replace("00:33:02.084", "00:43:03.736"))
    assert said["rank"] == 4 and said["time"] == "2026-03-18 00:43:03.736"
    page = one_verdict.render(report, "html").replace("hung the job", "failed first", 1)
    assert "failed first" in one_verdict.read_html(page)["headline"]
    term = one_verdict.render(report, "terminal", width=10_000).replace("rule nccl.watchdog", "rule gloo.watchdog", 1)
    assert one_verdict.read_terminal(term)["rule"] == "gloo.watchdog-collective-timeout"
