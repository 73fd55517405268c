"""The JSON report (schema ``correlate.report/1``, DESIGN §6): the stable contract for machines.

Fields are added in later versions, never renamed or removed without a new schema id. Strings keep
the exact text read; no control character is written raw (json escapes C0,
``correlator.report.safe.json_safe`` DEL, C1 and the bidi controls), so the file is safe to print.
"""

from __future__ import annotations

import dataclasses
import json
from enum import Enum
from typing import Any

from correlator.model import Report, field_names, omitted_when_empty
from correlator.report.safe import json_safe

SCHEMA = "correlate.report/1"

#: at most this many entries of each per-rank list (``collateral``, ``ranks``, ``clocks``, ``timeline``): a
#: job of 100,000 ranks would otherwise write one object per rank three times (63 MB). The groups carry
#: every count, and ``capped`` says what each list left out; below the cap nothing changes.
PER_RANK_CAP = 1000

#: the timeline events a cut timeline keeps first (then the earliest of the others); the others keep
#: their ``id``, and ``caused_by`` names the root's, which is kept
_TIMELINE_KEPT = ("root", "independent", "job")

#: collateral item labels: the groups of these labels hold every collateral item, counted
_ITEM_LABELS = ("collateral", "teardown", "independent", "job")


_SCALARS = (str, int, float, bool, type(None))


def _plain(value: Any) -> Any:
    cls = type(value)
    if cls in _SCALARS:
        return value
    if isinstance(value, Enum):
        return value.value
    if cls is list or cls is tuple:
        return [_plain(v) for v in value]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        omit = omitted_when_empty(cls)
        if omit:
            return {name: _plain(v) for name in field_names(cls) for v in [getattr(value, name)]
                    if v or name not in omit}
        return {name: _plain(getattr(value, name)) for name in field_names(cls)}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    return value


def to_dict(report: Report) -> dict[str, Any]:
    """The report as plain JSON-able data, keys in the contract's order."""
    report, capped = _cap(report)
    d = _plain(report)
    out: dict[str, Any] = {"schema": SCHEMA}
    for key in ("verdict", "root_cause", "collateral", "groups", "timeline", "ranks", "clocks", "diagnostics",
                "stats", "chain", "job", "attempts"):
        out[key] = d[key]
    stats = report.stats
    #: over how much of the job the verdict is (``note`` is "" when every source was read)
    out["coverage"] = {"sources_read": stats.sources_read, "sources": max(stats.sources_total, len(stats.unread)),
                       "note": stats.coverage_note()}
    if capped:
        out["capped"] = capped
    return out


def _cap(report: Report) -> tuple[Report, dict[str, Any]]:
    """The report with its per-rank lists cut to ``PER_RANK_CAP`` entries (before they become JSON
    objects), and what each list left out. ``collateral`` keeps its first (earliest) items, and its
    total is the groups' count (the correlation stage may already list fewer items than it
    grouped); ``ranks`` keeps the ranks that are neither healthy, unknown nor collateral first (the
    root, silent ranks), then the lowest ranks; ``clocks`` the largest offsets; ``timeline`` its root,
    independent and job-level events, then the earliest others."""
    capped: dict[str, Any] = {}
    changes: dict[str, Any] = {}
    items = report.collateral
    total = max(len(items), sum(g.count for g in report.groups if g.label in _ITEM_LABELS))
    if total > PER_RANK_CAP or total > len(items):
        changes["collateral"] = items[:PER_RANK_CAP]
        capped["collateral"] = {"listed": len(changes["collateral"]), "total": total}
    rows = report.ranks
    job_ranks = report.job.ranks or 0  # (ranks only counted in groups have no row)
    if len(rows) > PER_RANK_CAP or job_ranks > len(rows):
        plain = ("healthy", "unknown", "collateral")
        notable = [r for r in rows if str(r.state) not in plain]
        rest = [r for r in rows if str(r.state) in plain]
        keep = notable[:PER_RANK_CAP] + rest[:max(0, PER_RANK_CAP - len(notable))]
        changes["ranks"] = tuple(sorted(keep, key=lambda r: r.rank))
        capped["ranks"] = {"listed": len(keep), "total": max(len(rows), job_ranks)}
    clocks = report.clocks
    if len(clocks) > PER_RANK_CAP:
        worst = sorted(range(len(clocks)), key=lambda i: -abs(clocks[i].offset_s))[:PER_RANK_CAP]
        changes["clocks"] = tuple(clocks[i] for i in sorted(worst))
        capped["clocks"] = {"listed": PER_RANK_CAP, "total": len(clocks)}
    events = report.timeline
    if len(events) > PER_RANK_CAP:  # (the correlation stage already cut it to its TIMELINE_CAP events)
        ahead = [e for e in events if e.label in _TIMELINE_KEPT][:PER_RANK_CAP]
        others = [e for e in events if e.label not in _TIMELINE_KEPT][:PER_RANK_CAP - len(ahead)]
        changes["timeline"] = tuple(sorted(ahead + others, key=lambda e: e.id))
        capped["timeline"] = {"listed": len(changes["timeline"]), "total": len(events)}
    if not capped:
        return report, capped
    capped["note"] = ("per-rank lists cut to their first entries (each list's listed and total say how many); the "
                      "groups count every rank, and --parquet DIR keeps every rank's row")
    if job_ranks > len(rows):
        capped["note"] += (f" of the {len(rows)} that have one (the lines of the other {job_ranks - len(rows)} were only "
                           "counted in the groups: the diagnostics say which)")
    return dataclasses.replace(report, **changes), capped


def render(report: Report) -> str:
    return json_safe(json.dumps(to_dict(report), indent=2, ensure_ascii=False)) + "\n"
