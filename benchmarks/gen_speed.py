"""Generate big, realistic training-job logs for the speed and memory benchmarks.

Three layouts, all describing the same kind of job (a GPT-style run under SLURM + torchrun, one
rank dies of a CUDA OOM, every other rank's NCCL watchdog times out 10 minutes later, the agents
SIGTERM their workers and the step is cancelled):

- ``ranks``: one file per rank (``rank-0037.log``) plus the agents' combined ``slurm-<job>.out``;
- ``combined``: one ``srun --label`` stream (``3: [default1]:[rank25]:message``) with every rank's
  lines interleaved in small blocks, written to a file or to stdout (``-o -``) lazily, so any size
  (10 GB) can be piped without being held anywhere;
- ``long-line``: a log with one line of N bytes in the middle (the bounded-memory case).

About 2 % of the lines contain a rule keyword without being a failure (Megatron's per-iteration
``number of nan iterations:   0`` summary, retried data reads), as real logs do; the failure and
its cascade sit at the very end of each stream. Generation is template-based: one step's lines
are formatted once per step with ``@R@``/``@L@``/``@H@`` placeholders for the rank, local rank
and host, and copied per rank with ``bytes.replace`` -- fast enough that generating 1 GB takes a
couple of seconds, so the benchmark measures the analyser and not the generator.

Usage::

    python benchmarks/gen_speed.py ranks --ranks 64 --size 1G -o /tmp/job64
    python benchmarks/gen_speed.py ranks --ranks 4096 --per-rank 1M -o /tmp/job4096
    python benchmarks/gen_speed.py combined --ranks 64 --size 10G -o - | correlate -
    python benchmarks/gen_speed.py long-line --size 1G -o /tmp/longline.log
"""

from __future__ import annotations

import argparse
import os
import random
import sys
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import BinaryIO

T0 = datetime(2026, 3, 2, 14, 0, 0, tzinfo=UTC)
STEP_S = 0.85
JOB_ID = 88123
PER_NODE = 8
FAIL_RANK_DEFAULT = 37


def parse_size(text: str) -> int:
    t = text.strip().upper().removesuffix("B")
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
    if t and t[-1] in mult:
        return int(float(t[:-1]) * mult[t[-1]])
    return int(t)


def _py(t: datetime) -> str:
    return t.strftime("%Y-%m-%d %H:%M:%S,") + f"{t.microsecond // 1000:03d}"


def _glog(t: datetime, level: str = "E") -> str:
    return f"{level}{t.strftime('%m%d %H:%M:%S.')}{t.microsecond:06d}{t.microsecond % 997:03d}"


def _host(rank: int) -> str:
    return f"gpu-a{rank // PER_NODE:03d}"


# --- one training step of one rank (placeholders: @R@ rank, @L@ local rank, @H@ host) -----------

def _step_lines(step: int, rnd: random.Random, ranks: int) -> list[str]:
    t = T0 + timedelta(seconds=60 + step * STEP_S)
    ts = _py(t)
    loss = 2.9 - 0.6 * min(step, 50_000) / 50_000 + rnd.random() * 0.05
    out = [f"{ts} - train - INFO - step={step} loss={loss:.4f} lr=3.000e-04 grad_norm={0.8 + rnd.random():.3f} "
           f"tokens_per_sec={150_000 + rnd.randint(0, 9999)} mem_alloc_gb=61.{rnd.randint(0, 9)}"]
    for mb in range(16):
        tt = _py(t + timedelta(milliseconds=mb * 40 + rnd.randint(0, 9)))
        out.append(f"{tt} - data - DEBUG - shard {(step * 16 + mb) % 4096:05d} offset {rnd.randint(0, 1 << 30)} "
                   f"read 512 samples in {rnd.uniform(2, 30):.1f} ms (queue depth {rnd.randint(1, 8)})")
        out.append(f"{tt} - train - DEBUG - micro_step={step * 16 + mb} fwd={rnd.uniform(30, 40):.2f}ms "
                   f"bwd={rnd.uniform(60, 80):.2f}ms allreduce_bucket={mb % 12} wait={rnd.uniform(0, 3):.2f}ms")
    ds = _py(t + timedelta(milliseconds=700))
    out.append(f"[{ds}] [INFO] [logging.py:128:log_dist] [Rank @R@] step={step}, skipped=0, lr=[0.0003], "
               f"mom=[(0.9, 0.95)]")
    out.append(f"[{ds}] [INFO] [timer.py:264:stop] epoch=0/micro_step={step * 16}/global_step={step}, "
               f"RunningAvgSamplesPerSec={500 + rnd.random() * 20:.3f}, CurrSamplesPerSec={500 + rnd.random() * 20:.3f}, "
               f"MemAllocated=61.2GB, MaxMemAllocated=70.1GB")
    # Megatron's per-iteration summary: contains the nan-loss keyword, is not a failure
    out.append(f" [{_py(t + timedelta(milliseconds=810))[:19]}] iteration {step:8d}/  500000 | consumed samples: "
               f"{step * 1024:12d} | elapsed time per iteration (ms): {800 + rnd.random() * 30:.1f} | learning rate: "
               f"3.000E-04 | global batch size:  1024 | lm loss: {loss:.6E} | loss scale: 1.0 | grad norm: "
               f"{0.8 + rnd.random():.3f} | number of skipped iterations:   0 | number of nan iterations:   0 |")
    out.append(f"{ds} - train - INFO - [@H@:@L@] throughput {140 + rnd.random() * 5:.2f} TFLOP/s/GPU, "
               f"MFU {0.45 + rnd.random() * 0.02:.3f}, step time {0.8 + rnd.random() * 0.05:.3f}s")
    pct = step * 100 // 200_000
    out.append(f"Epoch 0:  {pct:2d}%|{'#' * (pct // 10):<10}| {step}/200000 [{step // 60:02d}:{step % 60:02d}<41:12:13,  "
               f"1.18it/s, loss={loss:.3f}, v_num=0]")
    if step % 97 == 0:  # a retried read: keywords of network/uncaught-exception rules, not a failure
        out.append(f"{ds} - data - WARNING - retrying shard {step % 4096:05d} after ConnectionResetError: "
                   f"[Errno 104] Connection reset by peer (attempt 1/5)")
    if step % 500 == 0:
        out.append(f"{ds} - lightning - INFO - Saving checkpoint to /lustre/ckpt/run7/step-{step:07d}.ckpt")
        out.append(f"{_py(t + timedelta(seconds=9))} - lightning - INFO - Checkpoint saved in 8.91 s")
    return out


