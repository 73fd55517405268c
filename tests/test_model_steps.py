"""The verdict model's steps, each on hand-made events (no files, no extraction).

Every step of ``correlator.attribution`` is a small function; these tests give each the events it
would see in one class of job and check what it concludes, so a change to one step is caught where
it happens and not only through a whole job.
"""

from __future__ import annotations

import ast
from pathlib import Path

from correlator.correlate.attribution import causal, hang, lifecycle, policy
from correlator.correlate.attribution.events import Ev
from correlator.correlate.attribution.verdict import attribute
from correlator.model import (
    NS,
    Match,
    MatchSpec,
    Role,
    Rule,
    Severity,
    StreamFacts,
    TimeKind,
    Verdict,
    Who,
)
from correlator.model.evidence import _TEXT, HANG_KINDS, EvidenceKind, describe

T0 = 1_772_460_000 * NS


def rule(rid: str, role: Role = Role.PRIMARY, tags: tuple[str, ...] = (), priority: int = 50,
         explains: tuple[str, ...] = ()) -> Rule:
    return Rule(rid, rid, rid.split(".")[0], Severity.HIGH, role, "", "", MatchSpec(any=("x",)), priority=priority,
                tags=tags, explains=explains)


def match(r: Rule, rank: int | None, t: float | None, *, path: str | None = None, offset: int = 0, host: str | None = None,
          own: bool = True, caps: dict[str, str] | None = None) -> Match:
    tn = None if t is None else T0 + int(t * NS)
    return Match(r.id, path or f"rank-{rank}.log", 1 + offset // 100, offset, "text", Who(rank=rank, host=host), tn,
                 tn, None, TimeKind.OWN if own and t is not None else (TimeKind.NONE if t is None else TimeKind.INHERITED),
                 tuple((caps or {}).items()))


def ev(m: Match, r: Rule) -> Ev:
    t = m.time_ns
    return Ev(m, r, t, t, None, 0 if t is not None else None, m.who.host or f"rank {m.who.rank}")


def stream(rank: int, *, last_step: int | None = None, step_t: float | None = None, step_offset: int | None = None,
           last_t: float | None = None, host: str | None = None, path: str | None = None) -> StreamFacts:
    return StreamFacts(Who(rank=rank, host=host), path or f"rank-{rank}.log", 100, T0,
                       None if last_t is None else T0 + int(last_t * NS), 0, last_step,
                       None if step_t is None else T0 + int(step_t * NS), None, step_offset)


EXC = rule("python.uncaught-exception", priority=10)
OOM = rule("cuda.out-of-memory", priority=60)
SEGV = rule("python.segmentation-fault", tags=("native-crash",), priority=60)
IB = rule("nccl.ib-completion-error", tags=("network", "peer-transport"), priority=60)
WATCHDOG = rule("nccl.watchdog-collective-timeout", Role.COLLATERAL, tags=("timeout",))
CLOSED = rule("nccl.proxy-service-failed", Role.COLLATERAL, tags=("peer-loss", "shutdown"))
DONE = rule("python.training-completed", Role.CONTEXT, tags=("completion",))
EXIT = rule("launcher.worker-failed-exitcode", Role.TEARDOWN, tags=("worker-exit",))
BUS = rule("launcher.worker-killed-by-signal", tags=("signal-exit", "worker-exit"))


# --- lifecycle: terminal or survived ---------------------------------------------------------------


def test_a_failure_followed_by_its_writers_progress_is_survived_without_any_stamp():
    e = ev(match(EXC, 3, None, offset=500), EXC)
    lives = lifecycle.build([e], [stream(3, last_step=900, step_offset=90_000)])
    assert id(e) in lifecycle.survived([e], lives)


def test_progress_before_the_failure_does_not_save_it():
    e = ev(match(EXC, 3, 10.0, offset=95_000), EXC)
    lives = lifecycle.build([e], [stream(3, last_step=900, step_t=9.0, step_offset=90_000)])
    assert lifecycle.survived([e], lives) == {}


