"""Seeded fault-injection generator of realistic dead distributed-training jobs.

This module is the ground truth the analyzer is measured against, so it imports nothing else from
``correlator`` and uses only the standard library. ``generate_job`` writes one job (its log files plus
``expected.toml``) and returns a :class:`Truth`; ``generate_suite`` writes a varied mix of jobs.

How a job is simulated
----------------------
Every event happens at a *true* time (seconds since the job started). Each host has a clock offset;
a printed stamp is ``true time + offset of the host that printed it``. Combined files interleave lines
in true-time order (the order the writes reached the file), never in printed-stamp order.

A failing job follows the cascade seen in real jobs:

* normal output first: torchrun warnings, NCCL init (``NCCL INFO`` ... ``Init COMPLETE``), step lines
  logged by every rank at the same step (clock anchors), tqdm ``\\r`` frames on rank 0, some ANSI colour;
* the root fault on one rank (a Python traceback, a fatal signal, an NCCL network error, or silence);
* the root's torchrun agent sends SIGTERM to the other local workers, logs
  ``failed (exitcode: N) local_rank: L (pid: P)`` and prints a ``ChildFailedError`` table;
* the ranks on the other nodes block in the next collective and their NCCL watchdogs fire after
  ``Timeout(ms)=600000`` (with the flight-recorder lines of newer PyTorch), some raise
  ``DistBackendError`` in Python, the others abort (SIGABRT);
* each node agent prints its own table whose "Root Cause (first observed failure)" is the first local
  failure of *that* node, so multi-node tables disagree and usually name collateral ranks;
* ``srun: error: host: task N: Exited with exit code 1`` lines, and sometimes a user ``scancel`` of a
  node stuck in NCCL abort (``slurmstepd: error: *** STEP ... CANCELLED AT ... ***``).

Who is silent after the root event
----------------------------------
The ranks that wait for the root in the collective it never joins were synchronised by the previous
collective: they enqueue the stuck one within 80 ms of each other, and their watchdogs poll every 100 ms
(``ran for 6000xx milliseconds``, under 100 ms over the timeout, as in real logs). Every way such a rank
ends (the watchdog's comm abort and ``terminate``, or a Python ``DistBackendError`` followed by interpreter
shutdown) takes longer than that window, so an agent's SIGTERM or an ``srun --kill-on-bad-exit`` kill
triggered by a sibling's exit never reaches a waiting rank before its own timeout is printed. A stuck node
hangs in abort *after* printing its timeouts. A process prints nothing after it died, and
``Truth.collateral_ranks`` is exactly the non-root ranks that print failure output (timeouts, tracebacks,
aborts, ``NCCL WARN``). The only non-root ranks that print nothing after the root event are:

* the other workers on the root's node when its torchrun agent sees the root exit: the agent SIGTERMs
  them (``Sending process PID closing signal SIGTERM``; the PID is in their NCCL INFO lines) long before
  their 600 s timeout, and they die without output (the same holds for a ``secondary`` failure's node);
* with ``srun --kill-on-bad-exit`` and a ``secondary`` failure (hand-made variants only), the ranks srun
  kills when that rank exits.

So in ``nccl-hang`` the culprit is the one rank missing from the SeqNum timeout pattern (its own node's
workers time out too, and only then does their agent SIGTERM it); with the 2.8 flight recorder a
``culprit_dump`` culprit also reports ``Last enqueued NCCL work`` below the stuck SeqNum.

Message texts are the ones the real software prints (PyTorch ``ProcessGroupNCCL.cpp`` for several
releases, torchelastic, NCCL, Slurm, Lightning, CPython); the sources are listed in
``sample_logs/README.md``. Stack-frame line numbers are representative of the release a profile models,
not pinned to one exact build.

CLI::

    python -m tools.synth suite OUT --jobs 200 --seed 1
    python -m tools.synth job OUT --fault storage-eio --ranks 32 --layout srun-combined
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Iterable, Mapping, Sequence

__all__ = ["FAULTS", "LAYOUTS", "PROFILES", "FaultKind", "Truth", "generate_job", "generate_suite", "main"]

LAYOUTS: tuple[str, ...] = ("per-rank", "srun-combined", "torchrun-combined", "torchelastic")


# --------------------------------------------------------------------------------------------------
# Fault registry


@dataclass(frozen=True, slots=True)
class FaultKind:
    """One kind of injected failure and what the analyzer should conclude from it."""

    name: str
    title: str
    verdict: str            # root_cause | job_level | no_failure | undetermined
    rule: str | None        # canonical rule id the analyzer should name (None: no rule matches the root)
    mechanism: str          # exception | signal | network | hang | job | none
    saves: str = ""         # checkpoint faults: "per-rank" (any rank writes) or "rank0" (only rank 0)
    signal: int = 0         # mechanism == "signal": the signal that ends the root process
    rule_without_agent: str | None = None  # rule when no torchrun agent reports the death (per-rank layout)
    min_nodes: int = 1


FAULTS: dict[str, FaultKind] = {
    "storage-eio": FaultKind(
        "storage-eio", "EIO while writing a checkpoint on Lustre", "root_cause",
        "storage.eio-on-checkpoint-save", "exception", saves="per-rank"),
    "storage-estale": FaultKind(
        "storage-estale", "ESTALE (stale file handle) while creating the checkpoint directory", "root_cause",
        "storage.estale-stale-file-handle", "exception", saves="per-rank"),
    "storage-exdev": FaultKind(
        "storage-exdev", "EXDEV: atomic rename of a checkpoint from /tmp to the parallel filesystem", "root_cause",
        "storage.exdev-cross-device-rename", "exception", saves="rank0"),
    "lightning-exdev": FaultKind(
        "lightning-exdev", "Lightning _atomic_save cannot move its fsspec temp file across devices", "root_cause",
        "checkpoint.lightning-fsspec-cross-device", "exception", saves="rank0"),
    "storage-enospc": FaultKind(
        "storage-enospc", "ENOSPC while writing a checkpoint shard", "root_cause",
        "storage.enospc-no-space-left", "exception", saves="per-rank"),
    "storage-edquot": FaultKind(
        "storage-edquot", "EDQUOT while writing a checkpoint shard", "root_cause",
        "storage.edquot-disk-quota-exceeded", "exception", saves="per-rank"),
    "stream-writer": FaultKind(
        "stream-writer", "PytorchStreamWriter failed writing a checkpoint record", "root_cause",
        "checkpoint.pytorch-stream-writer-failed", "exception", saves="per-rank"),
    "cuda-oom": FaultKind(
        "cuda-oom", "CUDA out of memory in the forward pass", "root_cause", "cuda.out-of-memory", "exception"),
    "segfault": FaultKind(
        "segfault", "Segmentation fault in a CUDA extension", "root_cause",
        "python.segmentation-fault", "signal", signal=11),
    "host-oom-kill": FaultKind(
        "host-oom-kill", "Worker SIGKILLed by the host OOM killer (no output of its own)", "root_cause",
        "launcher.worker-killed-by-signal", "signal", signal=9, rule_without_agent="slurm.oom-kill"),
    "nccl-ib-error": FaultKind(
        "nccl-ib-error", "InfiniBand completion error (retry counter exceeded) on one rank", "root_cause",
        "nccl.ib-completion-error", "network", min_nodes=2),
    "nccl-hang": FaultKind(
        "nccl-hang", "One rank silently stops; everyone else times out on the same SeqNum", "root_cause",
        None, "hang"),
    "gpu-ecc": FaultKind(
        "gpu-ecc", "Uncorrectable ECC error on one GPU", "root_cause", "gpu-hardware.uncorrectable-ecc", "exception"),
    "dataloader-killed": FaultKind(
        "dataloader-killed", "DataLoader worker killed by the OOM killer", "root_cause",
        "data.dataloader-worker-killed", "exception"),
    "import-error": FaultKind(
        "import-error", "Lazy import fails on one rank (module missing from its environment)", "root_cause",
        "python-env.import-error", "exception"),
    "slurm-time-limit": FaultKind(
        "slurm-time-limit", "Job reached its Slurm time limit", "job_level", "slurm.time-limit", "job"),
    "healthy": FaultKind("healthy", "Clean run that finishes", "no_failure", None, "none"),
}


@dataclass(frozen=True, slots=True)
class Truth:
    """What really happened in a generated job (also written to ``expected.toml``)."""

    verdict: str
    root_rank: int | None
    rule: str | None
    root_host: str | None
    collateral_ranks: tuple[int, ...]
    fault: str
    layout: str
    ranks: int
    skew_s: dict[str, float]
    description: str = ""
    root_time: str | None = None          # true UTC time of the root event (ISO-8601)
    root_local_rank: int | None = None
    files: tuple[str, ...] = ()


# --------------------------------------------------------------------------------------------------
# PyTorch release profiles: what the NCCL watchdog, the agent and the tracebacks print.


@dataclass(frozen=True, slots=True)
class _Profile:
    key: str
    torch: str
    python: str
    nccl: str
    cuda: str
    rank_prefix: bool          # PyTorch prefixes its C++ log lines and tracebacks with [rankN]:
    glog_stamp: bool           # [E1121 10:53:32.123456789 ProcessGroupNCCL.cpp:616] vs [E ProcessGroupNCCL.cpp:475]
    agent_glog: bool           # W0302 14:17:31.412000 139 .../api.py:897] vs [2026-...] torch.distributed...: [WARNING]
    monitor_interval: float    # torchrun --monitor-interval default
    abort_delay: tuple[float, float]   # watchdog timeout -> terminate (comm abort, flight-recorder dump)
    pg: str                    # how the process group is named in watchdog lines
    src: str                   # source prefix in "Exception raised from ... at <src>/ProcessGroupNCCL.cpp"
    ln: Mapping[str, int]
    agent_ln: Mapping[str, int]
    oom: str                   # "old" | "new"
    oom_cls: str
    fr: str                    # flight recorder: "" | "notfound" | "stack"


PROFILES: dict[str, _Profile] = {
    # torch 2.1-era: no [rankN]: prefix, undated glog tags, bracketed agent logging.
    "2.1": _Profile(
        "2.1", "2.1.2", "3.10", "2.18.1", "12.1", False, False, False, 5.0, (0.25, 0.9),
        "[Rank {r}]", "../torch/csrc/distributed/c10d",
        {"wd": 474, "some": 455, "avoid": 460, "check": 525, "dsync": 1203},
        {"errors": 346, "main": 806, "run": 797, "call": 134, "launch": 264},
        "old", "torch.cuda.OutOfMemoryError", ""),
    "2.3": _Profile(
        "2.3", "2.3.1", "3.10", "2.20.5", "12.1", True, False, False, 5.0, (0.3, 1.2),
        "[PG 0 Rank {r}]", "../torch/csrc/distributed/c10d",
        {"wd": 563, "timeout_at": 1537, "some": 577, "avoid": 583, "term": 1414, "check": 565,
         "watchdog": 1418, "remote": 1723},
        {"errors": 347, "main": 879, "run": 870, "call": 132, "launch": 263},
        "new", "torch.cuda.OutOfMemoryError", ""),
    "2.4": _Profile(
        "2.4", "2.4.1", "3.11", "2.20.5", "12.4", True, True, True, 0.1, (0.4, 1.5),
        "[PG 0 (default_pg) Rank {r}]", "../torch/csrc/distributed/c10d",
        {"wd": 607, "detected": 1664, "some": 621, "avoid": 627, "term": 1515, "check": 609,
         "watchdog": 1521, "remote": 1808},
        {"sigterm": 897, "failed": 869, "death": 719, "errors": 355, "main": 918, "run": 909,
         "call": 138, "launch": 269, "runpy": 0},
        "new", "torch.cuda.OutOfMemoryError", ""),
    "2.6": _Profile(
        "2.6", "2.6.0", "3.11", "2.21.5", "12.4", True, True, True, 0.1, (0.6, 1.2),
        "[PG ID 0 PG GUID 0(default_pg) Rank {r}]", "/pytorch/torch/csrc/distributed/c10d",
        {"wd": 632, "failure": 2271, "notfound": 670, "first": 2106, "dump": 1746, "prep": 1536,
         "some": 684, "avoid": 698, "term": 1899, "check": 635, "watchdog": 1905, "remote": 2009,
         "destroy": 1496},
        {"sigterm": 900, "failed": 874, "death": 719, "errors": 355, "main": 892, "run": 883,
         "call": 139, "launch": 270, "runpy": 0},
        "new", "torch.OutOfMemoryError", "notfound"),
    "2.8": _Profile(
        "2.8", "2.8.0", "3.12", "2.27.3", "12.8", True, True, True, 0.1, (59.5, 60.5),
        "[PG ID 0 PG GUID 0(default_pg) Rank {r}]", "/pytorch/torch/csrc/distributed/c10d",
        {"wd": 757, "failure": 2395, "stack": 801, "first": 2732, "dump": 1987, "observed": 1922,
         "prep": 1700, "broken": 1442, "some": 818, "avoid": 832, "term": 2197, "check": 760,
         "remote": 2261, "destroy": 1647},
        {"sigterm": 1014, "failed": 988, "death": 719, "errors": 367, "main": 1016, "run": 1007,
         "call": 191, "launch": 371, "runpy": 1020},
        "new", "torch.OutOfMemoryError", "stack"),
}

_WD_TAIL = (
    "This is most likely caused by incorrect usages of collectives, e.g., wrong sizes used across ranks, "
    "the order of collectives is not same for all ranks or the scheduled collective, for some reason, didn't "
    "run. Additionally, this can be caused by GIL deadlock or other reasons such as network errors or bugs in "
    "the communications library (e.g. NCCL), etc. ")
_SOME_NCCL = ("Some NCCL operations have failed or timed out. Due to the asynchronous nature of CUDA kernels, "
              "subsequent GPU operations might run on corrupted/incomplete data.")
_AVOID = "To avoid data inconsistency, we are taking the entire process down."
_REMOTE_ERR = "remote process exited or there was a network error"
_REMOTE_EXPL = "ncclRemoteError: A call failed possibly due to a network error or a remote process exiting prematurely."
_ELASTIC_DOC = "To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html"
_OMP = ("Setting OMP_NUM_THREADS environment variable for each process to be 1 in default, to avoid your system "
        "being overloaded, please further tune the variable for optimal performance in your application as needed. ")
_CUDA_ASYNC = [
    "CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below might be incorrect.",
    "For debugging consider passing CUDA_LAUNCH_BLOCKING=1",
    "Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.",
]
# Timing of the ranks that wait in the collective the root never joins. They were synchronised by the
# previous collective, so they enqueue the stuck one within _ENQUEUE_SPREAD_S of each other; their watchdogs
# poll every _WATCHDOG_POLL_S (ProcessGroupNCCL kWatchdogThreadSleepMillis = 100), so "ran for" is 600000 plus
# under 100 ms, as in real logs. Every way a waiting rank can end (abort, Python DistBackendError exit)
# takes longer than that window, so no agent SIGTERM or srun kill triggered by a sibling's exit can reach
# a waiting rank before its own timeout is printed (checked below and by tests/test_synth.py).
_ENQUEUE_SPREAD_S = 0.08
_WATCHDOG_POLL_S = 0.1
_PY_EXIT_S = (0.25, 0.8)      # DistBackendError traceback -> process exit (interpreter shutdown tears down the PG)
_COORD_CHECK_S = 1.0          # 2.8 heartbeat monitor polls the TCPStore dump key (TORCH_NCCL_COORD_CHECK_MILSEC)
assert min([_PY_EXIT_S[0]] + [pr.abort_delay[0] for pr in PROFILES.values()]) > _ENQUEUE_SPREAD_S + _WATCHDOG_POLL_S
_SIGNAMES = {6: "SIGABRT", 9: "SIGKILL", 11: "SIGSEGV", 15: "SIGTERM", 7: "SIGBUS"}
_STRSIGNAL = {6: "Aborted", 9: "Killed", 11: "Segmentation fault", 15: "Terminated", 7: "Bus error"}


# --------------------------------------------------------------------------------------------------
# Clock formatting (cached per second; stamps are UTC)


class _Clock:
    def __init__(self, base_epoch: int) -> None:
        self.base = base_epoch
        self._cache: dict[int, tuple[str, str, str]] = {}

    def _sec(self, s: int) -> tuple[str, str, str]:
        v = self._cache.get(s)
        if v is None:
            d = datetime.fromtimestamp(self.base + s, tz=timezone.utc)
            v = (d.strftime("%Y-%m-%d"), d.strftime("%H:%M:%S"), d.strftime("%m%d"))
            self._cache[s] = v
        return v

    @staticmethod
    def _split(t: float) -> tuple[int, float]:
        s = math.floor(t)
        return s, t - s

    def log(self, t: float) -> str:          # 2026-03-02 14:07:31,412
        s, f = self._split(t)
        d, hms, _ = self._sec(s)
        return f"{d} {hms},{min(int(f * 1000), 999):03d}"

    def glog(self, t: float, level: str = "E") -> str:   # E0302 14:07:31.123456789
        s, f = self._split(t)
        _, hms, md = self._sec(s)
        return f"{level}{md} {hms}.{min(int(f * 1e9), 999999999):09d}"

    def agent(self, t: float, level: str = "W") -> str:  # W0302 14:07:31.412000
        s, f = self._split(t)
        _, hms, md = self._sec(s)
        return f"{level}{md} {hms}.{min(int(f * 1000), 999):03d}000"

    def slurm(self, t: float) -> str:        # 2026-03-02T14:07:31
        d, hms, _ = self._sec(math.floor(t))
        return f"{d}T{hms}"

    def table(self, s: int) -> str:          # 2026-03-02_14:07:31
        d, hms, _ = self._sec(s)
        return f"{d}_{hms}"

    def iso(self, t: float) -> str:
        s, f = self._split(t)
        d, hms, _ = self._sec(s)
        return f"{d}T{hms}.{min(int(f * 1000), 999):03d}Z"

    def epoch(self, t: float) -> int:
        return self.base + math.floor(t)


# --------------------------------------------------------------------------------------------------
# Small helpers


def _ranges(nums: Iterable[int]) -> str:
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


def _interval(sec: int) -> str:
    """tqdm's format_interval: ``MM:SS`` or ``H:MM:SS``."""
    m, s = divmod(sec, 60)
    h, m = divmod(m, 60)
    return f"{h:d}:{m:02d}:{s:02d}" if h else f"{m:02d}:{s:02d}"