def _head_lines(rank: int, ranks: int) -> list[str]:
    host, lr, pid = _host(rank), rank % PER_NODE, 40_000 + rank
    t = _py(T0)
    nh = f"{host}:{pid}:{pid}"
    out = [f"{t} - root - INFO - starting rank {rank} of {ranks} on {host} (local rank {lr})",
           f"{nh} [{lr}] NCCL INFO Bootstrap : Using ib0:10.1.{rank // 256}.{rank % 256}<0>",
           f"{nh} [{lr}] NCCL INFO NET/Plugin: Plugin load returned 2 : libnccl-net.so: cannot open shared object "
           f"file: No such file or directory : when loading libnccl-net.so",
           f"{nh} [{lr}] NCCL INFO cudaDriverVersion 12040",
           "NCCL version 2.21.5+cuda12.4",
           f"{nh} [{lr}] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB [2]mlx5_2:1/IB [3]mlx5_3:1/IB ; OOB ib0:10.1.0.1<0>",
           f"{nh} [{lr}] NCCL INFO Using network IB",
           f"{nh} [{lr}] NCCL INFO comm 0x55d0c8a1b2c0 rank {rank} nranks {ranks} cudaDev {lr} nvmlDev {lr} "
           f"busId {lr + 1}8000 commId 0x9f3c2a7b11d4e5f6 - Init START"]
    for ch in range(8):
        out.append(f"{nh} [{lr}] NCCL INFO Channel {ch:02d}/0 : {rank} -> {(rank + 1) % ranks} "
                   f"[send] via NET/IB/{ch % 4}/GDRDMA")
    out.append(f"{nh} [{lr}] NCCL INFO comm 0x55d0c8a1b2c0 rank {rank} nranks {ranks} cudaDev {lr} nvmlDev {lr} "
               f"busId {lr + 1}8000 commId 0x9f3c2a7b11d4e5f6 - Init COMPLETE")
    return out


def _tail_lines(rank: int, ranks: int, steps: int, fail_rank: int) -> list[str]:
    t_fail = T0 + timedelta(seconds=60 + steps * STEP_S + 0.3)
    seq = steps * 4 + 3
    if rank == fail_rank:
        return [f"{_py(t_fail)} - train - INFO - step={steps} forward",
                "Traceback (most recent call last):",
                '  File "/workspace/train.py", line 412, in <module>',
                "    main()",
                '  File "/workspace/train.py", line 388, in main',
                "    loss = model(batch).loss",
                "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU "
                f"{rank % PER_NODE} has a total capacity of 79.15 GiB of which 1.02 GiB is free. Including non-PyTorch "
                "memory, this process has 78.11 GiB memory in use. Of the allocated memory 74.07 GiB is allocated by "
                "PyTorch, and 2.93 GiB is reserved by PyTorch but unallocated. If reserved but unallocated memory is "
                "large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See "
                "documentation for Memory Management  (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)"]
    tt = t_fail + timedelta(seconds=600, milliseconds=rank % 900)
    g = _glog(tt)
    return [f"[rank{rank}]:[{g} ProcessGroupNCCL.cpp:632] [Rank {rank}] Watchdog caught collective operation timeout: "
            f"WorkNCCL(SeqNum={seq}, OpType=ALLREDUCE, NumelIn=25165824, NumelOut=25165824, Timeout(ms)=600000) ran "
            f"for 600{rank % 900:03d} milliseconds before timing out.",
            f"[rank{rank}]:[{g} ProcessGroupNCCL.cpp:1664] [PG 0 (default_pg) Rank {rank}] Exception (either an error "
            f"or timeout) detected by watchdog at work: {seq}, last enqueued NCCL work: {seq}, last completed NCCL "
            f"work: {seq - 1}."]


