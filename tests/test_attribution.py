"""Attribution scenarios through the real extract and correlate stages (inputs visible inline)."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
from conftest import digest_of
from hypothesis import given, settings
from hypothesis import strategies as st
from jobs import T0, combined_srun, glog, py, rank_lines
from test_digest_io import MATCH, STREAM, WHO

from correlator.model import RankState, Verdict
from correlator.pipeline import correlate


def run(engine, files: dict[str, str], **kw):
    digests = [digest_of(engine, text, name=name, **kw.get(name, {})) for name, text in files.items()]
    return correlate(digests, engine.ruleset.rules)


def join(lines):
    return "\n".join(lines) + "\n"


def test_eio_root_with_collateral_groups_and_chain(engine):
    rep = run(engine, {"slurm-1.out": join(combined_srun(rank_lines(16, 4, 9), 4))})
    rc = rep.root_cause
    assert rep.verdict is Verdict.ROOT_CAUSE
    assert (rc.rank, rc.host, rc.local_rank, rc.rule) == (9, "gpu-a02", 1, "storage.eio-on-checkpoint-save")
    assert rc.confidence >= 0.8 and not rc.tie
    coll = [g for g in rep.groups if g.rule == "nccl.watchdog-collective-timeout"]
    assert coll and coll[0].ranks == "0-8,10-15" and coll[0].label == "collateral"
    assert 599 < coll[0].first_after_s < 602
    assert rep.chain[0].stage == "root" and rep.chain[1].rule == "nccl.watchdog-collective-timeout"
    states = {r.rank: r.state for r in rep.ranks}
    assert states[9] is RankState.ROOT and states[0] is RankState.COLLATERAL and len(states) == 16
    assert rc.evidence[0].text == "OSError: [Errno 5] Input/output error"


def test_two_failures_in_the_same_second_are_a_tie(engine):
    t = py(T0)[:-4]  # whole-second stamps only
    text = join([
        f"[rank3]:{t} ERROR torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 3 has a total capacity of 79.15 GiB of which 1.02 GiB is free.",
        f"[rank7]:{t} ERROR torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 7 has a total capacity of 79.15 GiB of which 1.02 GiB is free.",
    ])
    rep = run(engine, {"train.log": text})
    assert rep.verdict is Verdict.ROOT_CAUSE
    assert rep.root_cause.rank in (3, 7)
    assert set(rep.root_cause.tie) == {3, 7} - {rep.root_cause.rank}
    assert rep.root_cause.confidence <= 0.5


def test_worker_killed_by_a_signal_nobody_sent(engine):
    # node 1's agent SIGTERMs its healthy workers; local rank 2 died of SIGKILL first (host OOM killer)
    per = rank_lines(8, 4, None)
    lines = combined_srun(per, 4)
    t = T0 + timedelta(seconds=300)
    lines += [
        f"1: [{py(t)}] torch.distributed.elastic.multiprocessing.api: [WARNING] Sending process 1004 closing signal SIGTERM",
        f"1: [{py(t)}] torch.distributed.elastic.multiprocessing.api: [WARNING] Sending process 1005 closing signal SIGTERM",
        f"1: [{py(t)}] torch.distributed.elastic.multiprocessing.api: [WARNING] Sending process 1007 closing signal SIGTERM",
        f"1: [{py(t + timedelta(seconds=1))}] torch.distributed.elastic.multiprocessing.api: [ERROR] failed (exitcode: -9) local_rank: 2 (pid: 1006) of binary: /usr/bin/python",
        f"0: [{py(t + timedelta(seconds=20))}] torch.distributed.elastic.multiprocessing.api: [WARNING] Sending process 1000 closing signal SIGTERM",
    ]
    rep = run(engine, {"slurm-2.out": join(lines)})
    rc = rep.root_cause
    assert rep.verdict is Verdict.ROOT_CAUSE
    assert rc.rule == "launcher.worker-killed-by-signal" and rc.decided_by == "signal-exit"
    assert (rc.rank, rc.host) == (6, "gpu-a01")


def test_sigkill_after_the_agents_own_escalation_is_not_a_root(engine):
    t = T0 + timedelta(seconds=300)
    text = join([
        f"[{py(t)}] torch.distributed.elastic.multiprocessing.api: [WARNING] Sending process 1006 closing signal SIGTERM",
        f"[{py(t + timedelta(seconds=30))}] torch.distributed.elastic.multiprocessing.api: [WARNING] Sending process 1006 closing signal SIGKILL",
        f"[{py(t + timedelta(seconds=31))}] torch.distributed.elastic.multiprocessing.api: [ERROR] failed (exitcode: -9) local_rank: 2 (pid: 1006) of binary: /usr/bin/python",
    ])
    rep = run(engine, {"agent.log": text})
    assert rep.verdict is not Verdict.ROOT_CAUSE


def test_hang_culprit_that_logs_nothing(engine):
    per = rank_lines(8, 4, 3, hang=True)
    rep = run(engine, {"train.out": join(combined_srun(per, 4))})
    rc = rep.root_cause
    assert rep.verdict is Verdict.ROOT_CAUSE
    assert rc.rank == 3 and rc.decided_by == "missing-from-collective"
    assert any("absent from the collective timeout" in w for w in rc.why)
    assert {r.rank: r.state for r in rep.ranks}[3] is RankState.SILENT or rc.rank == 3


def test_time_limit_is_job_level(engine):
    per = rank_lines(4, 4, None)
    lines = combined_srun(per, 4) + [
        "slurmstepd: error: *** JOB 1234 ON gpu-a00 CANCELLED AT 2026-03-02T15:00:00 DUE TO TIME LIMIT ***"]
    rep = run(engine, {"slurm-1234.out": join(lines)})
    assert rep.verdict is Verdict.JOB_LEVEL
    assert rep.root_cause.rule == "slurm.time-limit" and rep.root_cause.rank is None


def test_healthy_job(engine):
    rep = run(engine, {"slurm-5.out": join(combined_srun(rank_lines(4, 4, None), 4))})
    assert rep.verdict is Verdict.NO_FAILURE and rep.root_cause is None
    assert all(r.state is RankState.HEALTHY for r in rep.ranks)


def test_clock_skew_correction_changes_the_order(engine):
    # host 0 runs 5 s behind. rank 9 (host 2) hits an illegal memory access at true T; rank 1 (host 0)
    # segfaults 2 s later in true time, but its stamp reads 3 s earlier than rank 9's.
    skew = {0: -5.0}
    per = rank_lines(12, 4, None, skew_s=skew)
    t = T0 + timedelta(seconds=400)
    per[9].append(f"{py(t)} - train - ERROR - RuntimeError: CUDA error: an illegal memory access was encountered")
    per[1].append(f"[{glog(t + timedelta(seconds=2 - 5))} ProcessGroupNCCL.cpp:1] crash")
    per[1].append(f"{py(t + timedelta(seconds=2 - 5))} - train - ERROR - Fatal Python error: Segmentation fault")
    files = {f"rank-{r}.out": join(ls) for r, ls in per.items()}
    rep = run(engine, files, **{f"rank-{r}.out": {"file_rank": r} for r in per})
    assert rep.verdict is Verdict.ROOT_CAUSE
    assert rep.root_cause.rank == 9, rep.root_cause
    offsets = {c.host: c.offset_s for c in rep.clocks}
    assert abs(offsets["gpu-a00"] - offsets["gpu-a02"] + 5.0) < 0.05
    # without correction (naive order) the segfault would come first
    seg = [e for e in rep.timeline if e.rank == 1 and e.label == "independent"]
    assert seg and seg[0].after_root_s > 1.5


def test_generic_exception_yields_to_a_specific_failure(engine):
    t = T0
    text = join([
        f"[rank2]:{py(t)} x",
        "[rank2]:ValueError: bad batch shape",
        f"[rank5]:{py(t + timedelta(seconds=3))} x",
        "[rank5]:torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 5 has a total capacity of 79.15 GiB of which 1.02 GiB is free.",
    ])
    rep = run(engine, {"t.log": text})
    assert rep.root_cause.rank == 5 and rep.root_cause.rule == "cuda.out-of-memory"


def test_only_a_generic_exception_gives_low_confidence(engine):
    text = join([f"[rank2]:{py(T0)} x", "[rank2]:ValueError: bad batch shape"])
    rep = run(engine, {"t.log": text})
    assert rep.root_cause.rank == 2 and rep.root_cause.rule == "python.uncaught-exception"
    assert rep.root_cause.confidence <= 0.75


def test_torchelastic_restarts_get_one_verdict_per_attempt(tmp_path):
    from correlator.pipeline import Options, analyze

    def write(attempt, local, text):
        d = tmp_path / "run_abc" / f"attempt_{attempt}" / str(local)
        d.mkdir(parents=True, exist_ok=True)
        (d / "stderr.log").write_text(text)

    t0 = py(T0)
    t1 = py(T0 + timedelta(minutes=20))
    for lr in range(4):
        write(0, lr, f"{t0} - train - INFO - step=100\n")
        write(1, lr, f"{t1} - train - INFO - step=100\n")
    write(0, 2, f"{t0} - train - INFO - step=100\n{py(T0 + timedelta(seconds=5))} - train - ERROR - "
                "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 2 has a total "
                "capacity of 79.15 GiB of which 1.02 GiB is free.\n")
    write(1, 3, f"{t1} - train - INFO - step=100\n{py(T0 + timedelta(minutes=21))} - train - ERROR - "
                "RuntimeError: CUDA error: uncorrectable ECC error encountered\n")
    rep = analyze([str(tmp_path)], Options(tz="UTC"))
    assert [a.attempt for a in rep.attempts] == [1, 0]
    assert rep.root_cause.rank == 3 and rep.root_cause.rule == "gpu-hardware.uncorrectable-ecc"
    assert rep.attempts[1].rank == 2 and rep.attempts[1].rule == "cuda.out-of-memory"


def test_only_failure_tables_name_the_earliest_entry_across_nodes(engine):
    from pathlib import Path

    text = (Path(__file__).parent / "fixtures" / "tables-only-slurm-7.out").read_text()
    rep = run(engine, {"slurm-7.out": text})
    rc = rep.root_cause
    assert rep.verdict is Verdict.ROOT_CAUSE and rc.decided_by == "failure-table"
    assert (rc.rank, rc.host) == (4, "node-b")  # 51 s before node-a's entry; torchrun's tables disagree
    assert 0.3 <= rc.confidence <= 0.6 and rc.evidence[0].line > 0


def test_a_collective_mismatch_names_the_reporter_without_overstating(engine):
    """The mismatch check compares two ranks' fingerprints: the reporter is not shown to be the one
    that diverged, so the verdict says so and does not claim high confidence."""
    text = join([
        f"{py(T0)} - train - INFO - step=31 loss=2.1",
        "[rank2]: RuntimeError: Detected mismatch between collectives on ranks. Rank 2 is running collective: "
        "CollectiveFingerPrint(SequenceNumber=32, OpType=ALLREDUCE, TensorShape=[1], TensorDtypes=Float), "
        "but Rank 3 is running collective: CollectiveFingerPrint(SequenceNumber=0, OpType=GATHER).",
    ])
    rep = run(engine, {"rank2.log": text})
    rc = rep.root_cause
    assert rep.verdict is Verdict.ROOT_CAUSE and rc.rule == "nccl.collective-mismatch-detected" and rc.rank == 2
    assert rc.confidence <= 0.5
    assert any("against rank 3" in w and "which side diverged" in w for w in rc.why)


def test_a_rankless_failure_takes_the_rank_of_the_only_worker_the_launcher_saw_fail(engine):
    assert_line = ("../aten/src/ATen/native/cuda/Indexing.cu:1141: indexSelectLargeIndex: block: [118,0,0], "
                   "thread: [{},0,0] Assertion `srcIndex < srcSelectDimSize` failed.")
    lines = [assert_line.format(i) for i in range(3)]
    lines += [f"WARNING:torch.distributed.elastic.multiprocessing.api:Sending process {p} closing signal SIGTERM"
              for p in (501, 502, 504)]
    lines.append("ERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: -6) local_rank: 2 "
                 "(pid: 503) of binary: /opt/conda/bin/python")
    rep = run(engine, {"train.log": join(lines)})
    rc = rep.root_cause
    assert rep.verdict is Verdict.ROOT_CAUSE and rc.rule == "cuda.device-side-assert"
    assert rc.local_rank == 2 and rc.rank == 2  # one node: global rank = local rank
    assert any("launcher's only report" in w for w in rc.why)
    # two workers failing on their own: the assertion's rank stays unknown
    lines.append("ERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: 1) local_rank: 3 "
                 "(pid: 504) of binary: /opt/conda/bin/python")
    rc = run(engine, {"train.log": join(lines)}).root_cause
    assert rc.rule == "cuda.device-side-assert" and rc.rank is None


def _desync(ranks_joined: str | None = None, finished: str | None = None, never: str | None = None) -> list[str]:
    out = ["\t - To our best knowledge, the lagging/dead/mismatched ranks that caused the desync are:"]
    if joined := ranks_joined:
        out.append(f"\t   - [{joined}] joined but didn't finish collective #301 (count from 1)")
    if finished:
        out.append(f"\t     [{finished}] finished collective #301, but didn't join collective #302 (count from 1)")
    if never:
        out = [f"\t - To our best knowledge, ranks [{never}] are the lagging ranks that caused this timeout. "
               f"They never joined any collectives"]
    return out


def test_a_desync_report_where_every_rank_joined_names_no_rank(engine):
    # rank 3 is absent from the timeout lines (it would be the culprit), but the desync report saw it join
    per = rank_lines(8, 4, 3, hang=True)
    lines = combined_srun(per, 4) + [f"0: [default0]:[rank0]:{x}" for x in _desync("0, 1, 2, 3, 4, 5, 6, 7")]
    rep = run(engine, {"train.out": join(lines)})
    assert rep.verdict is Verdict.UNDETERMINED and rep.root_cause is None
    notes = [d.message for d in rep.diagnostics if d.path is None]
    assert any("every rank (0-7) joined the stuck collective" in n for n in notes)


def test_a_desync_report_names_the_rank_that_never_joined_or_is_the_odd_one_out(engine):
    per = rank_lines(8, 4, 99, hang=True)  # every rank times out on the same collective: nobody stands out
    assert run(engine, {"train.out": join(combined_srun(per, 4))}).verdict is Verdict.UNDETERMINED
    for extra, want in ((_desync(never="6"), 6), (_desync("5", "0, 1, 2, 3, 4, 6, 7"), 5)):
        lines = combined_srun(per, 4) + [f"0: [default0]:[rank0]:{x}" for x in extra]
        rc = run(engine, {"train.out": join(lines)}).root_cause
        assert rc.rank == want and rc.decided_by == "desync-report", extra
        assert any("desync report" in w for w in rc.why)


def test_a_dump_signal_pointer_alone_names_no_rank(engine):
    t = py(T0)
    lines = [
        f"[rank{r}]:[E302 14:00:00.000000000 ProcessGroupNCCL.cpp:1987] [PG ID 0 PG GUID 0(default_pg) Rank {r}] "
        f"Received a dump signal due to a collective timeout from  rank 6 and we will try our best to dump the debug "
        f"info. Last enqueued NCCL work: 56116, last completed NCCL work: 56116." for r in (0, 1, 2, 3)]
    rep = run(engine, {"train.log": join([f"{t} - train - INFO - step=5", *lines])})
    assert rep.verdict is Verdict.UNDETERMINED and rep.root_cause is None
    assert any("named by" in d.message and "a hint only" in d.message for d in rep.diagnostics if d.path is None)


def test_the_same_failure_told_without_a_rank_on_the_roots_node_is_no_tie(engine):
    lines = [
        "slurmstepd-gpu20-15: error: Detected 1 oom-kill event(s) in StepId=9411285.0. Some of your processes may "
        "have been killed by the cgroup out-of-memory handler.",
        "srun: error: gpu20-15: task 0: Out Of Memory",
        "slurmstepd-gpu20-15: error: *** STEP 9411285.0 ON gpu20-15 CANCELLED AT 2022-05-17T17:58:10 ***",
    ]
    rc = run(engine, {"slurm.out": join(lines)}).root_cause
    assert (rc.rule, rc.rank, rc.host) == ("slurm.oom-kill", 0, "gpu20-15")
    assert not rc.tie and rc.confidence > 0.5
    assert not any("could not order" in w for w in rc.why)


def test_the_traceback_after_mp_spawns_report_is_that_process(engine):
    lines = ["Traceback (most recent call last):", '  File "x.py", line 3, in <module>', "    mp.spawn(main, nprocs=4)",
             "torch.multiprocessing.spawn.ProcessRaisedException: ", "",
             "-- Process 2 terminated with the following error:", "Traceback (most recent call last):",
             '  File "/opt/train.py", line 40, in main', "    img = Image.open(path)",
             "PIL.UnidentifiedImageError: cannot identify image file '/data/x.jpg'"]
    rc = run(engine, {"train.log": join(lines)}).root_cause
    assert rc.rank == 2 and rc.local_rank == 2 and "UnidentifiedImageError" in rc.evidence[0].text


def _watchdog(rank: int, seq: int, op: str, pg: str = "") -> str:
    where = f"[PG {pg} Rank {rank}] Process group watchdog thread terminated with exception: " if pg else ""
    return (f"[rank{rank}]:[E{glog(T0 + timedelta(seconds=1800 + rank))} ProcessGroupNCCL.cpp:632] {where}[Rank {rank}] "
            f"Watchdog caught collective operation timeout: WorkNCCL(SeqNum={seq}, OpType={op}, NumelIn=1, "
            f"NumelOut=1, Timeout(ms)=1800000) ran for 1800{rank:03d} milliseconds before timing out.")


def test_the_rank_in_another_operation_at_the_stuck_seqnum_is_the_culprit(engine):
    """Ranks that time out on the same SeqNum of one group but in another operation (a REDUCE where
    the others run an ALLGATHER) took another code path: they are the hang's culprit."""
    lines = [_watchdog(r, 3742816, "REDUCE" if r == 2 else "_ALLGATHER_BASE") for r in range(8)]
    rep = run(engine, {"train.log": join(lines)})
    rc = rep.root_cause
    assert rep.verdict is Verdict.ROOT_CAUSE and rc.rank == 2 and rc.decided_by == "other-operation"
    assert any("REDUCE where 7 other rank(s) run a _ALLGATHER_BASE" in w for w in rc.why)
    # the same operation everywhere: nobody stands out
    same = run(engine, {"train.log": join(_watchdog(r, 3742816, "_ALLGATHER_BASE") for r in range(8))})
    assert same.verdict is not Verdict.ROOT_CAUSE
    # half and half: no minority to name
    split = run(engine, {"train.log": join(_watchdog(r, 3742816, "REDUCE" if r < 4 else "ALLREDUCE") for r in range(8))})
    assert split.verdict is not Verdict.ROOT_CAUSE


