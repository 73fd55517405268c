"""Healthy training jobs with the benign noise real ones print, in several log styles.

``healthy_job(seed, style)`` returns ``{relative path: bytes}`` of a small job (8 ranks on 2 nodes,
a few hundred lines) that trained and ended normally. The noise is what the software prints in a
run that goes well: caught and retried errors with their tracebacks, retry warnings, deprecation
warnings, NCCL's teardown lines, the TCPStore lines of ranks that outlive rank 0's store at exit
(``recvValue failed``, ``Failed to check the "should dump" flag``), NCCL's proxy ``Failed to execute
operation Close``, ``Exception ignored in`` at interpreter exit, ``destroy_process_group() was not
called``, a worker's TCPStore client retrying before rank 0's store listens, DDP's
``find_unused_parameters`` warning, DeepSpeed's fp16 ``OVERFLOW! Rank 0 Skipping step``. The texts are the ones the libraries print (torch c10d, NCCL, urllib3, huggingface_hub,
wandb, DeepSpeed, Lightning, tqdm); numbers, hosts and paths are made up.

Styles (``STYLES``): ``pylog_per_rank`` (Python logging, one file per rank), ``srun_torchrun`` (one
``srun --label`` stream, one task per node, torchrun ``--tee 3`` tags, the agents' SUCCEEDED lines),
``hf_deepspeed`` (the DeepSpeed launcher over pdsh: host tags, ``log_dist`` lines, HF Trainer's tqdm
``\\r`` frames and loss dicts on rank 0, c10's glog-stamped lines), ``lightning`` (one file per rank
from ``srun --output %t``: Lightning's banner, tqdm epochs, ``Trainer.fit stopped``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from random import Random

from metamorphic import WARNINGS

Files = dict[str, bytes]

RANKS, PER_NODE = 8, 4
#: the kinds of benign noise a job may print (``healthy_job(..., noise=...)`` picks some)
NOISE = ("caught", "retry", "warn", "teardown", "store_noise", "proxy", "ignored", "destroy_warn", "store_retry",
         "ddp_warn", "overflow")


@dataclass
class Job:
    rng: Random
    t0: datetime
    hosts: list[str]
    pids: list[int]
    buses: list[str]
    comm: list[str]
    steps: int
    step_s: float
    first_step: int
    job_id: int
    noise: frozenset[str] = frozenset(NOISE)

    def host(self, r: int) -> str:
        return self.hosts[r // PER_NODE]

    def at(self, k: int, r: int = 0) -> datetime:
        """The time of progress mark k on rank r (ranks a few ms apart)."""
        return self.t0 + timedelta(seconds=60 + k * self.step_s, milliseconds=3 * r + (7 * k + 5 * r) % 5)

    @property
    def end(self) -> datetime:
        return self.at(self.steps) + timedelta(seconds=4)


def _job(seed: int) -> Job:
    rng = Random(seed)
    t0 = datetime(2026, rng.randint(1, 12), rng.randint(1, 27), rng.randint(0, 22), rng.randint(0, 59),
                  rng.randint(0, 59), rng.randint(0, 999) * 1000, tzinfo=UTC)
    fam = rng.choice(["gpu-a", "gpu-c", "hgx-", "node"])
    base = rng.randint(1, 40)
    hosts = [f"{fam}{base + i:02d}" for i in range(RANKS // PER_NODE)]
    return Job(rng, t0, hosts, [rng.randint(100_000, 4_000_000) + r for r in range(RANKS)],
               [["18000", "2a000", "3a000", "5d000", "9a000", "ab000", "ba000", "db000"][r % 8] for r in range(RANKS)],
               [f"0x55{rng.getrandbits(40):010x}" for _ in range(RANKS)], rng.randint(24, 40),
               rng.choice([10.0, 15.0, 20.0, 30.0]), rng.randrange(0, 20_000, 50), rng.randint(100_000, 999_999))


def py(t: datetime) -> str:
    return t.strftime("%Y-%m-%d %H:%M:%S,") + f"{t.microsecond // 1000:03d}"


def glog(t: datetime, level: str = "I") -> str:
    """torchelastic's Python glog format: I0310 09:04:57.408000"""
    return t.strftime(f"{level}%m%d %H:%M:%S.") + f"{t.microsecond:06d}"


