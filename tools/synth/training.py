"""Normal training output: NCCL start-up lines, the step lines every rank logs, tqdm frames on rank 0.

The step lines are the clock anchors of a job (every rank logs the same steps).
"""

from __future__ import annotations

from collections.abc import Mapping

from tools.synth.job import Job


def tqdm_interval(sec: int) -> str:
    """tqdm's format_interval: ``MM:SS`` or ``H:MM:SS``."""
    m, s = divmod(sec, 60)
    h, m = divmod(m, 60)
    return f"{h:d}:{m:02d}:{s:02d}" if h else f"{m:02d}:{s:02d}"


def normal_output(job: Job, last_step: int, silent_after: Mapping[int, int] | None = None) -> None:
    """Startup lines and step logs up to ``last_step`` (per-rank cut-offs in ``silent_after``)."""
    rng, p = job.rng, job.profile
    silent_after = silent_after or {}
    init_t = [rng.uniform(8.0, 20.0) for _ in range(job.nodes)]
    comm = f"0x{rng.randrange(1 << 60, 1 << 63):x}"
    bus = ["18000", "2a000", "3a000", "5d000", "9a000", "ab000", "ba000", "db000",
           "1b000", "2b000", "3b000", "5e000", "9b000", "ac000", "bb000", "dc000"]
    nccl_major = tuple(int(x) for x in p.nccl.split(".")[:2])
    for wk in job.workers:
        r, n, lr = wk.rank, wk.node, wk.local
        host, pid = job.hosts[n], wk.pid
        t = init_t[n] + lr * 0.003 + rng.uniform(0, 0.02)
        dev = lr
        pre = f"{host}:{pid}:{pid} [{dev}] NCCL INFO "
        job.print_rank(r, t, f"{pre}Bootstrap : Using ib0:{job.ips[n]}<0>", stream="o")
        if nccl_major < (2, 20):
            job.print_rank(r, t, f"{pre}NET/Plugin : No plugin found (libnccl-net.so), using internal implementation", stream="o")
        job.print_rank(r, t, f"{pre}cudaDriverVersion 12040", stream="o")
        if r == 0:
            job.print_rank(r, t + 0.001, f"NCCL version {p.nccl}+cuda{p.cuda}", stream="o")
        tid = pid + 61 + lr
        pre2 = f"{host}:{pid}:{tid} [{dev}] NCCL INFO "
        ib = " ".join(f"[{i}]mlx5_{i}:1/IB" for i in range(4))
        job.print_rank(r, t + 0.2, f"{pre2}NET/IB : Using {ib} ; OOB ib0:{job.ips[n]}<0>", stream="o")
        job.print_rank(r, t + 0.21, f"{pre2}Using network IB", stream="o")
        addr = f"0x{rng.randrange(0x55d000000000, 0x55dfffffffff):x}"
        b = bus[dev % len(bus)]
        if nccl_major >= (2, 22):
            head = f"ncclCommInitRankConfig comm {addr}"
        elif nccl_major >= (2, 20):
            head = f"ncclCommInitRank comm {addr}"
        else:
            head = f"comm {addr}"
        job.print_rank(r, t + 1.1, f"{pre2}Connected all trees", stream="o")
        job.print_rank(r, t + 1.3, f"{pre2}{head} rank {r} nranks {job.ranks} cudaDev {dev} nvmlDev {dev} busId {b} "
                       f"commId {comm} - Init COMPLETE", stream="o")
    # step lines: every rank logs the same steps (synchronised by the step's collectives)
    first = job.step0 + job.log_every
    steps = list(range(first, last_step + 1, job.log_every))
    ansi = job.variant.ansi
    for step in steps:
        t0 = job.step_time(step)
        lr_v = job.lr * min(1.0, step / 2000.0)
        gn = 0.6 + ((step * 31) % 97) / 200.0
        tps = 38000 + (step * 13) % 4000
        for wk in job.workers:
            r, n = wk.rank, wk.node
            if r in silent_after and step > silent_after[r]:
                continue
            t = t0 + 0.002 + ((r * 2654435761) % 997) / 40000.0
            loss = job.loss_at(step, r)
            if job.variant.steplog == "deepspeed":
                body = f"[Rank {r}] step={step}, skipped=0, lr=[{lr_v:.6e}], mom=[(0.9, 0.95)]"
                if rng.random() < job.drop:
                    job.print_rank(r, t, f"step={step} loss={loss:.4f} grad_norm={gn:.3f}", stream="o")
                else:
                    job.print_rank(r, t, f"[{job.log_stamp(n, t)}] [INFO] [logging.py:96:log_dist] {body}")
            else:
                body = (f"step {step} | loss {loss:.4f} | lr {lr_v:.3e} | grad_norm {gn:.3f} | "
                        f"tokens/s {tps}")
                if rng.random() < job.drop:
                    job.print_rank(r, t, f"[rank {r}] {body}", stream="o")
                elif ansi:
                    job.print_rank(r, t, f"\x1b[32m{job.log_stamp(n, t)}\x1b[0m - \x1b[34mtrain\x1b[0m - "
                                   f"\x1b[1mINFO\x1b[0m - [rank {r}] {body}")
                else:
                    job.print_rank(r, t, f"{job.log_stamp(n, t)} - train - INFO - [rank {r}] {body}")
        if job.variant.tqdm and step <= silent_after.get(0, step):
            job.print_rank(0, t0 + 0.05, tqdm_frames(job, step), stream="e")
    job.logged_steps = steps


def tqdm_frames(job: Job, step: int) -> str:
    """Rank 0's tqdm progress bar: four ``\\r`` frames up to ``step``, glued in front of its next line."""
    total = job.ckpt_every * 10
    frames = []
    for k in range(4):
        s = step - 3 + k
        done = s % total
        pct = int(100 * done / total)
        fill = pct // 10
        bar = "\u2588" * fill + ("\u258f" if pct % 10 else "") + " " * (10 - fill - (1 if pct % 10 else 0))
        el = int(done * job.step_dt)
        rem = int((total - done) * job.step_dt)
        frames.append(f"Epoch {s // total}: {pct:3d}%|{bar}| {done}/{total} "
                      f"[{tqdm_interval(el)}<{tqdm_interval(rem)}, {job.step_dt:5.2f}s/it, v_num=0, "
                      f"train_loss={job.loss_at(s, 0):.3f}]")
    return "\r" + "\r".join(frames)