def _node_file(host: str, ranks: tuple[int, int], fail_local: int | None, tagged: bool = True) -> str:
    """A node's file as torchrun --tee writes it: NCCL init lines naming each worker's global rank,
    then an ENOSPC traceback from one worker whose lines carry only the [defaultN]: tag."""
    lines = []
    for local, rank in enumerate(ranks):
        tag = f"[default{local}]:" if tagged else ""
        lines.append(f"{tag}{host}:{2811 + local}:{2817 + local} [{local}] NCCL INFO comm 0x55d7dd5c903{local} rank {rank} "
                     f"nRanks 4 nNodes 2 localRanks 2 localRank {local} MNNVL 0")
    if fail_local is not None:
        tag = f"[default{fail_local}]:" if tagged else ""
        lines += [f"{tag}2026-02-20 04:39:28,101 - INFO - train - Saving checkpoint at step 490 to /lustre/ckpt",
                  f"{tag}Traceback (most recent call last):",
                  f'{tag}  File "/workspace/train.py", line 395, in main',
                  f"{tag}OSError: [Errno 28] No space left on device"]
    return join(lines)


def test_a_workers_rank_comes_from_its_own_statements_not_from_digits_in_a_file_name(engine):
    """Per-node files named after their hosts: the failing worker's lines carry only [default1]:, its
    NCCL init line says rank 3; neither the host's digits nor the local rank is its global rank."""
    for names in (("node-gpu-a01.log", "node-gpu-a02.log"), ("node-ip-10-0-63-17.log", "node-ip-10-0-63-211.log"),
                  ("node-dgx-h100-03.log", "node-dgx-h100-04.log")):
        from correlator.extract.sources import _number_family

        assert _number_family([f"/x/{n}" for n in names]) == {}
        rep = run(engine, {names[0]: _node_file("gpu-a01", (0, 1), None), names[1]: _node_file("gpu-a02", (2, 3), 1)},
                  **{n: {"file_rank": None} for n in names})
        assert rep.root_cause.rank == 3 and rep.root_cause.local_rank == 1
    # a file name that looks like a rank loses to the process's own NCCL init line
    rep = run(engine, {"worker-1.log": _node_file("gpu-a02", (3,), 0, tagged=False)},
              **{"worker-1.log": {"file_rank": 1}})
    assert rep.root_cause.rank == 3
    # an NCCL init line of a sub-communicator (nRanks 2) says nothing about the global rank
    sub = _node_file("gpu-a02", (3,), 0, tagged=False).replace("nRanks 4", "nRanks 2").replace("rank 3 ", "rank 1 ")
    rep = run(engine, {"worker.log": sub, "other.log": _node_file("gpu-a01", (0,), None, tagged=False)})
    assert rep.root_cause.rank != 1


