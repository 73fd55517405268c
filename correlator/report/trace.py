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
  events on a ``correlate: waves`` process (the ``pid`` after the last host's; no pid is 0, which
  viewers take for the idle process; ``tid = 2000000 + n``);
- the root is marked where the verdict puts it (``correlator.report.view``): on the root rank's
  thread at the verdict's time, on its own line when that line carries the time, else as an event
  of its own (a hang's culprit printed nothing: its peers' lines are never marked as the root).

Timestamps are whole microseconds since the earliest time in the report (``otherData.t0_utc``), or
with ``wall_clock`` since the Unix epoch (``otherData.ts_base = "unix-epoch"``: the viewer's clock is
then UTC wall-clock time); events
without any time cannot be placed and are counted in ``otherData.untimed_events``. It reads a
``Report`` and never recomputes analysis. No control character is written raw: json escapes C0,
``correlator.report.safe.json_safe`` the rest (DEL, C1, bidi controls), with the same value.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

from correlator.model import Report, TimelineEvent, iso
from correlator.report import view as views
from correlator.report.markdown import group_part
from correlator.report.safe import json_safe
from correlator.report.view import parse_dt, who

#: thread id base of a host's lines that name no rank (plus the host's pid)
AGENT_TID = 1_000_000
#: thread id base of the waves tracks (their process id is the one after the last host's)
WAVES_TID = 2_000_000


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _micros(text: str | None) -> int | None:
    """Integer microseconds since the epoch of a report time (floats would blur sub-µs at 1.7e15)."""
    dt = parse_dt(text)
    if dt is None:
        return None
    return (dt - _EPOCH) // timedelta(microseconds=1)


def build(report: Report, *, wall_clock: bool = False) -> dict[str, Any]:
    """The trace as a JSON-able dict; ``wall_clock`` writes ``ts`` as microseconds since the Unix
    epoch (UTC wall-clock time) instead of since the report's first time."""
    v = views.build(report)
    root = report.root_cause
    root_us = _micros(root.time) if root is not None else None
    # the root's own line, as the view reads it: a hang's culprit has none (its peers' lines are not it)
    root_event: TimelineEvent | None = None
    if v.root is not None and v.root.event is not None:
        root_event = v.root.event
    if root_event is not None and (root_us is None or _micros(root_event.time) != root_us
                                   or root_event.rank != root.rank):  # type: ignore[union-attr]
        # its line is stamped later than the verdict's time (a death its launcher told late), or is on
        # another track than the verdict's (a job-level end found in a rank's file): the mark goes on
        # the verdict's track at the verdict's time, as an event of its own
        root_event = None

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
    base = 0 if wall_clock else t0

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
        if host not in pid_of:  # a host only the verdict names
            pid_of[host] = len(pid_of) + 1
            events.append({"ph": "M", "name": "process_name", "pid": pid_of[host], "tid": AGENT_TID + pid_of[host],
                           "args": {"name": host}})
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
                       "ts": lo - base, "dur": max(hi - lo, 1),
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
            "ph": "i", "s": "t", "pid": pid, "tid": tid, "ts": micros - base,
            "name": f"ROOT CAUSE: {root.rule}" if is_root and root is not None else e.rule,
            "cat": "root" if is_root else ("root-line" if e.label == "root" else (e.label or e.role or "event")),
            "args": {"root": is_root, "rule": e.rule, "role": e.role, "label": e.label, "time": e.time,
                     "time_kind": e.time_kind, "after_root_s": e.after_root_s, "rank": e.rank, "host": e.host,
                     "local_rank": e.local_rank, "attempt": e.attempt, "where": f"{e.path}:{e.line}",
                     "text": e.text, "seq": index},
        }
        if is_root:
            event["cname"] = "terrible"
            if root is not None:
                # the verdict's rule (the line's own rule may be a generic one the verdict refined)
                event["args"].update({"rule": root.rule, "line_rule": e.rule, "title": root.title,
                                      "confidence": root.confidence, "fix": root.fix,
                                      "decided_by": root.decided_by, "verdict": v.headline})
        events.append(event)

    if root is not None and root_event is None and root_us is not None:
        # the root without a line of its own at the verdict's time (a hang's culprit: output stopped,
        # counters; a death its launcher told later): flagged on its own thread at the verdict's time
        line_host = v.root.event.host if v.root is not None and v.root.event is not None else None
        pid, tid = rank_thread(root.rank, host_of(root.rank, root.host or line_host))
        events.append({"ph": "i", "s": "t", "pid": pid, "tid": tid, "ts": root_us - base,
                       "name": f"ROOT CAUSE: {root.rule}", "cat": "root", "cname": "terrible",
                       "args": {"root": True, "rule": root.rule, "title": root.title, "time": root.time,
                                "rank": root.rank, "host": root.host, "confidence": root.confidence,
                                "decided_by": root.decided_by, "fix": root.fix,
                                "verdict": v.headline, "time_means": v.root.time_means if v.root else None}})

    waves = [g for g in report.groups if g.first or g.last]
    waves_pid = len(pid_of) + 1  # pids start at 1 (viewers treat pid 0 as the idle/swapper process)
    if waves:
        events.append({"ph": "M", "name": "process_name", "pid": waves_pid, "tid": WAVES_TID,
                       "args": {"name": "correlate: waves"}})
        events.append({"ph": "M", "name": "process_sort_index", "pid": waves_pid, "tid": WAVES_TID,
                       "args": {"sort_index": -1}})
    for index, g in enumerate(waves, start=1):
        lo = _micros(g.first) or _micros(g.last)
        hi = _micros(g.last) or lo
        if lo is None or hi is None:
            continue
        thread(waves_pid, WAVES_TID + index, f"{group_part(g.label, g.role)}: {g.rule}")
        events.append({"ph": "X", "name": g.rule, "cat": "root-rank" if g.label == "root" else (g.label or g.role),
                       "pid": waves_pid, "tid": WAVES_TID + index,
                       "ts": lo - base, "dur": max(hi - lo, 1),
                       "args": {"ranks": g.ranks, "count": g.count, "first": g.first, "last": g.last,
                                "first_after_s": g.first_after_s, "last_after_s": g.last_after_s,
                                "title": g.title}})

    other: dict[str, Any] = {
        "generator": "correlate",
        "schema": report.schema,
        "verdict": str(report.verdict),
        "t0_utc": iso(base * 1000) if times or wall_clock else None,
        "ts_base": "unix-epoch" if wall_clock else "first-event",
        "untimed_events": untimed,
        "clock_offsets_s": {c.host: c.offset_s for c in report.clocks},
    }
    if root is not None:
        other["root"] = f"{who(root.rank, root.host, root.local_rank)}: {root.rule} at {root.time}"
        other["headline"] = v.headline
    if report.job.id:
        other["job_id"] = report.job.id
    return {"traceEvents": events, "displayTimeUnit": "ms", "otherData": other}


def render(report: Report, *, wall_clock: bool = False) -> str:
    """The trace as JSON text (one line per event, so big traces stay diffable)."""
    trace = build(report, wall_clock=wall_clock)
    lines = [json.dumps(event, ensure_ascii=False, separators=(",", ":")) for event in trace["traceEvents"]]
    head = json.dumps({k: v for k, v in trace.items() if k != "traceEvents"}, ensure_ascii=False)
    # DEL, C1 and bidi controls from log text are written as \\u escapes, like the C0 ones json escapes
    return json_safe(head[:-1] + ', "traceEvents": [\n' + ",\n".join(lines) + "\n]}\n")