def c10(t: datetime, level: str = "W") -> str:
    """c10's own: W305 10:17:38.040221001 (month not padded, nanoseconds)"""
    return f"{level}{t.month}{t.day:02d} {t:%H:%M:%S}.{t.microsecond:06d}{Random(t.timestamp()).randint(0, 999):03d}"


def nccl_init(j: Job, r: int) -> list[str]:
    h, lr, pid = j.host(r), r % PER_NODE, j.pids[r]
    tid = pid + 63
    ip = f"10.{j.hosts.index(h) + 10}.0.{lr + 10}"
    out = [f"{h}:{pid}:{pid} [{lr}] NCCL INFO Bootstrap : Using ib0:{ip}<0>",
           f"{h}:{pid}:{pid} [{lr}] NCCL INFO cudaDriverVersion 12040"]
    if r == 0:
        out.append("NCCL version 2.21.5+cuda12.4")
    out += [f"{h}:{pid}:{tid} [{lr}] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB ; OOB ib0:{ip}<0>",
            f"{h}:{pid}:{tid} [{lr}] NCCL INFO Using network IB",
            f"{h}:{pid}:{tid} [{lr}] NCCL INFO comm {j.comm[r]} rank {r} nranks {RANKS} cudaDev {lr} nvmlDev {lr} "
            f"busId {j.buses[r]} commId 0x7c3e1f0a9b2d4e61 - Init COMPLETE"]
    return out


def nccl_teardown(j: Job, r: int) -> list[str]:
    h, lr, pid = j.host(r), r % PER_NODE, j.pids[r]
    return [f"{h}:{pid}:{pid + 63} [{lr}] NCCL INFO [Service thread] Connection closed by localRank {lr}",
            f"{h}:{pid}:{pid} [{lr}] NCCL INFO comm {j.comm[r]} rank {r} nranks {RANKS} cudaDev {lr} "
            f"busId {j.buses[r]} - Destroy COMPLETE"]


def proxy_close_warning(j: Job, r: int) -> list[str]:
    h, lr, pid = j.host(r), r % PER_NODE, j.pids[r]
    return [f"{h}:{pid}:{pid + 64} [{lr}] NCCL WARN [Proxy Service {r}] Failed to execute operation Close from rank "
            f"{r}, retcode 3"]