def _toml_str(s: str) -> str:
    out = s.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\t", "\\t")
    return f'"{out}"'


def _fmt_gib(x: float) -> str:
    return f"{x:.2f} GiB"


def _fmt_mem(mib: float) -> str:
    return f"{mib / 1024:.2f} GiB" if mib >= 1024 else f"{mib:.2f} MiB"


@dataclass(slots=True)
class _Rec:
    t: float
    seq: int
    kind: str      # log (user/NCCL output) | glog (PyTorch C++ log line) | tb (uncaught traceback) | raw
    stream: str    # o | e
    text: str
    lead: str = "" # text glued in front (tqdm frames without newline), placed before the in-process prefix


@dataclass(slots=True)
class _Worker:
    rank: int
    node: int
    local: int
    pid: int
    exit_t: float | None = None     # when the process ended by itself (None: never / killed by agent)
    exit_code: int | None = None    # positive exit code, or -signal
    error_ts: float | None = None   # true time of the exception (error file timestamp) when @record wrote one
    error_json: str | None = None
    state: str = "ok"               # ok | root | collateral | silent | stuck


@dataclass(slots=True)
class _Opts:
    record: bool = False            # entry point decorated with torchelastic @record (error.json files)
    framework: str = "plain"        # plain | lightning
    steplog: str = "logging"        # logging | deepspeed
    ansi: bool = False
    tqdm: bool = True
    stuck_node: bool = False        # a non-root node hangs in NCCL abort until the user scancels the job
    per_rank_names: str = "slurm"   # slurm (slurm-<job>_<rank>.out) | rank (rank-<rank>.out)
    eio_variant: str = "close"      # close | move (EXDEV fallback copy fails with EIO)
    ecc_variant: str = "python"     # python | watchdog
    culprit_dump: bool = False      # hang: the silent rank's heartbeat monitor still prints its dump line
    secondary: bool = False         # a second, later primary failure on another host (same storage fault)
    secondary_delay: float = 1.5
    secondary_rank: int = -1        # pin the secondary failure to this rank (-1: a rank on a host whose clock is behind)
    fail_after_logs: int = 0        # number of logged steps before the fault (0: derived from lines_per_rank)
    scancel_delay: float = 900.0
    fqdn: str = ""                  # domain appended to host names in ChildFailedError tables
    log_exception: bool = False     # the script logs the exception (stamped ERROR line + traceback) before dying
    kill_on_bad_exit: bool = False  # srun --kill-on-bad-exit=1; the root process hangs at exit after its traceback,
                                    # so the first task to exit is a collateral one and srun then cancels the step


# --------------------------------------------------------------------------------------------------
# The job simulator


