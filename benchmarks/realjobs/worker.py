"""One rank of a tiny real training job (gloo, CPU) with faults injected on a chosen rank and step.

Started by torchrun (or by ``record.py`` directly, one process per rank); it owns nothing but its
own process: a seeded model, a loss all-reduced every step, progress lines like a real loop, and
the faults the plan names. The plan comes from the environment so the command line stays the
one a user would type:

    RJ_FAULTS   "WHO:STEP:KIND[:ARG][@ATTEMPT]" separated by ";"  (WHO = global rank "3", or
                "node1/2" = local rank 2 on host node1; ATTEMPT = only in that restart attempt)
    RJ_STEPS    steps to train (default 30)          RJ_STEP_S  seconds a step takes (0.1)
    RJ_TS       1: logging with asctime; 0: plain print() progress lines
    RJ_TIMEOUT  init_process_group timeout in seconds (default 30)
    RJ_NOISE    1: benign noise (warnings, a caught and logged traceback, a tqdm bar on rank 0)
    RJ_CKPT_DIR where the checkpoint faults write       RJ_RECORD  file the injector appends to
    RJ_LINGER   seconds a faulting rank lingers at exit (its peers keep running meanwhile)

When a fault fires, one JSON line (rank, host, local rank, kind, time) is appended to RJ_RECORD:
that is the injection plan's own account of which global rank got the fault, which record.py
uses for expected.toml (never correlate's output).
"""

from __future__ import annotations

import atexit
import ctypes
import datetime as dt
import json
import logging
import os
import signal
import socket
import sys
import time
import warnings

import torch
import torch.distributed as dist

log = logging.getLogger("train")


def _plan() -> list[dict]:
    faults = []
    for item in filter(None, (s.strip() for s in os.environ.get("RJ_FAULTS", "").split(";"))):
        attempt = None
        if "@" in item:
            item, a = item.rsplit("@", 1)
            attempt = int(a)
        who, step, kind, *arg = item.split(":", 3)
        faults.append({"who": who, "step": int(step), "kind": kind,
                       "arg": arg[0] if arg else "", "attempt": attempt})
    return faults


def _mine(fault: dict, rank: int, host: str, local: int) -> bool:
    attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    if fault["attempt"] is not None and fault["attempt"] != attempt:
        return False
    if "/" in fault["who"]:
        h, lr = fault["who"].split("/")
        return h == host and int(lr) == local
    return int(fault["who"]) == rank


def _record(fault: dict, rank: int, host: str, local: int) -> None:
    path = os.environ.get("RJ_RECORD")
    if not path:
        return
    line = json.dumps({"rank": rank, "host": host, "local_rank": local, "kind": fault["kind"],
                       "step": fault["step"], "time": time.time(),
                       "attempt": int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))})
    with open(path, "a", encoding="utf-8") as f:
        f.write(line + "\n")


class ShardDataset(torch.utils.data.Dataset):
    """Random samples; item ``bad`` raises or kills its DataLoader worker when asked to."""

    def __init__(self, n: int, seed: int, bad: int = -1, how: str = "", fault: tuple | None = None) -> None:
        g = torch.Generator().manual_seed(seed)
        self.x = torch.randn(n, 16, generator=g)
        self.y = torch.randn(n, 1, generator=g)
        self.bad, self.how = bad, how
        self.fault = fault  # (fault, rank, host, local rank): recorded from inside the DataLoader worker

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int):
        if i == self.bad:
            if self.fault:
                _record(*self.fault)
            if self.how == "kill":
                os.kill(os.getpid(), signal.SIGKILL)
            record = {"text": "sample %d" % i}
            return record["tokens"]  # a sample without the field the collate step needs
        return self.x[i], self.y[i]


def fire(fault: dict, model: torch.nn.Module, step: int, rank: int) -> None:
    """Do what the plan says, for real: nothing here prints a made-up error message."""
    kind, arg = fault["kind"], fault["arg"]
    ckpt_dir = os.environ.get("RJ_CKPT_DIR", "/tmp")
    if kind == "shape":
        torch.randn(4, 16) @ torch.randn(8, 1)
    elif kind == "keyerror":
        batch = {"input_ids": torch.zeros(4, 16)}
        batch["labels"]
    elif kind == "zerodiv":
        tokens_seen = 0
        _ = 4096 / tokens_seen
    elif kind == "filenotfound":
        open(os.path.join("/tmp/rj-data-missing", "shard-%05d.bin" % (step * 7 + rank)), "rb")
    elif kind == "assert":
        loss = torch.tensor(float("nan"))
        assert torch.isfinite(loss), f"loss is not finite at step {step}: {loss.item()}"
    elif kind == "sigkill":
        os.kill(os.getpid(), signal.SIGKILL)
    elif kind == "segv":
        ctypes.string_at(0)
    elif kind == "sigbus":
        os.kill(os.getpid(), signal.SIGBUS)
    elif kind == "abort":
        os.abort()
    elif kind == "hang":
        log.info("rank %d: waiting for the data service", rank) if arg == "say" else None
        time.sleep(3600)
    elif kind == "exit0":
        log.info("rank %d: no more data in its shard, leaving the loop", rank)
        sys.exit(0)
    elif kind == "mismatch":
        bad = torch.ones(7) if arg != "op" else torch.ones(1)
        if arg == "op":
            dist.broadcast(bad, src=rank)
        else:
            dist.all_reduce(bad)
    elif kind == "save":
        state = {"model": model.state_dict(), "buffer": torch.randn(1 << 19), "step": step}
        path = os.path.join(ckpt_dir, f"ckpt-step{step:06d}.pt")
        log.info("saving checkpoint to %s", path)
        torch.save(state, path)
    elif kind == "exdev":
        tmp = os.path.join(ckpt_dir, f"ckpt-step{step:06d}.pt.tmp")
        final_dir = "/tmp/rj-ckpt-final"
        os.makedirs(final_dir, exist_ok=True)
        torch.save({"model": model.state_dict(), "step": step}, tmp)
        log.info("moving %s into %s", tmp, final_dir)
        os.rename(tmp, os.path.join(final_dir, f"ckpt-step{step:06d}.pt"))
    elif kind == "rlimit":
        import resource

        with open("/proc/self/status") as f:
            vm = next(int(line.split()[1]) for line in f if line.startswith("VmSize:")) * 1024
        resource.setrlimit(resource.RLIMIT_AS, (vm + (256 << 20), resource.RLIM_INFINITY))
        activations = torch.empty(1 << 28, 4)  # 4 GiB of float32
        activations.zero_()
    elif kind == "slowraise":
        time.sleep(float(arg or 2))
        open(os.path.join("/tmp/rj-data-missing", "eval-%05d.jsonl" % rank))
    else:
        raise SystemExit(f"worker.py: unknown fault kind {kind!r}")