def test_stdout_flushed_after_the_traceback_is_not_progress_after_it():
    # the progress line comes later in the file but its own stamp is older: buffered output
    e = ev(match(EXC, 3, 10.0, offset=500), EXC)
    lives = lifecycle.build([e], [stream(3, last_step=900, step_t=8.0, step_offset=90_000)])
    assert lifecycle.survived([e], lives) == {}


def test_the_launcher_reporting_the_rank_failed_makes_its_last_failure_terminal():
    e = ev(match(EXC, 3, None, offset=500), EXC)
    x = ev(match(EXIT, 3, 20.0, path="agent.log", caps={"exitcode": "1"}), EXIT)
    lives = lifecycle.build([e, x], [stream(3, last_step=900, step_offset=90_000)])
    assert lifecycle.survived([e, x], lives) == {}
    # an earlier failure of that rank, followed by progress, was still survived
    early = ev(match(EXC, 3, None, offset=100), EXC)
    lives = lifecycle.build([early, e, x], [stream(3, last_step=900, step_offset=300)])
    assert set(lifecycle.survived([early, e, x], lives)) == {id(early)}


def test_a_completion_marker_after_a_failure_survives_it():
    e = ev(match(EXC, 2, None, offset=500), EXC)
    done = ev(match(DONE, 2, 50.0, offset=9000), DONE)
    lives = lifecycle.build([e, done], [stream(2)])
    assert id(e) in lifecycle.survived([e, done], lives)


# --- causal explanation ----------------------------------------------------------------------------


def test_a_peers_transport_error_is_explained_by_a_death_told_later():
    crash = ev(match(SEGV, 5, 3.0), SEGV)  # the agent told it 3 s after the peer noticed
    peer = ev(match(IB, 6, 0.4), IB)
    out = causal.explanations([peer, crash], [peer, crash])
    assert out[id(peer)][0] is crash and id(crash) not in out


def test_two_failures_never_explain_each_other():
    a = rule("a.x", explains=("b.y",))
    b = rule("b.y", explains=("a.x",))
    ea, eb = ev(match(a, 0, 1.0), a), ev(match(b, 1, 1.0), b)
    out = causal.explanations([ea, eb], [ea, eb])
    assert len(out) == 1


def test_a_wave_over_every_rank_of_a_node_names_the_node():
    evs = [ev(match(BUS, r, 1.0 + r * 0.1, host="gpu-a07", caps={"exitcode": "-7"}), BUS) for r in range(8, 16)]
    w = causal.wave(evs, {"gpu-a07": set(range(8, 16)), "gpu-a06": set(range(8))}, set(range(16)))
    assert w is not None and w.host == "gpu-a07" and w.ranks == tuple(range(8, 16))
    # half the node is not the node
    assert causal.wave(evs[:4], {"gpu-a07": set(range(8, 16))}, set(range(16))) is None
    # one rank first by more than the window is that rank's failure
    lone = ev(match(OOM, 3, -10.0, host="gpu-a06"), OOM)
    assert causal.wave([lone, *evs], {"gpu-a07": set(range(8, 16))}, set(range(16))) is None


# --- hang signals -----------------------------------------------------------------------------------


def test_work_counters_are_compared_within_their_own_process_group():
    evs = [ev(match(WATCHDOG, r, 600.0, caps={"seq": "1438", "pg": "3"}), WATCHDOG) for r in range(1, 8)]
    default_counter = ev(match(WATCHDOG, 0, 600.0, caps={"last_enqueued": "1261", "pg": "0"}), WATCHDOG)
    found = hang.work_counters([*evs, default_counter], hang.stuck_collective(evs), hang.desync(evs))
    assert found == []
    same_group = ev(match(WATCHDOG, 0, 600.0, caps={"last_enqueued": "1437", "pg": "3"}), WATCHDOG)
    found = hang.work_counters([*evs, same_group], hang.stuck_collective(evs), hang.desync(evs))
    assert [c.rank for c in found] == [0] and found[0].kind is EvidenceKind.NCCL_WORK_COUNTERS


