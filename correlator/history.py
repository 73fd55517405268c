"""``correlate history DIR``: what failed across many jobs, from the Parquet dataset ``--parquet`` wrote.

This module owns the cross-job summary: failures by verdict, by category and by rule (with the
rank-hours they spanned, a GPU-hours proxy), and the nodes that were the root of more than one
failure (candidates to drain). ``summarize`` reads the ``incidents`` table (its ``verdict`` rows,
one per job) through ``correlator.report.parquet.read_table`` and returns a frozen
``HistorySummary``; ``render_table``, ``render_json`` and ``render_markdown`` print it.

It reads only what ``report/parquet.py`` wrote; it never re-analyses logs. pyarrow is imported
inside the reader. What it prints came from logs (host names, titles, job ids): every cell is made
safe for a terminal (``correlator.report.safe``), Markdown cells can open no link, image or HTML,
and the JSON writes no control character raw.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from correlator.errors import InputError, UsageError
from correlator.model import Diagnostic
from correlator.report.markdown import md_cell, md_code
from correlator.report.safe import json_safe, visible

#: a node is a drain candidate once it was the root of this many distinct jobs' failures
REPEAT_THRESHOLD = 2


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
    jobs: int
    #: (verdict, jobs), most frequent first
    verdicts: tuple[tuple[str, int], ...]
    #: jobs that ended in a failure: a root cause, or failures without a nameable rank
    failures: int
    categories: tuple[CategoryRow, ...]
    rules: tuple[RuleRow, ...]
    #: nodes that were the root of at least ``REPEAT_THRESHOLD`` jobs' failures (drain candidates)
    repeated_roots: tuple[NodeRow, ...]
    rank_hours: float = 0.0
    #: what could not be read (a truncated partition file, a stray file), each left out; and notes
    diagnostics: tuple[Diagnostic, ...] = ()


def _iso(value: Any) -> str | None:
    """A UTC datetime from the table in the report's one time format."""
    if value is None:
        return None
    from correlator.model import iso

    whole = int(value.timestamp() // 1)
    return iso(whole * 1_000_000_000 + value.microsecond * 1000)


def summarize(directory: Path | str) -> HistorySummary:
    """Summarize every job in the dataset folder ``directory`` (the ``--parquet`` output).

    A partition file that cannot be read is left out with a diagnostic (the summary's
    ``diagnostics``); only when nothing at all could be read does it raise ``InputError``."""
    from correlator.report.parquet import read_table

    folder = Path(directory)
    if not (folder / "incidents").is_dir():
        raise InputError("no correlate Parquet dataset here (no incidents/ folder)", location=str(folder),
                         hint="write one with `correlate --parquet DIR LOGS...`")
    diagnostics: list[Diagnostic] = []
    table = read_table(folder, "incidents", diagnostics)
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
    verdicts: dict[str, int] = {}
    categories: dict[str, list[float]] = {}
    rules: dict[str, dict[str, Any]] = {}
    nodes: dict[str, dict[str, Any]] = {}
    total_hours = 0.0
    for job_id, row in sorted(by_job.items()):
        verdict = row["verdict"] or "undetermined"
        verdicts[verdict] = verdicts.get(verdict, 0) + 1
        hours = float(row["rank_hours"] or 0.0)
        total_hours += hours
        rule = row["rule"]
        if verdict == "no_failure" or not rule:
            continue
        category = row["category"] or rule.split(".", 1)[0]
        categories.setdefault(category, []).append(hours)
        entry = rules.setdefault(rule, {"category": category, "title": row["title"] or "", "hours": 0.0, "jobs": []})
        entry["hours"] += hours
        entry["jobs"].append(job_id)
        host = row["host"]
        if verdict == "root_cause" and host:
            node = nodes.setdefault(host, {"jobs": [], "rules": [], "ranks": [], "times": []})
            node["jobs"].append(job_id)
            node["rules"].append(rule)
            if row["rank"] is not None:
                node["ranks"].append(int(row["rank"]))
            if row["first_time"] is not None:
                node["times"].append(_iso(row["first_time"]))
    repeated = []
    for host, node in nodes.items():
        if len(set(node["jobs"])) >= REPEAT_THRESHOLD:
            times = sorted(t for t in node["times"] if t)
            repeated.append(NodeRow(host=host, failures=len(set(node["jobs"])), job_ids=tuple(node["jobs"]),
                                    rules=tuple(dict.fromkeys(node["rules"])), ranks=tuple(dict.fromkeys(node["ranks"])),
                                    first=times[0] if times else None, last=times[-1] if times else None))
    repeated.sort(key=lambda n: (-n.failures, n.host))
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
    )


