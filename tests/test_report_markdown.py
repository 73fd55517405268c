"""The Markdown post-mortem: every section, evidence as ``path:line``, a capped timeline, safe quoting."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

import pytest
from report_fixtures import EIO, HOSTILE, NS, T0, _ranges, empty_report, make_report  # noqa: F401

from correlator.model import (
    Diagnostic,
    TimelineEvent,
    Verdict,
)
from correlator.report import markdown

# --- tests ---------------------------------------------------------------------------------------


def test_post_mortem_has_every_section() -> None:
    text = markdown.render(make_report())
    assert text.startswith("# Post-mortem: job 88123\n")
    assert "**rank 1 on gpu-a01 failed first: Checkpoint save failed with EIO**" in text
    for heading in ("## Job", "### Clock offsets", "## Root cause", "### Evidence", "### Why this rank",
                    "### Mechanism", "## Impact", "## What to do", "### Prevention", "### References",
                    "## Causal chain", "## Collateral", "## Timeline", "## Ranks", "## What could not be read"):
        assert f"\n{heading}\n" in text, heading
    assert "`slurm-88123.out:20418`" in text                       # evidence as path:line
    assert "- [ ] Run `lfs check osts` on the node" in text        # confirm is a checklist
    assert "| ranks | 8 |" in text and "2: gpu-a01, gpu-a02" in text
    assert "| gpu-a02 | +0.012 s | 3.0 ms | 40 |" in text           # clock offsets table
    assert "0,2-7" in text                                         # collateral rank set
    assert "+600.2 s … +600.8 s" in text
    assert "truncated gzip stream at byte 1048576" in text          # diagnostics
    assert "<https://github.com/pytorch/pytorch/blob/main/torch/serialization.py>" in text


def test_rule_prose_cannot_open_html_but_keeps_code_spans() -> None:
    text = markdown.render(make_report())
    assert "kernel log &lt;dmesg>" in text
    assert "`EIO`" in text


def test_long_timeline_is_capped_and_says_how_many_were_left_out() -> None:
    report = make_report(n_hosts=64, per_host=8, root_rank=37)
    text = markdown.render(report, timeline_limit=50)
    section = text.split("<summary>Timeline table", 1)[1].split("</details>", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| ") and not line.startswith("| time")]
    assert len(rows) == 50
    left = len(report.timeline) - 50
    assert f"50 of {len(report.timeline)} events shown; {left} left out" in section
    assert "**ROOT** `storage.eio-on-checkpoint-save`" in section   # the root is always kept
    assert "slurm.step-cancelled" in section                       # so is the last teardown wave's last event


def test_select_timeline_keeps_order_and_every_wave() -> None:
    report = make_report(n_hosts=16, per_host=8, root_rank=100)
    kept, left_out = markdown.select_timeline(report.timeline, 12)
    assert len(kept) == 12 and left_out == len(report.timeline) - 12
    positions = [report.timeline.index(e) for e in kept]
    assert positions == sorted(positions)
    assert {e.rule for e in kept} == {e.rule for e in report.timeline}
    assert kept[0].label == "root"
    assert markdown.select_timeline(report.timeline[:5], 12) == (list(report.timeline[:5]), 0)


def _outside_code(text: str) -> str:
    return re.sub(r"(`+)(.+?)\1", "", text)


def test_hostile_log_text_stays_inside_code_spans() -> None:
    text = markdown.render(make_report(root_text=HOSTILE))
    assert "<script" not in _outside_code(text) and "<img" not in _outside_code(text)
    assert "alert(1)" in text
    # the pipe in the log line cannot split a table row: every timeline row has the header's cell count
    section = text.split("<summary>Timeline table", 1)[1].split("</details>", 1)[0]
    table = [line for line in section.splitlines() if line.startswith("|")]
    cells = {len(re.split(r"(?<!\\)\|", line)) for line in table}
    assert len(cells) == 1


def test_host_names_and_messages_are_escaped() -> None:
    report = make_report(hosts=["gpu_<b>x</b>", "n*2"], per_host=2, root_rank=0)
    report = replace(report, diagnostics=(Diagnostic(level="error", path="a|b.log", message="bad <byte> *here*"),))
    text = markdown.render(report)
    assert "<b>" not in _outside_code(text)
    assert "bad \\<byte\\> \\*here\\*" in text
    assert "gpu\\_\\<b\\>x\\</b\\>" in text


def test_code_span_holds_backticks() -> None:
    assert markdown.md_code("a `b` c") == "`` a `b` c ``"
    assert markdown.md_code("plain") == "`plain`"
    assert markdown.md_code("two\nlines") == "`two ⏎ lines`"


@pytest.mark.parametrize("verdict", [Verdict.NO_FAILURE, Verdict.JOB_LEVEL, Verdict.UNDETERMINED])
def test_reports_without_a_root_render(verdict: Verdict) -> None:
    text = markdown.render(empty_report(verdict))
    assert "## Root cause" in text and "## What could not be read" in text
    assert "Everything given was read." in text
    assert "_No rule matched any line._" in text


def test_tie_inherited_time_and_untimed_events() -> None:
    report = make_report()
    root = replace(report.root_cause, tie=(4, 5, 6), decided_by="signal-exit")
    untimed = TimelineEvent(time=None, rank=3, host="gpu-a01", rule="python.uncaught-exception", role="primary",
                            path="rank-3.log", line=9, text="Traceback (most recent call last):", label="independent",
                            time_kind="none")
    inherited = replace(report.timeline[1], time_kind="inherited")
    report = replace(report, root_cause=root, timeline=(report.timeline[0], inherited, untimed) + report.timeline[2:])
    text = markdown.render(report)
    assert "rank 1 on gpu-a01 failed first: Checkpoint save failed with EIO, tied with ranks 4-6" in text
    assert "a worker killed by a signal nobody sent it" in text
    assert " ~ |" in text and "no timestamp of its own" in text
    assert "| - | - | gpu-a01 | 3 | `python.uncaught-exception` | independent |" in text


def test_time_and_delay_formats() -> None:
    assert markdown.fmt_delta(0.0) == "0 s"
    assert markdown.fmt_delta(0.035) == "+35 ms"
    assert markdown.fmt_delta(-1.2) == "-1.20 s"
    assert markdown.fmt_delta(600.24) == "+600.2 s"
    assert markdown.fmt_delta(None) == "-"
    assert markdown.fmt_time("2026-03-02T14:07:31.412Z") == "2026-03-02 14:07:31.412"
    assert markdown.rank_ranges([5, 0, 1, 2, 7, 8]) == "0-2,5,7-8"


# --- end to end: the real pipeline over small logs written here, and over sample_logs/*/ ---------

from report_fixtures import REPO, SAMPLE_JOBS, analyze_job, write_job  # noqa: E402,F401


def test_every_sample_job_renders_as_markdown(tmp_path: Path) -> None:
    jobs = [(write_job(tmp_path / "inline", "9001"), "9001")] + [(p, p.name) for p in SAMPLE_JOBS]
    for folder, job_id in jobs:
        report = analyze_job(folder, job_id)
        text = markdown.render(report)
        assert text.startswith(f"# Post-mortem: job {job_id}\n"), folder
        for heading in ("## Job", "## Root cause", "## Collateral", "## Timeline", "## What could not be read"):
            assert f"\n{heading}\n" in text, (folder, heading)
        if report.root_cause is not None:
            for ev in report.root_cause.evidence:
                assert f"{ev.path}:{ev.line}" in text, folder
        if job_id == "9001":
            assert "rank 1 on gpu-b07 failed first" in text


def test_impact_actions_mermaid_and_a_folded_table() -> None:
    """Issue 15 item 6: the Markdown has the impact, the fix with action items, a Mermaid timeline
    (its labels cannot carry Mermaid syntax from the logs) and the timeline table in <details>."""
    report = make_report(hosts=["gpu:a01;%%{init}", "gpu-a02"])
    text = markdown.render(report)
    assert text.index("## Impact") < text.index("## What to do") < text.index("## Root cause")
    assert "- [ ] Run `lfs check osts` on the node" in text
    mermaid = text.split("```mermaid\n", 1)[1].split("```", 1)[0]
    lines = mermaid.splitlines()
    assert lines[0] == "timeline" and lines[1].startswith("    title ")
    assert any("ROOT rank 1 on gpu_a01____init_" in line for line in lines)  # : ; % { } replaced in the host
    for line in lines[2:]:
        assert ";" not in line and "%" not in line and "#" not in line and "<" not in line and "{" not in line
    assert "<details>\n<summary>Timeline table" in text and "\n</details>\n" in text
    assert markdown.mermaid_text("a: b; <c> #d \x1b[2J") == "a_ b_ _c_ _d _x1b_2J"
