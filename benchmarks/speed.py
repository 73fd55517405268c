"""Speed and memory of ``correlate`` against ``rg -c`` and ``grep -E -c``, measured in one run.

    python benchmarks/speed.py                 # the full benchmark (generates ~9 GB under --data)
    python benchmarks/speed.py --quick         # a smaller version of the same, for a first look

It generates (once; reused while the generator is unchanged) a 1 GB / 64-rank job of one file per
rank, a 4096-rank job of ~1 MB files, and 64-rank jobs of 0.25, 0.5 and 2 GB, all with
``benchmarks/gen_speed.py``. Then, for each job and in the same run (so that the ratios hold on a
machine shared with others), it times:

- ``correlate DIR --format json`` -- the complete analysis: extraction on all cores, correlation,
  report;
- ``rg -c -f PATTERNS DIR`` (all cores) and ``grep -E -c -r -f PATTERNS DIR`` (one core) with the
  ~40 failure patterns of ``benchmarks/patterns.py``: the rules' own regexes, rewritten for each
  tool's syntax;

and prints wall time (best of ``--repeat`` runs, warm page cache), throughput, the ratios
correlate/rg and correlate/grep, and each tool's peak RSS (the process tree's maximum resident set,
from ``getrusage(RUSAGE_CHILDREN)`` of a wrapper process). The last table is correlate's time per GB
at 0.25, 0.5, 1 and 2 GB (and rg's, for reference): as measured, and above the start of a pooled run
(the same command on a 32 MB job of 64 ranks, run in the same rounds): the first includes the fixed
start (interpreter, pool, rules, report: about a third of a second) and so falls with the size; the
second is flat if the cost grows linearly with the input. It is the median over rounds of each
round's difference to that round's start (with the interquartile range): the small sizes differ from
the start by a tenth of a second, which one burst of load elsewhere would move by a fifth.

``--json FILE`` also writes every measurement as JSON.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import shutil
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

import gen_speed  # noqa: E402
import patterns  # noqa: E402

GB = 1 << 30

_WRAPPER = (
    "import resource, subprocess, sys, time\n"
    "t = time.perf_counter()\n"
    "r = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)\n"
    "dt = time.perf_counter() - t\n"
    "print(dt, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, r.returncode)\n"
)


def _gen_version() -> str:
    return hashlib.sha256((HERE / "gen_speed.py").read_bytes()).hexdigest()[:12]


def ensure_job(data: Path, name: str, ranks: int, per_rank: int) -> Path:
    """The job folder, generated unless an identical one is there."""
    out = data / name
    marker = out / ".generated"
    want = f"{_gen_version()} ranks={ranks} per_rank={per_rank}"
    if marker.exists() and marker.read_text() == want:
        return out
    if out.exists():
        shutil.rmtree(out)
    t = time.perf_counter()
    print(f"  generating {name} ({ranks} ranks x {per_rank / 1e6:.1f} MB) ...", file=sys.stderr, flush=True)
    gen_speed.gen_ranks(str(out), ranks, per_rank)
    marker.write_text(want)
    print(f"  ... {time.perf_counter() - t:.1f} s", file=sys.stderr, flush=True)
    return out


def du(path: Path) -> int:
    return sum(p.stat().st_size for p in path.iterdir() if p.is_file() and not p.name.startswith("."))


def measure(cmd: list[str], repeat: int) -> tuple[float, float, int]:
    """(best wall seconds, peak RSS MB of the best run's process tree, exit code)."""
    best = (float("inf"), 0.0, 0)
    for _ in range(repeat):
        out = subprocess.run([sys.executable, "-c", _WRAPPER, *cmd], capture_output=True, text=True)
        dt, kib, code = out.stdout.split()
        if float(dt) < best[0]:
            best = (float(dt), int(kib) / 1024, int(code))
    return best


#: rounds of the 0.25 .. 2 GB series (at least; ``--repeat`` when higher): the small sizes differ from
#: the start by a tenth of a second, and one run on a shared machine varies by a few hundredths, so
#: their per-GB figure is the median of many rounds (about 80 s in all)
SERIES_ROUNDS = 21


def _quantile(xs: list[float], q: float) -> float:
    """The ``q`` quantile of sorted ``xs`` (linear between neighbours)."""
    pos = (len(xs) - 1) * q
    lo = int(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def warm(path: Path) -> None:
    for p in path.iterdir():
        if p.is_file():
            with open(p, "rb") as f:
                while f.read(16 << 20):
                    pass


def tools(pat_rg: Path, pat_ere: Path) -> dict[str, list[str] | None]:
    return {
        "correlate": [sys.executable, "-m", "correlator", "{dir}", "--format", "json", "-o", os.devnull],
        "rg": ["rg", "-c", "-f", str(pat_rg), "{dir}"] if shutil.which("rg") else None,
        "grep": ["grep", "-E", "-c", "-r", "-f", str(pat_ere), "{dir}"] if shutil.which("grep") else None,
    }


def bench_job(path: Path, cmds: dict[str, list[str] | None], repeat: int) -> dict:
    size = du(path)
    warm(path)
    row: dict = {"job": path.name, "files": sum(1 for p in path.iterdir() if p.is_file() and not p.name.startswith(".")),
                 "bytes": size}
    # interleave the tools run by run, so that a burst of load elsewhere hits all of them alike
    results: dict[str, list[tuple[float, float, int]]] = {k: [] for k, v in cmds.items() if v}
    for _ in range(repeat):
        for name, cmd in cmds.items():
            if cmd:
                results[name].append(measure([c.replace("{dir}", str(path)) for c in cmd], 1))
    for name, runs in results.items():
        secs, rss, code = min(runs)
        row[name] = {"seconds": round(secs, 3), "mb_s": round(size / secs / 1e6, 1), "peak_rss_mb": round(rss, 1),
                     "exit": code, "runs": [round(r[0], 3) for r in runs]}
    c = row["correlate"]["seconds"]
    for other in ("rg", "grep"):
        if other in row:
            row[f"correlate/{other}"] = round(c / row[other]["seconds"], 2)
    return row


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default=os.environ.get("CORRELATE_BENCH_DATA", "/tmp/correlate-bench"),
                    help="where the generated jobs live (kept between runs)")
    ap.add_argument("--repeat", type=int, default=3, help="runs per tool and job (the best counts)")
    ap.add_argument("--quick", action="store_true", help="1/8 of every size (a first look, not the benchmark)")
    ap.add_argument("--no-4096", action="store_true", help="skip the 4096-rank job")
    ap.add_argument("--no-scaling", action="store_true", help="skip the 0.25 .. 2 GB series")
    ap.add_argument("--json", help="also write the results as JSON to this file")
    a = ap.parse_args(argv)
    data = Path(a.data)
    data.mkdir(parents=True, exist_ok=True)
    scale = 8 if a.quick else 1
    pat_rg, pat_ere = data / "patterns.rg", data / "patterns.ere"
    n_pat = patterns.write_pattern_files(str(pat_rg), str(pat_ere))
    cmds = tools(pat_rg, pat_ere)
    print(f"# correlate speed benchmark  ({platform.node()}, {os.cpu_count()} cores, Python "
          f"{platform.python_version()}, {n_pat} patterns for rg/grep"
          f"{'' if cmds['rg'] else ', rg not installed'})")
    print(f"# load average at start: {', '.join(f'{x:.2f}' for x in os.getloadavg())}")

    # the correlate engine's compiled database is cached on disk: build it once before timing
    subprocess.run([sys.executable, "-m", "correlator", "rules", "list"], capture_output=True)
    # and its modules' bytecode, as ``pip install`` writes it (an editable install in an environment
    # with PYTHONDONTWRITEBYTECODE would compile ~20 modules from source on every run)
    import compileall

    import correlator

    compileall.compile_dir(str(Path(correlator.__file__).parent), quiet=1)

    rows = []
    jobs = [("job64-1G", 64, GB // 64 // scale)]
    if not a.no_4096:
        jobs.append(("job4096-1M", 4096 // scale, 1 << 20))
    for name, ranks, per in jobs:
        # (--quick jobs in folders of their own: the full-size ones stay generated)
        rows.append(bench_job(ensure_job(data, name + ("-quick" if a.quick else ""), ranks, per), cmds, a.repeat))

    print()
    print(f"{'job':12} {'files':>6} {'MB':>7} | {'correlate s':>11} {'MB/s':>6} {'RSS MB':>6} | "
          f"{'rg s':>6} {'RSS':>5} | {'grep s':>6} | {'corr/rg':>7} {'corr/grep':>9}")
    for r in rows:
        c, g, rr = r["correlate"], r.get("grep"), r.get("rg")
        print(f"{r['job']:12} {r['files']:>6} {r['bytes'] / 1e6:>7.0f} | {c['seconds']:>11.2f} {c['mb_s']:>6.0f} "
              f"{c['peak_rss_mb']:>6.0f} | {rr['seconds'] if rr else float('nan'):>6.2f} "
              f"{rr['peak_rss_mb'] if rr else float('nan'):>5.0f} | {g['seconds'] if g else float('nan'):>6.2f} | "
              f"{r.get('correlate/rg', float('nan')):>7.2f} {r.get('correlate/grep', float('nan')):>9.2f}")

    scaling = []
    base: dict = {}
    if a.quick and not a.no_scaling:
        print("\n(--quick: the 0.25 .. 2 GB series is left out; its smaller jobs would not reach the local pool)")
    elif not a.no_scaling:
        # the start of a pooled run (interpreter, pool, rules, report) measured on a small job of
        # the same shape: 64 ranks, 32 MB in all (the smallest job the local pool takes)
        series = [("job64-32M", 32 << 20), ("job64-256M", GB // 4), ("job64-512M", GB // 2), ("job64-1G", GB),
                  ("job64-2G", 2 * GB)]
        runs: dict[str, list] = {}
        rg_runs: dict[str, list] = {}
        paths = {name: ensure_job(data, name, 64, total // 64 // scale) for name, total in series}
        for name in paths:
            warm(paths[name])
        rounds = max(a.repeat, SERIES_ROUNDS)
        for i in range(rounds):  # interleaved, so that a burst of load elsewhere hits every size alike
            for name, path in paths.items():
                runs.setdefault(name, []).append(measure([c.replace("{dir}", str(path)) for c in cmds["correlate"]], 1))
                if cmds["rg"] and i < a.repeat:  # for reference: its best of --repeat
                    rg_runs.setdefault(name, []).append(measure([c.replace("{dir}", str(path)) for c in cmds["rg"]], 1))
        base_name = series[0][0]
        for name, path in paths.items():
            secs, rss, _ = min(runs[name])
            size = du(path)
            row = {"job": name, "bytes": size, "seconds": round(secs, 3), "s_per_gb": round(secs / (size / 1e9), 3),
                   "peak_rss_mb": round(rss, 1), "runs": [round(r[0], 3) for r in runs[name]]}
            if name in rg_runs:
                row["rg_s_per_gb"] = round(min(rg_runs[name])[0] / (size / 1e9), 3)
            if not base:
                base = row
                continue
            # above the start: each round's time minus the same round's start, over the bytes they
            # differ by; the median over rounds (a burst of load elsewhere moves one pair, not the median)
            per = sorted((t[0] - b[0]) / ((size - base["bytes"]) / 1e9) for t, b in zip(runs[name], runs[base_name]))
            row["s_per_gb_above_start"] = round(_quantile(per, 0.5), 3)
            row["above_start_iqr"] = [round(_quantile(per, 0.25), 3), round(_quantile(per, 0.75), 3)]
            scaling.append(row)
        print()
        print(f"start of a pooled run ({base['job']}, {base['bytes'] / 1e6:.0f} MB): {base['seconds']:.2f} s "
              f"(best of {rounds} rounds; every size is run once per round)")
        print(f"{'job':12} {'GB':>6} | {'correlate s':>11} {'s per GB':>9} {'above start':>12} {'(IQR)':>13} "
              f"{'RSS MB':>7} | {'rg s per GB':>11}")
        for s in scaling:
            lo, hi = s["above_start_iqr"]
            print(f"{s['job']:12} {s['bytes'] / 1e9:>6.2f} | {s['seconds']:>11.2f} {s['s_per_gb']:>9.2f} "
                  f"{s['s_per_gb_above_start']:>12.2f} {f'{lo:.2f}-{hi:.2f}':>13} {s['peak_rss_mb']:>7.0f} | "
                  f"{s.get('rg_s_per_gb', float('nan')):>11.2f}")
        per_gb = [s["s_per_gb"] for s in scaling]
        spread = (max(per_gb) - min(per_gb)) / min(per_gb) if per_gb else 0.0
        above = [s["s_per_gb_above_start"] for s in scaling]
        spread_above = (max(above) - min(above)) / min(above) if above else 0.0
        # least squares: seconds = fixed + per_gb * GB; linear growth means small residuals
        xs = [s["bytes"] / 1e9 for s in scaling]
        ys = [s["seconds"] for s in scaling]
        mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
        slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)
        fixed = my - slope * mx
        worst = max(abs(y - (fixed + slope * x)) / y for x, y in zip(xs, ys))
        print(f"time per GB from {scaling[0]['job']} to {scaling[-1]['job']}: spread {spread * 100:.0f}% "
              f"(max-min over min); above the start of a run: spread {spread_above * 100:.0f}%")
        print(f"linear fit of the best times: {fixed:.2f} s + {slope:.2f} s/GB (worst residual {worst * 100:.0f}%)")
    print(f"# load average at end: {', '.join(f'{x:.2f}' for x in os.getloadavg())}")
    if a.json:
        Path(a.json).write_text(json.dumps({"jobs": rows, "scaling": scaling, "start": base, "patterns": n_pat,
                                            "cores": os.cpu_count(), "quick": a.quick}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
