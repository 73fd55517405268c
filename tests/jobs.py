"""Small hand-written job builders for unit and property tests (the realistic generator used for
the accuracy benchmark is ``tools.synth``)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

T0 = datetime(2026, 3, 2, 14, 0, 0, tzinfo=UTC)


def py(t: datetime) -> str:
    return t.strftime("%Y-%m-%d %H:%M:%S,") + f"{t.microsecond // 1000:03d}"


def glog(t: datetime, level: str = "E") -> str:
    return t.strftime(f"{level}%m%d %H:%M:%S.") + f"{t.microsecond:06d}000"


def rank_lines(n: int, per_node: int, root: int | None, fault: str = "eio", steps: int = 3,
               skew_s: dict[int, float] | None = None, hang: bool = False) -> dict[int, list[str]]:
    """Per-rank message lines (no launcher prefixes) of a job whose ``root`` rank fails."""
    skew_s = skew_s or {}
    out: dict[int, list[str]] = {}
    for r in range(n):
        node, lr = divmod(r, per_node)
        host = f"gpu-a{node:02d}"
        off = timedelta(seconds=skew_s.get(node, 0.0))
        ls = [f"{host}:{1000 + r}:{1000 + r} [{lr}] NCCL INFO comm 0x55d0 rank {r} nranks {n} cudaDev {lr} "
              f"nvmlDev {lr} busId 1000 commId 0xabc - Init COMPLETE"]
        last = steps if not (hang and r == root) else steps - 1
        for s in range(1, last + 1):
            t = T0 + timedelta(seconds=60 * s, milliseconds=r % 7) + off
            ls.append(f"{py(t)} - train - INFO - step={s * 100} loss=2.31")
        fail_t = T0 + timedelta(seconds=60 * steps + 30) + off
        if root is not None and r == root and not hang:
            if fault == "eio":
                ls += [f"{py(fail_t)} - lightning - INFO - Saving checkpoint to /lustre/ckpt/last.ckpt",
                       "Traceback (most recent call last):",
                       '  File "/opt/lightning/fabric/utilities/cloud_io.py", line 82, in _atomic_save',
                       "    torch.save(checkpoint, bytesbuffer)",
                       "OSError: [Errno 5] Input/output error"]
            elif fault == "oom":
                ls += [f"{py(fail_t)} - train - INFO - forward",
                       "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 1 has a total "
                       "capacity of 79.15 GiB of which 1.02 GiB is free."]
        elif root is not None and r != root:
            tt = T0 + timedelta(seconds=60 * steps + 30 + 600, milliseconds=r) + off
            ls.append(f"[{glog(tt)} ProcessGroupNCCL.cpp:616] [Rank {r}] Watchdog caught collective operation "
                      f"timeout: WorkNCCL(SeqNum=301, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) "
                      f"ran for 600010 milliseconds before timing out.")
        out[r] = ls
    return out


def combined_srun(per_rank: dict[int, list[str]], per_node: int) -> list[str]:
    """Rank-ordered srun --label + torchrun --tee + [rankN] combined stream."""
    lines = []
    for r, ls in per_rank.items():
        node, lr = divmod(r, per_node)
        lines += [f"{node}: [default{lr}]:[rank{r}]:{x}" for x in ls]
    return lines