class _Job:
    def __init__(self, *, fault: FaultKind, ranks: int, layout: str, seed: int, gpn: int,
                 max_skew_s: float, drop: float, lines_per_rank: int, rng: random.Random,
                 root_rank: int | None, host_prefix: str | None, job_id: int | None,
                 torch_version: str | None, skew: Mapping[str, float] | None,
                 variant: Mapping[str, object] | None) -> None:
        self.rng = rng
        self.fault = fault
        self.ranks = ranks
        self.layout = layout
        self.gpn = gpn
        self.drop = drop
        self.lpr = lines_per_rank
        self.nodes = -(-ranks // gpn)
        self.p = PROFILES[torch_version] if torch_version else PROFILES[rng.choice(sorted(PROFILES))]
        self.job_id = job_id if job_id is not None else rng.randrange(100000, 9999999)
        self.clock = _Clock(1772456400 + rng.randrange(0, 120) * 86400 + rng.randrange(0, 80000))
        prefix, width = (host_prefix, 2) if host_prefix else rng.choice(
            [("gpu-a", 2), ("gpu-b", 2), ("gpu-c", 2), ("node", 3), ("hgx-", 3), ("dgx", 2)])
        width = max(width, len(str(self.nodes)))
        self.hosts = [f"{prefix}{i + 1:0{width}d}" for i in range(self.nodes)]
        net = rng.randrange(1, 200)
        self.ips = [f"10.{net}.{i // 250}.{i % 250 + 10}" for i in range(self.nodes)]
        if skew is not None:
            unknown = sorted(set(skew) - set(self.hosts))
            if unknown:
                raise ValueError(f"skew names unknown hosts {unknown}; hosts are {self.hosts}")
            self.offset = [float(skew.get(h, 0.0)) for h in self.hosts]
        elif max_skew_s > 0:
            self.offset = [round(rng.uniform(-max_skew_s, max_skew_s), 6) for _ in self.hosts]
        else:
            self.offset = [0.0] * self.nodes
        self.o = self._options(variant or {})
        # processes
        self.agent_pid = [rng.randrange(2000, 4_000_000) for _ in range(self.nodes)]
        self.workers = []
        for r in range(ranks):
            n, lr = divmod(r, gpn)
            self.workers.append(_Worker(r, n, lr, self.agent_pid[n] + 9 + lr))
        self.local_count = [sum(1 for w in self.workers if w.node == n) for n in range(self.nodes)]
        # output
        self.recs: list[list[_Rec]] = [[] for _ in range(ranks)]
        self.agent: list[list[tuple[float, int, str]]] = [[] for _ in range(self.nodes)]
        self.nodeslurm: list[tuple[float, int, int, str]] = []   # slurmstepd lines written through a node's task
        self.batch: list[tuple[float, int, str]] = []
        self._seq = 0
        self.collateral: set[int] = set()
        # environment
        self._env()
        self.root = self._pick_root(root_rank)
        self.description = ""
        self.root_time: float | None = None
        self._desc_args: tuple | None = None
        self.ib_peer: int | None = None

    # ---------------------------------------------------------------- setup
    def _options(self, v: Mapping[str, object]) -> _Opts:
        rng = self.rng
        o = _Opts(
            record=rng.random() < 0.5,
            framework=rng.choice(["plain", "lightning"]),
            steplog=rng.choice(["logging", "logging", "deepspeed"]),
            ansi=rng.random() < 0.3,
            tqdm=rng.random() < 0.7,
            stuck_node=self.nodes >= 3 and rng.random() < 0.35,
            per_rank_names=rng.choice(["slurm", "rank"]),
            eio_variant="move" if rng.random() < 0.25 else "close",
            ecc_variant=rng.choice(["python", "watchdog"]),
            culprit_dump=self.p.key == "2.8" and rng.random() < 0.5,
            fqdn=rng.choice(["", "", ".cluster.local", ".hpc.internal"]),
            log_exception=rng.random() < 0.35,
            kill_on_bad_exit=self.fault.mechanism == "exception" and rng.random() < 0.3,
        )
        if self.p.key == "2.1":
            o.ecc_variant = "python"
        for k, val in v.items():
            if not hasattr(o, k):
                raise ValueError(f"unknown variant option {k!r}")
            setattr(o, k, val)
        return o

    def _env(self) -> None:
        rng, py = self.rng, self.p.python
        user = rng.choice(["jdoe", "akumar", "mchen", "lgarcia", "spark", "tnguyen"])
        proj = rng.choice(["llm", "vision", "climate", "bio", "speech"])
        repo = rng.choice(["gpt-pretrain", "llama-ft", "vit-pretrain", "nanotron-exp", "mm-train"])
        kind = rng.choice(["conda", "venv", "system"])
        if kind == "conda":
            self.site = f"/opt/conda/lib/python{py}/site-packages"
            self.stdlib = f"/opt/conda/lib/python{py}"
            self.binary = f"/opt/conda/bin/python{py}"
            self.torchrun = "/opt/conda/bin/torchrun"
        elif kind == "venv":
            root = f"/lustre/fs1/{proj}/envs/{repo}"
            self.site = f"{root}/lib/python{py}/site-packages"
            self.stdlib = f"/usr/lib/python{py}"
            self.binary = f"{root}/bin/python"
            self.torchrun = f"{root}/bin/torchrun"
        else:
            self.site = f"/usr/local/lib/python{py}/dist-packages"
            self.stdlib = f"/usr/lib/python{py}"
            self.binary = "/usr/bin/python3"
            self.torchrun = "/usr/local/bin/torchrun"
        self.agent_path = rng.choice(["abs", "site", "short"])
        self.code = rng.choice([f"/lustre/fs1/{proj}/{user}/{repo}", f"/home/{user}/{repo}", f"/workspace/{repo}"])
        self.script = rng.choice(["train.py", "pretrain.py", "main.py"])
        self.run = f"{repo}-{rng.choice(['a', 'b', 'c'])}{rng.randrange(1, 40)}"
        self.ckpt = f"/lustre/fs1/{proj}/{user}/ckpt/{self.run}"
        self.tmpdir = f"/tmp/torchelastic_{''.join(rng.choice('abcdefghijklmnopqrstuvwxyz0123456789_') for _ in range(8))}"
        self.run_id = str(self.job_id)
        self.log_run_dir = f"{self.run_id}_{''.join(rng.choice('abcdefghijklmnopqrstuvwxyz0123456789_') for _ in range(8))}"
        # training dynamics
        self.step_dt = round(rng.uniform(0.6, 2.4), 3)
        self.log_every = rng.choice([10, 20, 25, 50])
        self.ckpt_every = self.log_every * rng.choice([20, 40, 50])
        self.seq_per_step = rng.choice([1, 2, 3, 4])
        self.seq0 = rng.randrange(2, 40)
        self.step0 = self.ckpt_every * rng.randrange(3, 30)        # resumed from a checkpoint
        self.t_train = rng.uniform(45.0, 110.0)
        self.loss0 = rng.uniform(1.8, 3.2)
        self.lr = rng.choice([3e-4, 2e-4, 1.5e-4, 6e-4])
        self.gpu_mem = rng.choice([79.10, 79.15, 39.39, 93.00])
        self.numel = rng.choice([26214400, 13107200, 6553600, 52428800])

    def _pick_root(self, root_rank: int | None) -> int | None:
        f = self.fault
        if f.mechanism in ("job", "none"):
            return None
        if root_rank is not None:
            if not 0 <= root_rank < self.ranks:
                raise ValueError(f"root_rank {root_rank} outside 0..{self.ranks - 1}")
            return root_rank
        if f.saves == "rank0":
            return 0
        if f.name == "import-error":
            return 0 if self.rng.random() < 0.5 else self.rng.randrange(self.ranks)
        return self.rng.randrange(self.ranks)

    # ---------------------------------------------------------------- emit helpers
    def _next(self) -> int:
        self._seq += 1
        return self._seq

    def w(self, r: int, t: float, text: str, kind: str = "log", stream: str = "e", lead: str = "") -> None:
        self.recs[r].append(_Rec(t, self._next(), kind, stream, text, lead))

    def wl(self, r: int, t: float, lines: Sequence[str], kind: str, stream: str = "e") -> None:
        for line in lines:
            self.recs[r].append(_Rec(t, self._next(), kind, stream, line))

    def a(self, n: int, t: float, text: str) -> None:
        self.agent[n].append((t, self._next(), text))

    def al(self, n: int, t: float, lines: Sequence[str]) -> None:
        for line in lines:
            self.agent[n].append((t, self._next(), line))

    def b(self, t: float, text: str) -> None:
        self.batch.append((t, self._next(), text))

    def s(self, n: int, t: float, text: str) -> None:
        self.nodeslurm.append((t, self._next(), n, text))

    def host_t(self, n: int, t: float) -> float:
        return t + self.offset[n]

    def ts_log(self, n: int, t: float) -> str:
        return self.clock.log(self.host_t(n, t))

    def glog(self, n: int, t: float, src: str, line: int, level: str = "E") -> str:
        if self.p.glog_stamp:
            return f"[{self.clock.glog(self.host_t(n, t), level)} {src}:{line}]"
        return f"[{level} {src}:{line}]"

    def agent_line(self, n: int, t: float, level: str, module: str, line_no: int, msg: str) -> str:
        """A torchelastic agent log line in the profile's format."""
        if self.p.agent_glog:
            rel = module.replace(".", "/") + ".py"
            if self.agent_path == "abs":
                path = f"{self.site}/{rel}"
            elif self.agent_path == "site":
                path = f"{self.site.rsplit('/', 1)[-1]}/{rel}"
            else:
                path = rel
            return f"{self.clock.agent(self.host_t(n, t), level[0])} {self.agent_pid[n]} {path}:{line_no}] {msg}"
        return f"[{self.clock.log(self.host_t(n, t))}] {module}: [{level}] {msg}"

    def pg(self, r: int) -> str:
        return self.p.pg.format(r=r)

    def work(self, seq: int, op: str, numel_in: int, numel_out: int) -> str:
        return (f"WorkNCCL(SeqNum={seq}, OpType={op}, NumelIn={numel_in}, NumelOut={numel_out}, "
                f"Timeout(ms)=600000)")

    # ---------------------------------------------------------------- normal output
    def seq_of_step(self, step: int) -> int:
        return self.seq0 + (step - self.step0) * self.seq_per_step

    def step_time(self, step: int) -> float:
        return self.t_train + (step - self.step0) * self.step_dt

    def loss_at(self, step: int, r: int) -> float:
        base = self.loss0 * (1.0 - 0.25 * (1 - math.exp(-(step - self.step0) / 4000.0)))
        return base + (((r * 7919 + step * 104729) % 1000) - 500) / 40000.0

    def normal(self, last_step: int, silent_after: Mapping[int, int] | None = None) -> None:
        """Startup lines and step logs up to ``last_step`` (per-rank cut-offs in ``silent_after``)."""
        rng, p = self.rng, self.p
        silent_after = silent_after or {}
        init_t = [rng.uniform(8.0, 20.0) for _ in range(self.nodes)]
        comm = f"0x{rng.randrange(1 << 60, 1 << 63):x}"
        bus = ["18000", "2a000", "3a000", "5d000", "9a000", "ab000", "ba000", "db000",
               "1b000", "2b000", "3b000", "5e000", "9b000", "ac000", "bb000", "dc000"]
        nccl_major = tuple(int(x) for x in p.nccl.split(".")[:2])
        for wk in self.workers:
            r, n, lr = wk.rank, wk.node, wk.local
            host, pid = self.hosts[n], wk.pid
            t = init_t[n] + lr * 0.003 + rng.uniform(0, 0.02)
            dev = lr
            pre = f"{host}:{pid}:{pid} [{dev}] NCCL INFO "
            self.w(r, t, f"{pre}Bootstrap : Using ib0:{self.ips[n]}<0>", stream="o")
            if nccl_major < (2, 20):
                self.w(r, t, f"{pre}NET/Plugin : No plugin found (libnccl-net.so), using internal implementation", stream="o")
            self.w(r, t, f"{pre}cudaDriverVersion 12040", stream="o")
            if r == 0:
                self.w(r, t + 0.001, f"NCCL version {p.nccl}+cuda{p.cuda}", stream="o")
            tid = pid + 61 + lr
            pre2 = f"{host}:{pid}:{tid} [{dev}] NCCL INFO "
            ib = " ".join(f"[{i}]mlx5_{i}:1/IB" for i in range(4))
            self.w(r, t + 0.2, f"{pre2}NET/IB : Using {ib} ; OOB ib0:{self.ips[n]}<0>", stream="o")
            self.w(r, t + 0.21, f"{pre2}Using network IB", stream="o")
            addr = f"0x{rng.randrange(0x55d000000000, 0x55dfffffffff):x}"
            b = bus[dev % len(bus)]
            if nccl_major >= (2, 22):
                head = f"ncclCommInitRankConfig comm {addr}"
            elif nccl_major >= (2, 20):
                head = f"ncclCommInitRank comm {addr}"
            else:
                head = f"comm {addr}"
            self.w(r, t + 1.1, f"{pre2}Connected all trees", stream="o")
            self.w(r, t + 1.3, f"{pre2}{head} rank {r} nranks {self.ranks} cudaDev {dev} nvmlDev {dev} busId {b} "
                                f"commId {comm} - Init COMPLETE", stream="o")
        # step lines: every rank logs the same steps (synchronised by the step's collectives)
        first = self.step0 + self.log_every
        steps = list(range(first, last_step + 1, self.log_every))
        ansi = self.o.ansi
        for step in steps:
            t0 = self.step_time(step)
            lr_v = self.lr * min(1.0, step / 2000.0)
            gn = 0.6 + ((step * 31) % 97) / 200.0
            tps = 38000 + (step * 13) % 4000
            for wk in self.workers:
                r, n = wk.rank, wk.node
                if r in silent_after and step > silent_after[r]:
                    continue
                t = t0 + 0.002 + ((r * 2654435761) % 997) / 40000.0
                loss = self.loss_at(step, r)
                if self.o.steplog == "deepspeed":
                    body = f"[Rank {r}] step={step}, skipped=0, lr=[{lr_v:.6e}], mom=[(0.9, 0.95)]"
                    if rng.random() < self.drop:
                        self.w(r, t, f"step={step} loss={loss:.4f} grad_norm={gn:.3f}", stream="o")
                    else:
                        self.w(r, t, f"[{self.ts_log(n, t)}] [INFO] [logging.py:96:log_dist] {body}")
                else:
                    body = (f"step {step} | loss {loss:.4f} | lr {lr_v:.3e} | grad_norm {gn:.3f} | "
                            f"tokens/s {tps}")
                    if rng.random() < self.drop:
                        self.w(r, t, f"[rank {r}] {body}", stream="o")
                    elif ansi:
                        self.w(r, t, f"\x1b[32m{self.ts_log(n, t)}\x1b[0m - \x1b[34mtrain\x1b[0m - "
                                     f"\x1b[1mINFO\x1b[0m - [rank {r}] {body}")
                    else:
                        self.w(r, t, f"{self.ts_log(n, t)} - train - INFO - [rank {r}] {body}")
            if self.o.tqdm and step <= silent_after.get(0, step):
                self.w(0, t0 + 0.05, self.tqdm_frames(step), stream="e")
        self.logged_steps = steps

    def tqdm_frames(self, step: int) -> str:
        total = self.ckpt_every * 10
        frames = []
        for k in range(4):
            s = step - 3 + k
            done = s % total
            pct = int(100 * done / total)
            fill = pct // 10
            bar = "\u2588" * fill + ("\u258f" if pct % 10 else "") + " " * (10 - fill - (1 if pct % 10 else 0))
            el = int(done * self.step_dt)
            rem = int((total - done) * self.step_dt)
            frames.append(f"Epoch {s // total}: {pct:3d}%|{bar}| {done}/{total} "
                          f"[{_interval(el)}<{_interval(rem)}, {self.step_dt:5.2f}s/it, v_num=0, "
                          f"train_loss={self.loss_at(s, 0):.3f}]")
        return "\r" + "\r".join(frames)

    # ---------------------------------------------------------------- tracebacks
    def frames(self, items: Sequence[tuple[str, int, str, str]]) -> list[str]:
        out: list[str] = []
        for path, line, func, code in items:
            out.append(f'  File "{path}", line {line}, in {func}')
            if code:
                out.append(f"    {code}")
        return out

    def top_frames(self, main_code: str) -> list[tuple[str, int, str, str]]:
        items = [(f"{self.code}/{self.script}", 412, "<module>", "main()")]
        if self.o.record:
            items.append((f"{self.site}/torch/distributed/elastic/multiprocessing/errors/__init__.py",
                          self.p.agent_ln["errors"], "wrapper", "return f(*args, **kwargs)"))
        items.append((f"{self.code}/{self.script}", 398, "main", main_code))
        return items

    def lightning_frames(self, hook: str) -> list[tuple[str, int, str, str]]:
        s = f"{self.site}/lightning/pytorch"
        items = self.top_frames("trainer.fit(model, datamodule=dm, ckpt_path=cfg.resume)")
        items += [
            (f"{s}/trainer/trainer.py", 561, "fit", "call._call_and_handle_interrupt("),
            (f"{s}/trainer/call.py", 48, "_call_and_handle_interrupt", "return trainer_fn(*args, **kwargs)"),
            (f"{s}/trainer/trainer.py", 599, "_fit_impl", "self._run(model, ckpt_path=ckpt_path)"),
            (f"{s}/trainer/trainer.py", 1012, "_run", "results = self._run_stage()"),
            (f"{s}/trainer/trainer.py", 1056, "_run_stage", "self.fit_loop.run()"),
        ]
        if hook == "epoch_end":
            items += [
                (f"{s}/loops/fit_loop.py", 217, "run", "self.on_advance_end()"),
                (f"{s}/loops/fit_loop.py", 468, "on_advance_end",
                 'call._call_callback_hooks(trainer, "on_train_epoch_end", monitoring_callbacks=False)'),
                (f"{s}/trainer/call.py", 227, "_call_callback_hooks", "fn(trainer, trainer.lightning_module, *args, **kwargs)"),
                (f"{s}/callbacks/model_checkpoint.py", 323, "on_train_epoch_end",
                 "self._save_last_checkpoint(trainer, monitor_candidates)"),
                (f"{s}/callbacks/model_checkpoint.py", 696, "_save_last_checkpoint", "self._save_checkpoint(trainer, filepath)"),
                (f"{s}/callbacks/model_checkpoint.py", 390, "_save_checkpoint",
                 "trainer.save_checkpoint(filepath, self.save_weights_only)"),
                (f"{s}/trainer/trainer.py", 1365, "save_checkpoint",
                 "self.strategy.save_checkpoint(checkpoint, filepath, storage_options=storage_options)"),
                (f"{s}/strategies/strategy.py", 490, "save_checkpoint",
                 "self.checkpoint_io.save_checkpoint(checkpoint, filepath, storage_options=storage_options)"),
                (f"{self.site}/lightning/fabric/plugins/io/torch_io.py", 58, "save_checkpoint", "_atomic_save(checkpoint, path)"),
            ]
        else:  # a per-rank state callback on_train_batch_end
            items += [
                (f"{s}/loops/fit_loop.py", 216, "run", "self.advance()"),
                (f"{s}/loops/fit_loop.py", 455, "advance", "self.epoch_loop.run(self._data_fetcher)"),
                (f"{s}/loops/training_epoch_loop.py", 150, "run", "self.advance(data_fetcher)"),
                (f"{s}/loops/training_epoch_loop.py", 320, "advance",
                 'call._call_callback_hooks(trainer, "on_train_batch_end", batch_output, batch, batch_idx)'),
                (f"{s}/trainer/call.py", 227, "_call_callback_hooks", "fn(trainer, trainer.lightning_module, *args, **kwargs)"),
                (f"{self.code}/callbacks.py", 88, "on_train_batch_end", "self._save_rank_state(trainer)"),
                (f"{self.code}/callbacks.py", 121, "_save_rank_state", "_atomic_save(state, path)"),
            ]
        return items

    def tb(self, r: int, t: float, blocks: Sequence[Sequence[str]], joins: Sequence[str] = ()) -> None:
        """Print an uncaught (possibly chained) traceback on rank ``r``."""
        lines: list[str] = []
        for i, blk in enumerate(blocks):
            if i:
                lines += ["", joins[i - 1], ""]
            lines += ["Traceback (most recent call last):", *blk]
        self.wl(r, t, lines, "tb")

    # ---------------------------------------------------------------- the root faults
    def ckpt_path(self, step: int, r: int, kind: str = "shard") -> str:
        if kind == "shard":
            return f"{self.ckpt}/step-{step:06d}/rank-{r:05d}.pt"
        return f"{self.ckpt}/epoch={step // (self.ckpt_every * 10)}-step={step}.ckpt"

    def root_exception(self, r: int, t: float, step: int) -> tuple[list[list[str]], list[str], str]:
        """Traceback blocks, the joins between them, and a one-line summary, for exception faults."""
        f, rng, site = self.fault.name, self.rng, self.site
        stdlib = self.stdlib
        joins: list[str] = []
        if f in ("storage-eio", "storage-enospc", "storage-edquot", "stream-writer", "storage-estale"):
            path = self.ckpt_path(step, r)
            tmp = f"/tmp/tmp{''.join(rng.choice('abcdefghijklmnopqrstuvwxyz0123456789_') for _ in range(8))}"
            if self.o.framework == "lightning":
                top = self.frames(self.lightning_frames("batch_end"))
            else:
                top = self.frames(self.top_frames("train(cfg, model, optimizer, train_loader)") + [
                    (f"{self.code}/{self.script}", 301, "train", "save_checkpoint(cfg, model, optimizer, step)")])
            cio = f"{site}/lightning/fabric/utilities/cloud_io.py"
            if f == "storage-estale":
                d = path.rsplit("/", 1)[0]
                if self.o.framework == "lightning":
                    blk = top[:-2] + self.frames([(f"{self.code}/callbacks.py", 116, "_save_rank_state",
                                                   "os.makedirs(os.path.dirname(path), exist_ok=True)")])
                else:
                    blk = top + self.frames([(f"{self.code}/utils/checkpoint.py", 41, "save_checkpoint",
                                             "os.makedirs(ckpt_dir, exist_ok=True)")])
                blk += self.frames([(f"{stdlib}/os.py", 225, "makedirs", "mkdir(name, mode)")])
                blk.append(f"OSError: [Errno 116] Stale file handle: '{d}'")
                return [blk], joins, "OSError: [Errno 116] Stale file handle"
            if self.o.framework == "lightning":
                save = top + self.frames([(cio, 92, "_atomic_save", 'with fs.transaction, fs.open(urlpath, "wb") as f:')])
            else:
                save = top + self.frames([(f"{self.code}/utils/checkpoint.py", 63, "save_checkpoint",
                                           "torch.save(state, path)")])
            if f == "stream-writer":
                if self.o.framework == "lightning":
                    save = top + self.frames([(cio, 93, "_atomic_save", "torch.save(checkpoint, f)")])
                b1 = self.frames([(f"{site}/torch/serialization.py", 965, "save",
                                   "_save(obj, opened_zipfile, pickle_module, pickle_protocol, _disable_byteorder_record)"),
                                  (f"{site}/torch/serialization.py", 1253, "_save",
                                   "zip_file.write_record(name, storage, num_bytes)")])
                rec = rng.randrange(3, 400)
                b1.append(f"RuntimeError: [enforce fail at inline_container.cc:778] . PytorchStreamWriter failed "
                          f"writing file data/{rec}: file write failed")
                b2 = save + self.frames([(f"{site}/torch/serialization.py", 964, "save",
                                          "with _open_zipfile_writer(f) as opened_zipfile:"),
                                         (f"{site}/torch/serialization.py", 798, "__exit__",
                                          "self.file_like.write_end_of_file()")])
                pos = rng.randrange(1 << 30, 1 << 34)
                b2.append(f"RuntimeError: [enforce fail at inline_container.cc:603] . unexpected pos {pos} vs {pos - 112}")
                joins = ["During handling of the above exception, another exception occurred:"]
                return [b1, b2], joins, f"PytorchStreamWriter failed writing file data/{rec}: file write failed"
            if f in ("storage-enospc", "storage-edquot"):
                msg = ("OSError: [Errno 28] No space left on device" if f == "storage-enospc"
                       else "OSError: [Errno 122] Disk quota exceeded")
                if self.o.framework == "lightning":
                    blk = top + self.frames([(cio, 93, "_atomic_save", "f.write(bytesbuffer.getvalue())")])
                else:
                    blk = save + self.frames([(f"{site}/torch/serialization.py", 965, "save",
                                               "_save(obj, opened_zipfile, pickle_module, pickle_protocol, _disable_byteorder_record)"),
                                              (f"{site}/torch/serialization.py", 1253, "_save",
                                               "zip_file.write_record(name, storage, num_bytes)")])
                blk.append(msg)
                return [blk], joins, msg
            # storage-eio
            if self.o.framework == "lightning" and self.o.eio_variant == "move":
                b1 = self.frames([(f"{stdlib}/shutil.py", 816, "move", "os.rename(src, real_dst)")])
                b1.append(f"OSError: [Errno 18] Invalid cross-device link: '{tmp}' -> '{path}'")
                b2 = save + self.frames([
                    (f"{site}/fsspec/transaction.py", 27, "__exit__", "self.complete(commit=exc_type is None)"),
                    (f"{site}/fsspec/transaction.py", 40, "complete", "f.commit()"),
                    (f"{site}/fsspec/implementations/local.py", 441, "commit", "shutil.move(self.temp, self.path)"),
                    (f"{stdlib}/shutil.py", 836, "move", "copy_function(src, real_dst)"),
                    (f"{stdlib}/shutil.py", 434, "copy2", "copyfile(src, dst, follow_symlinks=follow_symlinks)"),
                    (f"{stdlib}/shutil.py", 267, "copyfile", "_fastcopy_sendfile(fsrc, fdst)"),
                    (f"{stdlib}/shutil.py", 156, "_fastcopy_sendfile", "raise err from None"),
                    (f"{stdlib}/shutil.py", 142, "_fastcopy_sendfile", "sent = os.sendfile(outfd, infd, offset, blocksize)"),
                ])
                b2.append(f"OSError: [Errno 5] Input/output error: '{tmp}' -> '{path}'")
                return [b1, b2], ["During handling of the above exception, another exception occurred:"], \
                    "OSError: [Errno 5] Input/output error"
            if self.o.framework == "lightning":
                blk = save + self.frames([
                    (f"{site}/fsspec/implementations/local.py", 450, "__exit__", "self.close()"),
                    (f"{site}/fsspec/implementations/local.py", 437, "close", "return self.f.close()")])
            else:
                blk = save + self.frames([
                    (f"{site}/torch/serialization.py", 963, "save", "with _open_file_like(f, \"wb\") as opened_file:"),
                    (f"{site}/torch/serialization.py", 659, "__exit__", "self.file_like.close()")])
            blk.append("OSError: [Errno 5] Input/output error")
            return [blk], joins, "OSError: [Errno 5] Input/output error"
        if f == "storage-exdev":
            path = self.ckpt_path(step, r, "last")
            tmp = f"/tmp/tmp{''.join(rng.choice('abcdefghijklmnopqrstuvwxyz0123456789_') for _ in range(8))}.pt"
            blk = self.frames(self.top_frames("train(cfg, model, optimizer, train_loader)") + [
                (f"{self.code}/{self.script}", 301, "train", "save_checkpoint(cfg, model, optimizer, step)"),
                (f"{self.code}/utils/checkpoint.py", 71, "save_checkpoint", "os.replace(tmp_path, path)")])
            blk.append(f"OSError: [Errno 18] Invalid cross-device link: '{tmp}' -> '{path}'")
            return [blk], joins, "OSError: [Errno 18] Invalid cross-device link"
        if f == "lightning-exdev":
            path = self.ckpt_path(step, r, "last")
            tmp = f"/tmp/tmp{''.join(rng.choice('abcdefghijklmnopqrstuvwxyz0123456789_') for _ in range(8))}"
            b1 = self.frames([(f"{stdlib}/shutil.py", 816, "move", "os.rename(src, real_dst)")])
            b1.append(f"OSError: [Errno 18] Invalid cross-device link: '{tmp}' -> '{path}'")
            cio = f"{site}/lightning/fabric/utilities/cloud_io.py"
            b2 = self.frames([
                (cio, 94, "_atomic_save", 'with fs.open(urlpath, "wb") as f:'),
                (f"{site}/fsspec/transaction.py", 27, "__exit__", "self.complete(commit=exc_type is None)"),
                (f"{site}/fsspec/transaction.py", 40, "complete", "f.commit()"),
                (f"{site}/fsspec/implementations/local.py", 441, "commit", "shutil.move(self.temp, self.path)"),
                (f"{stdlib}/shutil.py", 836, "move", "copy_function(src, real_dst)"),
                (f"{stdlib}/shutil.py", 435, "copy2", "copystat(src, dst, follow_symlinks=follow_symlinks)"),
                (f"{stdlib}/shutil.py", 374, "copystat", "lookup(\"chmod\")(dst, mode, follow_symlinks=follow)"),
            ])
            b2.append(f"PermissionError: [Errno 1] Operation not permitted: '{path}'")
            b3 = self.frames(self.lightning_frames("epoch_end") + [(cio, 104, "_atomic_save", "raise RuntimeError(")])
            b3.append('RuntimeError: Upgrade fsspec to enable cross-device local checkpoints: pip install "fsspec[http]>=2025.5.0"')
            joins = ["During handling of the above exception, another exception occurred:",
                     "The above exception was the direct cause of the following exception:"]
            return [b1, b2, b3], joins, "RuntimeError: Upgrade fsspec to enable cross-device local checkpoints"
        if f == "cuda-oom":
            wk = self.workers[r]
            blk = self.frames(self.top_frames("train(cfg, model, optimizer, train_loader)") + [
                (f"{self.code}/{self.script}", 268, "train", "loss = model(input_ids, labels=labels)"),
                (f"{site}/torch/nn/modules/module.py", 1736, "_wrapped_call_impl", "return self._call_impl(*args, **kwargs)"),
                (f"{site}/torch/nn/modules/module.py", 1747, "_call_impl", "return forward_call(*args, **kwargs)"),
                (f"{site}/torch/nn/parallel/distributed.py", 1643, "forward",
                 "else self._run_ddp_forward(*inputs, **kwargs)"),
                (f"{site}/torch/nn/parallel/distributed.py", 1459, "_run_ddp_forward",
                 "return self.module(*inputs, **kwargs)  # type: ignore[index]"),
                (f"{site}/torch/nn/modules/module.py", 1747, "_call_impl", "return forward_call(*args, **kwargs)"),
                (f"{self.code}/model.py", 231, "forward", "x = block(x, freqs_cis)"),
                (f"{site}/torch/nn/modules/module.py", 1747, "_call_impl", "return forward_call(*args, **kwargs)"),
                (f"{self.code}/model.py", 142, "forward",
                 "att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))"),
            ])
            total = self.gpu_mem
            ask = rng.choice([512.0, 1024.0, 2048.0, 4096.0])
            free = rng.uniform(100.0, 900.0)
            if self.p.oom == "old":
                alloc = total - rng.uniform(2.0, 5.0)
                msg = (f"{self.p.oom_cls}: CUDA out of memory. Tried to allocate {_fmt_mem(ask)} "
                       f"(GPU {wk.local}; {_fmt_gib(total)} total capacity; {_fmt_gib(alloc)} already allocated; "
                       f"{_fmt_mem(free)} free; {_fmt_gib(alloc + 1.1)} reserved in total by PyTorch) If reserved "
                       "memory is >> allocated memory try setting max_split_size_mb to avoid fragmentation.  See "
                       "documentation for Memory Management and PYTORCH_CUDA_ALLOC_CONF")
            else:
                inuse = total - free / 1024
                by_pt = inuse - rng.uniform(1.5, 3.0)
                unalloc = rng.uniform(100.0, 900.0)
                msg = (f"{self.p.oom_cls}: CUDA out of memory. Tried to allocate {_fmt_mem(ask)}. GPU {wk.local} "
                       f"has a total capacity of {_fmt_gib(total)} of which {_fmt_mem(free)} is free. Including "
                       f"non-PyTorch memory, this process has {_fmt_gib(inuse)} memory in use. Of the allocated "
                       f"memory {_fmt_gib(by_pt)} is allocated by PyTorch, and {_fmt_mem(unalloc)} is reserved by "
                       "PyTorch but unallocated. If reserved but unallocated memory is large try setting "
                       "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation "
                       "for Memory Management  (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)")
            blk.append(msg)
            return [blk], joins, "CUDA out of memory"
        if f == "gpu-ecc":
            blk = self.frames(self.top_frames("train(cfg, model, optimizer, train_loader)") + [
                (f"{self.code}/{self.script}", 274, "train", "loss.backward()"),
                (f"{site}/torch/_tensor.py", 581, "backward", "torch.autograd.backward("),
                (f"{site}/torch/autograd/__init__.py", 347, "backward", "_engine_run_backward("),
                (f"{site}/torch/autograd/graph.py", 825, "_engine_run_backward",
                 "return Variable._execution_engine.run_backward(  # Calls into the C++ engine to run the backward pass"),
            ])
            blk.append("RuntimeError: CUDA error: uncorrectable ECC error encountered")
            blk += _CUDA_ASYNC
            blk.append("")
            return [blk], joins, "RuntimeError: CUDA error: uncorrectable ECC error encountered"
        if f == "dataloader-killed":
            wpid = self.workers[r].pid + rng.randrange(200, 900)
            b1 = self.frames([
                (f"{site}/torch/utils/data/dataloader.py", 1133, "_try_get_data", "data = self._data_queue.get(timeout=timeout)"),
                (f"{stdlib}/queue.py", 180, "get", "self.not_empty.wait(remaining)"),
                (f"{stdlib}/threading.py", 324, "wait", "gotit = waiter.acquire(True, timeout)"),
                (f"{site}/torch/utils/data/_utils/signal_handling.py", 66, "handler", "_error_if_any_worker_fails()"),
            ])
            b1.append(f"RuntimeError: DataLoader worker (pid {wpid}) is killed by signal: Killed. ")
            b2 = self.frames(self.top_frames("train(cfg, model, optimizer, train_loader)") + [
                (f"{self.code}/{self.script}", 259, "train", "for batch in train_loader:"),
                (f"{site}/torch/utils/data/dataloader.py", 631, "__next__", "data = self._next_data()"),
                (f"{site}/torch/utils/data/dataloader.py", 1329, "_next_data", "idx, data = self._get_data()"),
                (f"{site}/torch/utils/data/dataloader.py", 1295, "_get_data", "success, data = self._try_get_data()"),
                (f"{site}/torch/utils/data/dataloader.py", 1146, "_try_get_data",
                 "raise RuntimeError(f'DataLoader worker (pid(s) {pids_str}) exited unexpectedly') from e"),
            ])
            b2.append(f"RuntimeError: DataLoader worker (pid(s) {wpid}) exited unexpectedly")
            return [b1, b2], ["The above exception was the direct cause of the following exception:"], \
                f"DataLoader worker (pid {wpid}) is killed by signal: Killed."
        if f == "import-error":
            mod = rng.choice(["sacrebleu", "rouge_score", "evaluate", "nltk"])
            blk = self.frames(self.top_frames("train(cfg, model, optimizer, train_loader)") + [
                (f"{self.code}/{self.script}", 322, "train", "metrics = evaluate(model, val_loader, step)"),
                (f"{self.code}/eval.py", 14, "evaluate", f"import {mod}"),
            ])
            blk.append(f"ModuleNotFoundError: No module named '{mod}'")
            return [blk], joins, f"ModuleNotFoundError: No module named '{mod}'"
        raise AssertionError(f)

    def error_file_json(self, r: int, t_exc: float, blocks: Sequence[Sequence[str]], joins: Sequence[str]) -> str:
        last = blocks[-1]
        exc_line = next((x for x in reversed(last) if x and not x.startswith(" ")
                         and not x.startswith(("CUDA kernel", "For debugging", "Compile with"))), last[-1])
        lines: list[str] = []
        for i, blk in enumerate(blocks):
            if i:
                lines += ["", joins[i - 1], ""]
            lines += ["Traceback (most recent call last):", *blk]
        cls, _, rest = exc_line.partition(": ")
        data = {"message": {"message": f"{cls.rsplit('.', 1)[-1]}: {rest}",
                            "extraInfo": {"py_callstack": "\n".join(lines) + "\n",
                                          "timestamp": str(self.clock.epoch(self.host_t(self.workers[r].node, t_exc)))}}}
        return json.dumps(data)

    # ---------------------------------------------------------------- NCCL watchdog output
    def timeout_lines(self, r: int, t: float, seq: int, op: str, numel: int, ran_ms: int, *,
                      enq: int, comp: int, first_dump: bool, observed_from: tuple[int, float] | None,
                      mode: str) -> tuple[float, list[str] | None, float]:
        """Watchdog timeout output of a collateral rank detected at ``t``.

        ``observed_from``: (first rank that timed out, time this rank's heartbeat monitor saw its dump signal
        in the TCPStore), 2.8 only. Returns (process exit time, Python traceback block if it raised, time of
        the exception).
        """
        p, n, L = self.p, self.workers[r].node, self.p.ln
        work = self.work(seq, op, numel, numel)
        wd_msg = f"[Rank {r}] Watchdog caught collective operation timeout: {work} ran for {ran_ms} milliseconds before timing out."
        pg = self.pg(r)
        g = lambda tt, key: self.glog(n, tt, "ProcessGroupNCCL.cpp", L[key])  # noqa: E731
        t_abort = t + self.rng.uniform(*p.abort_delay)
        if p.fr == "stack" and observed_from is not None:
            src_rank, to = observed_from
            self.w(r, to, f"{g(to, 'observed')} {pg} Observed flight recorder dump signal from another rank via TCPStore.", "glog")
            self.w(r, to + 0.0002, f"{g(to + 0.0002, 'dump')} {pg} Received a dump signal due to a collective timeout from  rank "
                                   f"{src_rank} and we will try our best to dump the debug info. Last enqueued NCCL "
                                   f"work: {enq}, last completed NCCL work: {comp}.{_WD_TAIL}", "glog")
            self.w(r, to + 0.0003, f"{g(to + 0.0003, 'prep')} {pg} ProcessGroupNCCL preparing to dump debug info. "
                                   "Include stack trace: 1, only active collectives: 0", "glog")
        if p.key == "2.1":
            self.w(r, t, f"{g(t, 'wd')} {wd_msg}", "glog")
            self.w(r, t + 0.0002, f"{g(t, 'some')} {_SOME_NCCL}", "glog")
            self.w(r, t + 0.0003, f"{g(t, 'avoid')} {_AVOID}", "glog")
        elif p.key == "2.3":
            self.w(r, t, f"{g(t, 'wd')} {wd_msg}", "glog")
            self.w(r, t + 0.0003, f"{g(t, 'timeout_at')} {pg} Timeout at NCCL work: {seq}, last enqueued NCCL work: "
                                  f"{enq}, last completed NCCL work: {comp}.", "glog")
        elif p.key == "2.4":
            self.w(r, t, f"{g(t, 'wd')} {wd_msg}", "glog")
            t2 = t + 0.005
            self.w(r, t2, f"{g(t2, 'detected')} {pg} Exception (either an error or timeout) detected by watchdog at "
                          f"work: {seq}, last enqueued NCCL work: {enq}, last completed NCCL work: {comp}.", "glog")
        else:  # 2.6, 2.8
            self.w(r, t, f"{g(t, 'wd')} {wd_msg}", "glog")
            t2 = t + 0.004
            self.w(r, t2, f"{g(t2, 'failure')} {pg}  failure detected by watchdog at work sequence id: {seq} PG status: "
                          f"last enqueued work: {enq}, last completed work: {comp}", "glog")
            if p.fr == "notfound":
                self.w(r, t2, f"{g(t2, 'notfound')} Stack trace of the failed collective not found, potentially because "
                              "FlightRecorder is disabled. You can enable it by setting TORCH_NCCL_TRACE_BUFFER_SIZE to a "
                              "non-zero value.", "glog")
            else:
                self.w(r, t2, f"{g(t2, 'stack')} Stack trace of the failed collective:", "glog")
                if numel == 1:
                    stack = [f"#0 barrier from {self.site}/torch/distributed/distributed_c10d.py:4159",
                             f"#1 wrapper from {self.site}/torch/distributed/c10d_logger.py:81"]
                else:
                    stack = [f"#0 _engine_run_backward from {self.site}/torch/autograd/graph.py:825",
                             f"#1 backward from {self.site}/torch/autograd/__init__.py:347",
                             f"#2 backward from {self.site}/torch/_tensor.py:581"]
                stack += [f"#{len(stack)} train from {self.code}/{self.script}:274",
                          f"#{len(stack) + 1} main from {self.code}/{self.script}:398",
                          f"#{len(stack) + 2} <module> from {self.code}/{self.script}:412", ""]
                self.wl(r, t2, stack, "raw")
            if first_dump or observed_from is None:
                self.w(r, t2 + 0.0001, f"{g(t2, 'first')} {pg} First PG on this rank to signal dumping.", "glog")
                t3 = t2 + self.rng.uniform(0.05, 0.35)
                self.w(r, t3, f"{g(t3, 'dump')} {pg} Received a dump signal due to a collective timeout from this local "
                              f"rank and we will try our best to dump the debug info. Last enqueued NCCL work: {enq}, last "
                              f"completed NCCL work: {comp}.{_WD_TAIL}", "glog")
                extra = ", only active collectives: 0" if p.key == "2.8" else ""
                self.w(r, t3 + 0.0002, f"{g(t3, 'prep')} {pg} ProcessGroupNCCL preparing to dump debug info. Include "
                                       f"stack trace: 1{extra}", "glog")
        if mode == "python":
            t_exit = t + self.rng.uniform(0.05, 0.4)
            blk = self.python_backend_error(r, t_exit, wd_msg)
            if p.key != "2.1":
                self.w(r, t_exit + 0.01, f"{self.glog(n, t_exit, 'ProcessGroupNCCL.cpp', L['some'])} [Rank {r}] {_SOME_NCCL}", "glog")
                self.w(r, t_exit + 0.01, f"{self.glog(n, t_exit, 'ProcessGroupNCCL.cpp', L['avoid'])} [Rank {r}] {_AVOID}", "glog")
            return t_exit + self.rng.uniform(*_PY_EXIT_S), blk, t_exit
        if p.key != "2.1":
            self.w(r, t_abort, f"{g(t_abort, 'some')} [Rank {r}] {_SOME_NCCL}", "glog")
            self.w(r, t_abort, f"{g(t_abort, 'avoid')} [Rank {r}] {_AVOID}", "glog")
        self.abort_block(r, t_abort + 0.002, wd_msg, "checkTimeout")
        return t_abort + 0.02, None, t_abort

    def cpp_frames(self, where: str) -> list[str]:
        lib = f"{self.site}/torch/lib"
        rng = self.rng
        a = lambda: f"0x{rng.randrange(0x7f0000000000, 0x7fffffffffff):x}"  # noqa: E731
        k = self.p.key
        if where == "checkTimeout":
            out = [f"frame #0: c10::Error::Error(c10::SourceLocation, std::__cxx11::basic_string<char, "
                   f"std::char_traits<char>, std::allocator<char> >) + 0x98 ({a()} in {lib}/libc10.so)",
                   f"frame #1: c10d::ProcessGroupNCCL::WorkNCCL::checkTimeout(std::optional<std::chrono::duration<long, "
                   f"std::ratio<1l, 1000l> > >) + 0x23d ({a()} in {lib}/libtorch_cuda.so)"]
            if k == "2.1":
                out += [f"frame #2: c10d::ProcessGroupNCCL::workCleanupLoop() + 0x19d ({a()} in {lib}/libtorch_cuda.so)",
                        f"frame #3: c10d::ProcessGroupNCCL::ncclCommWatchdog() + 0x119 ({a()} in {lib}/libtorch_cuda.so)"]
            elif k == "2.8":
                out += [f"frame #2: c10d::ProcessGroupNCCL::Watchdog::runLoop() + 0x14f1 ({a()} in {lib}/libtorch_cuda.so)",
                        f"frame #3: c10d::ProcessGroupNCCL::Watchdog::run() + 0x157 ({a()} in {lib}/libtorch_cuda.so)"]
            else:
                out += [f"frame #2: c10d::ProcessGroupNCCL::watchdogHandler() + 0xc80 ({a()} in {lib}/libtorch_cuda.so)",
                        f"frame #3: c10d::ProcessGroupNCCL::ncclCommWatchdog() + 0x14d ({a()} in {lib}/libtorch_cuda.so)"]
        else:
            out = [f"frame #0: c10::Error::Error(c10::SourceLocation, std::__cxx11::basic_string<char, "
                   f"std::char_traits<char>, std::allocator<char> >) + 0x98 ({a()} in {lib}/libc10.so)",
                   f"frame #1: <unknown function> + 0x11b4abe ({a()} in {lib}/libtorch_cuda.so)",
                   f"frame #2: <unknown function> + 0xe07bed ({a()} in {lib}/libtorch_cuda.so)"]
        base = len(out)
        out += [f"frame #{base}: <unknown function> + 0xdc253 ({a()} in /lib/x86_64-linux-gnu/libstdc++.so.6)",
                f"frame #{base + 1}: <unknown function> + 0x94ac3 ({a()} in /lib/x86_64-linux-gnu/libc.so.6)",
                f"frame #{base + 2}: clone + 0x44 ({a()} in /lib/x86_64-linux-gnu/libc.so.6)", ""]
        return out

    def abort_block(self, r: int, t: float, what: str, where: str, *, extra: Sequence[str] = ()) -> None:
        """``terminate called after throwing ...`` on the watchdog thread (the process then dies of SIGABRT)."""
        p, n = self.p, self.workers[r].node
        pg = self.pg(r)
        if p.key == "2.1":
            whole = f"[Rank {r}] NCCL watchdog thread terminated with exception: {what}"
            lines = ["terminate called after throwing an instance of 'c10::DistBackendError'",
                     f"  what():  {whole}", *extra,
                     f"Exception raised from {where} at {p.src}/ProcessGroupNCCL.cpp:{p.ln['check']} (most recent call first):",
                     *self.cpp_frames(where)]
            self.wl(r, t, lines, "raw")
            return
        whole = f"{pg} Process group watchdog thread terminated with exception: {what}"
        line_no = p.ln["check"] if where == "checkTimeout" else p.ln.get("remote", p.ln["check"])
        raised = f"Exception raised from {where} at {p.src}/ProcessGroupNCCL.cpp:{line_no} (most recent call first):"
        self.w(r, t, f"{self.glog(n, t, 'ProcessGroupNCCL.cpp', p.ln['term'])} {whole}", "glog")
        self.wl(r, t, [*extra, raised, *self.cpp_frames(where)], "raw")
        lines = ["terminate called after throwing an instance of 'c10::DistBackendError'",
                 f"  what():  {whole}", *extra, raised, *self.cpp_frames(where)]
        if "watchdog" in p.ln:
            lines += [f"Exception raised from ncclCommWatchdog at {p.src}/ProcessGroupNCCL.cpp:{p.ln['watchdog']} "
                      "(most recent call first):", *self.cpp_frames("ncclCommWatchdog")]
        self.wl(r, t + 0.0005, lines, "raw")

    def python_backend_error(self, r: int, t: float, wd_msg: str) -> list[str]:
        site = self.site
        if self.o.framework == "lightning":
            items = self.lightning_frames("batch_end")[:-2] + [
                (f"{self.code}/callbacks.py", 96, "on_train_batch_end", 'trainer.strategy.barrier("rank_state_saved")'),
                (f"{site}/lightning/pytorch/strategies/ddp.py", 301, "barrier",
                 "torch.distributed.barrier(device_ids=self.determine_ddp_device_ids())")]
            call = (f"{site}/torch/distributed/distributed_c10d.py", 4159, "barrier", "work.wait()")
        else:
            items = self.top_frames("train(cfg, model, optimizer, train_loader)") + [
                (f"{self.code}/{self.script}", 287, "train", "dist.all_reduce(loss_sum, op=dist.ReduceOp.SUM)")]
            call = (f"{site}/torch/distributed/distributed_c10d.py", 2501, "all_reduce", "work.wait()")
        items += [(f"{site}/torch/distributed/c10d_logger.py", 81, "wrapper", "return func(*args, **kwargs)"), call]
        blk = self.frames(items)
        blk.append(f"torch.distributed.DistBackendError: {wd_msg}")
        self.tb(r, t, [blk])
        return blk

    # ---------------------------------------------------------------- agents
    def agent_start(self) -> None:
        for n in range(self.nodes):
            t = self.rng.uniform(1.0, 4.0)
            if self.local_count[n] > 1:
                for msg in ("", "*****************************************", _OMP,
                            "*****************************************"):
                    self.a(n, t, self.agent_line(n, t, "WARNING", "torch.distributed.run", 793, msg))

    def agent_teardown(self, n: int, *, exits: Mapping[int, tuple[float, int]], start_poll: float) -> float | None:
        """Simulate one node's torchelastic agent once a worker of node ``n`` has exited.

        ``exits`` maps global rank -> (exit time, exit code) for the workers that end by themselves.
        Returns the time torchrun exits (None if none of the node's workers ever exits).
        """
        if not exits:
            return None
        p, rng = self.p, self.rng
        mi = p.monitor_interval
        first = min(t for t, _ in exits.values())
        phase = (start_poll % mi) if mi > 0 else 0.0
        k = math.ceil((first - phase) / mi)
        t_poll = phase + k * mi + rng.uniform(0.0005, 0.004)
        node_workers = [w for w in self.workers if w.node == n]
        failed = [w for w in node_workers if w.rank in exits and exits[w.rank][0] <= t_poll]
        running = [w for w in node_workers if w not in failed]
        t = t_poll
        for w in running:
            t += rng.uniform(0.0005, 0.012)
            self.a(n, t, self.agent_line(n, t, "WARNING", "torch.distributed.elastic.multiprocessing.api",
                                         p.agent_ln.get("sigterm", 0), f"Sending process {w.pid} closing signal SIGTERM"))
        sigterm_done = t + rng.uniform(0.2, 2.5) if running else t
        for w in running:
            own = exits.get(w.rank)
            if own is not None and own[0] < sigterm_done:
                w.exit_t, w.exit_code = own            # it died by itself while being signalled
            else:
                w.exit_t, w.exit_code = sigterm_done - rng.uniform(0.0, 0.2), -15
        # ProcessFailure timestamps: error file timestamp if one was written, else the poll time (int seconds)
        host_epoch = self.clock.epoch(self.host_t(n, t_poll))
        ts: dict[int, int] = {}
        for w in failed:
            w.exit_t, w.exit_code = exits[w.rank]
            if w.error_ts is not None and w.error_json is not None:
                ts[w.rank] = self.clock.epoch(self.host_t(n, w.error_ts))
            else:
                ts[w.rank] = host_epoch
        root_w = min(sorted(failed, key=lambda w: w.local), key=lambda w: ts[w.rank])
        t_fail = sigterm_done + rng.uniform(0.01, 0.3)
        self.a(n, t_fail, self.agent_line(n, t_fail, "ERROR", "torch.distributed.elastic.multiprocessing.api",
                                          p.agent_ln.get("failed", 0),
                                          f"failed (exitcode: {root_w.exit_code}) local_rank: {root_w.local} "
                                          f"(pid: {root_w.pid}) of binary: {self.binary}"))
        table_entries = sorted(failed, key=lambda w: w.local)
        if p.key == "2.8":
            table_entries += sorted(running, key=lambda w: w.local)
            ts.update({w.rank: self.clock.epoch(self.host_t(n, sigterm_done)) for w in running})
        self.al(n, t_fail, self.child_failed(n, root_w, table_entries, ts))
        return t_fail + rng.uniform(0.05, 0.6)

    def agent_tb_frames(self) -> list[str]:
        p, site, L = self.p, self.site, self.p.agent_ln
        lines = ["Traceback (most recent call last):"]
        caret = p.python >= "3.11"
        if L.get("runpy"):
            lines += ['  File "<frozen runpy>", line 198, in _run_module_as_main',
                      '  File "<frozen runpy>", line 88, in _run_code',
                      f'  File "{site}/torch/distributed/run.py", line {L["runpy"]}, in <module>', "    main()"]
        else:
            lines += [f'  File "{self.torchrun}", line 8, in <module>', "    sys.exit(main())"]
            if caret:
                lines.append("             ^^^^^^")
        lines += [f'  File "{site}/torch/distributed/elastic/multiprocessing/errors/__init__.py", line {L["errors"]}, in wrapper',
                  "    return f(*args, **kwargs)"]
        if caret:
            lines.append("           ^^^^^^^^^^^^^^^^^^")
        lines += [f'  File "{site}/torch/distributed/run.py", line {L["main"]}, in main', "    run(args)",
                  f'  File "{site}/torch/distributed/run.py", line {L["run"]}, in run', "    elastic_launch(",
                  f'  File "{site}/torch/distributed/launcher/api.py", line {L["call"]}, in __call__',
                  "    return launch_agent(self._config, self._entrypoint, list(args))"]
        if caret:
            lines.append("           ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^")
        return lines

    def child_failed(self, n: int, root_w: _Worker, entries: Sequence[_Worker], ts: Mapping[int, int]) -> list[str]:
        """The agent's traceback and ChildFailedError table (format of torchelastic errors/__init__.py)."""
        p, L = self.p, self.p.agent_ln
        lines = self.agent_tb_frames()
        lines += [f'  File "{self.site}/torch/distributed/launcher/api.py", line {L["launch"]}, in launch_agent',
                  "    raise ChildFailedError("]
        host = self.hosts[n] + self.o.fqdn
        title = f"{self.script} FAILED"
        order = list(entries)   # failures dict order: the failed workers by local rank, then (2.8) the SIGTERMed ones
        idx = {w.rank: i for i, w in enumerate(order)}
        fmts: dict[int, list[str]] = {}
        width = len(title)
        for w in order:
            if w.exit_code is not None and w.exit_code < 0:
                msg = f"Signal {-w.exit_code} ({_SIGNAMES.get(-w.exit_code, '<N/A>')}) received by PID {w.pid}"
            elif w.error_json is not None:
                cs = json.loads(w.error_json)["message"]["extraInfo"]["py_callstack"]
                msg = cs.replace("\n", "\n  ")
            else:
                msg = _ELASTIC_DOC
            base = (f"{self.code}/logs/{self.job_id}/node-{n}" if self.layout == "torchelastic" else self.tmpdir)
            err_file = (f"{base}/{self.log_run_dir}/attempt_0/{w.local}/error.json"
                        if w.error_json is not None else "<N/A>")
            code = f"{w.exit_code} (pid: {w.pid})"
            if p.key == "2.8":
                code += f"  ({_SIGNAMES[-w.exit_code]})" if w.exit_code < 0 else " "
            fmt = [f"[{idx[w.rank]}]:", f"  time      : {self.clock.table(ts[w.rank] - self.clock.base)}",
                   f"  host      : {host}", f"  rank      : {w.rank} (local_rank: {w.local})",
                   f"  exitcode  : {code}", f"  error_file: {err_file}", f"  traceback : {msg}"]
            fmts[w.rank] = fmt
            for x in "\n".join(fmt).split("\n"):
                width = max(width, len(x))
        width = min(width, 60)
        others = [w for w in order if w is not root_w]
        lines.append("torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ")
        lines += ["=" * width, title, "-" * width, "Failures:"]
        if others:
            for w in others:
                lines += "\n".join(fmts[w.rank]).split("\n")
        else:
            lines.append("  <NO_OTHER_FAILURES>")
        lines += ["-" * width, "Root Cause (first observed failure):"]
        lines += "\n".join(fmts[root_w.rank]).split("\n")
        lines.append("=" * width)
        return lines

    def agent_signal_exit(self, n: int, t: float) -> float:
        """The agent receives SIGTERM (scancel / time limit): fan-out and SignalException traceback."""
        p, site = self.p, self.site
        self.a(n, t, self.agent_line(n, t, "WARNING", "torch.distributed.elastic.agent.server.api",
                                     p.agent_ln.get("death", 719), "Received Signals.SIGTERM death signal, shutting down workers"))
        tt = t
        for w in self.workers:
            if w.node == n and w.exit_t is None:
                tt += self.rng.uniform(0.0005, 0.01)
                self.a(n, tt, self.agent_line(n, tt, "WARNING", "torch.distributed.elastic.multiprocessing.api",
                                              p.agent_ln.get("sigterm", 0), f"Sending process {w.pid} closing signal SIGTERM"))
                w.exit_t, w.exit_code = tt + 0.5, -15
        tt += self.rng.uniform(0.3, 3.0)
        lines = ["Traceback (most recent call last):",
                 f'  File "{site}/torch/distributed/elastic/agent/server/api.py", line 711, in run',
                 "    result = self._invoke_run(role)",
                 f'  File "{site}/torch/distributed/elastic/agent/server/api.py", line 870, in _invoke_run',
                 "    time.sleep(monitor_interval)",
                 f'  File "{site}/torch/distributed/elastic/multiprocessing/api.py", line 84, in _terminate_process_handler',
                 '    raise SignalException(f"Process {os.getpid()} got signal: {sigval}", sigval=sigval)',
                 f"torch.distributed.elastic.multiprocessing.api.SignalException: Process {self.agent_pid[n]} got signal: 15",
                 "", "During handling of the above exception, another exception occurred:", ""]
        lines += self.agent_tb_frames()
        lines += [f'  File "{site}/torch/distributed/launcher/api.py", line 260, in launch_agent',
                  "    result = agent.run()",
                  f'  File "{site}/torch/distributed/elastic/metrics/api.py", line 137, in wrapper',
                  "    result = f(*args, **kwargs)",
                  f'  File "{site}/torch/distributed/elastic/agent/server/api.py", line 720, in run',
                  "    self._shutdown(e.sigval)",
                  f'  File "{site}/torch/distributed/elastic/agent/server/local_elastic_agent.py", line 372, in _shutdown',
                  "    self._pcontext.close(death_sig)",
                  f'  File "{site}/torch/distributed/elastic/multiprocessing/api.py", line 572, in close',
                  "    self._close(death_sig=death_sig, timeout=timeout)",
                  f'  File "{site}/torch/distributed/elastic/multiprocessing/api.py", line 909, in _close',
                  "    handler.proc.wait(time_to_wait)",
                  f'  File "{self.stdlib}/subprocess.py", line 1264, in wait',
                  "    return self._wait(timeout=timeout)",
                  f'  File "{self.stdlib}/subprocess.py", line 2047, in _wait',
                  "    time.sleep(delay)",
                  f'  File "{site}/torch/distributed/elastic/multiprocessing/api.py", line 84, in _terminate_process_handler',
                  '    raise SignalException(f"Process {os.getpid()} got signal: {sigval}", sigval=sigval)',
                  f"torch.distributed.elastic.multiprocessing.api.SignalException: Process {self.agent_pid[n]} got signal: 15"]
        self.al(n, tt, lines)
        return tt + 0.1

    @property
    def has_agent(self) -> bool:
        return self.layout != "per-rank"

    # ---------------------------------------------------------------- srun
    def srun_exits(self, ends: Sequence[tuple[float, int, int, int]]) -> None:
        """``ends``: (time, host index, task id, exit code) -> ``srun: error: host: tasks ...: ...`` lines."""
        groups: dict[tuple[int, int], list[tuple[float, int]]] = {}
        for t, n, task, code in ends:
            if code == 0:
                continue
            groups.setdefault((n, code), []).append((t, task))
        for (n, code), items in sorted(groups.items(), key=lambda kv: min(x[0] for x in kv[1])):
            t = max(x[0] for x in items) + self.rng.uniform(0.01, 0.3)
            tasks = [x[1] for x in items]
            word = "task" if len(tasks) == 1 else "tasks"
            if code > 0:
                what = f"Exited with exit code {code}"
            else:
                what = _STRSIGNAL.get(-code, f"Signal {-code}")
                if -code in (11, 6, 7) and self.layout == "per-rank":
                    what += " (core dumped)" if -code == 11 else ""
            self.b(t, f"srun: error: {self.hosts[n]}: {word} {_ranges(tasks)}: {what}")

    # ---------------------------------------------------------------- scenario
    def simulate(self) -> None:
        f = self.fault
        if self.has_agent:
            self.agent_start()
        if f.mechanism == "none":
            self.sim_healthy()
        elif f.mechanism == "job":
            self.sim_time_limit()
        else:
            self.sim_failure()
        self.prune()
        if self._desc_args is not None:
            self.describe(*self._desc_args)

    def prune(self) -> None:
        """A process prints nothing after it died; collateral = non-root ranks that printed errors after the root."""
        for w in self.workers:
            if w.exit_t is not None:
                self.recs[w.rank] = [x for x in self.recs[w.rank] if x.t <= w.exit_t + 1e-9]
        if self.root_time is None:
            self.collateral = set()
            return
        coll: set[int] = set()
        for w in self.workers:
            if w.rank == self.root:
                continue
            for x in self.recs[w.rank]:
                if x.t > self.root_time and (x.kind != "log" or " NCCL WARN " in x.text):
                    coll.add(w.rank)
                    break
        self.collateral = coll

    def emit_exception(self, r: int, t: float, blocks: Sequence[Sequence[str]], joins: Sequence[str],
                       step: int, lead: str = "") -> None:
        """A rank dies of an uncaught Python exception (optionally logged first by the script)."""
        n = self.workers[r].node
        if lead:
            self.w(r, t - 0.003, "", lead=lead, kind="raw")
        if self.o.log_exception:
            tl = t - 0.002
            what = "checkpoint save failed" if self.fault.saves else "training step failed"
            self.w(r, tl, f"{self.ts_log(n, tl)} - train - ERROR - [rank {r}] {what} at step {step}")
            plain: list[str] = []
            for i, blk in enumerate(blocks):
                if i:
                    plain += ["", joins[i - 1], ""]
                plain += ["Traceback (most recent call last):", *blk]
            self.wl(r, tl, plain, "log")
        self.tb(r, t, blocks, joins)
        if self.o.record and self.has_agent:
            self.workers[r].error_ts = t
            self.workers[r].error_json = self.error_file_json(r, t, blocks, joins)

    def n_logs(self) -> int:
        if self.o.fail_after_logs:
            return self.o.fail_after_logs
        init_lines = 7
        return max(3, self.lpr - init_lines)

    def sim_healthy(self) -> None:
        rng = self.rng
        last = self.step0 + self.log_every * self.n_logs()
        self.normal(last)
        t_end = self.step_time(last) + rng.uniform(5.0, 30.0)
        p = self.p
        for wk in self.workers:
            t = t_end + rng.uniform(0, 0.4)
            if wk.rank == 0:
                self.w(0, t - 2.0, f"{self.ts_log(0, t - 2.0)} - train - INFO - [rank 0] saving final checkpoint to "
                                   f"{self.ckpt}/final.pt")
                self.w(0, t - 0.5, f"{self.ts_log(0, t - 0.5)} - train - INFO - [rank 0] training finished after "
                                   f"{last} steps")
            if "destroy" in p.ln and rng.random() < 0.5:
                self.w(wk.rank, t, f"{self.glog(wk.node, t, 'ProcessGroupNCCL.cpp', p.ln['destroy'], 'W')} Warning: WARNING: "
                                   "destroy_process_group() was not called before program exit, which can leak resources. For "
                                   "more info, please see https://pytorch.org/docs/stable/distributed.html#shutdown "
                                   "(function operator())", "glog")
            wk.exit_t, wk.exit_code = t + 0.3, 0
        if self.has_agent:
            for n in range(self.nodes):
                t = max(w.exit_t or 0 for w in self.workers if w.node == n) + rng.uniform(0.05, 0.3)
                lines = [("INFO", "[default] worker group successfully finished. Waiting 300 seconds for other agents to finish.", 879),
                         ("INFO", "Local worker group finished (WorkerState.SUCCEEDED). Waiting 300 seconds for other agents to finish", 932),
                         ("INFO", f"Done waiting for other agents. Elapsed: {rng.uniform(0.0003, 4.0)} seconds", 946)]
                for lvl, msg, ln in lines:
                    self.a(n, t, self.agent_line(n, t, lvl, "torch.distributed.elastic.agent.server.api", ln, msg))
                    t += 0.001
        self.description = (
            f"A healthy {self.ranks}-rank run on {self.nodes} node(s) trained from step {self.step0} to step {last} and "
            "exited cleanly. Every rank kept logging synchronised step lines until the end; any "
            "destroy_process_group() warnings at exit are harmless and no rank, agent or Slurm reported a failure.")

    def sim_time_limit(self) -> None:
        rng = self.rng
        last = self.step0 + self.log_every * self.n_logs()
        self.normal(last)
        t_lim = self.step_time(last) + rng.uniform(1.0, self.log_every * self.step_dt - 0.5)
        n0 = 0
        self.b(t_lim, f"slurmstepd: error: *** JOB {self.job_id} ON {self.hosts[n0]} CANCELLED AT "
                      f"{self.clock.slurm(self.host_t(n0, t_lim))} DUE TO TIME LIMIT ***")
        self.b(t_lim + 0.02, "srun: Job step aborted: Waiting up to 32 seconds for job step to finish.")
        self.s(n0, t_lim + 0.01, f"slurmstepd: error: *** STEP {self.job_id}.0 ON {self.hosts[n0]} CANCELLED AT "
                                 f"{self.clock.slurm(self.host_t(n0, t_lim))} DUE TO TIME LIMIT ***")
        ends = []
        for n in range(self.nodes):
            tt = t_lim + rng.uniform(0.01, 0.2)
            if self.has_agent:
                te = self.agent_signal_exit(n, tt)
                ends.append((te, n, n, 1))
            else:
                for w in self.workers:
                    if w.node == n:
                        w.exit_t, w.exit_code = tt, -15
                        ends.append((tt, n, w.rank, -15))
        self.srun_exits(ends)
        self.description = (
            f"The job ({self.ranks} ranks on {self.nodes} node(s)) was still training normally at step ~{last} when "
            "Slurm's time limit expired: slurmstepd cancelled the job and step DUE TO TIME LIMIT, the torchrun agents "
            "received SIGTERM and forwarded it to their workers. No rank failed on its own; the fix is a longer "
            "--time or checkpoint-and-requeue, not a code change.")

    def sim_failure(self) -> None:
        f, rng, p = self.fault, self.rng, self.p
        if self.nodes < f.min_nodes:
            raise ValueError(f"fault {f.name!r} needs at least {f.min_nodes} nodes")
        root = self.root
        assert root is not None
        rw = self.workers[root]
        rn = rw.node
        nl = self.n_logs()
        last_logged = self.step0 + self.log_every * nl
        saves = bool(f.saves)
        if saves:
            # the fault happens while saving the checkpoint after a logged step
            fail_step = last_logged
            self.ckpt_every = self.log_every          # align: a checkpoint is due at the last logged step
        else:
            fail_step = last_logged + rng.randrange(1, self.log_every)
        silent_after: dict[int, int] = {}
        if f.mechanism == "hang":
            silent_after[root] = last_logged
        self.normal(last_logged, silent_after)
        t_fail = self.step_time(fail_step) + rng.uniform(0.05, 0.8) * self.step_dt
        if saves:
            t_fail = self.step_time(fail_step) + rng.uniform(3.0, 25.0)
            savers = [root] if f.saves == "rank0" else [w.rank for w in self.workers]
            for r in savers:
                n = self.workers[r].node
                ts = self.step_time(fail_step) + 0.3 + rng.uniform(0, 0.05)
                self.w(r, ts, f"{self.ts_log(n, ts)} - train - INFO - [rank {r}] saving checkpoint to "
                              f"{self.ckpt}/step-{fail_step:06d}")
        rw.state = "root"
        self.root_time = t_fail
        # the collective everyone else waits in
        seq_h = self.seq_of_step(fail_step) + (1 if saves else rng.randrange(0, self.seq_per_step))
        if saves:
            op, numel = "ALLREDUCE", 1
        else:
            op = rng.choice(["ALLREDUCE", "ALLREDUCE", "_ALLGATHER_BASE", "_REDUCE_SCATTER_BASE"])
            numel = self.numel
        root_exit: tuple[float, int] | None = None
        details = ""
        lead = ""
        if root == 0 and self.o.tqdm:
            lead = self.tqdm_frames(last_logged + rng.randrange(1, self.log_every))
        # ---- root fault
        if f.mechanism == "exception" and not (f.name == "gpu-ecc" and self.o.ecc_variant == "watchdog"):
            blocks, joins, details = self.root_exception(root, t_fail, fail_step)
            self.emit_exception(root, t_fail, blocks, joins, fail_step, lead)
            if "destroy" in p.ln:
                td = t_fail + rng.uniform(0.2, 1.5)
                self.w(root, td, f"{self.glog(rn, td, 'ProcessGroupNCCL.cpp', p.ln['destroy'], 'W')} Warning: WARNING: "
                                 "destroy_process_group() was not called before program exit, which can leak resources. "
                                 "For more info, please see https://pytorch.org/docs/stable/distributed.html#shutdown "
                                 "(function operator())", "glog")
            root_exit = None if self.o.kill_on_bad_exit else (t_fail + rng.uniform(1.0, 4.0), 1)
        elif f.name == "gpu-ecc":  # watchdog thread hits the ECC error first
            what = "CUDA error: uncorrectable ECC error encountered"
            self.w(root, t_fail, f"{self.glog(rn, t_fail, 'ProcessGroupNCCL.cpp', p.ln.get('term', p.ln['wd']))} "
                                 f"{self.pg(root)} Process group watchdog thread terminated with exception: {what}", "glog")
            self.wl(root, t_fail, _CUDA_ASYNC + [""], "raw")
            lines = ["terminate called after throwing an instance of 'c10::DistBackendError'",
                     f"  what():  {self.pg(root)} Process group watchdog thread terminated with exception: {what}",
                     *_CUDA_ASYNC, "",
                     f"Exception raised from c10_cuda_check_implementation at /pytorch/c10/cuda/CUDAException.cpp:43 "
                     "(most recent call first):", *self.cpp_frames("cuda"),
                     "Fatal Python error: Aborted", ""]
            lines += self.faulthandler_dump(root, "backward")
            self.wl(root, t_fail + 0.001, lines, "raw")
            details = "Process group watchdog thread terminated with exception: CUDA error: uncorrectable ECC error encountered"
            root_exit = (t_fail + rng.uniform(0.3, 1.5), -6)
        elif f.mechanism == "signal":
            if f.signal == 11:
                if lead:
                    self.w(root, t_fail - 0.001, "", lead=lead, kind="raw")
                self.wl(root, t_fail, ["Fatal Python error: Segmentation fault", ""] +
                        self.faulthandler_dump(root, "flash"), "raw")
                details = "Fatal Python error: Segmentation fault"
                root_exit = (t_fail + rng.uniform(0.05, 0.5), -11)
            else:  # SIGKILL by the kernel OOM killer: no output at all
                details = "killed by SIGKILL (host out of memory), no output of its own"
                root_exit = (t_fail, -9)
        elif f.mechanism == "network":
            details, t_abort = self.ib_error(root, t_fail)
            root_exit = (t_abort + rng.uniform(0.02, 0.3), -6)
        elif f.mechanism == "hang":
            details = "stops logging and never enters the collective"
            t_fail = self.step_time(last_logged) + rng.uniform(0.2, 0.9) * self.step_dt
            self.root_time = t_fail
            seq_h = self.seq_of_step(last_logged) + 1
            fail_step = last_logged     # its last step line; it never joins the next collective
            rw.state = "silent"
        if root_exit:
            rw.exit_t, rw.exit_code = root_exit
        # ---- collateral: who times out, when
        agent_kills_root_node = self.has_agent and root_exit is not None
        first_timeout: tuple[float, int] | None = None
        plan: list[tuple[float, int, int]] = []   # (timeout time, rank, ran_ms)
        stuck = -1
        if self.o.stuck_node and self.nodes >= 3:
            cands = [n for n in range(self.nodes) if n != rn]
            stuck = cands[rng.randrange(len(cands))]
        secondary: int | None = None
        if self.o.secondary and f.mechanism == "exception":
            cands = [w.rank for w in self.workers if w.node != rn]
            if self.o.secondary_rank >= 0:
                secondary = self.o.secondary_rank
            elif cands:
                secondary = self.pick_secondary(cands)
        # when the waiting ranks enqueue the collective the root never joins (all within _ENQUEUE_SPREAD_S)
        if f.mechanism == "hang":
            t_coll = t_fail
        elif f.saves == "rank0":      # the others go straight to the barrier while rank 0 writes
            t_coll = self.step_time(fail_step) + 0.35 + rng.uniform(0.0, 0.3)
        elif rng.random() < 0.5:      # they were already waiting when the root failed
            t_coll = t_fail - rng.uniform(0.0, 0.6 * self.step_dt)
        else:                         # they reach it a little after
            t_coll = t_fail + rng.uniform(0.0, 0.5 * self.step_dt)
        for wk in self.workers:
            if wk.rank == root or wk.rank == secondary:
                continue
            if agent_kills_root_node and wk.node == rn:
                continue
            t_enter = t_coll + rng.uniform(0.0, _ENQUEUE_SPREAD_S)
            ran_ms = 600000 + rng.randrange(1, int(_WATCHDOG_POLL_S * 1000))
            plan.append((t_enter + ran_ms / 1000.0, wk.rank, ran_ms))
        plan.sort()
        if plan:
            first_timeout = (plan[0][0], plan[0][1])
        # secondary primary failure (same storage fault seen by another rank a bit later)
        if secondary is not None:
            t2 = t_fail + self.o.secondary_delay
            sw = self.workers[secondary]
            blocks, joins, _ = self.root_exception(secondary, t2, fail_step)
            self.emit_exception(secondary, t2, blocks, joins, fail_step)
            sw.exit_t, sw.exit_code = t2 + rng.uniform(1.0, 3.0), 1
            sw.state = "collateral"
            self.collateral.add(secondary)
        # emit the timeouts
        p_mode = 0.7 if saves else 0.12
        for t_to, r, ran_ms in plan:
            wk = self.workers[r]
            mode = "python" if rng.random() < p_mode else "abort"
            observed = None
            if p.fr == "stack" and first_timeout and r != first_timeout[1]:
                # the heartbeat monitor polls the TCPStore; it reports the first rank's dump signal only if
                # that poll comes before this rank's own watchdog detects the timeout
                t_obs = first_timeout[0] + rng.uniform(0.02, _COORD_CHECK_S)
                if t_obs < t_to - 0.001:
                    observed = (first_timeout[1], t_obs)
            t_exit, pyblk, t_exc = self.timeout_lines(r, t_to, seq_h, op, numel, ran_ms, enq=seq_h, comp=seq_h - 1,
                                        first_dump=(first_timeout is not None and r == first_timeout[1]),
                                        observed_from=observed, mode=mode)
            wk.state = "collateral"
            self.collateral.add(r)
            if wk.node == stuck:
                wk.state = "stuck"
                continue
            wk.exit_t, wk.exit_code = t_exit, (1 if mode == "python" else -6)
            if pyblk is not None and self.o.record and self.has_agent:
                wk.error_ts = t_exc
                wk.error_json = self.error_file_json(r, wk.error_ts, [pyblk], [])
        if f.mechanism == "hang" and self.o.culprit_dump and first_timeout:
            to = first_timeout[0] + rng.uniform(0.3, 1.0)
            pg, L = self.pg(root), p.ln
            self.w(root, to, f"{self.glog(rn, to, 'ProcessGroupNCCL.cpp', L['observed'])} {pg} Observed flight recorder "
                             "dump signal from another rank via TCPStore.", "glog")
            self.w(root, to, f"{self.glog(rn, to, 'ProcessGroupNCCL.cpp', L['dump'])} {pg} Received a dump signal due to "
                             f"a collective timeout from  rank {first_timeout[1]} and we will try our best to dump the debug "
                             f"info. Last enqueued NCCL work: {seq_h - 1}, last completed NCCL work: {seq_h - 1}.{_WD_TAIL}",
                   "glog")
        # ---- teardown
        if self.o.kill_on_bad_exit and root_exit is None and f.mechanism != "hang":
            self.teardown_kill_on_bad_exit()
        else:
            self.teardown(rn, stuck)
        self._desc_args = (details, fail_step, seq_h, op, stuck, secondary)

    def pick_secondary(self, cands: Sequence[int]) -> int:
        # prefer a host whose clock is behind the root's
        rn = self.workers[self.root].node if self.root is not None else 0
        behind = [r for r in cands if self.offset[self.workers[r].node] < self.offset[rn]]
        pool = behind or list(cands)
        return pool[self.rng.randrange(len(pool))]

    def faulthandler_dump(self, r: int, where: str) -> list[str]:
        rng, site, std = self.rng, self.site, self.stdlib
        tid = lambda: f"0x{rng.randrange(0x7f0000000000, 0x7fffffffffff):016x}"  # noqa: E731
        lines = [f"Thread {tid()} (most recent call first):",
                 f'  File "{std}/threading.py", line 324 in wait',
                 f'  File "{std}/threading.py", line 607 in wait',
                 f'  File "{site}/tqdm/_monitor.py", line 60 in run',
                 f'  File "{std}/threading.py", line 1016 in _bootstrap_inner',
                 f'  File "{std}/threading.py", line 973 in _bootstrap', "",
                 f"Current thread {tid()} (most recent call first):"]
        if where == "flash":
            lines += [f'  File "{site}/flash_attn/flash_attn_interface.py", line 96 in _flash_attn_forward',
                      f'  File "{site}/flash_attn/flash_attn_interface.py", line 507 in forward',
                      f'  File "{site}/torch/autograd/function.py", line 575 in apply',
                      f'  File "{self.code}/model.py", line 142 in forward',
                      f'  File "{site}/torch/nn/modules/module.py", line 1747 in _call_impl']
        else:
            lines += ["  <no Python frame>"]
        lines += [f'  File "{self.code}/{self.script}", line 268 in train',
                  f'  File "{self.code}/{self.script}", line 398 in main',
                  f'  File "{self.code}/{self.script}", line 412 in <module>', ""]
        if self.p.python >= "3.11":
            lines += ["Extension modules: numpy.core._multiarray_umath, numpy.core._multiarray_tests, numpy.linalg._umath_linalg, "
                      "torch._C, torch._C._fft, torch._C._linalg, torch._C._nested, torch._C._nn, torch._C._sparse, "
                      "torch._C._special, yaml._yaml (total: 23)", ""]
        return lines

    def ib_error(self, r: int, t: float) -> tuple[str, float]:
        rng, p = self.rng, self.p
        wk = self.workers[r]
        n = wk.node
        peer_node = (n + 1 + rng.randrange(self.nodes - 1)) % self.nodes
        peer_ip = self.ips[peer_node]
        port = rng.randrange(32768, 60999)
        tid = wk.pid + 200 + rng.randrange(50)
        pre = f"{self.hosts[n]}:{wk.pid}:{tid} [{wk.local}]"
        nccl = tuple(int(x) for x in p.nccl.split(".")[:2])
        if nccl >= (2, 24):
            warn = (f"NET/IB : Got completion from peer {peer_ip}<{port}> with status=12 opcode=0 len=0 vendor err 129 "
                    f"(Recv) localGid ::ffff:{self.ips[n]} remoteGids::ffff:{peer_ip}")
        elif nccl >= (2, 19):
            warn = (f"NET/IB : Got completion from peer {peer_ip}<{port}> with error 12, opcode 0, len 0, vendor err 129 "
                    f"(Recv) localGid ::ffff:{self.ips[n]} remoteGid ::ffff:{peer_ip}")
        else:
            warn = f"NET/IB : Got completion from peer {peer_ip}<{port}> with error 12, opcode 0, len 0, vendor err 129"
        self.w(r, t, f"{pre} transport/net_ib.cc:1296 NCCL WARN {warn}", stream="o")
        self.wl(r, t + 0.0001, [f"{pre} NCCL INFO transport/net.cc:1134 -> 6", f"{pre} NCCL INFO proxy.cc:679 -> 6",
                                f"{pre} NCCL INFO proxy.cc:858 -> 6 [Proxy Thread]"], "log", "o")
        t2 = t + rng.uniform(0.3, 1.5)
        err = f"NCCL error: {_REMOTE_ERR}, NCCL version {p.nccl}"
        if p.key == "2.1":
            self.w(r, t2, f"{self.glog(n, t2, 'ProcessGroupNCCL.cpp', p.ln['some'])} {_SOME_NCCL}", "glog")
            self.w(r, t2, f"{self.glog(n, t2, 'ProcessGroupNCCL.cpp', p.ln['avoid'])} {_AVOID}", "glog")
            self.wl(r, t2 + 0.001, ["terminate called after throwing an instance of 'std::runtime_error'",
                                    f"  what():  {err}", _REMOTE_EXPL, "Last error:", warn], "raw")
        else:
            self.w(r, t2, f"{self.glog(n, t2, 'ProcessGroupNCCL.cpp', p.ln['some'])} [Rank {r}] {_SOME_NCCL}", "glog")
            self.w(r, t2, f"{self.glog(n, t2, 'ProcessGroupNCCL.cpp', p.ln['avoid'])} [Rank {r}] {_AVOID}", "glog")
            self.abort_block(r, t2 + 0.001, err, "checkForNCCLErrorsInternal", extra=[_REMOTE_EXPL, "Last error:", warn])
        # the peer on the other end sees its queue pair flushed a little later
        peers = [w for w in self.workers if w.node == peer_node and w.local == wk.local] or \
                [w for w in self.workers if w.node == peer_node]
        pw = peers[0]
        tp = t + rng.uniform(0.8, 4.0)
        ptid = pw.pid + 200 + rng.randrange(50)
        if nccl >= (2, 24):
            pwarn = (f"NET/IB : Got completion from peer {self.ips[n]}<{rng.randrange(32768, 60999)}> with status=5 opcode=0 "
                     f"len=1 vendor err 244 (Recv) localGid ::ffff:{peer_ip} remoteGids::ffff:{self.ips[n]}")
        elif nccl >= (2, 19):
            pwarn = (f"NET/IB : Got completion from peer {self.ips[n]}<{rng.randrange(32768, 60999)}> with error 5, opcode 0, "
                     f"len 1, vendor err 244 (Recv) localGid ::ffff:{peer_ip} remoteGid ::ffff:{self.ips[n]}")
        else:
            pwarn = f"NET/IB : Got completion from peer {self.ips[n]}<{rng.randrange(32768, 60999)}> with error 5, opcode 0, len 1, vendor err 244"
        self.w(pw.rank, tp, f"{self.hosts[peer_node]}:{pw.pid}:{ptid} [{pw.local}] transport/net_ib.cc:1296 NCCL WARN {pwarn}",
               stream="o")
        self.ib_peer = pw.rank
        return warn, t2 + 0.01

    def teardown(self, rn: int, stuck: int) -> None:
        """Agents, srun and the optional scancel of a stuck node."""
        rng = self.rng
        ends: list[tuple[float, int, int, int]] = []
        last_end = 0.0
        if self.has_agent:
            start_poll = rng.uniform(20.0, 40.0)
            for n in range(self.nodes):
                if n == stuck:
                    continue
                exits = {w.rank: (w.exit_t, w.exit_code) for w in self.workers
                         if w.node == n and w.exit_t is not None and w.exit_code is not None}
                t_end = self.agent_teardown(n, exits=exits, start_poll=start_poll)
                if t_end is not None:
                    ends.append((t_end, n, n, 1))
                    last_end = max(last_end, t_end)
        else:
            for w in self.workers:
                if w.node == stuck or w.exit_t is None:
                    continue
                code = w.exit_code if w.exit_code is not None else 1
                if self.fault.name == "host-oom-kill" and w.rank == self.root:
                    t = w.exit_t + rng.uniform(0.2, 1.0)
                    self.b(t, f"slurmstepd: error: Detected 1 oom_kill event in StepId={self.job_id}.0. Some of the "
                              "step tasks have been OOM Killed.")
                    self.b(t + 0.01, f"srun: error: {self.hosts[w.node]}: task {w.rank}: Out Of Memory")
                    last_end = max(last_end, t)
                    continue
                ends.append((w.exit_t, w.node, w.rank, code))
                last_end = max(last_end, w.exit_t)
        # ranks that never exit on their own (the silent culprit in per-rank layout; a stuck node)
        leftovers = [w for w in self.workers if w.exit_t is None]
        if leftovers:
            t_c = last_end + self.o.scancel_delay * rng.uniform(0.8, 1.2)
            n0 = 0
            self.b(t_c, f"slurmstepd: error: *** JOB {self.job_id} ON {self.hosts[n0]} CANCELLED AT "
                        f"{self.clock.slurm(self.host_t(n0, t_c))} ***")
            self.b(t_c + 0.01, "srun: Job step aborted: Waiting up to 32 seconds for job step to finish.")
            nodes_left = sorted({w.node for w in leftovers})
            self.s(nodes_left[0], t_c + 0.005, f"slurmstepd: error: *** STEP {self.job_id}.0 ON {self.hosts[nodes_left[0]]} "
                                               f"CANCELLED AT {self.clock.slurm(self.host_t(nodes_left[0], t_c))} ***")
            for n in nodes_left:
                if self.has_agent:
                    te = self.agent_signal_exit(n, t_c + rng.uniform(0.01, 0.3))
                    ends.append((te, n, n, 1))
                else:
                    for w in leftovers:
                        if w.node == n:
                            w.exit_t, w.exit_code = t_c + 0.2, -15
                            ends.append((w.exit_t, n, w.rank, -15))
        self.srun_exits(ends)

    def teardown_kill_on_bad_exit(self) -> None:
        """srun --kill-on-bad-exit: the first task that exits non-zero makes srun cancel the whole step."""
        rng, p = self.rng, self.p
        ends: list[tuple[float, int, int, int]] = []
        t_kill: float | None = None
        done: set[int] = set()
        if self.has_agent:
            start_poll = rng.uniform(20.0, 40.0)
            firsts = []
            for n in range(self.nodes):
                ts = [w.exit_t for w in self.workers if w.node == n and w.exit_t is not None]
                if ts:
                    firsts.append((min(ts), n))
            for fe, n in sorted(firsts):
                if t_kill is not None and fe + p.monitor_interval >= t_kill:
                    break
                exits = {w.rank: (w.exit_t, w.exit_code) for w in self.workers
                         if w.node == n and w.exit_t is not None and w.exit_code is not None}
                t_end = self.agent_teardown(n, exits=exits, start_poll=start_poll)
                if t_end is None:
                    continue
                ends.append((t_end, n, n, 1))
                done.add(n)
                if t_kill is None:
                    t_kill = t_end + 0.35 + rng.uniform(0.0, 0.3)
        else:
            exited = sorted((w.exit_t, w.rank) for w in self.workers if w.exit_t is not None)
            if exited:
                t_kill = exited[0][0] + 0.35 + rng.uniform(0.0, 0.3)
            for t, r in exited:
                w = self.workers[r]
                if t_kill is not None and t < t_kill:
                    ends.append((t, w.node, r, w.exit_code if w.exit_code is not None else 1))
        if t_kill is None:        # nothing ever exits: fall back to the user's scancel
            self.teardown(self.workers[self.root].node if self.root is not None else 0, -1)
            return
        modern = p.key in ("2.6", "2.8")
        self.b(t_kill, f"srun: launch/slurm: _step_signal: Terminating StepId={self.job_id}.0" if modern
               else f"srun: Terminating job step {self.job_id}.0")
        left_nodes = [n for n in range(self.nodes) if n not in done]
        if self.has_agent:
            for n in left_nodes:
                te = self.agent_signal_exit(n, t_kill + rng.uniform(0.02, 0.3))
                ends.append((te, n, n, -9))
        else:
            for w in self.workers:
                if w.exit_t is None or w.exit_t >= t_kill:
                    w.exit_t, w.exit_code = t_kill + rng.uniform(0.05, 0.5), -9
                    ends.append((w.exit_t, w.node, w.rank, -9))
            left_nodes = sorted({w.node for w in self.workers if w.exit_code == -9})
        if left_nodes:
            n = left_nodes[0]
            self.s(n, t_kill + 0.01, f"slurmstepd: error: *** STEP {self.job_id}.0 ON {self.hosts[n]} CANCELLED AT "
                                     f"{self.clock.slurm(self.host_t(n, t_kill))} ***")
        self.b(t_kill + 0.02, "srun: Job step aborted: Waiting up to 32 seconds for job step to finish.")
        self.srun_exits(ends)

    def describe(self, details: str, step: int, seq: int, op: str, stuck: int, secondary: int | None) -> None:
        f, r = self.fault, self.root
        assert r is not None
        w = self.workers[r]
        host = self.hosts[w.node]
        n_coll = len(self.collateral - ({secondary} if secondary is not None else set()))
        parts = [f"Rank {r} (host {host}, local rank {w.local}) failed first at step ~{step}: {f.title}"
                 + (f" ({details})." if details else ".")]
        if f.mechanism == "hang":
            parts = [f"Rank {r} (host {host}, local rank {w.local}) silently stopped after step {step}: it printed no "
                     f"error, it just never entered collective SeqNum {seq} ({op})."]
        if f.name == "host-oom-kill":
            parts.append("The process printed nothing; the only trace is its exit status "
                         + ("in the torchrun agent line 'failed (exitcode: -9)' while the other local workers were sent SIGTERM."
                            if self.has_agent else "in slurmstepd's oom_kill notice and srun's 'Out Of Memory' task line."))
        if secondary is not None:
            sw = self.workers[secondary]
            parts.append(f"Rank {secondary} on {self.hosts[sw.node]} hit the same storage error "
                         f"{self.o.secondary_delay:.1f} s later (true time) and is a consequence, not the root, even if "
                         "its host clock makes it look earlier.")
        if n_coll:
            parts.append(f"{n_coll} other rank(s) blocked in SeqNum {seq} ({op}) and their NCCL watchdogs fired after "
                         "Timeout(ms)=600000; those timeouts, DistBackendError tracebacks and aborts are collateral.")
        if self.has_agent:
            parts.append("Each torchrun agent sent SIGTERM to its remaining workers and printed its own ChildFailedError "
                         "table whose 'Root Cause' is only the first local failure of that node.")
        if self.o.kill_on_bad_exit and f.mechanism == "exception" and w.exit_code in (-9, -15):
            parts.append("The root process hung at exit after printing its traceback, so its agent never reported it; "
                         "srun (--kill-on-bad-exit) cancelled the step only when a collateral task exited, and any "
                         "ChildFailedError table names collateral ranks.")
        if stuck >= 0:
            parts.append(f"Node {self.hosts[stuck]} hung in NCCL abort until the job was scancelled, which produced the "
                         "final 'CANCELLED' lines; they are teardown, not the cause.")
        self.description = " ".join(parts)

    # ---------------------------------------------------------------- truth
    def truth(self, files: Sequence[str]) -> Truth:
        f = self.fault
        rule = f.rule
        if not self.has_agent and f.rule_without_agent:
            rule = f.rule_without_agent
        r = self.root
        return Truth(
            verdict=f.verdict, root_rank=r, rule=rule,
            root_host=self.hosts[self.workers[r].node] if r is not None else None,
            collateral_ranks=tuple(sorted(self.collateral)), fault=f.name, layout=self.layout, ranks=self.ranks,
            skew_s={h: self.offset[i] for i, h in enumerate(self.hosts)}, description=self.description,
            root_time=self.clock.iso(self.root_time) if self.root_time is not None and r is not None else None,
            root_local_rank=self.workers[r].local if r is not None else None, files=tuple(files))

    # ---------------------------------------------------------------- writers
    def render_worker(self, r: int, rec: _Rec, outer: str) -> str:
        """One physical line of worker output. ``outer`` is the launcher prefix (srun label, tee tag)."""
        k = rec.kind
        inproc = ""
        if self.layout == "torchrun-combined":
            inproc = f"[rank{r}]: " if k == "tb" else f"[rank{r}]:"
        elif self.p.rank_prefix:
            if k == "glog":
                inproc = f"[rank{r}]:"
            elif k == "tb":
                inproc = f"[rank{r}]: "
        return f"{outer}{rec.lead}{inproc}{rec.text}"

    def write(self, out: Path) -> list[str]:
        out.mkdir(parents=True, exist_ok=True)
        files: list[str] = []
        for rl in self.recs:
            rl.sort(key=lambda x: (x.t, x.seq))
        if self.layout == "per-rank":
            for r, rl in enumerate(self.recs):
                name = f"rank-{r}.out" if self.o.per_rank_names == "rank" else f"slurm-{self.job_id}_{r}.out"
                self._write_lines(out / name, (self.render_worker(r, x, "") for x in rl if not (x.lead and not x.text)),
                                  glue=[x for x in rl])
                files.append(name)
            batch = sorted([(t, s, txt) for t, s, txt in self.batch] + [(t, s, txt) for t, s, n, txt in self.nodeslurm])
            name = f"slurm-{self.job_id}.out"
            self._write_text(out / name, [x[2] for x in batch])
            files.append(name)
        elif self.layout == "srun-combined":
            merged: list[tuple[float, int, str]] = []
            for r, rl in enumerate(self.recs):
                wk = self.workers[r]
                outer = f"{wk.node}: [default{wk.local}]:"
                merged += self._glued(r, rl, outer)
            for n, al in enumerate(self.agent):
                merged += [(t, s, f"{n}: {txt}") for t, s, txt in al]
            merged += [(t, s, f"{n}: {txt}") for t, s, n, txt in self.nodeslurm]
            merged += self.batch
            merged.sort(key=lambda x: (x[0], x[1]))
            name = f"slurm-{self.job_id}.out"
            self._write_text(out / name, [x[2] for x in merged])
            files.append(name)
        elif self.layout == "torchrun-combined":
            per_node: list[list[tuple[float, int, str]]] = [[] for _ in range(self.nodes)]
            for r, rl in enumerate(self.recs):
                per_node[self.workers[r].node] += self._glued(r, rl, "")
            for n, al in enumerate(self.agent):
                per_node[n] += al
            for t, s, n, txt in self.nodeslurm:
                per_node[n].append((t, s, txt))
            for n in range(self.nodes):
                name = "train.log" if self.nodes == 1 else f"train-{self.hosts[n]}.log"
                lines = sorted(per_node[n], key=lambda x: (x[0], x[1]))
                self._write_text(out / name, [x[2] for x in lines])
                files.append(name)
            if self.batch:
                name = f"slurm-{self.job_id}.out"
                self._write_text(out / name, [x[2] for x in sorted(self.batch, key=lambda x: (x[0], x[1]))])
                files.append(name)
        else:  # torchelastic --log-dir
            for r, rl in enumerate(self.recs):
                wk = self.workers[r]
                d = out / f"node-{wk.node}" / self.log_run_dir / "attempt_0" / str(wk.local)
                d.mkdir(parents=True, exist_ok=True)
                for stream, fname in (("o", "stdout.log"), ("e", "stderr.log")):
                    sub = [x for x in rl if x.stream == stream or (stream == "e" and x.kind != "log")]
                    sub = [x for x in sub if not (stream == "o" and x.kind != "log")]
                    self._write_lines(d / fname, (self.render_worker(r, x, "") for x in sub if not (x.lead and not x.text)),
                                      glue=sub)
                    files.append(str((d / fname).relative_to(out)))
                if wk.error_json is not None:
                    (d / "error.json").write_text(wk.error_json)
                    files.append(str((d / "error.json").relative_to(out)))
            merged = []
            for n, al in enumerate(self.agent):
                merged += [(t, s, f"{n}: {txt}") for t, s, txt in al]
            merged += [(t, s, f"{n}: {txt}") for t, s, n, txt in self.nodeslurm]
            merged += self.batch
            merged.sort(key=lambda x: (x[0], x[1]))
            name = f"slurm-{self.job_id}.out"
            self._write_text(out / name, [x[2] for x in merged])
            files.append(name)
        return files

    def _glued(self, r: int, rl: Sequence[_Rec], outer: str) -> list[tuple[float, int, str]]:
        """Worker records as (t, seq, line); a lead-only record (tqdm frames) is glued to the next line."""
        out: list[tuple[float, int, str]] = []
        pending = ""
        for x in rl:
            if x.lead and not x.text:
                pending += x.lead
                continue
            line = self.render_worker(r, x, outer)
            if pending:
                line = outer + pending + line[len(outer):]
                pending = ""
            out.append((x.t, x.seq, line))
        return out

    def _write_lines(self, path: Path, lines: Iterable[str], glue: Sequence[_Rec]) -> None:
        # glue lead-only records onto the following record of the same file
        out: list[str] = []
        pending = ""
        rendered = iter(lines)
        for x in glue:
            if x.lead and not x.text:
                pending += x.lead
                continue
            line = next(rendered)
            if pending:
                line = pending + line
                pending = ""
            out.append(line)
        self._write_text(path, out)

    @staticmethod
    def _write_text(path: Path, lines: Sequence[str]) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "w", encoding="utf-8", newline="") as fh:
            fh.write("\n".join(lines))
            if lines:
                fh.write("\n")