def main() -> int:
    rank = int(os.environ["RANK"])
    world = int(os.environ["WORLD_SIZE"])
    local = int(os.environ.get("LOCAL_RANK", rank))
    host = socket.gethostname()
    steps = int(os.environ.get("RJ_STEPS", "30"))
    step_s = float(os.environ.get("RJ_STEP_S", "0.1"))
    stamps = os.environ.get("RJ_TS", "1") == "1"
    noise = os.environ.get("RJ_NOISE", "0") == "1"
    fmt = "%(asctime)s %(levelname)s %(name)s: %(message)s" if stamps else "%(levelname)s:%(name)s:%(message)s"
    logging.basicConfig(level=logging.INFO, format=fmt)
    faults = [f for f in _plan() if _mine(f, rank, host, local)]
    if any(f["kind"] == "segv" and f["arg"] == "faulthandler" for f in faults):
        import faulthandler

        faulthandler.enable()
    linger = float(os.environ.get("RJ_LINGER", "0"))
    if faults and linger:
        atexit.register(time.sleep, linger)

    timeout = dt.timedelta(seconds=float(os.environ.get("RJ_TIMEOUT", "30")))
    attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    if int(os.environ.get("TORCHELASTIC_MAX_RESTARTS", "0")) > 0:
        # With torch 2.14.1 a restarted gloo group read the previous attempt's addresses from the
        # agent's store ("Gloo connectFullMesh failed ... Connection refused") and every restart
        # failed at init; keys under a per-attempt prefix let the second attempt really run.
        agent_store = os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True"
        store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), world,
                              is_master=rank == 0 and not agent_store, timeout=timeout)
        dist.init_process_group("gloo", store=dist.PrefixStore(f"/rj/attempt_{attempt}", store),
                                rank=rank, world_size=world, timeout=timeout)
    else:
        dist.init_process_group("gloo", timeout=timeout)
    torch.manual_seed(1234)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    log.info("rank %d/%d (local rank %d on %s) started, %d steps", rank, world, local, host, steps)

    dl_fault = next((f for f in faults if f["kind"] in ("dl-exc", "dl-kill")), None)
    data = ShardDataset(4 * (steps + 1), seed=rank,
                        bad=4 * dl_fault["step"] if dl_fault else -1,
                        how="kill" if dl_fault and dl_fault["kind"] == "dl-kill" else "",
                        fault=(dl_fault, rank, host, local) if dl_fault else None)
    loader = torch.utils.data.DataLoader(data, batch_size=4, num_workers=1 if dl_fault else 0)
    batches = iter(loader)

    bar = None
    if noise:
        warnings.warn("torch.utils.checkpoint: the use_reentrant parameter should be passed explicitly",
                      UserWarning)
        if rank == 0:
            from tqdm import tqdm

            bar = tqdm(total=steps, desc="train", file=sys.stderr, mininterval=0)

    for step in range(1, steps + 1):
        for f in faults:
            if f["step"] == step and f["kind"] not in ("dl-exc", "dl-kill"):
                _record(f, rank, host, local)
                fire(f, model, step, rank)
        x, y = next(batches)
        loss = torch.nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        for p in model.parameters():
            dist.all_reduce(p.grad)
            p.grad /= world
        opt.step()
        mean = loss.detach().clone()
        dist.all_reduce(mean)
        mean /= world
        time.sleep(step_s)
        if noise and step == 3:
            try:
                socket.create_connection(("127.0.0.1", 9), timeout=1)
            except OSError:
                log.exception("metrics upload failed, will retry at the next step")
        if bar is not None:
            bar.update(1)
        if step % 5 == 0 or step == steps:
            if stamps:
                log.info("step %d loss %.4f", step, mean.item())
            else:
                print(f"[rank {rank}] step {step} loss {mean.item():.4f}", flush=True)
    if bar is not None:
        bar.close()
    dist.barrier()
    log.info("rank %d finished training", rank)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