def store_exit_noise(j: Job, r: int, t: datetime) -> list[str]:
    """What a rank whose process group outlives rank 0's TCPStore prints at exit."""
    port = 29500
    return [
        f"[rank{r}]:[{c10(t)} TCPStore.cpp:125] [c10d] recvValue failed on SocketImpl(fd=68, addr=[{j.host(r)}]:"
        f"{49590 + r}, remote=[{j.hosts[0]}]:{port}): Failed to recv, got 0 bytes. Connection was likely closed. "
        "Did the remote server shutdown or crash?",
        "Exception raised from recvBytes at /pytorch/torch/csrc/distributed/c10d/Utils.hpp:682 (most recent call first):",
        "frame #0: c10::Error::Error(c10::SourceLocation, std::__cxx11::basic_string<char, std::char_traits<char>, "
        "std::allocator<char> >) + 0x80 (0x7f610297cb80 in /usr/local/lib/python3.12/dist-packages/torch/lib/libc10.so)",
        "frame #1: <unknown function> + 0x5ffc5d1 (0x7f60e53f55d1 in /usr/local/lib/python3.12/dist-packages/torch/lib/"
        "libtorch_cpu.so)",
        "frame #2: c10d::TCPStore::check(std::vector<std::__cxx11::basic_string<char, std::char_traits<char>, "
        "std::allocator<char> >, std::allocator<std::__cxx11::basic_string<char, std::char_traits<char>, "
        "std::allocator<char> > > > const&) + 0x273 (0x7f60e53f8413 in /usr/local/lib/python3.12/dist-packages/torch/lib/"
        "libtorch_cpu.so)",
        "frame #3: c10d::ProcessGroupNCCL::heartbeatMonitor() + 0x379 (0x7f60a09c99f9 in /usr/local/lib/python3.12/"
        "dist-packages/torch/lib/libtorch_cuda.so)",
        "frame #4: <unknown function> + 0xdc253 (0x7f6102a9c253 in /lib/x86_64-linux-gnu/libstdc++.so.6)",
        "frame #5: <unknown function> + 0x94ac3 (0x7f6103a41ac3 in /lib/x86_64-linux-gnu/libc.so.6)",
        "frame #6: clone + 0x44 (0x7f6103ad2a04 in /lib/x86_64-linux-gnu/libc.so.6)",
        "",
        f"[rank{r}]:[{c10(t + timedelta(milliseconds=2))} ProcessGroupNCCL.cpp:1783] [PG ID 0 PG GUID 0 Rank {r}] Failed "
        'to check the "should dump" flag on TCPStore, (maybe TCPStore server has shut down too early), with error: '
        "Failed to recv, got 0 bytes. Connection was likely closed. Did the remote server shutdown or crash?",
    ]


def store_retry(j: Job, r: int, t: datetime) -> list[str]:
    """A worker that reaches rank 0's TCPStore before it listens (startup), then connects."""
    return [f"[rank{r}]:[{c10(t)} TCPStore.cpp:347] [c10d] TCP client failed to connect/validate to host "
            f"{j.hosts[0]}:29500 - retrying (try=0, timeout=1800000ms, delay=487ms): Connection reset by peer"]


def ddp_unused_warning(r: int, t: datetime) -> list[str]:
    return [f"[rank{r}]:[{c10(t)} reducer.cpp:1457] Warning: find_unused_parameters=True was specified in DDP "
            "constructor, but did not find any unused parameters in the forward pass. This flag results in an extra "
            "traversal of the autograd graph every iteration,  which can adversely affect performance. If your model "
            "indeed never has any unused parameters in the forward pass, consider turning this flag off. Note that "
            "this warning may be a false positive if your model has flow control causing later iterations to have "
            "unused parameters. (function operator())"]


def _start_noise(j: Job, r: int, plan: dict) -> list[str]:
    return store_retry(j, r, j.t0 + timedelta(seconds=8, milliseconds=r)) if r in plan["store_retry"] else []  # type: ignore[operator]


def destroy_not_called(r: int, t: datetime) -> list[str]:
    return [f"[rank{r}]:[{c10(t)} ProcessGroupNCCL.cpp:1250] Warning: WARNING: destroy_process_group() was not called "
            "before program exit, which can leak resources. For more info, please see "
            "https://pytorch.org/docs/stable/distributed.html#shutdown (function operator())"]


EXCEPTION_IGNORED = [
    "Exception ignored in: <function _MultiProcessingDataLoaderIter.__del__ at 0x7f3a2c1d8f40>",
    "Traceback (most recent call last):",
    '  File "/opt/conda/lib/python3.11/site-packages/torch/utils/data/dataloader.py", line 1479, in __del__',
    "    self._shutdown_workers()",
    '  File "/opt/conda/lib/python3.11/site-packages/torch/utils/data/dataloader.py", line 1443, in _shutdown_workers',
    "    if self._persistent_workers or self._workers_status[worker_id]:",
    "AttributeError: '_MultiProcessingDataLoaderIter' object has no attribute '_workers_status'",
]