# --------------------------------------------------------------------------------------------------
# Public API


def _expected_toml(t: Truth) -> str:
    lines = [f"verdict = {_toml_str(t.verdict)}"]
    if t.root_rank is not None:
        lines.append(f"root_rank = {t.root_rank}")
    if t.rule is not None:
        lines.append(f"rule = {_toml_str(t.rule)}")
    if t.root_host is not None:
        lines.append(f"root_host = {_toml_str(t.root_host)}")
    lines.append(f"description = {_toml_str(t.description)}")
    lines.append("")
    lines.append("# generator facts (not part of the analyzer contract)")
    lines.append("[synth]")
    lines.append(f"fault = {_toml_str(t.fault)}")
    lines.append(f"layout = {_toml_str(t.layout)}")
    lines.append(f"ranks = {t.ranks}")
    if t.root_local_rank is not None:
        lines.append(f"root_local_rank = {t.root_local_rank}")
    if t.root_time is not None:
        lines.append(f"root_time = {_toml_str(t.root_time)}")
    lines.append(f"collateral_ranks = [{', '.join(str(x) for x in t.collateral_ranks)}]")
    lines.append("")
    lines.append("[synth.skew_s]")
    for h, v in t.skew_s.items():
        lines.append(f"{_toml_str(h)} = {v!r}")
    return "\n".join(lines) + "\n"