def test_an_ignored_exception_is_no_failure_but_does_not_excuse_a_later_one(engine):
    ignored = [
        f"{py(T0)} - INFO - train - Training complete in 3.9 hours",
        "Exception ignored in: <function _MultiProcessingDataLoaderIter.__del__ at 0x7f5c541891c0>",
        "Traceback (most recent call last):",
        '  File "/usr/lib/python3.10/dist-packages/torch/utils/data/dataloader.py", line 1604, in __del__',
        "    self._shutdown_workers()",
        "AttributeError: '_MultiProcessingDataLoaderIter' object has no attribute '_workers_status'",
    ]
    rep = run(engine, {"rank-0.log": join(ignored)})
    assert rep.verdict is Verdict.NO_FAILURE
    real = ignored + ["Traceback (most recent call last):", '  File "/workspace/train.py", line 12, in <module>',
                      "ValueError: bad batch"]
    rep = run(engine, {"rank-0.log": join(real)})
    assert rep.verdict is Verdict.ROOT_CAUSE and rep.root_cause.rule == "python.uncaught-exception"
    assert "ValueError: bad batch" in rep.root_cause.evidence[-1].text


def test_a_failure_its_rank_trains_on_from_is_not_the_root(engine):
    """fairseq catches a CUDA OOM and retries the batch; the rank's progress goes on for hours: the
    OOM was survived. The same OOM with the rank's progress ending there is the root."""
    oom = (f"{py(T0 + timedelta(seconds=17))} - WARNING - fairseq.trainer - OOM: Ran out of memory with exception: "
           "CUDA out of memory. Tried to allocate 2.00 GiB. GPU 3 has a total capacity of 79.10 GiB of which 1.02 GiB is free.")
    survived = [f"{py(T0)} - INFO - train - step 1200/5000 | loss 2.3123", oom,
                f"{py(T0 + timedelta(seconds=18))} - WARNING - fairseq.trainer - attempting to recover from OOM in forward/backward pass",
                f"{py(T0 + timedelta(seconds=31))} - INFO - train - step 1210/5000 | loss 2.3101",
                f"{py(T0 + timedelta(hours=2))} - INFO - train - step 5000/5000 | loss 1.8101"]
    named = {"rank-3.log": {"file_rank": 3}}
    rep = run(engine, {"rank-3.log": join(survived)}, **named)
    assert rep.verdict is Verdict.NO_FAILURE
    assert any("went on after its cuda.out-of-memory" in d.message for d in rep.diagnostics)
    from correlator.report import markdown, terminal

    for text in (markdown.render(rep), terminal.render(rep, color=False)):
        assert "went on after its cuda.out-of-memory" in text
    died = survived[:2]
    rep = run(engine, {"rank-3.log": join(died)}, **named)
    assert rep.verdict is Verdict.ROOT_CAUSE and rep.root_cause.rule == "cuda.out-of-memory"
    assert rep.root_cause.rank == 3