#: user and deprecation warnings as the libraries print them (the metamorphic transformations use the same)
USER_WARNINGS = WARNINGS

RETRY_LINES = [
    ("urllib3.connectionpool", "Retrying (Retry(total=4, connect=None, read=None, redirect=None, status=None)) after "
     "connection broken by 'ReadTimeoutError(\"HTTPSConnectionPool(host='huggingface.co', port=443): Read timed out. "
     "(read timeout=10)\")': /api/datasets/allenai/c4/revision/main"),
    ("huggingface_hub.utils._http", "'(ReadTimeoutError(\"HTTPSConnectionPool(host='huggingface.co', port=443): Read "
     "timed out. (read timeout=10)\"), '(Request ID: 4f1c2b0e-7d3a-4c55-9b1e-2a6f0c9d8e11)')' thrown while requesting "
     "HEAD https://huggingface.co/meta-llama/Llama-3.1-8B/resolve/main/config.json. Retrying in 1s [Retry 1/5]."),
]

CAUGHT_TRACEBACK = [
    "Traceback (most recent call last):",
    '  File "/opt/conda/lib/python3.11/site-packages/urllib3/connectionpool.py", line 793, in urlopen',
    "    response = self._make_request(",
    '  File "/opt/conda/lib/python3.11/site-packages/urllib3/connectionpool.py", line 537, in _make_request',
    "    response = conn.getresponse()",
    "ConnectionResetError: [Errno 104] Connection reset by peer",
]


def _noise_plan(j: Job) -> dict[str, object]:
    """Which benign noise this job prints, and where (progress mark indices)."""
    rng = j.rng
    plan: dict[str, object] = {
        # one caught error in the last few progress marks (the run completes a minute or two later),
        # the others anywhere
        "caught": [(rng.randrange(RANKS), rng.randint(j.steps - 4, j.steps - 1))]
                  + [(rng.randrange(RANKS), rng.randint(1, j.steps - 1)) for _ in range(rng.randint(0, 2))],
        "retry": [(rng.randrange(RANKS), rng.randint(0, j.steps - 1)) for _ in range(rng.randint(1, 3))],
        "warn": [(rng.randrange(RANKS), rng.randint(0, j.steps - 1)) for _ in range(rng.randint(1, 4))],
        "teardown": True,
        "store_noise": rng.sample(range(1, RANKS), rng.randint(0, 3)),
        "proxy": rng.sample(range(RANKS), rng.randint(0, 2)),
        "ignored": rng.sample(range(RANKS), rng.randint(0, 2)),
        "destroy_warn": rng.random() < 0.5,
        "store_retry": rng.sample(range(1, RANKS), rng.randint(0, 3)),
        "ddp_warn": rng.random() < 0.5,
        "overflow": rng.randint(1, 3),
    }
    empty: dict[str, object] = {"caught": [], "retry": [], "warn": [], "teardown": False, "store_noise": [],
                                "proxy": [], "ignored": [], "destroy_warn": False, "store_retry": [],
                                "ddp_warn": False, "overflow": 0}
    return {k: (v if k in j.noise else empty[k]) for k, v in plan.items()}


