"""``correlate history DIR``: what failed across many jobs, from the Parquet dataset ``--parquet`` wrote.

This module owns the cross-job summary: jobs by verdict, what ended them by category and by rule
(with the rank-hours they spanned, a GPU-hours proxy), and the nodes that were the root of more
than one failure (candidates to drain). ``summarize`` reads the ``incidents`` table (its
``verdict`` rows, one per job; with ``node``, the ``ranks`` table too, for where each job ran)
through ``correlator.report.parquet`` and returns a frozen ``HistorySummary``; ``render_table``,
``render_json`` and ``render_markdown`` print it.

The counts add up, and the tests hold them to it: the verdicts sum to the jobs; every job that did
not end healthily (a failure, a job-level end, or one the logs could not decide) is in exactly one
category row and one rule row (``(none named)`` when no rule was), so each table sums to
``ended``; their rank-hours sum to ``ended_rank_hours``; and the jobs a filter left out
(``--since``, ``--node``) are counted by reason, so selected plus left out is the dataset.

It reads only what ``report/parquet.py`` wrote; it never re-analyses logs. pyarrow is imported
inside the reader. What it prints came from logs (host names, titles, job ids): every cell is made
safe for a terminal (``correlator.report.safe``), Markdown cells can open no link, image or HTML,
and the JSON writes no control character raw.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from correlator.errors import InputError, UsageError
from correlator.model import Diagnostic
from correlator.report.markdown import md_cell, md_code
from correlator.report.safe import json_safe, visible

#: a node is a drain candidate once it was the root of this many distinct jobs' failures
REPEAT_THRESHOLD = 2
#: the rule and category rows of jobs that did not end healthily but whose logs named no rule
NO_RULE, NO_CATEGORY = "(none named)", "(undetermined)"
#: ``--since`` durations: a number and one of these units
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_DURATION = re.compile(r"(\d+(?:\.\d+)?)\s*([smhdw])")


@dataclass(frozen=True, slots=True)
class CategoryRow:
    category: str
    jobs: int
    rank_hours: float


@dataclass(frozen=True, slots=True)
class RuleRow:
    rule: str
    category: str
    title: str
    jobs: int
    rank_hours: float
    job_ids: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class NodeRow:
    """A host that was the root of failures in several jobs."""

    host: str
    failures: int
    job_ids: tuple[str, ...]
    rules: tuple[str, ...]
    ranks: tuple[int, ...]
    first: str | None
    last: str | None


@dataclass(frozen=True, slots=True)
class HistorySummary:
    source: str
    #: the jobs summarized (those the filters kept)
    jobs: int
    #: (verdict, jobs), most frequent first; they sum to ``jobs``
    verdicts: tuple[tuple[str, int], ...]
    #: jobs that ended in a failure: a root cause, or failures without a nameable rank
    failures: int
    #: what ended the jobs that did not end healthily (failures, job-level ends, undetermined):
    #: one row per category and per rule, each table summing to ``ended``
    categories: tuple[CategoryRow, ...]
    rules: tuple[RuleRow, ...]
    #: nodes that were the root of at least ``REPEAT_THRESHOLD`` jobs' failures (drain candidates)
    repeated_roots: tuple[NodeRow, ...]
    rank_hours: float = 0.0
    #: what could not be read (a truncated partition file, a stray file), each left out; and notes
    diagnostics: tuple[Diagnostic, ...] = ()
    #: jobs that did not end healthily (``jobs`` minus the ``no_failure`` ones), and their rank-hours
    ended: int = 0
    ended_rank_hours: float = 0.0
    #: the filters: jobs since this instant (ISO), jobs that ran on this node
    since: str | None = None
    node: str | None = None
    #: with ``node``: the jobs whose root was on it
    node_roots: int | None = None
    #: jobs in the dataset, and those the filters left out by reason (they sum to the difference)
    dataset_jobs: int = 0
    left_out: tuple[tuple[str, int], ...] = ()


def parse_since(text: str, now: datetime | None = None) -> datetime:
    """``--since``: a date or date-time (ISO 8601: ``2026-03-01``, ``2026-03-01T14:00``, with a zone
    or UTC), or a duration back from ``now`` (``90m``, ``36h``, ``7d``, ``2w``, ``1d12h``)."""
    value = text.strip()
    whole = re.fullmatch(r"(?:\s*\d+(?:\.\d+)?\s*[smhdw])+", value)
    if whole:
        seconds = sum(float(n) * _UNITS[u] for n, u in _DURATION.findall(value))
        return (now or datetime.now(UTC)) - timedelta(seconds=seconds)
    try:
        when = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise UsageError(f"--since {text!r} is neither a date nor a duration",
                         hint="use a date like 2026-03-01 or 2026-03-01T14:00Z, or a duration like 36h, 7d, 2w") from None
    return when if when.tzinfo is not None else when.replace(tzinfo=UTC)


def _job_time(row: dict[str, Any]) -> datetime | None:
    """When a job happened, for ``--since``: its last line's time, else its first, else its root's."""
    return row.get("job_end") or row.get("job_start") or row.get("first_time")


def _iso(value: Any) -> str | None:
    """A UTC datetime from the table in the report's one time format."""
    if value is None:
        return None
    from correlator.model import iso

    whole = int(value.timestamp() // 1)
    return iso(whole * 1_000_000_000 + value.microsecond * 1000)


def summarize(directory: Path | str, *, since: datetime | None = None, node: str | None = None) -> HistorySummary:
    """Summarize the jobs in the dataset folder ``directory`` (the ``--parquet`` output): all of
    them, or those ``since`` an instant (by ``_job_time``; a job without any time is left out) and
    those that ran on ``node`` (a rank on it, or its root).

    A partition file that cannot be read is left out with a diagnostic (the summary's
    ``diagnostics``); only when nothing at all could be read does it raise ``InputError``."""
    from correlator.report.parquet import read_tables

    folder = Path(directory)
    if not (folder / "incidents").is_dir():
        raise InputError("no correlate Parquet dataset here (no incidents/ folder)", location=str(folder),
                         hint="write one with `correlate --parquet DIR LOGS...`")
    diagnostics: list[Diagnostic] = []
    tables = read_tables(folder, ("incidents", "ranks") if node is not None else ("incidents",), diagnostics)
    table = tables["incidents"]
    problems = [d for d in diagnostics if d.level != "info"]
    if table.num_rows == 0 and problems:
        first = problems[0]
        raise InputError(f"no file of the incidents table could be read ({len(problems)} left out; first: "
                         f"{first.path}: {first.message})", location=str(folder))
    rows = [r for r in table.to_pylist() if r["kind"] == "verdict"]
    # one verdict row per job; should a partition ever hold two, the job still counts once
    by_job: dict[str, dict[str, Any]] = {}
    for row in rows:
        by_job.setdefault(str(row["job_id"]), row)
    dataset_jobs = len(by_job)
    left_out: dict[str, int] = {}
    if since is not None:
        for job_id, row in list(by_job.items()):
            when = _job_time(row)
            if when is None or when < since:
                reason = "without a time (--since)" if when is None else "before --since"
                left_out[reason] = left_out.get(reason, 0) + 1
                del by_job[job_id]
    if node is not None:
        hosts: dict[str, set[str]] = {}
        for r in tables["ranks"].select(["job_id", "host"]).to_pylist():
            if r["host"]:
                hosts.setdefault(str(r["job_id"]), set()).add(r["host"])
        for job_id, row in list(by_job.items()):
            if node != row["host"] and node not in hosts.get(job_id, ()):
                left_out["not on --node"] = left_out.get("not on --node", 0) + 1
                del by_job[job_id]
    verdicts: dict[str, int] = {}
    categories: dict[str, list[float]] = {}
    rules: dict[str, dict[str, Any]] = {}
    nodes: dict[str, dict[str, Any]] = {}
    total_hours = ended_hours = 0.0
    for job_id, row in sorted(by_job.items()):
        verdict = row["verdict"] or "undetermined"
        verdicts[verdict] = verdicts.get(verdict, 0) + 1
        hours = float(row["rank_hours"] or 0.0)
        total_hours += hours
        if verdict == "no_failure":
            continue
        ended_hours += hours
        rule = row["rule"] or NO_RULE
        category = row["category"] or (rule.split(".", 1)[0] if row["rule"] else NO_CATEGORY)
        categories.setdefault(category, []).append(hours)
        entry = rules.setdefault(rule, {"category": category, "title": row["title"] or "", "hours": 0.0, "jobs": []})
        entry["hours"] += hours
        entry["jobs"].append(job_id)
        host = row["host"]
        if verdict == "root_cause" and host and row["rule"]:
            info = nodes.setdefault(host, {"jobs": [], "rules": [], "ranks": [], "times": []})
            info["jobs"].append(job_id)
            info["rules"].append(rule)
            if row["rank"] is not None:
                info["ranks"].append(int(row["rank"]))
            if row["first_time"] is not None:
                info["times"].append(_iso(row["first_time"]))
    repeated = []
    for host, info in nodes.items():
        if len(set(info["jobs"])) >= REPEAT_THRESHOLD:
            times = sorted(t for t in info["times"] if t)
            repeated.append(NodeRow(host=host, failures=len(set(info["jobs"])), job_ids=tuple(info["jobs"]),
                                    rules=tuple(dict.fromkeys(info["rules"])), ranks=tuple(dict.fromkeys(info["ranks"])),
                                    first=times[0] if times else None, last=times[-1] if times else None))
    repeated.sort(key=lambda n: (-n.failures, n.host))
    from correlator.model import iso

    return HistorySummary(
        source=str(folder),
        jobs=len(by_job),
        verdicts=tuple(sorted(verdicts.items(), key=lambda kv: (-kv[1], kv[0]))),
        failures=sum(n for v, n in verdicts.items() if v in ("root_cause", "undetermined")),
        categories=tuple(sorted((CategoryRow(c, len(h), round(sum(h), 3)) for c, h in categories.items()),
                                key=lambda c: (-c.rank_hours, -c.jobs, c.category))),
        rules=tuple(sorted((RuleRow(rule, e["category"], e["title"], len(e["jobs"]), round(e["hours"], 3),
                                    tuple(e["jobs"])) for rule, e in rules.items()),
                           key=lambda r: (-r.jobs, -r.rank_hours, r.rule))),
        repeated_roots=tuple(repeated),
        rank_hours=round(total_hours, 3),
        diagnostics=tuple(diagnostics),
        ended=sum(n for v, n in verdicts.items() if v != "no_failure"),
        ended_rank_hours=round(ended_hours, 3),
        since=iso(int(since.timestamp() * 1000) * 1_000_000) if since is not None else None,
        node=node,
        node_roots=sum(1 for row in by_job.values() if row["host"] == node) if node is not None else None,
        dataset_jobs=dataset_jobs,
        left_out=tuple(sorted(left_out.items())),
    )


# --- renderers -----------------------------------------------------------------------------------


def _jobs(count: int) -> str:
    return f"{count} job" if count == 1 else f"{count} jobs"


def _ids(ids: tuple[str, ...], limit: int = 8) -> str:
    shown = ", ".join(ids[:limit])
    return shown + (f", … (+{len(ids) - limit})" if len(ids) > limit else "")


def _grid(header: tuple[str, ...], cells: Sequence[tuple[str, ...]]) -> list[str]:
    rows = [tuple(visible(cell) for cell in row) for row in cells]  # widths are those of what is printed
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(header)]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths)
    return [fmt.format(*header).rstrip(), fmt.format(*("-" * w for w in widths)).rstrip()] + \
        [fmt.format(*r).rstrip() for r in rows]