def test_a_job_level_end_names_no_rank_even_from_a_ranks_file(engine):
    line = "slurmstepd: error: *** JOB 1234 ON gpu-a00 CANCELLED AT 2026-03-02T15:00:00 DUE TO TIME LIMIT ***"
    rep = run(engine, {"rank-0.log": join([f"{py(T0)} - INFO - train - step 10/100", line])},
              **{"rank-0.log": {"file_rank": 0}})
    assert rep.verdict is Verdict.JOB_LEVEL and rep.root_cause.rule == "slurm.time-limit"
    assert rep.root_cause.rank is None and rep.root_cause.local_rank is None


def test_a_nodes_file_named_like_a_rank_does_not_give_its_agent_lines_that_rank(engine):
    """The agent's "failed (exitcode: -11) local_rank: 1" in a node's file (its workers tagged
    [defaultN]:) belongs to the worker its NCCL init line names, not to the number in the file name."""
    text = _node_file("gpu-a02", (2, 3), None) + join([
        "E0222 16:13:00.981000 5709 torch/distributed/elastic/multiprocessing/api.py:869] failed (exitcode: -11) "
        "local_rank: 1 (pid: 293537) of binary: /usr/bin/python3"])
    rep = run(engine, {"out-5.log": text, "out-0.log": _node_file("gpu-a01", (0, 1), None)},
              **{"out-5.log": {"file_rank": 5}, "out-0.log": {"file_rank": 0}})
    assert rep.root_cause.rule == "launcher.worker-segfault-sigsegv" and rep.root_cause.rank == 3