def _agent_lines(ranks: int, steps: int, fail_rank: int) -> list[str]:
    t_fail = T0 + timedelta(seconds=60 + steps * STEP_S + 0.3)
    out = []
    nodes = (ranks + PER_NODE - 1) // PER_NODE
    for node in range(nodes):
        out.append(f"{node}: [{_py(T0)}] torch.distributed.run: [WARNING] Setting OMP_NUM_THREADS environment "
                   f"variable for each process to be 1 in default, to avoid your system being overloaded")
    fail_node = fail_rank // PER_NODE
    tf = t_fail + timedelta(seconds=2)
    for lr in range(PER_NODE):
        if fail_node * PER_NODE + lr == fail_rank:
            continue
        ts = tf.strftime("%m%d %H:%M:%S.") + f"{tf.microsecond:06d}"
        out.append(f"{fail_node}: W{ts} 139 torch/distributed/elastic/multiprocessing/api.py:897] Sending process "
                   f"{40_000 + fail_node * PER_NODE + lr} closing signal SIGTERM")
    ts = tf.strftime("%m%d %H:%M:%S.") + f"{tf.microsecond:06d}"
    out.append(f"{fail_node}: E{ts} 139 torch/distributed/elastic/multiprocessing/api.py:869] failed (exitcode: 1) "
               f"local_rank: {fail_rank % PER_NODE} (pid: {40_000 + fail_rank}) of binary: /usr/bin/python3")
    out.append(f"srun: error: {_host(fail_rank)}: task {fail_node}: Exited with exit code 1")
    tc = t_fail + timedelta(seconds=632)
    out.append(f"slurmstepd: error: *** STEP {JOB_ID}.0 ON {_host(0)} CANCELLED AT {tc.strftime('%Y-%m-%dT%H:%M:%S')} ***")
    return out


def _fill(text: bytes, rank: int) -> bytes:
    return (text.replace(b"@R@", str(rank).encode()).replace(b"@L@", str(rank % PER_NODE).encode())
            .replace(b"@H@", _host(rank).encode()))


def _body_blocks(target: int, ranks: int, seed: int, steps_per_block: int = 64) -> Iterator[tuple[int, bytes]]:
    """(first step, bytes) blocks of placeholder lines until about ``target`` bytes per rank."""
    rnd = random.Random(seed)
    step, made = 1, 0
    while made < target:
        lines: list[str] = []
        for s in range(step, step + steps_per_block):
            lines.extend(_step_lines(s, rnd, ranks))
        block = ("\n".join(lines) + "\n").encode()
        yield step, block
        made += len(block)
        step += steps_per_block


def gen_ranks(out_dir: str, ranks: int, per_rank: int, fail_rank: int = FAIL_RANK_DEFAULT, seed: int = 1) -> int:
    """One file per rank of about ``per_rank`` bytes, plus the agents' ``slurm-<job>.out``; returns bytes written."""
    os.makedirs(out_dir, exist_ok=True)
    fail_rank = fail_rank % ranks
    blocks = list(_body_blocks(per_rank, ranks, seed))
    steps = blocks[-1][0] + 63 if blocks else 0
    body = b"".join(b for _, b in blocks)
    total = 0
    for r in range(ranks):
        head = ("\n".join(_head_lines(r, ranks)) + "\n").encode()
        tail = ("\n".join(_tail_lines(r, ranks, steps, fail_rank)) + "\n").encode()
        data = head + _fill(body, r) + tail
        with open(os.path.join(out_dir, f"rank-{r:04d}.log"), "wb") as f:
            f.write(data)
        total += len(data)
    agents = ("\n".join(_agent_lines(ranks, steps, fail_rank)) + "\n").encode()
    with open(os.path.join(out_dir, f"slurm-{JOB_ID}.out"), "wb") as f:
        f.write(agents)
    return total + len(agents)