def test_a_rank_that_ended_while_the_others_waited_is_named():
    done = ev(match(DONE, 0, 10.0), DONE)
    waits = [ev(match(WATCHDOG, r, 1810.0), WATCHDOG) for r in range(1, 4)]
    lives = lifecycle.build([done, *waits], [stream(r) for r in range(4)])
    found = hang.exited_early([done, *waits], lives, set(range(4)))
    assert [(c.kind, c.rank) for c in found] == [(EvidenceKind.EXITED_EARLY, 0)]


def test_horovods_stall_report_names_the_ranks_it_lists():
    stall = rule("horovod.stall-inspector", Role.COLLATERAL, tags=("hang",))
    e = ev(match(stall, 0, 60.0, caps={"stalled_ranks": "5, 6"}), stall)
    assert {c.rank for c in hang.stall_report([e])} == {5, 6}


def test_the_strongest_evidence_decides():
    from correlator.model.evidence import Clue

    found = [Clue(EvidenceKind.OUTPUT_STOPPED, 4, "a"), Clue(EvidenceKind.MISSING_FROM_COLLECTIVE, 4, "b")]
    assert hang.strongest(found, 4) is EvidenceKind.MISSING_FROM_COLLECTIVE
    assert hang.score(found)[4] == policy.WEIGHTS[EvidenceKind.OUTPUT_STOPPED] + policy.WEIGHTS[
        EvidenceKind.MISSING_FROM_COLLECTIVE]


# --- the chain ---------------------------------------------------------------------------------------


def _attr(matches, streams, known):
    rules = {r.id: r for r in (EXC, OOM, SEGV, IB, WATCHDOG, CLOSED, DONE, EXIT, BUS)}
    return attribute(matches, streams, rules, {}, known)


def test_shutdown_chatter_after_every_rank_completed_is_no_failure():
    ms = [match(DONE, r, 100.0, offset=1000) for r in range(4)] + [match(CLOSED, r, 101.0, offset=1100) for r in range(4)]
    out = _attr(ms, [stream(r, last_step=50) for r in range(4)], set(range(4)))
    assert out.verdict is Verdict.NO_FAILURE


def test_a_crash_beats_its_peers_earlier_stamped_transport_errors():
    ms = [match(SEGV, 5, 3.0, host="n1"), *[match(IB, r, 0.4, host="n0") for r in (0, 1, 2)]]
    out = _attr(ms, [stream(r) for r in range(8)], set(range(8)))
    assert out.verdict is Verdict.ROOT_CAUSE and out.root is not None and out.root.rank == 5


def test_a_node_wave_names_no_rank():
    ms = [match(BUS, r, 1.0 + 0.01 * r, host="n1", caps={"exitcode": "-7"}) for r in range(4, 8)]
    from correlator.model import Match as M  # noqa: F401

    rules = {r.id: r for r in (BUS,)}
    out = attribute(ms, [stream(r, host="n1" if r >= 4 else "n0") for r in range(8)], rules, {}, set(range(8)),
                    ranks_of_host={"n0": {0, 1, 2, 3}, "n1": {4, 5, 6, 7}})
    assert out.verdict is Verdict.ROOT_CAUSE and out.root is not None
    assert out.root.rank is None and out.root.host == "n1" and out.root.decided_by == EvidenceKind.NODE_WAVE


# --- the registry and the policy ---------------------------------------------------------------------


def test_every_evidence_kind_has_its_wording_and_hang_kinds_their_weight():
    assert set(_TEXT) == set(EvidenceKind)
    assert all(describe(k) != str(k) for k in EvidenceKind)
    assert HANG_KINDS <= set(policy.WEIGHTS)