def _restart_job(second: str | None) -> str:
    """Two nodes under srun --label: rank 3 OOMs, node 0's agent restarts the worker group, and the
    second attempt either trains on (``second`` None) or hits ``second`` on rank 1."""
    lines = []
    for step in range(0, 5):
        for r in range(4):
            lines.append(f"{r // 2}: [default{r % 2}]:{py(T0 + timedelta(seconds=30 * step))} - INFO - train - step {step * 10} | loss 2.0")
    t = T0 + timedelta(seconds=150)
    lines += [f"1: [default1]:{py(t)} - ERROR - train - uncaught exception",
              "1: [default1]:[rank3]: Traceback (most recent call last):",
              "1: [default1]:[rank3]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.95 GiB. GPU 1 has a total capacity of 79.10 GiB of which 407.94 MiB is free.",
              f"1: W{glog(t + timedelta(seconds=1))} 4243 torch/distributed/elastic/multiprocessing/api.py:897] Sending process 2004 closing signal SIGTERM",
              f"1: E{glog(t + timedelta(seconds=2))} 4243 torch/distributed/elastic/multiprocessing/api.py:869] failed (exitcode: 1) local_rank: 1 (pid: 2005) of binary: /usr/bin/python3",
              f"1: I{glog(t + timedelta(seconds=2))} 4243 torch/distributed/elastic/agent/server/api.py:863] [default] Worker group FAILED. 2/3 attempts left; will restart worker group",
              f"0: W{glog(t + timedelta(seconds=5))} 4111 torch/distributed/elastic/multiprocessing/api.py:897] Sending process 1004 closing signal SIGTERM"]
    t2 = t + timedelta(seconds=60)
    for step in range(0, 8):
        for r in range(4):
            lines.append(f"{r // 2}: [default{r % 2}]:{py(t2 + timedelta(seconds=30 * step))} - INFO - train - step {step * 10} | loss 2.0")
    if second:
        t3 = t2 + timedelta(seconds=300)
        lines += [f"0: [default1]:{py(t3)} - ERROR - train - checkpoint save failed",
                  f"0: [default1]:[rank1]: {second}"]
    return join(lines)