# --- renderers -----------------------------------------------------------------------------------


def _jobs(count: int) -> str:
    return f"{count} job" if count == 1 else f"{count} jobs"


def _ids(ids: tuple[str, ...], limit: int = 8) -> str:
    shown = ", ".join(ids[:limit])
    return shown + (f", … (+{len(ids) - limit})" if len(ids) > limit else "")


def _grid(header: tuple[str, ...], rows: list[tuple[str, ...]]) -> list[str]:
    rows = [tuple(visible(cell) for cell in row) for row in rows]  # widths are those of what is printed
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(header)]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths)
    return [fmt.format(*header).rstrip(), fmt.format(*("-" * w for w in widths)).rstrip()] + \
        [fmt.format(*r).rstrip() for r in rows]


def render_table(summary: HistorySummary) -> str:
    """Plain-text tables for a terminal."""
    out = [visible(f"{_jobs(summary.jobs)} in {summary.source}: " + ", ".join(f"{n} {v}" for v, n in summary.verdicts)),
           f"rank-hours spanned: {summary.rank_hours:,.1f}", ""]
    out.append("nodes that were the root of more than one failure (candidates to drain):")
    if summary.repeated_roots:
        out += _grid(("host", "failures", "rules", "jobs"),
                     [(n.host, str(n.failures), ", ".join(n.rules), _ids(n.job_ids)) for n in summary.repeated_roots])
    else:
        out.append("  none")
    out += ["", "failures by category:"]
    out += _grid(("category", "jobs", "rank-hours"),
                 [(c.category, str(c.jobs), f"{c.rank_hours:,.1f}") for c in summary.categories]) \
        if summary.categories else ["  none"]
    out += ["", "failures by rule:"]
    out += _grid(("rule", "jobs", "rank-hours", "job ids"),
                 [(r.rule, str(r.jobs), f"{r.rank_hours:,.1f}", _ids(r.job_ids)) for r in summary.rules]) \
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
    out = ["# Failure history", "",
           f"{_jobs(summary.jobs)} in {_md(summary.source)}: "
           + ", ".join(f"{n} {v.replace('_', ' ')}" for v, n in summary.verdicts)
           + f"; {summary.rank_hours:,.1f} rank-hours spanned.", "",
           "## Nodes that were the root of more than one failure", ""]
    if summary.repeated_roots:
        out += ["Candidates to drain and test:", "", "| host | failures | rules | jobs | first | last |",
                "|---|---|---|---|---|---|"]
        out += [f"| {_md(n.host)} | {n.failures} | {_md(', '.join(n.rules))} | {_md(_ids(n.job_ids))} | "
                f"{n.first or '-'} | {n.last or '-'} |" for n in summary.repeated_roots]
    else:
        out.append("None: no node was the root of more than one job's failure.")
    out += ["", "## Failures by category", ""]
    if summary.categories:
        out += ["| category | jobs | rank-hours |", "|---|---|---|"]
        out += [f"| {_md(c.category)} | {c.jobs} | {c.rank_hours:,.1f} |" for c in summary.categories]
    else:
        out.append("None.")
    out += ["", "## Failures by rule", ""]
    if summary.rules:
        out += ["| rule | title | jobs | rank-hours | job ids |", "|---|---|---|---|---|"]
        out += [f"| {_md_code(r.rule)} | {_md(r.title)} | {r.jobs} | {r.rank_hours:,.1f} | {_md(_ids(r.job_ids))} |"
                for r in summary.rules]
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