def _scope(summary: HistorySummary) -> str | None:
    """The filters and what they left out, in one sentence (None without filters)."""
    if summary.since is None and summary.node is None:
        return None
    parts = []
    if summary.since is not None:
        parts.append(f"since {summary.since}")
    if summary.node is not None:
        parts.append(f"on node {summary.node} ({summary.node_roots} with their root there)")
    left = sum(n for _reason, n in summary.left_out)
    gone = ", ".join(f"{n} {reason}" for reason, n in summary.left_out)
    return "; ".join(parts) + f"; {left} of {_jobs(summary.dataset_jobs)} left out" + (f": {gone}" if gone else "")


def _ended(summary: HistorySummary) -> str:
    return (f"{_jobs(summary.ended)} that did not end healthily ({summary.failures} failed, "
            f"{summary.ended - summary.failures} ended by the job's limits or scheduler)")


def render_table(summary: HistorySummary) -> str:
    """Plain-text tables for a terminal."""
    out = [visible(f"{_jobs(summary.jobs)} in {summary.source}"
                   + (": " + ", ".join(f"{n} {v}" for v, n in summary.verdicts) if summary.verdicts else ""))]
    scope = _scope(summary)
    if scope:
        out.append(visible(scope))
    out += [f"rank-hours spanned: {summary.rank_hours:,.1f} ({summary.ended_rank_hours:,.1f} by the "
            f"{_jobs(summary.ended)} that did not end healthily)", ""]
    out.append("nodes that were the root of more than one failure (candidates to drain):")
    if summary.repeated_roots:
        out += _grid(("host", "failures", "rules", "jobs"),
                     [(n.host, str(n.failures), ", ".join(n.rules), _ids(n.job_ids)) for n in summary.repeated_roots])
    else:
        out.append("  none")
    total = ("total", str(summary.ended), f"{summary.ended_rank_hours:,.1f}")
    out += ["", f"failures by category: {_ended(summary)}"]
    out += _grid(("category", "jobs", "rank-hours"),
                 [(c.category, str(c.jobs), f"{c.rank_hours:,.1f}") for c in summary.categories] + [total]) \
        if summary.categories else ["  none"]
    out += ["", "failures by rule:"]
    out += _grid(("rule", "jobs", "rank-hours", "job ids"),
                 [(r.rule, str(r.jobs), f"{r.rank_hours:,.1f}", _ids(r.job_ids)) for r in summary.rules] + [(*total, "")]) \
        if summary.rules else ["  none"]
    return "\n".join(out) + "\n"


