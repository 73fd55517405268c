"""A failing job's cascade: the root fault on one rank, who waits and times out, the teardown, the truth's words.

The root fault's own output comes from its family's module (``ROOT_TRACEBACKS`` for the faults that
raise a Python exception); the timing here is what keeps ``Truth.collateral_ranks`` exact (see the
package docstring: who is silent after the root event).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from tools.synth import cuda, environment, hardware, host_oom, nccl, slurm, storage, tracebacks, training, watchdog
from tools.synth.job import Job
from tools.synth.profiles import COORD_CHECK_S, ENQUEUE_SPREAD_S, WATCHDOG_POLL_S
from tools.synth.tracebacks import RootTraceback

#: the faults whose root raises a Python exception -> its traceback (rank, step) -> blocks, joins, summary
ROOT_TRACEBACKS: dict[str, Callable[[Job, int, int], RootTraceback]] = {
    "storage-eio": storage.save_error,
    "storage-estale": storage.save_error,
    "storage-enospc": storage.save_error,
    "storage-edquot": storage.save_error,
    "stream-writer": storage.save_error,
    "storage-exdev": storage.exdev_rename,
    "lightning-exdev": storage.lightning_exdev,
    "cuda-oom": cuda.out_of_memory,
    "gpu-ecc": hardware.ecc_traceback,
    "dataloader-killed": host_oom.dataloader_killed,
    "import-error": environment.import_error,
}
#: the signal that ends the root process -> what it prints (rank, time, lead) -> details, (exit time, exit code)
SIGNAL_DEATHS: dict[int, Callable[[Job, int, float, str], tuple[str, tuple[float, int]]]] = {
    11: cuda.segfault,
    9: host_oom.killed_silently,
}


def simulate(job: Job) -> None:
    """A failing job: normal output, the root fault, the waiting ranks' timeouts, the teardown."""
    f, rng, p = job.fault, job.rng, job.profile
    if job.nodes < f.min_nodes:
        raise ValueError(f"fault {f.name!r} needs at least {f.min_nodes} nodes")
    root = job.root_rank
    assert root is not None
    rw = job.workers[root]
    rn = rw.node
    nl = job.steps_before_fault()
    last_logged = job.step0 + job.log_every * nl
    saves = bool(f.saves)
    if saves:
        # the fault happens while saving the checkpoint after a logged step
        fail_step = last_logged
        job.ckpt_every = job.log_every          # align: a checkpoint is due at the last logged step
    else:
        fail_step = last_logged + rng.randrange(1, job.log_every)
    silent_after: dict[int, int] = {}
    if f.mechanism == "hang":
        silent_after[root] = last_logged
    training.normal_output(job, last_logged, silent_after)
    t_fail = job.step_time(fail_step) + rng.uniform(0.05, 0.8) * job.step_dt
    if saves:
        t_fail = job.step_time(fail_step) + rng.uniform(3.0, 25.0)
        savers = [root] if f.saves == "rank0" else [w.rank for w in job.workers]
        for r in savers:
            n = job.workers[r].node
            ts = job.step_time(fail_step) + 0.3 + rng.uniform(0, 0.05)
            job.print_rank(r, ts, f"{job.log_stamp(n, ts)} - train - INFO - [rank {r}] saving checkpoint to "
                           f"{job.ckpt}/step-{fail_step:06d}")
    rw.state = "root"
    job.root_time = t_fail
    # the collective everyone else waits in
    seq_h = job.seq_of_step(fail_step) + (1 if saves else rng.randrange(0, job.seq_per_step))
    if saves:
        op, numel = "ALLREDUCE", 1
    else:
        op = rng.choice(["ALLREDUCE", "ALLREDUCE", "_ALLGATHER_BASE", "_REDUCE_SCATTER_BASE"])
        numel = job.numel
    root_exit: tuple[float, int] | None = None
    details = ""
    lead = ""
    if root == 0 and job.variant.tqdm:
        lead = training.tqdm_frames(job, last_logged + rng.randrange(1, job.log_every))
    # ---- root fault
    if f.mechanism == "exception" and not (f.name == "gpu-ecc" and job.variant.ecc_variant == "watchdog"):
        blocks, joins, details = ROOT_TRACEBACKS[f.name](job, root, fail_step)
        tracebacks.die_of_exception(job, root, t_fail, blocks, joins, fail_step, lead)
        if "destroy" in p.cpp_line:
            td = t_fail + rng.uniform(0.2, 1.5)
            job.print_rank(root, td, f"{job.glog_tag(rn, td, 'ProcessGroupNCCL.cpp', p.cpp_line['destroy'], 'W')} Warning: WARNING: "
                           "destroy_process_group() was not called before program exit, which can leak resources. "
                           "For more info, please see https://pytorch.org/docs/stable/distributed.html#shutdown "
                           "(function operator())", "glog")
        root_exit = None if job.variant.kill_on_bad_exit else (t_fail + rng.uniform(1.0, 4.0), 1)
    elif f.name == "gpu-ecc":  # the watchdog thread hits the ECC error first
        details, root_exit = hardware.ecc_in_watchdog(job, root, t_fail)
    elif f.mechanism == "signal":
        details, root_exit = SIGNAL_DEATHS[f.signal](job, root, t_fail, lead)
    elif f.mechanism == "network":
        details, t_abort = nccl.ib_completion_error(job, root, t_fail)
        root_exit = (t_abort + rng.uniform(0.02, 0.3), -6)
    elif f.mechanism == "hang":
        details = "stops logging and never enters the collective"
        t_fail = job.step_time(last_logged) + rng.uniform(0.2, 0.9) * job.step_dt
        job.root_time = t_fail
        seq_h = job.seq_of_step(last_logged) + 1
        fail_step = last_logged     # its last step line; it never joins the next collective
        rw.state = "silent"
    if root_exit:
        rw.exit_t, rw.exit_code = root_exit
    # ---- collateral: who times out, when
    agent_kills_root_node = job.has_agent and root_exit is not None
    first_timeout: tuple[float, int] | None = None
    plan: list[tuple[float, int, int]] = []   # (timeout time, rank, ran_ms)
    stuck = -1
    if job.variant.stuck_node and job.nodes >= 3:
        cands = [n for n in range(job.nodes) if n != rn]
        stuck = cands[rng.randrange(len(cands))]
    secondary: int | None = None
    if job.variant.secondary and f.mechanism == "exception":
        cands = [w.rank for w in job.workers if w.node != rn]
        if job.variant.secondary_rank >= 0:
            secondary = job.variant.secondary_rank
        elif cands:
            secondary = pick_secondary_rank(job, cands)
    # when the waiting ranks enqueue the collective the root never joins (all within ENQUEUE_SPREAD_S)
    if f.mechanism == "hang":
        t_coll = t_fail
    elif f.saves == "rank0":      # the others go straight to the barrier while rank 0 writes
        t_coll = job.step_time(fail_step) + 0.35 + rng.uniform(0.0, 0.3)
    elif rng.random() < 0.5:      # they were already waiting when the root failed
        t_coll = t_fail - rng.uniform(0.0, 0.6 * job.step_dt)
    else:                         # they reach it a little after
        t_coll = t_fail + rng.uniform(0.0, 0.5 * job.step_dt)
    for wk in job.workers:
        if wk.rank == root or wk.rank == secondary:
            continue
        if agent_kills_root_node and wk.node == rn:
            continue
        t_enter = t_coll + rng.uniform(0.0, ENQUEUE_SPREAD_S)
        ran_ms = 600000 + rng.randrange(1, int(WATCHDOG_POLL_S * 1000))
        plan.append((t_enter + ran_ms / 1000.0, wk.rank, ran_ms))
    plan.sort()
    if plan:
        first_timeout = (plan[0][0], plan[0][1])
    # secondary primary failure (same storage fault seen by another rank a bit later)
    if secondary is not None:
        t2 = t_fail + job.variant.secondary_delay
        sw = job.workers[secondary]
        blocks, joins, _ = ROOT_TRACEBACKS[f.name](job, secondary, fail_step)
        tracebacks.die_of_exception(job, secondary, t2, blocks, joins, fail_step)
        sw.exit_t, sw.exit_code = t2 + rng.uniform(1.0, 3.0), 1
        sw.state = "collateral"
        job.collateral.add(secondary)
    # emit the timeouts
    p_mode = 0.7 if saves else 0.12
    for t_to, r, ran_ms in plan:
        wk = job.workers[r]
        mode = "python" if rng.random() < p_mode else "abort"
        observed = None
        if p.flight_recorder == "stack" and first_timeout and r != first_timeout[1]:
            # the heartbeat monitor polls the TCPStore; it reports the first rank's dump signal only if
            # that poll comes before this rank's own watchdog detects the timeout
            t_obs = first_timeout[0] + rng.uniform(0.02, COORD_CHECK_S)
            if t_obs < t_to - 0.001:
                observed = (first_timeout[1], t_obs)
        t_exit, pyblk, t_exc = watchdog.timeout_output(job, r, t_to, seq_h, op, numel, ran_ms, enq=seq_h, comp=seq_h - 1,
                                                       first_dump=(first_timeout is not None and r == first_timeout[1]),
                                                       observed_from=observed, mode=mode)
        wk.state = "collateral"
        job.collateral.add(r)
        if wk.node == stuck:
            wk.state = "stuck"
            continue
        wk.exit_t, wk.exit_code = t_exit, (1 if mode == "python" else -6)
        if pyblk is not None and job.variant.record and job.has_agent:
            wk.error_ts = t_exc
            wk.error_json = tracebacks.error_file_json(job, r, wk.error_ts, [pyblk], [])
    if f.mechanism == "hang" and job.variant.culprit_dump and first_timeout:
        nccl.culprit_sees_dump_signal(job, root, first_timeout, seq_h)
    # ---- teardown
    if job.variant.kill_on_bad_exit and root_exit is None and f.mechanism != "hang":
        slurm.teardown_kill_on_bad_exit(job)
    else:
        slurm.teardown(job, rn, stuck)
    job.description_facts = (details, fail_step, seq_h, op, stuck, secondary)