def _pylog_worker(j: Job, r: int, plan: dict, logger: str = "train") -> list[str]:
    """One rank's own lines in Python logging format, noise included, ending normally."""
    out = _start_noise(j, r, plan) + nccl_init(j, r)
    lr = 2e-4
    for k in range(j.steps + 1):
        t = j.at(k, r)
        for rr, kk in plan["warn"]:  # type: ignore[union-attr]
            if rr == r and kk == k:
                out += USER_WARNINGS[(k + r) % len(USER_WARNINGS)]
        for rr, kk in plan["retry"]:  # type: ignore[union-attr]
            if rr == r and kk == k:
                name, msg = RETRY_LINES[(k + r) % len(RETRY_LINES)]
                out.append(f"{py(t - timedelta(seconds=2))} - {name} - WARNING - {msg}")
        for rr, kk in plan["caught"]:  # type: ignore[union-attr]
            if rr == r and kk == k:
                out.append(f"{py(t - timedelta(seconds=1))} - {logger} - WARNING - [rank {r}] Retrying metrics upload "
                           f"(attempt 1/5) after error: [Errno 104] Connection reset by peer")
                out += CAUGHT_TRACEBACK
        step = j.first_step + 50 * k
        loss = 2.6 - 0.01 * k + j.rng.random() * 0.02
        out.append(f"{py(t)} - {logger} - INFO - [rank {r}] step {step} | loss {loss:.4f} | lr {lr:.3e} | "
                   f"grad_norm {0.9 + j.rng.random() * 0.1:.3f} | tokens/s {40000 + j.rng.randint(0, 3000)}")
        if k == 0 and plan["ddp_warn"]:
            out += ddp_unused_warning(r, t + timedelta(milliseconds=40))
        if k and k % 10 == 0:
            out.append(f"{py(t + timedelta(seconds=1))} - {logger} - INFO - [rank {r}] saving checkpoint to "
                       f"/lustre/ckpt/run-{j.job_id}/step-{step:06d}")
            out.append(f"{py(t + timedelta(seconds=6))} - {logger} - INFO - [rank {r}] checkpoint saved")
    out.append(f"{py(j.end + timedelta(milliseconds=r))} - {logger} - INFO - [rank {r}] Training completed: "
               f"{j.steps * 50} steps")
    return out + _exit_noise(j, r, plan)


def _exit_noise(j: Job, r: int, plan: dict) -> list[str]:
    out: list[str] = []
    t = j.end + timedelta(seconds=1, milliseconds=10 * r)
    if r in plan["proxy"]:  # type: ignore[operator]
        out += proxy_close_warning(j, r)
    if plan["teardown"]:
        out += nccl_teardown(j, r)
    if r in plan["store_noise"]:  # type: ignore[operator]
        out += store_exit_noise(j, r, t)
    if r in plan["ignored"]:  # type: ignore[operator]
        out += EXCEPTION_IGNORED
    if plan["destroy_warn"] and r == 0:
        out += destroy_not_called(r, t)
    return out


def style_pylog_per_rank(j: Job) -> Files:
    plan = _noise_plan(j)
    return {f"rank-{r}.log": ("\n".join(_pylog_worker(j, r, plan)) + "\n").encode() for r in range(RANKS)}


def _agent_start(j: Job, node: int) -> list[str]:
    t = j.t0 + timedelta(seconds=node * 0.4)
    pid = 3_000_000 + node * 7919
    where = "/opt/conda/lib/python3.11/site-packages/torch/distributed/run.py:793]"
    return [f"W{t:%m%d %H:%M:%S}.{t.microsecond:06d} {pid} {where} ",
            f"W{t:%m%d %H:%M:%S}.{t.microsecond:06d} {pid} {where} *****************************************",
            f"W{t:%m%d %H:%M:%S}.{t.microsecond:06d} {pid} {where} Setting OMP_NUM_THREADS environment variable for "
            "each process to be 1 in default, to avoid your system being overloaded, please further tune the variable "
            "for optimal performance in your application as needed. ",
            f"W{t:%m%d %H:%M:%S}.{t.microsecond:06d} {pid} {where} *****************************************"]


def _agent_end(j: Job, node: int) -> list[str]:
    t = j.end + timedelta(seconds=3 + node)
    pid = 3_000_000 + node * 7919
    api = "/opt/conda/lib/python3.11/site-packages/torch/distributed/elastic/agent/server/api.py"
    t2 = t + timedelta(seconds=1.5)
    return [f"{glog(t)} {pid} {api}:879] [default] worker group successfully finished. Waiting 300 seconds for other "
            "agents to finish.",
            f"{glog(t)} {pid} {api}:932] Local worker group finished (WorkerState.SUCCEEDED). Waiting 300 seconds for "
            "other agents to finish",
            f"{glog(t2)} {pid} {api}:946] Done waiting for other agents. Elapsed: 1.5021 seconds"]