def test_numbers_of_the_verdict_live_in_the_policy_module():
    """No module of the attribution package but ``policy`` builds a duration from ``NS`` or names a
    numeric constant of its own."""
    pkg = Path(policy.__file__).parent
    bad = []
    for path in pkg.glob("*.py"):
        if path.name == "policy.py":
            continue
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.BinOp) and any(isinstance(x, ast.Name) and x.id == "NS" for x in (node.left, node.right)) \
                    and isinstance(node.op, ast.Mult):
                bad.append(f"{path.name}:{node.lineno}")
        for node in tree.body:
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, (int, float)):
                bad.append(f"{path.name}:{node.lineno}")
    assert not bad, bad


def test_a_silent_culprit_of_a_sub_group_is_absent_from_every_groups_timeouts():
    # rank 5 never names its tensor-parallel group: it is the one rank with no timeout anywhere
    ms = [match(WATCHDOG, r, 600.0, caps={"seq": "9021", "pg": "2"}) for r in (4, 6, 7)]
    ms += [match(WATCHDOG, r, 601.0, caps={"seq": "4512", "pg": "0"}) for r in (0, 1, 2, 3)]
    out = _attr(ms, [stream(r) for r in range(8)], set(range(8)))
    assert out.root is not None and out.root.rank == 5, out.why


def test_the_one_rank_that_timed_out_in_another_group_is_the_odd_one():
    ms = [match(WATCHDOG, 7, 590.0, caps={"seq": "9021", "pg": "2"})]
    ms += [match(WATCHDOG, r, 600.0, caps={"seq": "4512", "pg": "0"}) for r in range(7)]
    out = _attr(ms, [stream(r) for r in range(8)], set(range(8)))
    assert out.root is not None and out.root.rank == 7, out.why


def test_a_stall_report_its_rank_went_on_from_is_no_hang():
    stall = rule("horovod.stall-inspector-missing-ranks", Role.COLLATERAL, tags=("hang",))
    rules = {r.id: r for r in (stall, DONE)}
    ms = [match(stall, 0, 60.0, offset=500, caps={"stalled_ranks": "3"})]
    out = attribute(ms, [stream(r, last_step=900, step_t=900.0, step_offset=9000) for r in range(4)], rules, {},
                    set(range(4)))
    assert out.verdict is Verdict.NO_FAILURE, out.why


def test_srun_naming_every_task_of_a_node_killed_is_a_node_level_root():
    killed = rule("slurm.task-killed", Role.TEARDOWN, tags=("worker-exit",))
    rules = {r.id: r for r in (killed, WATCHDOG)}
    ms = [match(killed, None, None, path="slurm-1.out", host="gpu-d04", caps={"tasks": "4-7", "signal": "Killed"})]
    ms += [match(WATCHDOG, r, 600.0) for r in range(4)]
    out = attribute(ms, [stream(r) for r in range(8)], rules, {}, set(range(8)),
                    ranks_of_host={"gpu-d03": {0, 1, 2, 3}, "gpu-d04": {4, 5, 6, 7}})
    assert out.root is not None and out.root.rank is None and out.root.host == "gpu-d04", out.why


def _writer(rank: int, last_offset: int, last_t: float) -> StreamFacts:
    return StreamFacts(Who(rank=rank), f"rank-{rank}.log", 100, T0, T0 + int(last_t * NS), last_offset)


def test_a_failure_its_writer_wrote_on_from_for_minutes_was_caught():
    e = ev(match(OOM, 3, 10.0, offset=500), OOM)
    lives = lifecycle.build([e], [_writer(3, 9000, 10.0 + 300)])
    assert id(e) in lifecycle.survived([e], lives)
    lives = lifecycle.build([e], [_writer(3, 9000, 10.0 + 30)])  # half a minute: a fatal error's exit lines?
    assert lifecycle.survived([e], lives) == {}