def pick_secondary_rank(job: Job, cands: Sequence[int]) -> int:
    """The rank of a ``secondary`` failure: preferably on a host whose clock is behind the root's (it looks first)."""
    # prefer a host whose clock is behind the root's
    rn = job.workers[job.root_rank].node if job.root_rank is not None else 0
    behind = [r for r in cands if job.host_offset_s[job.workers[r].node] < job.host_offset_s[rn]]
    pool = behind or list(cands)
    return pool[job.rng.randrange(len(pool))]


def describe(job: Job, details: str, step: int, seq: int, op: str, stuck: int, secondary: int | None) -> None:
    """The truth's post-mortem paragraph (``Truth.description``)."""
    f, r = job.fault, job.root_rank
    assert r is not None
    w = job.workers[r]
    host = job.hosts[w.node]
    n_coll = len(job.collateral - ({secondary} if secondary is not None else set()))
    parts = [f"Rank {r} (host {host}, local rank {w.local}) failed first at step ~{step}: {f.title}"
             + (f" ({details})." if details else ".")]
    if f.mechanism == "hang":
        parts = [f"Rank {r} (host {host}, local rank {w.local}) silently stopped after step {step}: it printed no "
                 f"error, it just never entered collective SeqNum {seq} ({op})."]
    if f.name == "host-oom-kill":
        parts.append("The process printed nothing; the only trace is its exit status "
                     + ("in the torchrun agent line 'failed (exitcode: -9)' while the other local workers were sent SIGTERM."
                        if job.has_agent else "in slurmstepd's oom_kill notice and srun's 'Out Of Memory' task line."))
    if secondary is not None:
        sw = job.workers[secondary]
        parts.append(f"Rank {secondary} on {job.hosts[sw.node]} hit the same storage error "
                     f"{job.variant.secondary_delay:.1f} s later (true time) and is a consequence, not the root, even if "
                     "its host clock makes it look earlier.")
    if n_coll:
        parts.append(f"{n_coll} other rank(s) blocked in SeqNum {seq} ({op}) and their NCCL watchdogs fired after "
                     "Timeout(ms)=600000; those timeouts, DistBackendError tracebacks and aborts are collateral.")
    if job.has_agent:
        parts.append("Each torchrun agent sent SIGTERM to its remaining workers and printed its own ChildFailedError "
                     "table whose 'Root Cause' is only the first local failure of that node.")
    if job.variant.kill_on_bad_exit and f.mechanism == "exception" and w.exit_code in (-9, -15):
        parts.append("The root process hung at exit after printing its traceback, so its agent never reported it; "
                     "srun (--kill-on-bad-exit) cancelled the step only when a collateral task exited, and any "
                     "ChildFailedError table names collateral ranks.")
    if stuck >= 0:
        parts.append(f"Node {job.hosts[stuck]} hung in NCCL abort until the job was scancelled, which produced the "
                     "final 'CANCELLED' lines; they are teardown, not the cause.")
    job.description = " ".join(parts)
