"""Generate big, realistic training-job logs for the speed and memory benchmarks.

Three layouts, all describing the same kind of job (a GPT-style run under SLURM + torchrun, one
rank dies of a CUDA OOM, every other rank's NCCL watchdog times out 10 minutes later, the agents
SIGTERM their workers and the step is cancelled):

- ``ranks``: one file per rank (``rank-0037.log``) plus the agents' combined ``slurm-<job>.out``;
- ``combined``: one ``srun --label`` stream (``3: [default1]:[rank25]:message``) with every rank's
  lines interleaved in small blocks, written to a file or to stdout (``-o -``) lazily, so any size
  (10 GB) can be piped without being held anywhere;
- ``long-line``: a log with one line of N bytes in the middle (the bounded-memory case).

The body of the logs (what the ranks print while they train) comes in styles (``--style``), each a
kind of job whose density of rule keywords differs (the matrix of ``benchmarks/speed.py``):

- ``ours``: Python logging, DeepSpeed, Megatron, tqdm and NCCL init lines, ~2 % with a keyword;
- ``deepspeed``: DeepSpeed/HF step-and-timer heavy: ~150-byte lines (~7 M lines per GB), DeepSpeed's
  ``log_dist``/timer lines and fp16 ``OVERFLOW! Rank N Skipping step`` lines (a context rule's),
  HF Trainer and Python logging, loguru's ANSI lines, a caught traceback every ~1 MB;
- ``nccl``: ``NCCL_DEBUG=INFO`` heavy: a communicator's init block (rings, trees, channels) and
  its destroy (``[Service thread] Connection closed by localRank N``, no stamps) every 16 steps, as
  a job that makes and frees a sub-group's communicator prints them;
- ``tqdm``: tqdm bars (``█▏▎▍▌▋▊▉``: non-ASCII) whose ``\r`` frames run on one line until a
  logging line ends it;
- ``traceback``: ``ours`` plus a caught (logged and retried) traceback every ~300 lines.

The wordings are the real ones these tools print (the benign corpus ``rules/benign/`` has them).

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


_ANSI = {"g": "\x1b[32m", "b": "\x1b[1m", "c": "\x1b[36m", "0": "\x1b[0m"}


#: what a caught read error says (``logger.exception`` before a retry): a peer reset (no rule
#: confirms it), a timeout (the generic uncaught-exception rule does) and an EIO (a storage rule does)
_CAUGHT = ("ConnectionResetError: [Errno 104] Connection reset by peer",
           'botocore.exceptions.ReadTimeoutError: Read timeout on endpoint URL: '
           '"https://s3.us-east-1.amazonaws.com/corpus/shard-{shard:05d}.tar"',
           "OSError: [Errno 5] Input/output error: '/lustre/corpus/shard-{shard:05d}.tar'")


def _caught_traceback(t: datetime, rnd: random.Random, step: int) -> list[str]:
    """A data read that failed, was logged with its traceback, and retried: not a failure (the
    rank's training goes on after it)."""
    shard = rnd.randint(0, 4095)
    return [f"{_py(t)} - data - ERROR - reading shard {shard:05d} failed, retrying in 2 s (attempt 1/5)",
            "Traceback (most recent call last):",
            '  File "/workspace/data/shards.py", line 142, in read',
            "    return self._fs.cat_file(path)",
            '  File "/usr/local/lib/python3.11/site-packages/fsspec/spec.py", line 771, in cat_file',
            '    with self.open(path, "rb", **kwargs) as f:',
            _CAUGHT[step % len(_CAUGHT)].format(shard=shard),
            f"{_py(t + timedelta(seconds=2))} - data - INFO - shard {shard:05d} read on retry (step {step})"]


def _ds_step_lines(step: int, rnd: random.Random, ranks: int) -> list[str]:
    """One optimizer step of a DeepSpeed + HF Trainer job: ~13 lines of ~150 bytes."""
    t = T0 + timedelta(seconds=60 + step * STEP_S)
    loss = 2.9 - 0.6 * min(step, 50_000) / 50_000 + rnd.random() * 0.05
    out = []
    for mb in range(4):
        tt = _py(t + timedelta(milliseconds=mb * 180 + rnd.randint(0, 9)))
        out.append(f"{tt} - train - DEBUG - micro_step={step * 4 + mb} fwd={rnd.uniform(30, 40):.2f}ms "
                   f"bwd={rnd.uniform(60, 80):.2f}ms allreduce_bucket={mb % 12} wait={rnd.uniform(0, 3):.2f}ms "
                   f"seq_len=4096 tokens=16384")
        out.append(f"{tt} - data - DEBUG - shard {(step * 4 + mb) % 4096:05d} offset {rnd.randint(0, 1 << 30)} "
                   f"read 512 samples in {rnd.uniform(2, 30):.1f} ms (queue depth {rnd.randint(1, 8)})")
    ds = _py(t + timedelta(milliseconds=700))
    out.append(f"[{ds}] [INFO] [logging.py:128:log_dist] [Rank @R@] step={step}, skipped={step // 80}, "
               f"lr=[0.0003], mom=[(0.9, 0.95)]")
    out.append(f"[{ds}] [INFO] [timer.py:264:stop] epoch=0/micro_step={step * 4}/global_step={step}, "
               f"RunningAvgSamplesPerSec={500 + rnd.random() * 20:.3f}, CurrSamplesPerSec={500 + rnd.random() * 20:.3f}, "
               f"MemAllocated=61.2GB, MaxMemAllocated=70.1GB")
    out.append(f"[{ds}] [INFO] [logging.py:128:log_dist] [Rank @R@] time (ms) | fwd_microstep: "
               f"{rnd.uniform(140, 160):.2f} | bwd_microstep: {rnd.uniform(280, 320):.2f} | step_microstep: "
               f"{rnd.uniform(10, 14):.2f}")
    if step % 80 == 40:  # fp16 dynamic loss scaling: the scale overflowed, the step is skipped
        scale = 1 << (16 - (step // 80) % 8)
        out.append(f"[{ds}] [INFO] [loss_scaler.py:183:update_scale] [deepspeed] OVERFLOW! Rank @R@ Skipping step. "
                   f"Attempted loss scale: {scale}, reducing to {scale // 2}")
    out.append(f"{{'loss': {loss:.4f}, 'grad_norm': {0.8 + rnd.random():.4f}, 'learning_rate': 0.0003, "
               f"'epoch': {step / 200_000:.4f}, 'num_input_tokens_seen': {step * 4 * 16384}}}")
    hf = (t + timedelta(milliseconds=720)).strftime("%Y-%m-%d %H:%M:%S,") + "720"
    out.append(f"[INFO|trainer.py:2031] {hf} >> step {step}: {150_000 + rnd.randint(0, 9999)} tokens/s, "
               f"{rnd.uniform(0.8, 0.9):.3f} s/it, {rnd.uniform(140, 145):.1f} TFLOP/s per GPU")
    lt = (t + timedelta(milliseconds=730)).strftime("%Y-%m-%d %H:%M:%S.") + "730"
    a = _ANSI
    out.append(f"{a['g']}{lt}{a['0']} | {a['b']}INFO    {a['0']} | {a['c']}train.loop{a['0']}:{a['c']}step{a['0']}:"
               f"{a['c']}214{a['0']} - {a['b']}[@H@:@L@] step {step} done, MFU {0.45 + rnd.random() * 0.02:.3f}{a['0']}")
    if step % 500 == 250:  # a few caught tracebacks (one every ~1 MB)
        out.extend(_caught_traceback(t + timedelta(milliseconds=750), rnd, step))
    return out


def _nccl_block(step: int, ranks: int, destroy: bool) -> list[str]:
    """A sub-communicator's NCCL_DEBUG=INFO init (or its destroy): the lines NCCL prints per rank."""
    nh = "@H@:@P@:@P@"
    comm = f"0x55d3a8e{step % 0xfffff:05x}"
    if destroy:
        return ["@H@:@P@:@T@ [@L@] NCCL INFO [Service thread] Connection closed by localRank @L@",
                f"{nh} [@L@] NCCL INFO comm {comm} rank @R@ nranks {ranks} cudaDev @L@ busId @L@8000 - Destroy COMPLETE"]
    out = [f"{nh} [@L@] NCCL INFO Using network IB",
           f"{nh} [@L@] NCCL INFO ncclCommInitRank comm {comm} rank @R@ nranks {ranks} cudaDev @L@ nvmlDev @L@ "
           f"busId @L@8000 commId 0x2f6c1e9a{step % 0xffffffff:08x} - Init START",
           f"{nh} [@L@] NCCL INFO Setting affinity for GPU @L@ to ffffffff,00000000,ffffffff",
           f"{nh} [@L@] NCCL INFO comm {comm} rank @R@ nRanks {ranks} nNodes {max(1, ranks // PER_NODE)} localRanks "
           f"{PER_NODE} localRank @L@ MNNVL 0"]
    for ch in range(4):
        out.append(f"{nh} [@L@] NCCL INFO Channel {ch:02d}/24 :    0   1   2   3   4   5   6   7")
    out.append(f"{nh} [@L@] NCCL INFO Trees [0] 1/8/-1->@R@->-1 [1] -1/-1/-1->@R@->7 [2] 1/-1/-1->@R@->-1")
    out.append(f"{nh} [@L@] NCCL INFO P2P Chunksize set to 524288")
    for ch in range(4):
        out.append(f"{nh} [@L@] NCCL INFO Channel {ch:02d}/0 : @R@[@L@] -> {1}[1] via P2P/CUMEM/read")
    out += [f"{nh} [@L@] NCCL INFO Connected all rings",
            f"{nh} [@L@] NCCL INFO Connected all trees",
            f"{nh} [@L@] NCCL INFO threadThresholds 8/8/64 | 128/8/64 | 512 | 512",
            f"{nh} [@L@] NCCL INFO 24 coll channels, 24 collnet channels, 0 nvls channels, 32 p2p channels, "
            f"32 p2p channels per peer",
            f"{nh} [@L@] NCCL INFO ncclCommInitRank comm {comm} rank @R@ nranks {ranks} cudaDev @L@ nvmlDev @L@ "
            f"busId @L@8000 commId 0x2f6c1e9a{step % 0xffffffff:08x} - Init COMPLETE",
            f"{nh} [@L@] NCCL INFO Init timings: rank @R@ nranks {ranks} total 1.84 (kernels 0.27, bootstrap 0.61, "
            f"allgathers 0.04, topo 0.38, graphs 0.05, connections 0.44, rest 0.05)"]
    return out


def _nccl_step_lines(step: int, rnd: random.Random, ranks: int) -> list[str]:
    """A step of a job whose code makes (and frees) a sub-group's communicator every few steps."""
    t = T0 + timedelta(seconds=60 + step * STEP_S)
    loss = 2.9 - 0.6 * min(step, 50_000) / 50_000 + rnd.random() * 0.05
    out = [f"{_py(t)} - train - INFO - step={step} loss={loss:.4f} lr=3.000e-04 grad_norm={0.8 + rnd.random():.3f}"]
    for mb in range(4):
        out.append(f"{_py(t + timedelta(milliseconds=mb * 40))} - train - DEBUG - micro_step={step * 4 + mb} "
                   f"fwd={rnd.uniform(30, 40):.2f}ms bwd={rnd.uniform(60, 80):.2f}ms")
    if step % 16 == 0:
        out.extend(_nccl_block(step, ranks, destroy=False))
    elif step % 16 == 8:
        out.extend(_nccl_block(step - 8, ranks, destroy=True))
    return out


_BLOCKS = " ▏▎▍▌▋▊▉█"


def _bar(frac: float, width: int = 10) -> str:
    full = frac * width
    n = int(full)
    part = int((full - n) * 8)
    return ("█" * n + (_BLOCKS[part] if n < width and part else "")).ljust(width)


def _tqdm_step_lines(step: int, rnd: random.Random, ranks: int) -> list[str]:
    """tqdm frames (``\r`` each, no newline) until a logging line ends the line: one per step here,
    twenty frames a step (the bar refreshes on the data loader's batches)."""
    t = T0 + timedelta(seconds=60 + step * STEP_S)
    total = 2000  # batches per epoch
    frames = []
    for k in range(20):
        epoch, n = divmod(step * 20 + k, total)
        frac = n / total
        el = int(n * 0.0425)
        rem = int((total - n) * 0.0425)
        frames.append(f"\rEpoch {epoch}: {frac * 100:3.0f}%|{_bar(frac)}| {n}/{total} [{el // 60:02d}:{el % 60:02d}<"
                      f"{rem // 60:02d}:{rem % 60:02d}, {23 + rnd.random():.2f}it/s, loss={2.5 + rnd.random() * 0.1:.3f}, "
                      f"v_num=0]")
    loss = 2.9 - 0.6 * min(step, 50_000) / 50_000 + rnd.random() * 0.05
    return ["".join(frames) + f"{_py(t)} - train - INFO - step={step} loss={loss:.4f} lr=3.000e-04"]


def _traceback_step_lines(step: int, rnd: random.Random, ranks: int) -> list[str]:
    """``ours``, with a caught traceback every eight steps (~300 lines)."""
    out = _step_lines(step, rnd, ranks)
    if step % 8 == 3:
        out.extend(_caught_traceback(T0 + timedelta(seconds=60 + step * STEP_S + 0.75), rnd, step))
    return out


#: the body styles: one step of one rank (with @R@/@L@/@H@/@P@/@T@ placeholders)
STYLES = {"ours": _step_lines, "deepspeed": _ds_step_lines, "nccl": _nccl_step_lines, "tqdm": _tqdm_step_lines,
          "traceback": _traceback_step_lines}


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
    out = (text.replace(b"@R@", str(rank).encode()).replace(b"@L@", str(rank % PER_NODE).encode())
           .replace(b"@H@", _host(rank).encode()))
    if b"@P@" in out or b"@T@" in out:  # the process and its NCCL service thread
        out = out.replace(b"@P@", str(40_000 + rank).encode()).replace(b"@T@", str(40_071 + rank).encode())
    return out


def _body_blocks(target: int, ranks: int, seed: int, steps_per_block: int = 64,
                 style: str = "ours") -> Iterator[tuple[int, bytes]]:
    """(first step, bytes) blocks of placeholder lines until about ``target`` bytes per rank."""
    rnd = random.Random(seed)
    step_lines = STYLES[style]
    step, made = 1, 0
    while made < target:
        lines: list[str] = []
        for s in range(step, step + steps_per_block):
            lines.extend(step_lines(s, rnd, ranks))
        block = ("\n".join(lines) + "\n").encode()
        yield step, block
        made += len(block)
        step += steps_per_block


def gen_ranks(out_dir: str, ranks: int, per_rank: int, fail_rank: int = FAIL_RANK_DEFAULT, seed: int = 1,
              style: str = "ours") -> int:
    """One file per rank of about ``per_rank`` bytes, plus the agents' ``slurm-<job>.out``; returns bytes written."""
    os.makedirs(out_dir, exist_ok=True)
    fail_rank = fail_rank % ranks
    # (a small file: steps a few at a time, so that its size stays near ``per_rank``)
    spb = max(1, min(64, per_rank // (64 << 10)))
    blocks = list(_body_blocks(per_rank, ranks, seed, steps_per_block=spb, style=style))
    steps = blocks[-1][0] + spb - 1 if blocks else 0
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


def combined_stream(size: int, ranks: int, fail_rank: int = FAIL_RANK_DEFAULT, seed: int = 1,
                    style: str = "ours") -> Iterator[bytes]:
    """The ``srun --label`` stream of the whole job, lazily, in blocks of a few MB (about ``size`` bytes)."""
    fail_rank = fail_rank % ranks
    prefixes = [_prefix(r) for r in range(ranks)]
    out = []
    for r in range(ranks):
        out.append(b"".join(prefixes[r] + ln.encode() + b"\n" for ln in _head_lines(r, ranks)))
    yield b"".join(out)
    per_rank = max(1, size // ranks)
    last_step = 1
    for step, block in _body_blocks(per_rank, ranks, seed, steps_per_block=1, style=style):
        # each rank's step comes out as one chunk (a flushed buffer), ranks interleaved
        lines = block.rstrip(b"\n").split(b"\n")
        tmpl = b"@P@" + b"\n@P@".join(lines) + b"\n"
        yield b"".join(_fill(tmpl.replace(b"@P@", prefixes[r]), r) for r in range(ranks))
        last_step = step
    tail = []
    for r in range(ranks):
        tail.append(b"".join(prefixes[r] + ln.encode() + b"\n" for ln in _tail_lines(r, ranks, last_step, fail_rank)))
    yield b"".join(tail) + ("\n".join(_agent_lines(ranks, last_step, fail_rank)) + "\n").encode()


def gen_combined(out: BinaryIO, size: int, ranks: int, fail_rank: int = FAIL_RANK_DEFAULT, seed: int = 1,
                 style: str = "ours") -> int:
    total = 0
    pending: list[bytes] = []
    pending_n = 0
    for chunk in combined_stream(size, ranks, fail_rank, seed, style):
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
    r.add_argument("--style", choices=sorted(STYLES), default="ours", help="what the ranks print while training")
    r.add_argument("-o", "--out", required=True, help="output folder")
    c = sub.add_parser("combined", help="one srun --label stream")
    c.add_argument("--ranks", type=int, default=64)
    c.add_argument("--size", type=parse_size, default=parse_size("1G"))
    c.add_argument("--fail-rank", type=int, default=FAIL_RANK_DEFAULT)
    c.add_argument("--style", choices=sorted(STYLES), default="ours", help="what the ranks print while training")
    c.add_argument("-o", "--out", default="-", help="output file, or - for stdout")
    ll = sub.add_parser("long-line", help="one huge line")
    ll.add_argument("--size", type=parse_size, default=parse_size("1G"))
    ll.add_argument("-o", "--out", default="-")
    a = ap.parse_args(argv)
    try:
        if a.layout == "ranks":
            per = a.per_rank if a.per_rank else (a.size or parse_size("1G")) // a.ranks
            n = gen_ranks(a.out, a.ranks, per, a.fail_rank, style=a.style)
        elif a.layout == "combined":
            with _open_out(a.out) as f:
                n = gen_combined(f, a.size, a.ranks, a.fail_rank, style=a.style)
        else:
            with _open_out(a.out) as f:
                n = gen_long_line(f, a.size)
    except BrokenPipeError:
        return 1
    print(f"wrote {n / 1e6:.1f} MB", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