def _interleave(parts: list[tuple[float, int, str]]) -> list[str]:
    return [x[2] for x in sorted(parts, key=lambda x: (x[0], x[1]))]


def style_srun_torchrun(j: Job) -> Files:
    """srun --label (one task per node) around torchrun --tee 3: ``0: [default2]:...``."""
    plan = _noise_plan(j)
    parts: list[tuple[float, int, str]] = []
    seq = 0
    for node in range(RANKS // PER_NODE):
        for x in _agent_start(j, node):
            parts.append((j.t0.timestamp() + node * 0.4, seq, f"{node}: {x}"))
            seq += 1
        for x in _agent_end(j, node):
            parts.append((j.end.timestamp() + 3 + node, seq, f"{node}: {x}"))
            seq += 1
    for r in range(RANKS):
        node, lr = divmod(r, PER_NODE)
        last = j.t0.timestamp() + 10
        for x in _pylog_worker(j, r, plan):
            try:
                last = datetime.strptime(x[:23], "%Y-%m-%d %H:%M:%S,%f").replace(tzinfo=UTC).timestamp()
            except ValueError:
                pass
            parts.append((last, seq, f"{node}: [default{lr}]:{x}"))
            seq += 1
    lines = _interleave(parts)
    return {f"slurm-{j.job_id}.out": ("\n".join(lines) + "\n").encode()}


def _ds(t: datetime, level: str, where: str, msg: str) -> str:
    return f"[{py(t)}] [{level}] [{where}] {msg}"


def style_hf_deepspeed(j: Job) -> Files:
    """The DeepSpeed launcher over pdsh (``worker-N: `` host tags), HF Trainer on rank 0 (tqdm frames
    with ``\\r``, loss dicts), DeepSpeed's log_dist, c10's glog-stamped ProcessGroupNCCL lines."""
    plan = _noise_plan(j)
    parts: list[tuple[float, int, str]] = []
    seq = 0

    def put(t: datetime, node: int, text: str) -> None:
        nonlocal seq
        parts.append((t.timestamp(), seq, f"worker-{node}: {text}"))
        seq += 1

    total = j.steps * 10
    for node in range(RANKS // PER_NODE):
        t = j.t0 + timedelta(seconds=node * 0.3)
        put(t, node, _ds(t, "INFO", "launch.py:146:main", "WORLD INFO DICT: {'worker-0': [0, 1, 2, 3], "
                                                           "'worker-1': [0, 1, 2, 3]}"))
        put(t, node, _ds(t, "INFO", "launch.py:152:main", f"nnodes=2, num_local_procs=4, node_rank={node}"))
        put(t, node, _ds(t, "INFO", "launch.py:164:main", f"dist_world_size={RANKS}"))
    for r in range(RANKS):
        node = r // PER_NODE
        t = j.t0 + timedelta(seconds=20, milliseconds=10 * r)
        for x in _start_noise(j, r, plan) + nccl_init(j, r):
            put(t, node, x)
        put(t, node, f"[rank{r}]:[{c10(t, 'I')} ProcessGroupNCCL.cpp:852] [PG ID 0 PG GUID 0 Rank {r}] "
                     f"ProcessGroupNCCL initialization options: size: {RANKS}, global rank: {r}, TIMEOUT(ms): 600000, "
                     "USE_HIGH_PRIORITY_STREAM: 0, SPLIT_FROM: 0, SPLIT_COLOR: 0, PG Name: 0")
        put(t, node, _ds(t, "INFO", "comm.py:652:init_distributed", "cdb=None"))
        for rr, kk in plan["warn"]:  # type: ignore[union-attr]
            if rr == r:
                for x in USER_WARNINGS[kk % len(USER_WARNINGS)]:
                    put(j.at(kk, r), node, x)
    for k in range(j.steps + 1):
        t = j.at(k)
        step = 10 * k
        frame = "".join(f"\r{100 * s // total:3d}%|{'█' * (10 * s // total):<10}| {s}/{total} "
                        f"[{s // 60:02d}:{s % 60:02d}<{(total - s) // 60:02d}:{(total - s) % 60:02d},  1.00it/s]"
                        for s in range(max(0, step - 9), step + 1))
        put(t, 0, frame)
        if 1 <= k <= plan["overflow"]:  # type: ignore[operator]
            # fp16's dynamic loss scale backing off in the first steps
            put(t, 0, _ds(t, "INFO", "loss_scaler.py:183:update_scale", f"[deepspeed] OVERFLOW! Rank 0 Skipping "
                                                                        f"step. Attempted loss scale: {2 ** (17 - k)}, "
                                                                        f"reducing to {2 ** (16 - k)}"))
        if k and k % 2 == 0:
            put(t, 0, f"{{'loss': {2.6 - 0.01 * k:.4f}, 'grad_norm': {1.1 + j.rng.random():.3f}, 'learning_rate': "
                      f"{5e-05 * (1 - k / (j.steps + 1)):.4e}, 'epoch': {k / j.steps:.2f}}}")
        for r in range(RANKS):
            if k and k % 5 == 0:
                put(j.at(k, r), r // PER_NODE, _ds(j.at(k, r), "INFO", "logging.py:128:log_dist",
                                                   f"[Rank {r}] step={step}, skipped=0, lr=[{5e-05:.4e}], "
                                                   f"mom=[(0.9, 0.999)]"))
            for rr, kk in plan["caught"]:  # type: ignore[union-attr]
                if rr == r and kk == k:
                    put(t, r // PER_NODE, f"{py(t)} - WARNING - huggingface_hub.utils._http - [Rank {r}] Retrying "
                                          "upload after error: [Errno 104] Connection reset by peer")
                    for x in CAUGHT_TRACEBACK:
                        put(t, r // PER_NODE, x)
            for rr, kk in plan["retry"]:  # type: ignore[union-attr]
                if rr == r and kk == k:
                    name, msg = RETRY_LINES[(k + r) % len(RETRY_LINES)]
                    put(t, r // PER_NODE, f"{py(t)} - WARNING - {name} - {msg}")
    t = j.end
    put(t, 0, f"\r100%|██████████| {total}/{total} [{total // 60:02d}:{total % 60:02d}<00:00,  1.00it/s]")
    put(t, 0, f"{{'train_runtime': {j.steps * j.step_s:.4f}, 'train_samples_per_second': 31.2, "
              f"'train_steps_per_second': 1.0, 'train_loss': 2.4121, 'epoch': 1.0}}")
    put(t, 0, "Training completed. Do not forget to share your model on huggingface.co/models =)")
    for r in range(RANKS):
        tt = t + timedelta(seconds=2, milliseconds=5 * r)
        for x in _exit_noise(j, r, plan):
            put(tt, r // PER_NODE, x)
    for node in range(RANKS // PER_NODE):
        for lr in range(PER_NODE):
            tt = t + timedelta(seconds=5 + node, milliseconds=lr)
            put(tt, node, _ds(tt, "INFO", "launch.py:351:main", f"Process {j.pids[node * PER_NODE + lr]} exits "
                                                                "successfully."))
    lines = _interleave(parts)
    return {f"ds-{j.job_id}.log": ("\n".join(lines) + "\n").encode()}


def style_lightning(j: Job) -> Files:
    """One file per rank (``srun --output lit-%j-%t.out``): Lightning's banner, tqdm epoch bars with
    ``\\r`` on every rank, python warnings, ``Trainer.fit stopped``."""
    plan = _noise_plan(j)
    files: Files = {}
    per_epoch = max(1, j.steps // 2)
    for r in range(RANKS):
        lr = r % PER_NODE
        out = _start_noise(j, r, plan) + [f"Initializing distributed: GLOBAL_RANK: {r}, MEMBER: {r + 1}/{RANKS}"]
        out += nccl_init(j, r)
        if r == 0:
            out += ["----------------------------------------------------------------------------------------------------",
                    "distributed_backend=nccl",
                    f"All distributed processes registered. Starting with {RANKS} processes",
                    "----------------------------------------------------------------------------------------------------",
                    ""]
        out.append(f"LOCAL_RANK: {lr} - CUDA_VISIBLE_DEVICES: [0,1,2,3]")
        if r == 0:
            out += ["",
                    "  | Name  | Type             | Params | Mode ",
                    "---------------------------------------------------",
                    "0 | model | GPT              | 124 M  | train",
                    "---------------------------------------------------",
                    "124 M     Trainable params", "0         Non-trainable params", "124 M     Total params"]
        bar = ""
        for k in range(j.steps + 1):
            t = j.at(k, r)
            for rr, kk in plan["warn"]:  # type: ignore[union-attr]
                if rr == r and kk == k:
                    out.append(bar)
                    bar = ""
                    out += USER_WARNINGS[(k + r) % len(USER_WARNINGS)]
            for rr, kk in plan["caught"]:  # type: ignore[union-attr]
                if rr == r and kk == k:
                    out.append(bar)
                    bar = ""
                    out.append(f"{py(t)} - lit.callbacks - WARNING - Retrying metrics upload (attempt 1/5) after "
                               "error: [Errno 104] Connection reset by peer")
                    out += CAUGHT_TRACEBACK
            for rr, kk in plan["retry"]:  # type: ignore[union-attr]
                if rr == r and kk == k:
                    out.append(bar)
                    bar = ""
                    name, msg = RETRY_LINES[(k + r) % len(RETRY_LINES)]
                    out.append(f"{py(t)} - {name} - WARNING - {msg}")
            epoch, s = divmod(k, per_epoch)
            pct = 100 * s // per_epoch
            bar += (f"\rEpoch {epoch}:  {pct:2d}%|{'█' * (pct // 10):<10}| {s}/{per_epoch} [{k:02d}:00<00:00,  "
                    f"0.10it/s, v_num=3, train_loss={2.6 - 0.01 * k:.3f}]")
            out.append(f"{py(t)} - lit.train - INFO - [rank {r}] step {k * 50} loss {2.6 - 0.01 * k:.4f}")
            if k == 0 and plan["ddp_warn"]:
                out += ddp_unused_warning(r, t + timedelta(milliseconds=40))
        out.append(bar)
        if r == 0:
            out.append(f"`Trainer.fit` stopped: `max_epochs={j.steps // per_epoch + 1}` reached.")
        out.append(f"{py(j.end)} - lit.train - INFO - [rank {r}] Training completed")
        out += _exit_noise(j, r, plan)
        files[f"lit-{j.job_id}-{r}.out"] = ("\n".join(out) + "\n").encode()
    return files


STYLES: dict[str, Callable[[Job], Files]] = {
    "pylog_per_rank": style_pylog_per_rank,
    "srun_torchrun": style_srun_torchrun,
    "hf_deepspeed": style_hf_deepspeed,
    "lightning": style_lightning,
}


def healthy_job(seed: int, style: str, noise: frozenset[str] | None = None) -> Files:
    """A healthy 8-rank job in ``style`` (a key of ``STYLES``), the same for the same seed; with the
    benign noise of the kinds in ``noise`` (default: all of ``NOISE``, each where the seed puts it)."""
    j = _job(seed * 7919 + sorted(STYLES).index(style))
    if noise is not None:
        j.noise = frozenset(noise)
    return STYLES[style](j)
