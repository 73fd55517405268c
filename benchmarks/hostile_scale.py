"""Hostile input at scale (issue 17, items 9 and 10): time, throughput and peak RSS of ``correlate``
on two generated logs, with a reference tool timed on the same file in the same run.

- ``ranks``: one combined file naming N ranks (default 100,000), one NCCL watchdog timeout line
  each, after one rank's EIO traceback: the cascade of a very large job in one file. What matters
  is that the collateral is grouped before it is materialised per rank (peak RSS) and that the
  JSON stays small (its per-rank detail is capped).
- ``tracebacks``: a log of N lines (default 1,000,000) that are all Python tracebacks, a
  dataloader retrying and printing the same exception over and over. What matters is that the
  time stays linear in the size with a small constant (MB/s).

    python benchmarks/hostile_scale.py                      # both, full size
    python benchmarks/hostile_scale.py --ranks 20000 --lines 200000
    python benchmarks/hostile_scale.py gen ranks -n 100000 -o /tmp/ranks.log   # the input only
    python benchmarks/hostile_scale.py ranks -n 20000       # one of the two only

Each run prints wall time, MB/s, peak RSS (``getrusage(RUSAGE_CHILDREN)`` of a wrapper process:
the process tree's maximum resident set), the JSON's size, and the ratio to ``wc -l`` (and
``rg -c`` when installed) on the same file, measured in the same round: the machine is shared,
so the ratio is the number to compare across runs. Nothing here is a test; the functional checks
at a small size are ``tests/test_attacks_scale.py``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PER_NODE = 8

_WRAPPER = (
    "import resource, subprocess, sys, time\n"
    "t = time.perf_counter()\n"
    "r = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)\n"
    "dt = time.perf_counter() - t\n"
    "print(dt, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, r.returncode)\n"
)


def _py(sec: float) -> str:
    """A Python-logging stamp on 2026-03-02, ``sec`` seconds after 14:00:00."""
    h, rem = divmod(int(sec), 3600)
    m, s = divmod(rem, 60)
    return f"2026-03-02 {14 + h:02d}:{m:02d}:{s:02d},{int(sec * 1000) % 1000:03d}"


def _glog(sec: float) -> str:
    h, rem = divmod(int(sec), 3600)
    m, s = divmod(rem, 60)
    return f"E0302 {14 + h:02d}:{m:02d}:{s:02d}.{int(sec * 1e6) % 1_000_000:06d}"


def ranks_lines(n: int, root: int = 5) -> list[str]:
    """A combined ``srun --label`` stream of ``n`` ranks: one step each, the root's EIO traceback,
    then every other rank's watchdog timeout (600 s later, 1 ms apart)."""
    out = []
    for r in range(n):
        node, lr = divmod(r, PER_NODE)
        out.append(f"{node}: [default{lr}]:[rank{r}]:{_py(60)} - train - INFO - step=100 loss=2.31")
    node, lr = divmod(root, PER_NODE)
    pre = f"{node}: [default{lr}]:[rank{root}]:"
    out += [pre + f"{_py(90)} - lightning - INFO - Saving checkpoint to /lustre/ckpt/last.ckpt",
            pre + "Traceback (most recent call last):",
            pre + '  File "/opt/lightning/fabric/utilities/cloud_io.py", line 82, in _atomic_save',
            pre + "    torch.save(checkpoint, bytesbuffer)",
            pre + "OSError: [Errno 5] Input/output error"]
    for r in range(n):
        if r == root:
            continue
        node, lr = divmod(r, PER_NODE)
        out.append(f"{node}: [default{lr}]:[rank{r}]:[{_glog(690 + (r % 1000) / 1000)} ProcessGroupNCCL.cpp:616] "
                   f"[Rank {r}] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=301, "
                   f"OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600010 milliseconds "
                   f"before timing out.")
    return out


_TB = [
    "Traceback (most recent call last):",
    '  File "/opt/conda/lib/python3.11/site-packages/torch/utils/data/dataloader.py", line 1345, in _next_data',
    "    return self._process_data(data)",
    '  File "/opt/conda/lib/python3.11/site-packages/torch/utils/data/_utils/fetch.py", line 52, in fetch',
    "    data = [self.dataset[idx] for idx in possibly_batched_index]",
    '  File "/workspace/data/shards.py", line 88, in __getitem__',
    "    raise ValueError(f\"corrupt sample {idx} in shard {shard}\")",
    "ValueError: corrupt sample @I@ in shard @S@",
]


def traceback_lines(n: int) -> list[str]:
    """``n`` lines: the same eight-line traceback over and over, each after one stamped warning
    (a loader that skips bad samples and prints why), then a rank's real failure at the end."""
    out: list[str] = []
    i = 0
    while len(out) < n:
        out.append(f"{_py(60 + i * 0.01)} - data - WARNING - skipping sample {i}")
        out += [x.replace("@I@", str(i)).replace("@S@", str(i % 4096)) for x in _TB]
        i += 1
    del out[n:]
    out += [f"{_py(60 + i * 0.01 + 5)} - train - INFO - forward",
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 1 has a total "
            "capacity of 79.15 GiB of which 1.02 GiB is free."]
    return out


