"""PyTorch release profiles (what the watchdog, the agent and tracebacks print) and the cascade's timing.

Line numbers in the profiles are representative of the release each one models, not pinned to one
exact build. The timing constants are the reason no waiting rank is cut short by a sibling's teardown.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Profile:
    """What one PyTorch release prints: formats, timings and the source line numbers in its messages."""

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
    pg_format: str             # how the process group is named in watchdog lines ({r}: the rank)
    c10d_src: str              # source prefix in "Exception raised from ... at <src>/ProcessGroupNCCL.cpp"
    cpp_line: Mapping[str, int]       # ProcessGroupNCCL.cpp line of each message (keys name the message)
    agent_py_line: Mapping[str, int]  # torchelastic's Python line of each agent message and frame
    oom_format: str            # CUDA OOM message: "old" (total capacity; already allocated) | "new" (has a total capacity of)
    oom_class: str
    flight_recorder: str       # "" | "notfound" (disabled: says so) | "stack" (prints the failed collective's stack)


PROFILES: dict[str, Profile] = {
    # torch 2.1-era: no [rankN]: prefix, undated glog tags, bracketed agent logging.
    "2.1": Profile(
        "2.1", "2.1.2", "3.10", "2.18.1", "12.1", False, False, False, 5.0, (0.25, 0.9),
        "[Rank {r}]", "../torch/csrc/distributed/c10d",
        {"wd": 474, "some": 455, "avoid": 460, "check": 525, "dsync": 1203},
        {"errors": 346, "main": 806, "run": 797, "call": 134, "launch": 264},
        "old", "torch.cuda.OutOfMemoryError", ""),
    "2.3": Profile(
        "2.3", "2.3.1", "3.10", "2.20.5", "12.1", True, False, False, 5.0, (0.3, 1.2),
        "[PG 0 Rank {r}]", "../torch/csrc/distributed/c10d",
        {"wd": 563, "timeout_at": 1537, "some": 577, "avoid": 583, "term": 1414, "check": 565,
         "watchdog": 1418, "remote": 1723},
        {"errors": 347, "main": 879, "run": 870, "call": 132, "launch": 263},
        "new", "torch.cuda.OutOfMemoryError", ""),
    "2.4": Profile(
        "2.4", "2.4.1", "3.11", "2.20.5", "12.4", True, True, True, 0.1, (0.4, 1.5),
        "[PG 0 (default_pg) Rank {r}]", "../torch/csrc/distributed/c10d",
        {"wd": 607, "detected": 1664, "some": 621, "avoid": 627, "term": 1515, "check": 609,
         "watchdog": 1521, "remote": 1808},
        {"sigterm": 897, "failed": 869, "death": 719, "errors": 355, "main": 918, "run": 909,
         "call": 138, "launch": 269, "runpy": 0},
        "new", "torch.cuda.OutOfMemoryError", ""),
    "2.6": Profile(
        "2.6", "2.6.0", "3.11", "2.21.5", "12.4", True, True, True, 0.1, (0.6, 1.2),
        "[PG ID 0 PG GUID 0(default_pg) Rank {r}]", "/pytorch/torch/csrc/distributed/c10d",
        {"wd": 632, "failure": 2271, "notfound": 670, "first": 2106, "dump": 1746, "prep": 1536,
         "some": 684, "avoid": 698, "term": 1899, "check": 635, "watchdog": 1905, "remote": 2009,
         "destroy": 1496},
        {"sigterm": 900, "failed": 874, "death": 719, "errors": 355, "main": 892, "run": 883,
         "call": 139, "launch": 270, "runpy": 0},
        "new", "torch.OutOfMemoryError", "notfound"),
    "2.8": Profile(
        "2.8", "2.8.0", "3.12", "2.27.3", "12.8", True, True, True, 0.1, (59.5, 60.5),
        "[PG ID 0 PG GUID 0(default_pg) Rank {r}]", "/pytorch/torch/csrc/distributed/c10d",
        {"wd": 757, "failure": 2395, "stack": 801, "first": 2732, "dump": 1987, "observed": 1922,
         "prep": 1700, "broken": 1442, "some": 818, "avoid": 832, "term": 2197, "check": 760,
         "remote": 2261, "destroy": 1647},
        {"sigterm": 1014, "failed": 988, "death": 719, "errors": 367, "main": 1016, "run": 1007,
         "call": 191, "launch": 371, "runpy": 1020},
        "new", "torch.OutOfMemoryError", "stack"),
}


# Timing of the ranks that wait in the collective the root never joins. They were synchronised by the
# previous collective, so they enqueue the stuck one within ENQUEUE_SPREAD_S of each other; their watchdogs
# poll every WATCHDOG_POLL_S (ProcessGroupNCCL kWatchdogThreadSleepMillis = 100), so "ran for" is 600000 plus
# under 100 ms, as in real logs. Every way a waiting rank can end (abort, Python DistBackendError exit)
# takes longer than that window, so no agent SIGTERM or srun kill triggered by a sibling's exit can reach
# a waiting rank before its own timeout is printed (checked below and by tests/test_synth.py).
ENQUEUE_SPREAD_S = 0.08
WATCHDOG_POLL_S = 0.1
PY_EXIT_S = (0.25, 0.8)      # DistBackendError traceback -> process exit (interpreter shutdown tears down the PG)
COORD_CHECK_S = 1.0          # 2.8 heartbeat monitor polls the TCPStore dump key (TORCH_NCCL_COORD_CHECK_MILSEC)
assert min([PY_EXIT_S[0]] + [pr.abort_delay[0] for pr in PROFILES.values()]) > ENQUEUE_SPREAD_S + WATCHDOG_POLL_S