def generate_job(out_dir: Path, *, fault: str, ranks: int, layout: str, seed: int,
                 gpus_per_node: int = 8, max_skew_s: float = 0.0, drop_timestamps: float = 0.0,
                 lines_per_rank: int = 200, root_rank: int | None = None, host_prefix: str | None = None,
                 job_id: int | None = None, torch_version: str | None = None,
                 skew: Mapping[str, float] | None = None, variant: Mapping[str, object] | None = None) -> Truth:
    """Write one simulated job into ``out_dir`` (its logs and ``expected.toml``) and return the truth.

    The keyword arguments after ``lines_per_rank`` pin details for hand-made samples: the root rank,
    host name prefix, Slurm job id, PyTorch profile (one of ``PROFILES``), exact per-host clock offsets
    and ``variant`` switches (fields of the internal options: ``record``, ``framework``, ``steplog``,
    ``ansi``, ``tqdm``, ``stuck_node``, ``per_rank_names``, ``eio_variant``, ``ecc_variant``,
    ``culprit_dump``, ``secondary``, ``secondary_delay``, ``secondary_rank``, ``fail_after_logs``,
    ``scancel_delay``, ``fqdn``, ``log_exception``).
    """
    if fault not in FAULTS:
        raise ValueError(f"unknown fault {fault!r}; known: {', '.join(FAULTS)}")
    if layout not in LAYOUTS:
        raise ValueError(f"unknown layout {layout!r}; known: {', '.join(LAYOUTS)}")
    if ranks < 1 or gpus_per_node < 1:
        raise ValueError("ranks and gpus_per_node must be >= 1")
    if fault in ("nccl-hang",) and ranks < 2:
        raise ValueError("nccl-hang needs at least two ranks")
    if not 0.0 <= drop_timestamps <= 1.0:
        raise ValueError("drop_timestamps must be in [0, 1]")
    rng = random.Random(f"correlate-synth:{seed}:{fault}:{ranks}:{layout}:{gpus_per_node}")
    job = _Job(fault=FAULTS[fault], ranks=ranks, layout=layout, seed=seed, gpn=gpus_per_node,
               max_skew_s=max_skew_s, drop=drop_timestamps, lines_per_rank=max(8, lines_per_rank), rng=rng,
               root_rank=root_rank, host_prefix=host_prefix, job_id=job_id, torch_version=torch_version,
               skew=skew, variant=variant)
    job.simulate()
    out_dir = Path(out_dir)
    files = job.write(out_dir)
    truth = job.truth(files)
    (out_dir / "expected.toml").write_text(_expected_toml(truth), encoding="utf-8")
    return truth


