"""The timeline as Chrome trace-event JSON (``--format trace``): opens in Perfetto and chrome://tracing.

This module owns the mapping of a ``Report`` onto the trace-event format (the "JSON Object
Format" with a ``traceEvents`` list):

- one process per host (``pid`` = the host's position, 1-based, named by a ``process_name``
  metadata event) and one thread per rank (``tid`` = the global rank, named ``rank 37 (local 5)``
  by a ``thread_name`` event); lines that are about no rank (launcher agent, srun, slurmstepd) go on
  the host's thread ``tid = 1000000 + pid`` named ``agent / scheduler``. Thread ids are unique
  across the whole trace, because Perfetto keys threads by ``tid`` alone;
- every timeline match is an instant event (``ph: "i"``, thread scope) named by its rule id, with
  the line, its place and its delay after the root in ``args``;
- the root event is named ``ROOT CAUSE: <rule>``, has category ``root``, ``args.root = true`` and
  the ``terrible`` (red) colour; it is the only event so flagged;
- each rank's output (first to last line) is a complete event (``ph: "X"``) named ``output`` so a
  rank whose output stopped early is visible; collateral waves and teardown groups are complete
  events on a ``correlate: waves`` process (``pid`` 0, ``tid = 2000000 + n``).

Timestamps are whole microseconds since the earliest time in the report (``otherData.t0_utc``); events
without any time cannot be placed and are counted in ``otherData.untimed_events``. It reads a
``Report`` and never recomputes analysis. No control character is written raw: json escapes C0,
``correlator.report.safe.json_safe`` the rest (DEL, C1, bidi controls), with the same value.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

from correlator.model import Report, TimelineEvent, iso
from correlator.report.markdown import parse_dt, who
from correlator.report.safe import json_safe

#: thread id base of a host's lines that name no rank (plus the host's pid)
AGENT_TID = 1_000_000
#: process id of the waves tracks, and their thread id base
WAVES_PID = 0
WAVES_TID = 2_000_000


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _micros(text: str | None) -> int | None:
    """Integer microseconds since the epoch of a report time (floats would blur sub-µs at 1.7e15)."""
    dt = parse_dt(text)
    if dt is None:
        return None
    return (dt - _EPOCH) // timedelta(microseconds=1)


def build(report: Report) -> dict[str, Any]:
    """The trace as a JSON-able dict."""
    root = report.root_cause
    root_us = _micros(root.time) if root is not None else None
    root_event: TimelineEvent | None = next((e for e in report.timeline if e.label == "root"), None)
    if root_event is None and root is not None and root.evidence:
        first = root.evidence[0]
        root_event = next((e for e in report.timeline if e.path == first.path and e.line == first.line), None)

    rank_host = {r.rank: r.host for r in report.ranks}
    local = {r.rank: r.local_rank for r in report.ranks}

    def host_of(rank: int | None, host: str | None) -> str:
        return host or (rank_host.get(rank) if rank is not None else None) or "(host unknown)"

    # hosts numbered in order of their lowest rank, so tracks read top-down like the job
    low: dict[str, float] = {}
    for r in report.ranks:
        h = host_of(r.rank, r.host)
        low[h] = min(low.get(h, float("inf")), r.rank)
    for e in report.timeline:
        h = host_of(e.rank, e.host)
        low.setdefault(h, float("inf"))
        if e.rank is not None:
            low[h] = min(low[h], e.rank)
    pid_of = {h: i for i, h in enumerate(sorted(low, key=lambda h: (low[h], h)), start=1)}

    times = [t for e in report.timeline if (t := _micros(e.time)) is not None]
    times += [t for r in report.ranks for t in (_micros(r.first_time), _micros(r.last_time)) if t is not None]
    if root_us is not None:
        times.append(root_us)
    t0 = min(times) if times else 0

    events: list[dict[str, Any]] = []
    threads: set[tuple[int, int]] = set()
    # process metadata carries a tid of that process only (Perfetto attaches every event to a thread)
    for host, pid in pid_of.items():
        events.append({"ph": "M", "name": "process_name", "pid": pid, "tid": AGENT_TID + pid, "args": {"name": host}})
        events.append({"ph": "M", "name": "process_sort_index", "pid": pid, "tid": AGENT_TID + pid,
                       "args": {"sort_index": pid}})

    def thread(pid: int, tid: int, name: str) -> None:
        if (pid, tid) in threads:
            return
        threads.add((pid, tid))
        events.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": name}})
        events.append({"ph": "M", "name": "thread_sort_index", "pid": pid, "tid": tid, "args": {"sort_index": tid}})

    def rank_thread(rank: int | None, host: str) -> tuple[int, int]:
        pid = pid_of[host]
        if rank is None:
            thread(pid, AGENT_TID + pid, "agent / scheduler")
            return pid, AGENT_TID + pid
        lr = local.get(rank)
        thread(pid, rank, f"rank {rank}" + (f" (local {lr})" if lr is not None else ""))
        return pid, rank

    for r in report.ranks:
        pid, tid = rank_thread(r.rank, host_of(r.rank, r.host))
        lo, hi = _micros(r.first_time), _micros(r.last_time)
        if lo is None or hi is None:
            continue
        events.append({"ph": "X", "name": "output", "cat": "rank", "pid": pid, "tid": tid,
                       "ts": lo - t0, "dur": max(hi - lo, 1),
                       "args": {"state": str(r.state), "lines": r.lines, "last_step": r.last_step,
                                "first_time": r.first_time, "last_time": r.last_time}})

    untimed = 0
    for index, e in enumerate(report.timeline):
        micros = _micros(e.time)
        if micros is None and e.after_root_s is not None and root_us is not None:
            micros = root_us + round(e.after_root_s * 1e6)
        if micros is None:
            untimed += 1
            continue
        pid, tid = rank_thread(e.rank, host_of(e.rank, e.host))
        is_root = e is root_event
        event: dict[str, Any] = {
            "ph": "i", "s": "t", "pid": pid, "tid": tid, "ts": micros - t0,
            "name": f"ROOT CAUSE: {e.rule}" if is_root else e.rule,
            "cat": "root" if is_root else (e.label or e.role or "event"),
            "args": {"root": is_root, "rule": e.rule, "role": e.role, "label": e.label, "time": e.time,
                     "time_kind": e.time_kind, "after_root_s": e.after_root_s, "rank": e.rank, "host": e.host,
                     "local_rank": e.local_rank, "attempt": e.attempt, "where": f"{e.path}:{e.line}",
                     "text": e.text, "seq": index},
        }
        if is_root:
            event["cname"] = "terrible"
            if root is not None:
                event["args"].update({"title": root.title, "confidence": root.confidence, "fix": root.fix,
                                      "decided_by": root.decided_by})
        events.append(event)

    if root is not None and root_event is None and root_us is not None:
        # the root was decided without a line of its own (a hang: output stopped, counters): still flag it
        pid, tid = rank_thread(root.rank, host_of(root.rank, root.host))
        events.append({"ph": "i", "s": "t", "pid": pid, "tid": tid, "ts": root_us - t0,
                       "name": f"ROOT CAUSE: {root.rule}", "cat": "root", "cname": "terrible",
                       "args": {"root": True, "rule": root.rule, "title": root.title, "time": root.time,
                                "rank": root.rank, "host": root.host, "confidence": root.confidence,
                                "decided_by": root.decided_by, "fix": root.fix}})

    waves = [g for g in report.groups if g.first or g.last]
    if waves:
        events.append({"ph": "M", "name": "process_name", "pid": WAVES_PID, "tid": WAVES_TID,
                       "args": {"name": "correlate: waves"}})
        events.append({"ph": "M", "name": "process_sort_index", "pid": WAVES_PID, "tid": WAVES_TID,
                       "args": {"sort_index": -1}})
    for index, g in enumerate(waves, start=1):
        lo = _micros(g.first) or _micros(g.last)
        hi = _micros(g.last) or lo
        if lo is None or hi is None:
            continue
        thread(WAVES_PID, WAVES_TID + index, f"{g.label or g.role}: {g.rule}")
        events.append({"ph": "X", "name": g.rule, "cat": g.label or g.role, "pid": WAVES_PID, "tid": WAVES_TID + index,
                       "ts": lo - t0, "dur": max(hi - lo, 1),
                       "args": {"ranks": g.ranks, "count": g.count, "first": g.first, "last": g.last,
                                "first_after_s": g.first_after_s, "last_after_s": g.last_after_s,
                                "title": g.title}})

    other: dict[str, Any] = {
        "generator": "correlate",
        "schema": report.schema,
        "verdict": str(report.verdict),
        "t0_utc": iso(t0 * 1000) if times else None,
        "untimed_events": untimed,
        "clock_offsets_s": {c.host: c.offset_s for c in report.clocks},
    }
    if root is not None:
        other["root"] = f"{who(root.rank, root.host, root.local_rank)}: {root.rule} at {root.time}"
    if report.job.id:
        other["job_id"] = report.job.id
    return {"traceEvents": events, "displayTimeUnit": "ms", "otherData": other}


def render(report: Report) -> str:
    """The trace as JSON text (one line per event, so big traces stay diffable)."""
    trace = build(report)
    lines = [json.dumps(event, ensure_ascii=False, separators=(",", ":")) for event in trace["traceEvents"]]
    head = json.dumps({k: v for k, v in trace.items() if k != "traceEvents"}, ensure_ascii=False)
    # DEL, C1 and bidi controls from log text are written as \\u escapes, like the C0 ones json escapes
    return json_safe(head[:-1] + ', "traceEvents": [\n' + ",\n".join(lines) + "\n]}\n")