def test_a_restart_outside_a_log_dir_splits_the_job_into_attempts(engine):
    """torchelastic's "will restart worker group" in a combined srun log: the verdict is the last
    attempt's (a failure there, or none when it trained on), and each attempt's is reported."""
    rep = run(engine, {"slurm-1.out": _restart_job(None)})
    assert rep.verdict is Verdict.NO_FAILURE
    first = {a.attempt: a for a in rep.attempts}[0]
    assert (first.verdict, first.rank, first.rule) == (Verdict.ROOT_CAUSE, 3, "cuda.out-of-memory")
    rep = run(engine, {"slurm-1.out": _restart_job("OSError: [Errno 5] Input/output error: '/lustre/ckpt/step_00200/model.pt'")})
    assert rep.verdict is Verdict.ROOT_CAUSE and rep.root_cause.rank == 1
    assert rep.root_cause.rule.startswith("storage.")
    assert {a.attempt: a.rank for a in rep.attempts} == {0: 3, 1: 1}


def test_a_plain_exception_well_before_a_specific_failure_is_the_first(engine):
    """Rank 2's ValueError comes 30 s before rank 5's EIO: the plain exception is the root (a specific
    rule wins only when the two are close enough to be one event or a clock's error)."""
    def rank_file(rank: int, t, last: str) -> str:
        return join([f"{py(T0)} - INFO - train - step 10 | loss 2.0", f"{py(t)} - ERROR - train - failed",
                     f"[rank{rank}]: Traceback (most recent call last):", f"[rank{rank}]: {last}",
                     f"{py(t + timedelta(seconds=1))} - INFO - train - exiting"])

    eio = "OSError: [Errno 5] Input/output error: '/lustre/ckpt/step_0001/model.pt'"
    for gap, root in ((30, 2), (3, 5)):
        rep = run(engine, {"rank-2.log": rank_file(2, T0 + timedelta(seconds=60), "ValueError: cannot reshape array"),
                           "rank-5.log": rank_file(5, T0 + timedelta(seconds=60 + gap), eio)},
                  **{"rank-2.log": {"file_rank": 2}, "rank-5.log": {"file_rank": 5}})
        assert rep.root_cause.rank == root, (gap, rep.root_cause.why)