def write(lines: list[str], path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(lines))
        f.write("\n")
    return path


def measure(cmd: list[str]) -> tuple[float, int, int]:
    """Wall seconds, peak RSS in KiB of the process tree, exit code."""
    r = subprocess.run([sys.executable, "-c", _WRAPPER, *cmd], capture_output=True, text=True, cwd=ROOT,
                       check=True)
    dt, rss, rc = r.stdout.split()
    return float(dt), int(rss), int(rc)


def bench(name: str, path: Path, out: Path, repeat: int) -> dict:
    size = path.stat().st_size
    refs = {"wc -l": ["wc", "-l", str(path)]}
    if shutil.which("rg"):
        refs["rg -c"] = ["rg", "-c", "Traceback|Watchdog|Error", str(path)]
    best: dict[str, tuple[float, int]] = {}
    for _ in range(repeat):  # rounds: each tool once per round, so a burst of load hits all alike
        for tool, cmd in [("correlate", [sys.executable, "-m", "correlator", str(path), "--format", "json",
                                         "-o", str(out)]), *refs.items()]:
            dt, rss, rc = measure(cmd)
            if tool == "correlate" and rc != 0:
                raise SystemExit(f"correlate exited {rc} on {path}")
            if tool not in best or dt < best[tool][0]:
                best[tool] = (dt, max(rss, best.get(tool, (0, 0))[1]))
            else:
                best[tool] = (best[tool][0], max(rss, best[tool][1]))
    c_dt, c_rss = best["correlate"]
    rep = json.loads(out.read_text())
    res = {"input": name, "bytes": size, "seconds": round(c_dt, 3), "mb_per_s": round(size / 1e6 / c_dt, 1),
           "peak_rss_mb": round(c_rss / 1024, 1), "json_bytes": out.stat().st_size,
           "verdict": rep["verdict"], "root_rank": (rep.get("root_cause") or {}).get("rank"),
           "ratios": {t: round(c_dt / d, 1) for t, (d, _) in best.items() if t != "correlate"},
           "reference_s": {t: round(d, 3) for t, (d, _) in best.items() if t != "correlate"}}
    return res


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd")
    g = sub.add_parser("gen", help="write one input and stop")
    g.add_argument("kind", choices=("ranks", "tracebacks"))
    g.add_argument("-n", type=int, required=True, help="ranks, or traceback lines")
    g.add_argument("-o", type=Path, required=True)
    for kind, n in (("ranks", 100_000), ("tracebacks", 1_000_000)):
        one = sub.add_parser(kind, help=f"measure {kind} only")
        one.add_argument("-n", type=int, default=n, help="ranks, or traceback lines")
    ap.add_argument("--ranks", type=int, default=100_000)
    ap.add_argument("--lines", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--data", type=Path, default=None, help="where inputs go (default: a temporary folder)")
    ap.add_argument("--json", type=Path, default=None, help="also write the measurements here")
    a = ap.parse_args(argv)
    if a.cmd == "gen":
        write(ranks_lines(a.n) if a.kind == "ranks" else traceback_lines(a.n), a.o)
        return
    if a.cmd == "ranks":
        a.ranks = a.n
    if a.cmd == "tracebacks":
        a.lines = a.n
    data = a.data or Path(tempfile.mkdtemp(prefix="hostile-scale-"))
    results = []
    for name, lines in (("ranks", lambda: ranks_lines(a.ranks)), ("tracebacks", lambda: traceback_lines(a.lines))):
        if a.cmd in ("ranks", "tracebacks") and name != a.cmd:
            continue
        path = write(lines(), data / f"{name}.log")
        r = bench(f"{name} ({a.ranks if name == 'ranks' else a.lines:,})", path, data / f"{name}.json", a.repeat)
        results.append(r)
        refs = ", ".join(f"{r['ratios'][t]}x {t} ({r['reference_s'][t]} s)" for t in r["ratios"])
        print(f"{r['input']:<24} {r['bytes'] / 1e6:8.1f} MB {r['seconds']:8.2f} s {r['mb_per_s']:8.1f} MB/s "
              f"RSS {r['peak_rss_mb']:7.1f} MB  JSON {r['json_bytes'] / 1e6:6.2f} MB  {r['verdict']} "
              f"rank {r['root_rank']}  | {refs}", flush=True)
    if a.json:
        a.json.write_text(json.dumps(results, indent=2) + "\n")
    if a.data is None:
        shutil.rmtree(data)


if __name__ == "__main__":
    main()