def test_in_a_job_nothing_tore_down_a_failure_its_writer_wrote_on_from_was_caught():
    ms = [match(EXC, 3, 10.0, offset=500)]
    out = _attr(ms, [_writer(3, 9000, 40.0)] + [stream(r) for r in (0, 1, 2)], set(range(4)))
    assert out.verdict is Verdict.NO_FAILURE, out.why
    # the same with the launcher tearing the job down: the failure ended it
    ms.append(match(rule("launcher.torchrun-sigterm-to-workers", Role.TEARDOWN), None, 41.0, path="agent.log"))
    rules = {r.id: r for r in (EXC,)} | {"launcher.torchrun-sigterm-to-workers": rule("launcher.torchrun-sigterm-to-workers", Role.TEARDOWN)}
    out = attribute(ms, [_writer(3, 9000, 40.0)], rules, {}, set(range(4)))
    assert out.verdict is Verdict.ROOT_CAUSE and out.root is not None and out.root.rank == 3


def test_a_job_cancelled_after_its_collectives_timed_out_is_the_hangs():
    cancel = rule("slurm.job-cancelled", Role.JOB)
    rules = {r.id: r for r in (cancel, WATCHDOG)}
    waits = [match(WATCHDOG, r, 600.0, caps={"seq": "77"}) for r in range(1, 8)]
    late = [match(cancel, None, 1800.0, path="slurm-1.out")]
    out = attribute([*waits, *late], [stream(r) for r in range(8)], rules, {}, set(range(8)))
    assert out.verdict is Verdict.ROOT_CAUSE and out.root is not None and out.root.rank == 0, out.why
    # ended while the ranks still waited (no collective had timed out yet): the job's end
    early = [match(cancel, None, 300.0, path="slurm-1.out")]
    out = attribute([*waits, *early], [stream(r) for r in range(8)], rules, {}, set(range(8)))
    assert out.verdict is Verdict.JOB_LEVEL, out.why


def test_a_peer_error_after_sruns_grouped_exit_line_is_a_rank_that_woke_late():
    """In one ``srun --label`` stream, srun reports several ranks' exits in one line (``tasks 1,3-7:
    Exited``): a peer error after it is a rank waking up to find its peers gone (the stalled one),
    as after srun's line for one task; a peer error before it is one more rank of the timeout wave."""
    recv = rule("network.gloo-recv-timeout", Role.COLLATERAL, tags=("timeout",))
    closed = rule("network.gloo-connection-closed-by-peer", Role.COLLATERAL, tags=("peer-loss", "peer-transport"))
    exited = rule("slurm.task-exited", Role.TEARDOWN, tags=("srun", "worker-exit"))
    rules = {r.id: r for r in (recv, closed, exited)}
    path = "slurm-81006.out"
    lines = [match(recv, r, None, path=path, offset=100 * i) for i, r in enumerate((1, 3, 4, 5, 6, 7))]
    lines.append(match(closed, 0, None, path=path, offset=700))  # in the wave: a neighbour closed the pair

    def verdict(exit_lines: list[Match]) -> int | None:
        late = match(closed, 2, None, path=path, offset=2000)  # rank 2 wakes after they are gone
        out = attribute([*lines, *exit_lines, late], [stream(r, path=path) for r in range(8)], rules, {}, set(range(8)))
        return out.root.rank if out.verdict is Verdict.ROOT_CAUSE and out.root is not None else None

    grouped = [match(exited, None, None, path=path, offset=1000, caps={"tasks": "1,3-7"}),
               match(exited, None, None, path=path, offset=1100, caps={"tasks": "0"})]
    one_each = [match(exited, r, None, path=path, offset=1000 + 10 * r) for r in (0, 1, 3, 4, 5, 6, 7)]
    assert verdict(one_each) == 2
    assert verdict(grouped) == 2