_SUITE_RANKS = (8, 8, 16, 16, 16, 32, 32, 64, 64, 128, 256, 512, 1024)


def generate_suite(out_dir: Path, *, jobs: int, seed: int) -> list[tuple[Path, Truth]]:
    """Write ``jobs`` varied jobs under ``out_dir`` (``job-0000-<fault>-<layout>-<ranks>/``)."""
    rng = random.Random(f"correlate-suite:{seed}")
    out_dir = Path(out_dir)
    names = list(FAULTS)
    result: list[tuple[Path, Truth]] = []
    for i in range(jobs):
        fault = names[i % len(names)] if i < len(names) * 2 else rng.choice(names)
        kind = FAULTS[fault]
        gpn = rng.choice([8, 8, 8, 4])
        ranks = rng.choice(_SUITE_RANKS)
        if ranks < gpn * kind.min_nodes:
            ranks = gpn * kind.min_nodes
        layout = rng.choice(LAYOUTS)
        if layout == "torchelastic" and ranks > 256:
            layout = "srun-combined"
        if layout == "torchrun-combined" and ranks > 64:
            layout = "srun-combined"
        lpr = max(12, min(160, 5000 // ranks))
        skew = rng.choice([0.0, 0.0, 0.2, 1.0, 3.0])
        drop = rng.choice([0.0, 0.0, 0.05, 0.2])
        d = out_dir / f"job-{i:04d}-{fault}-{layout}-{ranks}"
        t = generate_job(d, fault=fault, ranks=ranks, layout=layout, seed=rng.randrange(1 << 30),
                         gpus_per_node=gpn, max_skew_s=skew, drop_timestamps=drop, lines_per_rank=lpr)
        result.append((d, t))
    return result


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tools.synth", description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("suite", help="write a varied mix of jobs")
    s.add_argument("out", type=Path)
    s.add_argument("--jobs", type=int, default=200)
    s.add_argument("--seed", type=int, default=1)
    j = sub.add_parser("job", help="write one job")
    j.add_argument("out", type=Path)
    j.add_argument("--fault", required=True, choices=sorted(FAULTS))
    j.add_argument("--ranks", type=int, required=True)
    j.add_argument("--layout", required=True, choices=LAYOUTS)
    j.add_argument("--seed", type=int, default=1)
    j.add_argument("--gpus-per-node", type=int, default=8)
    j.add_argument("--max-skew", type=float, default=0.0, dest="max_skew_s")
    j.add_argument("--drop-timestamps", type=float, default=0.0)
    j.add_argument("--lines-per-rank", type=int, default=200)
    j.add_argument("--root-rank", type=int, default=None)
    j.add_argument("--torch", dest="torch_version", choices=sorted(PROFILES), default=None)
    a = ap.parse_args(argv)
    if a.cmd == "suite":
        res = generate_suite(a.out, jobs=a.jobs, seed=a.seed)
        for d, t in res:
            print(f"{d.name}\t{t.verdict}\t{t.root_rank}\t{t.rule}")
        return 0
    t = generate_job(a.out, fault=a.fault, ranks=a.ranks, layout=a.layout, seed=a.seed,
                     gpus_per_node=a.gpus_per_node, max_skew_s=a.max_skew_s,
                     drop_timestamps=a.drop_timestamps, lines_per_rank=a.lines_per_rank,
                     root_rank=a.root_rank, torch_version=a.torch_version)
    print(f"{a.out}\t{t.verdict}\troot_rank={t.root_rank}\trule={t.rule}\thost={t.root_host}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
