"""A tiny data-parallel training process for the SLURM recordings, with one injected fault.

Owns: one process of a gloo (CPU) job: a small model wrapped in DDP, a few paced steps that each
all-reduce gradients, logging as a training script does, and the fault the plan gives this rank.
Rank and world size come from torchrun (RANK/WORLD_SIZE) when it started us, else from srun
(SLURM_PROCID/SLURM_NTASKS); MASTER_ADDR is 127.0.0.1.

    srun --ntasks=8 --label python slurm_worker.py --fault raise@3:step=5

Faults (``KIND@RANK:step=N``, the fault fires on RANK just before step N's collective):
``raise`` (an IndexError from an out-of-range sample index), ``sigkill`` (the process SIGKILLs
itself, as the OOM killer would), ``segv`` (a NULL read through ctypes), ``exit1`` (an error
logged, then ``sys.exit(1)``), ``hang`` (the rank sleeps ``secs`` seconds before the collective
while the others wait for it). It must not touch anything outside its own process.
"""

from __future__ import annotations

import argparse
import ctypes
import logging
import os
import signal
import sys
import time
import warnings
from dataclasses import dataclass
from datetime import timedelta

FAULT_KINDS = ("raise", "sigkill", "segv", "exit1", "hang")


@dataclass(frozen=True, slots=True)
class Fault:
    kind: str
    rank: int
    step: int
    secs: float = 0.0


def parse_fault(text: str) -> Fault:
    """``raise@3:step=5`` or ``hang@2:step=3:secs=45``."""
    kind, _, rest = text.partition("@")
    if kind not in FAULT_KINDS:
        raise argparse.ArgumentTypeError(f"unknown fault kind {kind!r} (one of {', '.join(FAULT_KINDS)})")
    rank_s, *opts = rest.split(":")
    kw = dict(o.split("=", 1) for o in opts)
    return Fault(kind=kind, rank=int(rank_s), step=int(kw.get("step", 3)), secs=float(kw.get("secs", 0)))


def identity() -> tuple[int, int, int]:
    """(global rank, world size, local rank) from torchrun if present, else from srun."""
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:
        return int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), int(os.environ.get("LOCAL_RANK", 0))
    return int(os.environ["SLURM_PROCID"]), int(os.environ["SLURM_NTASKS"]), int(os.environ.get("SLURM_LOCALID", 0))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--step-s", type=float, default=0.3, help="pause per step (the 'compute')")
    ap.add_argument("--timeout-s", type=float, default=60.0, help="init_process_group timeout")
    ap.add_argument("--fault", type=parse_fault, action="append", default=[])
    ap.add_argument("--noise", action="store_true", help="benign warnings and a caught, logged exception")
    args = ap.parse_args(argv)

    rank, world, local_rank = identity()
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("RANK", str(rank))
    os.environ.setdefault("WORLD_SIZE", str(world))
    logging.basicConfig(
        level=logging.INFO,
        format=f"%(asctime)s %(levelname)s [rank {rank}] %(name)s: %(message)s",
        stream=sys.stdout,
    )
    log = logging.getLogger("train")

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    torch.set_num_threads(1)
    mine = [f for f in args.fault if f.rank == rank]
    log.info("starting rank %d/%d (local rank %d) pid %d torch %s", rank, world, local_rank, os.getpid(), torch.__version__)
    dist.init_process_group(
        "gloo", init_method="env://", rank=rank, world_size=world, timeout=timedelta(seconds=args.timeout_s)
    )
    log.info("process group ready: backend=%s world_size=%d", dist.get_backend(), dist.get_world_size())

    torch.manual_seed(1234 + rank)
    model = DDP(torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4)))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    data = torch.randn(1024, 32)
    target = torch.randint(0, 4, (1024,))

    if args.noise:
        benign_noise(log, rank)

    for step in range(1, args.steps + 1):
        for f in mine:
            if f.step == step:
                inject(f, log, rank, step, data)
        idx = torch.arange((step * 16 + rank * 7) % 1000, (step * 16 + rank * 7) % 1000 + 16)
        loss = torch.nn.functional.cross_entropy(model(data[idx]), target[idx])
        opt.zero_grad()
        loss.backward()  # DDP all-reduces the gradients here: every rank must arrive
        opt.step()
        log.info("step %d/%d loss %.4f", step, args.steps, loss.item())
        time.sleep(args.step_s)

    dist.barrier()
    log.info("training finished after %d steps", args.steps)
    dist.destroy_process_group()
    return 0


def inject(f: Fault, log: logging.Logger, rank: int, step: int, data: object) -> None:
    sys.stdout.flush()
    if f.kind == "raise":
        # a real indexing error, as a sampler bug would produce it
        bad = len(data) + 16  # type: ignore[arg-type]
        data[bad]  # type: ignore[index]
    elif f.kind == "sigkill":
        os.kill(os.getpid(), signal.SIGKILL)
    elif f.kind == "segv":
        ctypes.string_at(0)
    elif f.kind == "exit1":
        log.error("shard /scratch/data/shard-%05d.bin has 0 samples left at step %d; stopping this rank", rank, step)
        sys.stdout.flush()
        sys.exit(1)
    elif f.kind == "hang":
        log.info("loading next batch from /scratch/data/shard-%05d.bin", rank)
        sys.stdout.flush()
        time.sleep(f.secs)  # stuck in I/O while every other rank waits in the all-reduce


def benign_noise(log: logging.Logger, rank: int) -> None:
    """What a healthy job prints too: warnings and an exception that was caught and logged."""
    warnings.warn("torch.cuda.amp.GradScaler is enabled, but CUDA is not available; disabling", UserWarning)
    if rank == 0:
        try:
            with open("/nonexistent/optional_overrides.yaml") as fh:
                fh.read()
        except FileNotFoundError:
            log.exception("no optional overrides file; using defaults")
        log.warning("gradient accumulation steps=1; effective batch size is small (16 x world)")


if __name__ == "__main__":
    sys.exit(main())