def test_a_kernel_xid_line_names_the_rank_whose_gpu_is_on_that_bus(engine):
    """A node's kernel log names only the GPU's PCI address; the ranks' NCCL init lines on that host
    give each GPU's bus id (busId 38000 = 0000:38:00.0)."""
    files = {f"rank-{r}.log": join([
        f"gpu-a02:{1000 + r}:{1300 + r} [{r}] NCCL INFO ncclCommInitRank comm 0x55d1 rank {r} nranks 4 cudaDev {r} "
        f"nvmlDev {r} busId {r + 1}8000 commId 0x5e1d - Init COMPLETE",
        f"{py(T0)} - INFO - train - step 100 | loss 2.0"]) for r in range(4)}
    files["kern-gpu-a02.log"] = join([
        "Mar  2 14:10:00 gpu-a02 kernel: [1812345.123470] NVRM: Xid (PCI:0000:38:00): 79, pid='<unknown>', "
        "name=<unknown>, GPU has fallen off the bus."])
    rep = run(engine, files, **{f"rank-{r}.log": {"file_rank": r} for r in range(4)})
    assert rep.root_cause.rule == "gpu-hardware.fallen-off-bus"
    assert (rep.root_cause.rank, rep.root_cause.host) == (2, "gpu-a02")


def test_a_failure_reported_about_an_absent_peer_names_neither_the_printers_rank_nor_host(tmp_path):
    """The agents that joined a rendezvous print its timeout; the culprit is the node that never
    came. A rule tagged ``absent-peer`` makes a root whose host and rank are not the printer's, for
    any such rule and any host naming (here two host folders of torchrun agents)."""
    from correlator.pipeline import Options, analyze

    log = Path(__file__).parent / "recorded" / "rdzv-timeout" / "node0.log"
    for host in ("gpu-a01", "gpu-a02"):
        (tmp_path / host).mkdir()
        (tmp_path / host / "torchrun.log").write_bytes(log.read_bytes())
    report = analyze([str(tmp_path)], Options(tz="UTC", workers=1))
    rc = report.root_cause
    assert rc is not None and rc.rule == "launcher.rendezvous-error"
    assert rc.host is None and rc.rank is None
    assert any("never came" in w for w in rc.why)