def render_json(summary: HistorySummary) -> str:
    data = asdict(summary)
    data["schema"] = "correlate.history/1"
    data["verdicts"] = dict(summary.verdicts)
    return json_safe(json.dumps(data, indent=2, ensure_ascii=False)) + "\n"


#: the ``]`` that would close a link's or an image's text
_LINK_CLOSE = re.compile(r"\](?=[(\[:])")


def _md(text: str) -> str:
    text = visible(text).replace("\\", "\\\\").replace("|", "\\|").replace("<", "&lt;").replace("`", "\\`")
    return _LINK_CLOSE.sub(r"\\]", text)


def _md_code(text: str) -> str:
    return md_cell(md_code(text))


def render_markdown(summary: HistorySummary) -> str:
    scope = _scope(summary)
    out = ["# Failure history", "",
           f"{_jobs(summary.jobs)} in {_md(summary.source)}"
           + (": " + ", ".join(f"{n} {v.replace('_', ' ')}" for v, n in summary.verdicts) if summary.verdicts else "")
           + f"; {summary.rank_hours:,.1f} rank-hours spanned ({summary.ended_rank_hours:,.1f} by the "
           + f"{_jobs(summary.ended)} that did not end healthily).", ""]
    if scope:
        out += [f"Selected: {_md(scope)}.", ""]
    out += ["## Nodes that were the root of more than one failure", ""]
    if summary.repeated_roots:
        out += ["Candidates to drain and test:", "", "| host | failures | rules | jobs | first | last |",
                "|---|---|---|---|---|---|"]
        out += [f"| {_md(n.host)} | {n.failures} | {_md(', '.join(n.rules))} | {_md(_ids(n.job_ids))} | "
                f"{n.first or '-'} | {n.last or '-'} |" for n in summary.repeated_roots]
    else:
        out.append("None: no node was the root of more than one job's failure.")
    out += ["", "## Failures by category", "", f"The {_md(_ended(summary))}.", ""]
    if summary.categories:
        out += ["| category | jobs | rank-hours |", "|---|---|---|"]
        out += [f"| {_md(c.category)} | {c.jobs} | {c.rank_hours:,.1f} |" for c in summary.categories]
        out.append(f"| **total** | **{summary.ended}** | **{summary.ended_rank_hours:,.1f}** |")
    else:
        out.append("None.")
    out += ["", "## Failures by rule", ""]
    if summary.rules:
        out += ["| rule | title | jobs | rank-hours | job ids |", "|---|---|---|---|---|"]
        out += [f"| {_md_code(r.rule) if r.rule != NO_RULE else _md(r.rule)} | {_md(r.title)} | {r.jobs} | "
                f"{r.rank_hours:,.1f} | {_md(_ids(r.job_ids))} |" for r in summary.rules]
        out.append(f"| **total** | | **{summary.ended}** | **{summary.ended_rank_hours:,.1f}** | |")
    else:
        out.append("None.")
    return "\n".join(out) + "\n"


#: ``correlate history --format`` choices
RENDERERS: dict[str, Callable[[HistorySummary], str]] = {
    "table": render_table,
    "json": render_json,
    "markdown": render_markdown,
}


def render(summary: HistorySummary, fmt: str = "table") -> str:
    """The summary in one of ``RENDERERS``' formats."""
    if fmt not in RENDERERS:
        raise UsageError(f"unknown history format {fmt!r}", hint=f"use one of {', '.join(RENDERERS)}")
    return RENDERERS[fmt](summary)
