"""How a job ends under Slurm: srun's task exit lines, the teardown, ``--kill-on-bad-exit``, time limits.

Also the ``slurm-time-limit`` fault (a job-level end: no rank failed on its own).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from tools.synth import host_oom, launcher, training
from tools.synth.job import Job

SIGNAL_STRINGS = {6: "Aborted", 9: "Killed", 11: "Segmentation fault", 15: "Terminated", 7: "Bus error"}


def task_ranges(nums: Iterable[int]) -> str:
    """``[2, 4, 5]`` -> ``"2,4-5"`` (srun's task list form)."""
    xs = sorted(set(nums))
    out: list[str] = []
    i = 0
    while i < len(xs):
        j = i
        while j + 1 < len(xs) and xs[j + 1] == xs[j] + 1:
            j += 1
        out.append(str(xs[i]) if i == j else f"{xs[i]}-{xs[j]}")
        i = j + 1
    return ",".join(out)


def srun_task_exits(job: Job, ends: Sequence[tuple[float, int, int, int]]) -> None:
    """``ends``: (time, host index, task id, exit code) -> ``srun: error: host: tasks ...: ...`` lines."""
    groups: dict[tuple[int, int], list[tuple[float, int]]] = {}
    for t, n, task, code in ends:
        if code == 0:
            continue
        groups.setdefault((n, code), []).append((t, task))
    for (n, code), items in sorted(groups.items(), key=lambda kv: min(x[0] for x in kv[1])):
        t = max(x[0] for x in items) + job.rng.uniform(0.01, 0.3)
        tasks = [x[1] for x in items]
        word = "task" if len(tasks) == 1 else "tasks"
        if code > 0:
            what = f"Exited with exit code {code}"
        else:
            what = SIGNAL_STRINGS.get(-code, f"Signal {-code}")
            if -code in (11, 6, 7) and job.layout == "per-rank":
                what += " (core dumped)" if -code == 11 else ""
        job.print_batch(t, f"srun: error: {job.hosts[n]}: {word} {task_ranges(tasks)}: {what}")


def teardown(job: Job, rn: int, stuck: int) -> None:
    """Agents, srun and the optional scancel of a stuck node."""
    rng = job.rng
    ends: list[tuple[float, int, int, int]] = []
    last_end = 0.0
    if job.has_agent:
        start_poll = rng.uniform(20.0, 40.0)
        for n in range(job.nodes):
            if n == stuck:
                continue
            exits = {w.rank: (w.exit_t, w.exit_code) for w in job.workers
                     if w.node == n and w.exit_t is not None and w.exit_code is not None}
            t_end = launcher.agent_reports_exit(job, n, exits=exits, start_poll=start_poll)
            if t_end is not None:
                ends.append((t_end, n, n, 1))
                last_end = max(last_end, t_end)
    else:
        for w in job.workers:
            if w.node == stuck or w.exit_t is None:
                continue
            code = w.exit_code if w.exit_code is not None else 1
            if job.fault.name == "host-oom-kill" and w.rank == job.root_rank:
                last_end = max(last_end, host_oom.slurm_reports_oom_kill(job, w))
                continue
            ends.append((w.exit_t, w.node, w.rank, code))
            last_end = max(last_end, w.exit_t)
    # ranks that never exit on their own (the silent culprit in per-rank layout; a stuck node)
    leftovers = [w for w in job.workers if w.exit_t is None]
    if leftovers:
        t_c = last_end + job.variant.scancel_delay * rng.uniform(0.8, 1.2)
        n0 = 0
        job.print_batch(t_c, f"slurmstepd: error: *** JOB {job.job_id} ON {job.hosts[n0]} CANCELLED AT "
                        f"{job.clock.slurm(job.host_time(n0, t_c))} ***")
        job.print_batch(t_c + 0.01, "srun: Job step aborted: Waiting up to 32 seconds for job step to finish.")
        nodes_left = sorted({w.node for w in leftovers})
        job.print_stepd(nodes_left[0], t_c + 0.005, f"slurmstepd: error: *** STEP {job.job_id}.0 ON {job.hosts[nodes_left[0]]} "
                        f"CANCELLED AT {job.clock.slurm(job.host_time(nodes_left[0], t_c))} ***")
        for n in nodes_left:
            if job.has_agent:
                te = launcher.agent_receives_sigterm(job, n, t_c + rng.uniform(0.01, 0.3))
                ends.append((te, n, n, 1))
            else:
                for w in leftovers:
                    if w.node == n:
                        w.exit_t, w.exit_code = t_c + 0.2, -15
                        ends.append((w.exit_t, n, w.rank, -15))
    srun_task_exits(job, ends)


def teardown_kill_on_bad_exit(job: Job) -> None:
    """srun --kill-on-bad-exit: the first task that exits non-zero makes srun cancel the whole step."""
    rng, p = job.rng, job.profile
    ends: list[tuple[float, int, int, int]] = []
    t_kill: float | None = None
    done: set[int] = set()
    if job.has_agent:
        start_poll = rng.uniform(20.0, 40.0)
        firsts = []
        for n in range(job.nodes):
            ts = [w.exit_t for w in job.workers if w.node == n and w.exit_t is not None]
            if ts:
                firsts.append((min(ts), n))
        for fe, n in sorted(firsts):
            if t_kill is not None and fe + p.monitor_interval >= t_kill:
                break
            exits = {w.rank: (w.exit_t, w.exit_code) for w in job.workers
                     if w.node == n and w.exit_t is not None and w.exit_code is not None}
            t_end = launcher.agent_reports_exit(job, n, exits=exits, start_poll=start_poll)
            if t_end is None:
                continue
            ends.append((t_end, n, n, 1))
            done.add(n)
            if t_kill is None:
                t_kill = t_end + 0.35 + rng.uniform(0.0, 0.3)
    else:
        exited = sorted((w.exit_t, w.rank) for w in job.workers if w.exit_t is not None)
        if exited:
            t_kill = exited[0][0] + 0.35 + rng.uniform(0.0, 0.3)
        for t, r in exited:
            w = job.workers[r]
            if t_kill is not None and t < t_kill:
                ends.append((t, w.node, r, w.exit_code if w.exit_code is not None else 1))
    if t_kill is None:        # nothing ever exits: fall back to the user's scancel
        teardown(job, job.workers[job.root_rank].node if job.root_rank is not None else 0, -1)
        return
    modern = p.key in ("2.6", "2.8")
    job.print_batch(t_kill, f"srun: launch/slurm: _step_signal: Terminating StepId={job.job_id}.0" if modern
                    else f"srun: Terminating job step {job.job_id}.0")
    left_nodes = [n for n in range(job.nodes) if n not in done]
    if job.has_agent:
        for n in left_nodes:
            te = launcher.agent_receives_sigterm(job, n, t_kill + rng.uniform(0.02, 0.3))
            ends.append((te, n, n, -9))
    else:
        for w in job.workers:
            if w.exit_t is None or w.exit_t >= t_kill:
                w.exit_t, w.exit_code = t_kill + rng.uniform(0.05, 0.5), -9
                ends.append((w.exit_t, w.node, w.rank, -9))
        left_nodes = sorted({w.node for w in job.workers if w.exit_code == -9})
    if left_nodes:
        n = left_nodes[0]
        job.print_stepd(n, t_kill + 0.01, f"slurmstepd: error: *** STEP {job.job_id}.0 ON {job.hosts[n]} CANCELLED AT "
                        f"{job.clock.slurm(job.host_time(n, t_kill))} ***")
    job.print_batch(t_kill + 0.02, "srun: Job step aborted: Waiting up to 32 seconds for job step to finish.")
    srun_task_exits(job, ends)


def simulate_time_limit(job: Job) -> None:
    """Slurm's time limit ends a job that trains normally: slurmstepd cancels, agents pass SIGTERM on."""
    rng = job.rng
    last = job.step0 + job.log_every * job.steps_before_fault()
    training.normal_output(job, last)
    t_lim = job.step_time(last) + rng.uniform(1.0, job.log_every * job.step_dt - 0.5)
    n0 = 0
    job.print_batch(t_lim, f"slurmstepd: error: *** JOB {job.job_id} ON {job.hosts[n0]} CANCELLED AT "
                    f"{job.clock.slurm(job.host_time(n0, t_lim))} DUE TO TIME LIMIT ***")
    job.print_batch(t_lim + 0.02, "srun: Job step aborted: Waiting up to 32 seconds for job step to finish.")
    job.print_stepd(n0, t_lim + 0.01, f"slurmstepd: error: *** STEP {job.job_id}.0 ON {job.hosts[n0]} CANCELLED AT "
                    f"{job.clock.slurm(job.host_time(n0, t_lim))} DUE TO TIME LIMIT ***")
    ends = []
    for n in range(job.nodes):
        tt = t_lim + rng.uniform(0.01, 0.2)
        if job.has_agent:
            te = launcher.agent_receives_sigterm(job, n, tt)
            ends.append((te, n, n, 1))
        else:
            for w in job.workers:
                if w.node == n:
                    w.exit_t, w.exit_code = tt, -15
                    ends.append((tt, n, w.rank, -15))
    srun_task_exits(job, ends)
    job.description = (
        f"The job ({job.ranks} ranks on {job.nodes} node(s)) was still training normally at step ~{last} when "
        "Slurm's time limit expired: slurmstepd cancelled the job and step DUE TO TIME LIMIT, the torchrun agents "
        "received SIGTERM and forwarded it to their workers. No rank failed on its own; the fix is a longer "
        "--time or checkpoint-and-requeue, not a code change.")
