"""The ``healthy`` fault: a clean run that finishes (harmless exit warnings, the agents' success lines)."""

from __future__ import annotations

from tools.synth import training
from tools.synth.job import Job


def simulate(job: Job) -> None:
    """A clean run: step lines to the end, harmless warnings at exit, every agent's success."""
    rng = job.rng
    last = job.step0 + job.log_every * job.steps_before_fault()
    training.normal_output(job, last)
    t_end = job.step_time(last) + rng.uniform(5.0, 30.0)
    p = job.profile
    for wk in job.workers:
        t = t_end + rng.uniform(0, 0.4)
        if wk.rank == 0:
            job.print_rank(0, t - 2.0, f"{job.log_stamp(0, t - 2.0)} - train - INFO - [rank 0] saving final checkpoint to "
                           f"{job.ckpt}/final.pt")
            job.print_rank(0, t - 0.5, f"{job.log_stamp(0, t - 0.5)} - train - INFO - [rank 0] training finished after "
                           f"{last} steps")
        if "destroy" in p.cpp_line and rng.random() < 0.5:
            job.print_rank(wk.rank, t, f"{job.glog_tag(wk.node, t, 'ProcessGroupNCCL.cpp', p.cpp_line['destroy'], 'W')} Warning: WARNING: "
                           "destroy_process_group() was not called before program exit, which can leak resources. For "
                           "more info, please see https://pytorch.org/docs/stable/distributed.html#shutdown "
                           "(function operator())", "glog")
        wk.exit_t, wk.exit_code = t + 0.3, 0
    if job.has_agent:
        for n in range(job.nodes):
            t = max(w.exit_t or 0 for w in job.workers if w.node == n) + rng.uniform(0.05, 0.3)
            lines = [("INFO", "[default] worker group successfully finished. Waiting 300 seconds for other agents to finish.", 879),
                     ("INFO", "Local worker group finished (WorkerState.SUCCEEDED). Waiting 300 seconds for other agents to finish", 932),
                     ("INFO", f"Done waiting for other agents. Elapsed: {rng.uniform(0.0003, 4.0)} seconds", 946)]
            for lvl, msg, ln in lines:
                job.print_agent(n, t, job.agent_log_line(n, t, lvl, "torch.distributed.elastic.agent.server.api", ln, msg))
                t += 0.001
    job.description = (
        f"A healthy {job.ranks}-rank run on {job.nodes} node(s) trained from step {job.step0} to step {last} and "
        "exited cleanly. Every rank kept logging synchronised step lines until the end; any "
        "destroy_process_group() warnings at exit are harmless and no rank, agent or Slurm reported a failure.")
