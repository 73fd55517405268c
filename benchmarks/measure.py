"""Run one command and print what it cost, as one JSON line: wall and CPU seconds, peak RSS.

    python benchmarks/measure.py CMD [ARG...]

The command runs in a session of its own, so its whole process tree (a pool's workers, their
children) shares one process group; a sampler thread reads ``/proc`` every ``SAMPLE_S`` and keeps,
per process of that group, its peak resident set (``VmHWM``, the kernel's own maximum, so a peak
between two samples still counts), and the largest sum of the group's resident sets seen at one
sample (the tree's peak: the sum counts pages that forked workers share with their parent once per
process, so it is an upper bound). CPU time is ``getrusage(RUSAGE_CHILDREN)``: user + system of
every process of the tree that was waited for (a pool's workers are, by the pool). The command's
output goes to a temporary file (not ``/dev/null``: GNU grep stops at its first match when its
output is ``/dev/null``, so ``grep -c`` would not read the job); its exit code is in the result.

Printed: ``{"wall_s", "cpu_s", "user_s", "sys_s", "exit", "tree_rss_mb", "max_rss_mb",
"top_rss_mb", "processes"}``; ``top`` is the command's first process (for ``correlate``, the parent
that replays combined files and correlates), ``max`` the largest peak of any one process (at least
``ru_maxrss``, which also sees processes that ended between two samples).
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import tempfile
import threading
import time

#: how often the process tree is sampled
SAMPLE_S = 0.05


def _pgrp(pid: str) -> int | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return None
    # pid (comm) state ppid pgrp ...: comm may hold spaces and parentheses, so split after its last ')'
    fields = stat[stat.rfind(b")") + 2:].split()
    return int(fields[2]) if len(fields) > 2 else None


def _status_kb(pid: int) -> tuple[int, int] | None:
    """(VmRSS, VmHWM) in KiB, or None when the process is gone or is not a user process."""
    try:
        with open(f"/proc/{pid}/status", "rb") as f:
            text = f.read()
    except OSError:
        return None
    rss = hwm = None
    for line in text.split(b"\n"):
        if line.startswith(b"VmRSS:"):
            rss = int(line.split()[1])
        elif line.startswith(b"VmHWM:"):
            hwm = int(line.split()[1])
    return (rss, hwm) if rss is not None and hwm is not None else None


class Sampler(threading.Thread):
    def __init__(self, group: int) -> None:
        super().__init__(daemon=True)
        self.group = group
        self.stop = threading.Event()
        self.peak: dict[int, int] = {}  # pid -> VmHWM KiB
        self.tree_kb = 0
        self._others: set[str] = set()  # pids seen not to be ours (checked once each)
        self._ours: set[int] = set()

    def sample(self) -> None:
        for name in os.listdir("/proc"):
            if not name.isdigit() or name in self._others:
                continue
            pid = int(name)
            if pid not in self._ours:
                if _pgrp(name) == self.group:
                    self._ours.add(pid)
                else:
                    self._others.add(name)
                    continue
        total = 0
        for pid in list(self._ours):
            got = _status_kb(pid)
            if got is None:
                continue
            rss, hwm = got
            total += rss
            if hwm > self.peak.get(pid, 0):
                self.peak[pid] = hwm
        self.tree_kb = max(self.tree_kb, total)

    def run(self) -> None:
        while not self.stop.wait(SAMPLE_S):
            self.sample()


def main(argv: list[str]) -> int:
    # (output to a file, not /dev/null: GNU grep stops at the first match when its output is /dev/null)
    sink = tempfile.TemporaryFile()
    t = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=sink, stderr=subprocess.DEVNULL, start_new_session=True)
    sampler = Sampler(proc.pid)
    sampler.start()
    code = proc.wait()
    wall = time.perf_counter() - t
    sampler.stop.set()
    sampler.join()
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    top = sampler.peak.get(proc.pid, 0)
    out = {"wall_s": round(wall, 4), "cpu_s": round(ru.ru_utime + ru.ru_stime, 4), "user_s": round(ru.ru_utime, 4),
           "sys_s": round(ru.ru_stime, 4), "exit": code,
           "tree_rss_mb": round(max(sampler.tree_kb, top, ru.ru_maxrss) / 1024, 1),
           "max_rss_mb": round(max([ru.ru_maxrss, *sampler.peak.values()]) / 1024, 1),
           "top_rss_mb": round(top / 1024, 1), "processes": len(sampler.peak)}
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