# --- the stage's cost: same results, less work ------------------------------------------------------

@settings(max_examples=200, deadline=None)
@given(st.one_of(MATCH, STREAM), WHO)
def test_identity_is_filled_in_as_replace_would(x, who):
    """``identity._with_who`` (the stage's copy of 50,000 matches with their identity filled in) is
    ``dataclasses.replace(x, who=who)``."""
    from dataclasses import replace

    from correlator.correlate import identity

    got = identity._with_who(x, who)
    assert got == replace(x, who=who) and type(got) is type(x) and got.who is who


def test_the_stage_runs_without_the_cyclic_collector_and_restores_it(engine, monkeypatch):
    """The collector is off while the stage runs (it went over every digest's objects again and again)
    and as it was afterwards, when the stage fails too."""
    import gc

    from correlator.correlate import attribution

    seen = []
    real = attribution.attribute

    def spy(*a, **k):
        seen.append(gc.isenabled())
        return real(*a, **k)

    monkeypatch.setattr(attribution, "attribute", spy)
    files = {"slurm-1.out": join(combined_srun(rank_lines(4, 4, 2), 4))}
    assert gc.isenabled()
    assert run(engine, files).verdict is Verdict.ROOT_CAUSE
    assert seen == [False] and gc.isenabled()

    def boom(*a, **k):
        raise RuntimeError("boom")

    monkeypatch.setattr(attribution, "attribute", boom)
    with pytest.raises(RuntimeError):
        run(engine, files)
    assert gc.isenabled()
    gc.disable()
    try:
        monkeypatch.setattr(attribution, "attribute", spy)
        run(engine, files)
        assert not gc.isenabled()  # (left off: it was off)
    finally:
        gc.enable()
