"""Host memory faults: a worker SIGKILLed by the OOM killer (no output of its own), a DataLoader worker killed."""

from __future__ import annotations

from tools.synth import tracebacks
from tools.synth.job import Job, Worker
from tools.synth.tracebacks import RootTraceback


def dataloader_killed(job: Job, r: int, step: int) -> RootTraceback:
    """A DataLoader worker of rank ``r`` is killed; the main process raises from the data queue."""
    rng, site, stdlib = job.rng, job.site, job.stdlib
    wpid = job.workers[r].pid + rng.randrange(200, 900)
    b1 = tracebacks.format_frames([
        (f"{site}/torch/utils/data/dataloader.py", 1133, "_try_get_data", "data = self._data_queue.get(timeout=timeout)"),
        (f"{stdlib}/queue.py", 180, "get", "self.not_empty.wait(remaining)"),
        (f"{stdlib}/threading.py", 324, "wait", "gotit = waiter.acquire(True, timeout)"),
        (f"{site}/torch/utils/data/_utils/signal_handling.py", 66, "handler", "_error_if_any_worker_fails()"),
    ])
    b1.append(f"RuntimeError: DataLoader worker (pid {wpid}) is killed by signal: Killed. ")
    b2 = tracebacks.format_frames(tracebacks.script_frames(job, "train(cfg, model, optimizer, train_loader)") + [
        (f"{job.code}/{job.script}", 259, "train", "for batch in train_loader:"),
        (f"{site}/torch/utils/data/dataloader.py", 631, "__next__", "data = self._next_data()"),
        (f"{site}/torch/utils/data/dataloader.py", 1329, "_next_data", "idx, data = self._get_data()"),
        (f"{site}/torch/utils/data/dataloader.py", 1295, "_get_data", "success, data = self._try_get_data()"),
        (f"{site}/torch/utils/data/dataloader.py", 1146, "_try_get_data",
         "raise RuntimeError(f'DataLoader worker (pid(s) {pids_str}) exited unexpectedly') from e"),
    ])
    b2.append(f"RuntimeError: DataLoader worker (pid(s) {wpid}) exited unexpectedly")
    return [b1, b2], ["The above exception was the direct cause of the following exception:"], \
        f"DataLoader worker (pid {wpid}) is killed by signal: Killed."


def killed_silently(job: Job, root: int, t_fail: float, lead: str) -> tuple[str, tuple[float, int]]:
    """The kernel's OOM killer SIGKILLs rank ``root``: it prints nothing at all (only its launcher tells)."""
    return "killed by SIGKILL (host out of memory), no output of its own", (t_fail, -9)


def slurm_reports_oom_kill(job: Job, w: Worker) -> float:
    """Without an agent, slurmstepd and srun are the only ones to tell; returns when they do."""
    assert w.exit_t is not None
    t = w.exit_t + job.rng.uniform(0.2, 1.0)
    job.print_batch(t, f"slurmstepd: error: Detected 1 oom_kill event in StepId={job.job_id}.0. Some of the "
                    "step tasks have been OOM Killed.")
    job.print_batch(t + 0.01, f"srun: error: {job.hosts[w.node]}: task {w.rank}: Out Of Memory")
    return t
