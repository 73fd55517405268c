"""Chrome trace-event JSON: one track per rank, instant events for matches, the root flagged."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import replace
from pathlib import Path

from report_fixtures import EIO, HOSTILE, NS, T0, _ranges, empty_report, make_report  # noqa: F401

from correlator.model import (
    Evidence,
    Report,
    Verdict,
    iso,
)
from correlator.report import trace


def _load(report: Report) -> dict:
    data = json.loads(trace.render(report))
    assert set(data) == {"traceEvents", "displayTimeUnit", "otherData"}
    return data


def test_tracks_are_named_per_host_and_rank() -> None:
    events = _load(make_report())["traceEvents"]
    processes = {e["pid"]: e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "process_name"}
    assert processes == {1: "gpu-a01", 2: "gpu-a02", 3: "correlate: waves"}
    assert all(e["pid"] > 0 for e in events)  # viewers take pid 0 for the idle process
    threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
    for rank in range(8):
        assert threads[(1 + rank // 4, rank)] == f"rank {rank} (local {rank % 4})"
    assert threads[(1, trace.AGENT_TID + 1)] == "agent / scheduler"
    # Perfetto keys threads by tid: no tid may belong to two processes
    owners: dict[int, set[int]] = {}
    for e in events:
        owners.setdefault(e["tid"], set()).add(e["pid"])
    assert all(len(p) == 1 for p in owners.values()), owners


def test_every_timed_match_is_an_instant_event_and_only_the_root_is_flagged() -> None:
    report = make_report()
    events = _load(report)["traceEvents"]
    instants = [e for e in events if e["ph"] == "i"]
    assert len(instants) == len(report.timeline)
    assert all(e["s"] == "t" and isinstance(e["ts"], (int, float)) for e in instants)
    roots = [e for e in instants if e["args"]["root"]]
    assert len(roots) == 1
    root = roots[0]
    assert root["name"] == "ROOT CAUSE: storage.eio-on-checkpoint-save" and root["cat"] == "root"
    assert root["cname"] == "terrible" and (root["pid"], root["tid"]) == (1, 1)
    assert root["args"]["where"] == "slurm-88123.out:20418" and root["args"]["title"] == "Checkpoint save failed with EIO"
    assert Counter(e["cat"] for e in instants) == {"collateral": 7, "teardown": 3, "root": 1}
    timeout = next(e for e in instants if e["tid"] == 0)
    assert timeout["ts"] - root["ts"] == 600.2e6 and timeout["args"]["after_root_s"] == 600.2


def test_rank_output_spans_and_waves_are_complete_events() -> None:
    data = _load(make_report())
    spans = [e for e in data["traceEvents"] if e["ph"] == "X"]
    outputs = [e for e in spans if e["name"] == "output"]
    assert len(outputs) == 8 and all(e["dur"] > 0 for e in outputs)
    root_out = next(e for e in outputs if e["tid"] == 1)
    assert root_out["args"]["state"] == "root" and root_out["dur"] == 3600e6
    waves_pid = next(e["pid"] for e in data["traceEvents"] if e["ph"] == "M" and e["name"] == "process_name"
                     and e["args"]["name"] == "correlate: waves")
    waves = [e for e in spans if e["pid"] == waves_pid]
    assert [w["name"] for w in waves] == ["nccl.watchdog-collective-timeout", "launcher.torchrun-sigterm-to-workers",
                                          "slurm.step-cancelled"]
    assert data["otherData"]["t0_utc"] == "2026-03-02T13:07:31.412Z"
    assert min(e["ts"] for e in data["traceEvents"] if "ts" in e) == 0


def test_untimed_events_are_counted_and_a_lineless_root_is_still_flagged() -> None:
    report = make_report()
    timeline = tuple(replace(e, time=None, after_root_s=None) if e.rank == 3 else e for e in report.timeline)
    timeline = tuple(e for e in timeline if e.label != "root")  # decided without a line (output stopped)
    report = replace(report, timeline=timeline, root_cause=replace(report.root_cause, evidence=(),
                                                                   decided_by="output-stopped"))
    data = _load(report)
    assert data["otherData"]["untimed_events"] == 1
    roots = [e for e in data["traceEvents"] if e.get("cat") == "root"]
    assert len(roots) == 1 and roots[0]["args"]["decided_by"] == "output-stopped"


def test_log_text_round_trips_and_empty_reports_render() -> None:
    data = _load(make_report(root_text=HOSTILE))
    root = next(e for e in data["traceEvents"] if e.get("cat") == "root")
    assert root["args"]["text"] == HOSTILE
    for verdict in (Verdict.NO_FAILURE, Verdict.UNDETERMINED):
        empty = _load(empty_report(verdict))
        assert empty["traceEvents"] == [] and empty["otherData"]["verdict"] == str(verdict)


def test_4096_ranks_give_one_track_each() -> None:
    data = _load(make_report(n_hosts=512, per_host=8, root_rank=37))
    threads = [e for e in data["traceEvents"] if e["ph"] == "M" and e["name"] == "thread_name"]
    assert len([t for t in threads if t["tid"] < trace.AGENT_TID]) == 4096


# --- end to end: the real pipeline over small logs written here, and over sample_logs/*/ ---------

from report_fixtures import REPO, SAMPLE_JOBS, analyze_job, write_job  # noqa: E402,F401


def test_every_sample_job_renders_as_a_trace(tmp_path: Path) -> None:
    jobs = [(write_job(tmp_path / "inline", "9001"), "9001")] + [(p, p.name) for p in SAMPLE_JOBS]
    for folder, job_id in jobs:
        report = analyze_job(folder, job_id)
        data = _load(report)
        roots = [e for e in data["traceEvents"] if e.get("cat") == "root"]
        if report.root_cause is not None and report.root_cause.time is not None:
            assert len(roots) == 1, folder
        else:
            assert len(roots) <= 1, folder
        assert all(e["pid"] > 0 for e in data["traceEvents"]), folder
        rc = report.root_cause
        if rc is not None and rc.time is not None and rc.rank is not None:
            # the root is marked on its own rank's thread at the verdict's time, whatever its evidence lines
            root = roots[0]
            assert root["tid"] == rc.rank and root["args"]["root"] is True, folder
            t0 = trace._micros(data["otherData"]["t0_utc"])
            assert root["ts"] + t0 == trace._micros(rc.time), folder
        ranks = {e["tid"] for e in data["traceEvents"] if e["ph"] == "M" and e["name"] == "thread_name"
                 and e["tid"] < trace.AGENT_TID}
        assert {r.rank for r in report.ranks} <= ranks, folder


def test_a_hang_culprit_is_marked_on_its_own_thread_not_on_a_peer_line() -> None:
    """A hang's culprit printed nothing: its evidence lines are its peers' timeouts. The trace marks
    the culprit's thread at the verdict's time (its last progress), and no peer line is the root."""
    base = make_report()
    root = replace(base.root_cause, rank=3, host="gpu-a01", local_rank=3, rule="nccl.watchdog-collective-timeout",
                   decided_by="missing-from-collective", time=iso(T0 - 30 * NS),
                   evidence=(Evidence("slurm-88123.out", 20500, "[Rank 0] Watchdog caught collective operation timeout"),))
    timeline = tuple(replace(e, label="collateral") if e.label == "root" else e for e in base.timeline)
    report = replace(base, root_cause=root, timeline=timeline)
    data = _load(report)
    roots = [e for e in data["traceEvents"] if e.get("cat") == "root"]
    assert len(roots) == 1 and roots[0]["tid"] == 3 and roots[0]["args"]["root"] is True
    t0 = trace._micros(data["otherData"]["t0_utc"])
    assert roots[0]["ts"] + t0 == trace._micros(iso(T0 - 30 * NS))
    assert "hung the job" in roots[0]["args"]["verdict"]
    peer = next(e for e in data["traceEvents"] if e["ph"] == "i" and e["args"].get("where") == "slurm-88123.out:20500")
    assert peer["args"]["root"] is False and not peer["name"].startswith("ROOT CAUSE")


def test_wall_clock_timestamps_are_microseconds_since_the_epoch() -> None:
    report = make_report()
    relative = _load(report)
    wall = json.loads(trace.render(report, wall_clock=True))
    assert wall["otherData"]["ts_base"] == "unix-epoch" and wall["otherData"]["t0_utc"] == "1970-01-01T00:00:00.000Z"
    t0 = trace._micros(relative["otherData"]["t0_utc"])
    rel = [e.get("ts") for e in relative["traceEvents"]]
    abs_ = [e.get("ts") for e in wall["traceEvents"]]
    assert [None if r is None else r + t0 for r in rel] == abs_
    root = next(e for e in wall["traceEvents"] if e.get("cat") == "root")
    assert root["ts"] == (T0 // 1000)  # the root's own stamp, in microseconds since 1970 UTC