def _prefix(rank: int) -> bytes:
    return f"{rank // PER_NODE}: [default{rank % PER_NODE}]:[rank{rank}]:".encode()


def combined_stream(size: int, ranks: int, fail_rank: int = FAIL_RANK_DEFAULT, seed: int = 1) -> Iterator[bytes]:
    """The ``srun --label`` stream of the whole job, lazily, in blocks of a few MB (about ``size`` bytes)."""
    fail_rank = fail_rank % ranks
    prefixes = [_prefix(r) for r in range(ranks)]
    out = []
    for r in range(ranks):
        out.append(b"".join(prefixes[r] + ln.encode() + b"\n" for ln in _head_lines(r, ranks)))
    yield b"".join(out)
    per_rank = max(1, size // ranks)
    last_step = 1
    for step, block in _body_blocks(per_rank, ranks, seed, steps_per_block=1):
        # each rank's step comes out as one chunk (a flushed buffer), ranks interleaved
        lines = block.rstrip(b"\n").split(b"\n")
        tmpl = b"@P@" + b"\n@P@".join(lines) + b"\n"
        yield b"".join(_fill(tmpl.replace(b"@P@", prefixes[r]), r) for r in range(ranks))
        last_step = step
    tail = []
    for r in range(ranks):
        tail.append(b"".join(prefixes[r] + ln.encode() + b"\n" for ln in _tail_lines(r, ranks, last_step, fail_rank)))
    yield b"".join(tail) + ("\n".join(_agent_lines(ranks, last_step, fail_rank)) + "\n").encode()


def gen_combined(out: BinaryIO, size: int, ranks: int, fail_rank: int = FAIL_RANK_DEFAULT, seed: int = 1) -> int:
    total = 0
    pending: list[bytes] = []
    pending_n = 0
    for chunk in combined_stream(size, ranks, fail_rank, seed):
        pending.append(chunk)
        pending_n += len(chunk)
        if pending_n >= (4 << 20):
            out.write(b"".join(pending))
            total += pending_n
            pending, pending_n = [], 0
    if pending:
        out.write(b"".join(pending))
        total += pending_n
    out.flush()
    return total


def gen_long_line(out: BinaryIO, size: int) -> int:
    """A small log with one ``size``-byte line in the middle, then the failure: written in 1 MiB pieces."""
    rnd = random.Random(3)
    before = ("\n".join(_head_lines(0, 1) + _step_lines(1, rnd, 1)) + "\n").encode()
    out.write(before)
    piece = (b"x" * 1023 + b" ") * 1024
    left = size
    while left > 0:
        n = min(left, len(piece))
        out.write(piece[:n])
        left -= n
    out.write(b"\n")
    after = ("\n".join(_step_lines(2, rnd, 1) + _tail_lines(0, 1, 2, 0)) + "\n").encode()
    out.write(after)
    out.flush()
    return len(before) + size + 1 + len(after)


def _open_out(path: str) -> BinaryIO:
    if path == "-":
        return sys.stdout.buffer
    d = os.path.dirname(path)
    if d:
        os.makedirs(d, exist_ok=True)
    return open(path, "wb")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="layout", required=True)
    r = sub.add_parser("ranks", help="one file per rank")
    r.add_argument("--ranks", type=int, default=64)
    g = r.add_mutually_exclusive_group()
    g.add_argument("--size", type=parse_size, help="total bytes (split over the ranks)")
    g.add_argument("--per-rank", type=parse_size, help="bytes per rank file")
    r.add_argument("--fail-rank", type=int, default=FAIL_RANK_DEFAULT)
    r.add_argument("-o", "--out", required=True, help="output folder")
    c = sub.add_parser("combined", help="one srun --label stream")
    c.add_argument("--ranks", type=int, default=64)
    c.add_argument("--size", type=parse_size, default=parse_size("1G"))
    c.add_argument("--fail-rank", type=int, default=FAIL_RANK_DEFAULT)
    c.add_argument("-o", "--out", default="-", help="output file, or - for stdout")
    ll = sub.add_parser("long-line", help="one huge line")
    ll.add_argument("--size", type=parse_size, default=parse_size("1G"))
    ll.add_argument("-o", "--out", default="-")
    a = ap.parse_args(argv)
    try:
        if a.layout == "ranks":
            per = a.per_rank if a.per_rank else (a.size or parse_size("1G")) // a.ranks
            n = gen_ranks(a.out, a.ranks, per, a.fail_rank)
        elif a.layout == "combined":
            with _open_out(a.out) as f:
                n = gen_combined(f, a.size, a.ranks, a.fail_rank)
        else:
            with _open_out(a.out) as f:
                n = gen_long_line(f, a.size)
    except BrokenPipeError:
        return 1
    print(f"wrote {n / 1e6:.1f} MB", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
