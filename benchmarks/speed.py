"""The speed matrix: ``correlate`` against ``rg -c`` and ``grep -E -c`` on every style of job, in one run.

    python benchmarks/speed.py                          # the matrix at 1 GB per job (~7 GB under --data)
    python benchmarks/speed.py --quick                  # --size 128M --repeat 1: a first look
    python benchmarks/speed.py --styles deepspeed,srun256 --json out.json

Each job of the matrix is one kind of log (``benchmarks/gen_speed.py``'s styles), ``--size`` in all
(1 GB by default), with the same failure at its end: one rank (37) dies of a CUDA OOM, every other
rank's NCCL watchdog times out ten minutes later, the agents SIGTERM the workers and SLURM cancels
the step. The jobs:

============  =======================================================================================
``ours``      64 rank files of the text the benchmark always had (~2 % of the lines hold a keyword)
``deepspeed`` 64 rank files, DeepSpeed/HF step-and-timer heavy: ~130-byte lines, ``OVERFLOW! Rank N
              Skipping step`` lines, HF/Python logging, loguru ANSI lines, a caught traceback per MB
``nccl``      64 rank files, ``NCCL_DEBUG=INFO`` heavy: init blocks and unstamped ``Connection closed
              by localRank N`` lines
``tqdm``      64 rank files of tqdm bars: non-ASCII, ``\\r`` frames on ~2 KB lines
``traceback`` 64 rank files of ``ours`` with a caught traceback every ~300 lines
``srun256``   one ``srun --label`` stream of 256 ranks in the ``deepspeed`` style
``files4096`` 4096 rank files of ``--size``/1024 (1 MB at 1 GB: 4 GB in all), ``deepspeed`` style
============  =======================================================================================

For each job, in the same run and interleaved run by run (a burst of load elsewhere on a shared
machine hits every tool alike), it times ``correlate DIR --format json -o FILE`` (the complete
analysis), ``rg -c -f PATTERNS DIR`` and ``LC_ALL=C grep -E -c -r -f PATTERNS DIR`` with the ~40
failure patterns of ``benchmarks/patterns.py`` (the rules' own regexes, rewritten for each tool;
word boundaries ASCII: ``(?-u:\\b)`` for rg, the C locale for grep). Every correlate run's report is
checked: the verdict must be rank 37's CUDA OOM with the watchdog timeouts of every other rank as
its collateral (a fast wrong answer is no answer: the run fails).

Printed per job (best of ``--repeat`` by wall time, warm page cache): wall and CPU seconds (user +
system of the whole process tree), MB/s, correlate/rg by wall and by CPU, correlate/grep; what the
extraction's fast path did per MB (Hyperscan reports, candidate lines, confirmed matches: the
report's ``stats``), lines per MB; CPU seconds per GB; and peak RSS of the process tree (the
largest sum at one sample), of the largest single process and of correlate's parent process
(``benchmarks/measure.py``). The jobs are generated under ``--data`` once and reused while the
generator is unchanged (a marker with its hash and the job's parameters).

``--scaling`` adds the older series of the ``ours`` style at 0.25 .. 2 GB (time per GB as measured
and above the start of a run); ``--json FILE`` writes every measurement.
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
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

import gen_speed  # noqa: E402
import patterns  # noqa: E402

GB = 1 << 30


@dataclass(frozen=True)
class Job:
    """One job of the matrix."""

    name: str
    style: str
    ranks: int
    #: one srun --label stream instead of a file per rank
    combined: bool = False
    #: its bytes, in multiples of ``--size``
    scale: int = 1


MATRIX = (
    Job("ours", "ours", 64),
    Job("deepspeed", "deepspeed", 64),
    Job("nccl", "nccl", 64),
    Job("tqdm", "tqdm", 64),
    Job("traceback", "traceback", 64),
    Job("srun256", "deepspeed", 256, combined=True),
    Job("files4096", "deepspeed", 4096, scale=4),
)
JOBS = {j.name: j for j in MATRIX}


def _gen_version() -> str:
    return hashlib.sha256((HERE / "gen_speed.py").read_bytes()).hexdigest()[:12]


def ensure_job(data: Path, job: Job, size: int) -> Path:
    """The job's folder, generated unless an identical one is there."""
    size *= job.scale
    out = data / f"{job.name}-{size >> 20}M"
    marker = out / ".generated"
    want = f"{_gen_version()} style={job.style} ranks={job.ranks} combined={job.combined} size={size}"
    if marker.exists() and marker.read_text() == want:
        return out
    if out.exists():
        shutil.rmtree(out)
    t = time.perf_counter()
    print(f"  generating {out.name} ({job.style}, {job.ranks} ranks{', one srun --label stream' if job.combined else ''}"
          f", {size / 1e6:.0f} MB) ...", file=sys.stderr, flush=True)
    out.mkdir(parents=True)
    if job.combined:
        with open(out / f"slurm-{gen_speed.JOB_ID}.out", "wb") as f:
            gen_speed.gen_combined(f, size, job.ranks, style=job.style)
    else:
        gen_speed.gen_ranks(str(out), job.ranks, max(4096, size // job.ranks), style=job.style)
    marker.write_text(want)
    print(f"  ... {time.perf_counter() - t:.1f} s", file=sys.stderr, flush=True)
    return out


def _files(path: Path) -> list[Path]:
    return [p for p in path.iterdir() if p.is_file() and not p.name.startswith(".")]


def warm(path: Path) -> tuple[int, int]:
    """Read the job into the page cache; returns (bytes, lines)."""
    size = lines = 0
    for p in _files(path):
        with open(p, "rb") as f:
            while block := f.read(16 << 20):
                size += len(block)
                lines += block.count(b"\n")
    return size, lines


#: where the measured commands run: not the caller's folder, which ``python -m correlator`` would
#: put first on ``sys.path`` (a checkout there would be measured instead of the installed or
#: ``PYTHONPATH`` one)
RUN_DIR = "/"


def measure(cmd: list[str], env: dict[str, str] | None = None) -> dict:
    """One run of ``cmd`` under ``benchmarks/measure.py``: wall, CPU, peak RSS."""
    out = subprocess.run([sys.executable, str(HERE / "measure.py"), *cmd], capture_output=True, text=True,
                         env={**os.environ, **(env or {})}, cwd=RUN_DIR)
    if out.returncode != 0 or not out.stdout.strip():
        raise RuntimeError(f"measure.py failed on {cmd[:3]}: {out.stderr.strip()[-500:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def check_verdict(report: dict, job: Job) -> list[str]:
    """What is wrong with the report of ``job`` (nothing: an empty list)."""
    from correlator.model.ranks import expand_ranks

    fail = gen_speed.FAIL_RANK_DEFAULT % job.ranks
    wrong = []
    root = report.get("root_cause") or {}
    if report.get("verdict") != "root_cause":
        wrong.append(f"verdict {report.get('verdict')!r}, not 'root_cause'")
    if (root.get("rank"), root.get("rule")) != (fail, "cuda.out-of-memory"):
        wrong.append(f"root {root.get('rule')} on rank {root.get('rank')}, not cuda.out-of-memory on rank {fail}")
    others = set(range(job.ranks)) - {fail}
    timeouts = [g for g in report.get("groups", []) if g.get("rule") == "nccl.watchdog-collective-timeout"]
    got = set(expand_ranks(timeouts[0]["ranks"])) if timeouts else set()
    if not timeouts or timeouts[0].get("label") != "collateral" or got != others:
        wrong.append(f"the watchdog timeouts of the {len(others)} other ranks are not all collateral "
                     f"({len(got)} ranks, label {timeouts[0].get('label') if timeouts else None})")
    return wrong


def tools(pat_rg: Path, pat_ere: Path) -> dict[str, tuple[list[str], dict[str, str]] | None]:
    return {
        "correlate": ([sys.executable, "-m", "correlator", "{dir}", "--format", "json", "-o", "{out}"], {}),
        "rg": (["rg", "-c", "-f", str(pat_rg), "{dir}"], {}) if shutil.which("rg") else None,
        "grep": (["grep", "-E", "-c", "-r", "-f", str(pat_ere), "{dir}"], {"LC_ALL": "C"})
        if shutil.which("grep") else None,
    }


def bench_job(job: Job, path: Path, cmds: dict, repeat: int, report_path: Path) -> dict:
    size, nlines = warm(path)
    mb = size / 1e6
    row: dict = {"job": job.name, "style": job.style, "ranks": job.ranks, "files": len(_files(path)),
                 "bytes": size, "lines": nlines, "lines_per_mb": round(nlines / mb, 1)}
    runs: dict[str, list[dict]] = {k: [] for k, v in cmds.items() if v}
    stats: dict = {}
    wrong: list[str] = []
    for _ in range(repeat):
        for name, spec in cmds.items():
            if not spec:
                continue
            cmd, env = spec
            if report_path.exists():
                report_path.unlink()
            r = measure([c.replace("{dir}", str(path)).replace("{out}", str(report_path)) for c in cmd], env)
            runs[name].append(r)
            if name == "correlate":
                try:
                    report = json.loads(report_path.read_text())
                except (OSError, ValueError) as e:
                    wrong.append(f"no report ({e}); exit {r['exit']}")
                    continue
                stats = report.get("stats", {})
                wrong += [w for w in check_verdict(report, job) if w not in wrong]
    for name, rs in runs.items():
        best = min(rs, key=lambda r: r["wall_s"])
        row[name] = {**best, "mb_s": round(size / best["wall_s"] / 1e6, 1), "cpu_s_per_gb": round(best["cpu_s"] / (size / 1e9), 3),
                     "walls": [r["wall_s"] for r in rs], "cpus": [r["cpu_s"] for r in rs],
                     "min_cpu_s": min(r["cpu_s"] for r in rs)}
    c = row["correlate"]
    for other in ("rg", "grep"):
        if other in row:
            row[f"correlate/{other}"] = round(c["wall_s"] / row[other]["wall_s"], 2)
            row[f"correlate/{other} cpu"] = round(c["min_cpu_s"] / max(1e-3, row[other]["min_cpu_s"]), 2)
    row["per_mb"] = {k: round(stats.get(k, 0) / mb, 2) for k in ("scan_reports", "candidate_lines", "confirmed_matches")}
    row["matches_kept"] = stats.get("matches")
    row["verdict_ok"] = not wrong
    row["verdict_wrong"] = wrong
    return row


def _nan(x: float | None) -> float:
    return float("nan") if x is None else x


def print_matrix(rows: list[dict]) -> None:
    print()
    print(f"{'job':10} {'files':>5} {'MB':>6} {'lines/MB':>8} | {'rep/MB':>7} {'cand/MB':>7} {'match/MB':>8} | "
          f"{'corr s':>6} {'cpu s':>6} {'MB/s':>5} | {'rg s':>5} {'cpu s':>5} | {'grep s':>6} | {'c/rg':>5} "
          f"{'cpu c/rg':>8} {'c/grep':>6} | {'cpu s/GB':>8} | {'tree':>5} {'proc':>5} {'parent':>6} MB | verdict")
    for r in rows:
        c, rg, g = r["correlate"], r.get("rg"), r.get("grep")
        d = r["per_mb"]
        print(f"{r['job']:10} {r['files']:>5} {r['bytes'] / 1e6:>6.0f} {r['lines_per_mb']:>8.0f} | "
              f"{d['scan_reports']:>7.1f} {d['candidate_lines']:>7.1f} {d['confirmed_matches']:>8.2f} | "
              f"{c['wall_s']:>6.2f} {c['min_cpu_s']:>6.2f} {c['mb_s']:>5.0f} | "
              f"{_nan(rg and rg['wall_s']):>5.2f} {_nan(rg and rg['min_cpu_s']):>5.2f} | {_nan(g and g['wall_s']):>6.2f} | "
              f"{_nan(r.get('correlate/rg')):>5.2f} {_nan(r.get('correlate/rg cpu')):>8.2f} "
              f"{_nan(r.get('correlate/grep')):>6.2f} | {c['min_cpu_s'] / (r['bytes'] / 1e9):>8.2f} | "
              f"{c['tree_rss_mb']:>5.0f} {c['max_rss_mb']:>5.0f} {c['top_rss_mb']:>6.0f}    | "
              f"{'right' if r['verdict_ok'] else 'WRONG: ' + '; '.join(r['verdict_wrong'])}")
    if rows:
        worst = max(rows, key=lambda r: r.get("correlate/rg", 0))
        per_gb = {r["job"]: r["correlate"]["min_cpu_s"] / (r["bytes"] / 1e9) for r in rows if r["ranks"] == 64}
        dens = {r["job"]: r["per_mb"]["candidate_lines"] for r in rows if r["ranks"] == 64}
        print(f"worst correlate/rg (wall): {worst.get('correlate/rg', float('nan')):.2f} ({worst['job']}); "
              f"largest process: {max(r['correlate']['max_rss_mb'] for r in rows):.0f} MB")
        if len(dens) > 1 and any(dens.values()):  # (a correlator without the counts: nothing to say)
            hi, lo = max(dens, key=dens.get), min(dens, key=dens.get)
            print(f"CPU per GB of the densest 64-rank job ({hi}, {dens[hi]:.1f} candidates/MB) over the sparsest "
                  f"({lo}, {dens[lo]:.1f}): {per_gb[hi] / per_gb[lo]:.2f}x; over the cheapest: "
                  f"{max(per_gb.values()) / min(per_gb.values()):.2f}x")


# --- the older size series (``--scaling``): the ``ours`` style at 0.25 .. 2 GB ------------------

#: rounds of the series (at least; ``--repeat`` when higher): the small sizes differ from the start
#: by a tenth of a second, and one run on a shared machine varies by a few hundredths
SERIES_ROUNDS = 21


def _quantile(xs: list[float], q: float) -> float:
    """The ``q`` quantile of sorted ``xs`` (linear between neighbours)."""
    pos = (len(xs) - 1) * q
    lo = int(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def scaling_series(data: Path, cmds: dict, repeat: int, report_path: Path) -> tuple[list[dict], dict]:
    # the start of a pooled run (interpreter, pool, rules, report) measured on a small job of the
    # same shape: 64 ranks, 32 MB in all (the smallest job the local pool takes)
    sizes = [32 << 20, GB // 4, GB // 2, GB, 2 * GB]
    paths = {s: ensure_job(data, JOBS["ours"], s) for s in sizes}
    for p in paths.values():
        warm(p)
    corr = [c.replace("{out}", str(report_path)) for c in cmds["correlate"][0]]
    runs: dict[int, list[float]] = {s: [] for s in sizes}
    rg_runs: dict[int, list[float]] = {s: [] for s in sizes}
    rounds = max(repeat, SERIES_ROUNDS)
    for i in range(rounds):  # interleaved, so that a burst of load elsewhere hits every size alike
        for s, p in paths.items():
            runs[s].append(measure([c.replace("{dir}", str(p)) for c in corr])["wall_s"])
            if cmds["rg"] and i < repeat:
                rg_runs[s].append(measure([c.replace("{dir}", str(p)) for c in cmds["rg"][0]])["wall_s"])
    base_size = sizes[0]
    base = {"job": paths[base_size].name, "bytes": warm(paths[base_size])[0], "seconds": min(runs[base_size])}
    out = []
    for s in sizes[1:]:
        size = warm(paths[s])[0]
        per = sorted((t - b) / ((size - base["bytes"]) / 1e9) for t, b in zip(runs[s], runs[base_size]))
        row = {"job": paths[s].name, "bytes": size, "seconds": min(runs[s]), "s_per_gb": round(min(runs[s]) / (size / 1e9), 3),
               "s_per_gb_above_start": round(_quantile(per, 0.5), 3),
               "above_start_iqr": [round(_quantile(per, 0.25), 3), round(_quantile(per, 0.75), 3)]}
        if rg_runs[s]:
            row["rg_s_per_gb"] = round(min(rg_runs[s]) / (size / 1e9), 3)
        out.append(row)
    print()
    print(f"start of a pooled run ({base['job']}, {base['bytes'] / 1e6:.0f} MB): {base['seconds']:.2f} s "
          f"(best of {rounds} rounds; every size is run once per round)")
    print(f"{'job':12} {'GB':>6} | {'correlate s':>11} {'s per GB':>9} {'above start':>12} {'(IQR)':>13} | {'rg s per GB':>11}")
    for r in out:
        lo, hi = r["above_start_iqr"]
        print(f"{r['job']:12} {r['bytes'] / 1e9:>6.2f} | {r['seconds']:>11.2f} {r['s_per_gb']:>9.2f} "
              f"{r['s_per_gb_above_start']:>12.2f} {f'{lo:.2f}-{hi:.2f}':>13} | {r.get('rg_s_per_gb', float('nan')):>11.2f}")
    return out, base


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default=os.environ.get("CORRELATE_BENCH_DATA", "/tmp/correlate-bench"),
                    help="where the generated jobs live (kept between runs; not in the repository)")
    ap.add_argument("--size", type=gen_speed.parse_size, default=GB, help="bytes per job (1G; 128M for a quick look)")
    ap.add_argument("--styles", default=",".join(JOBS),
                    help=f"comma-separated jobs of the matrix (default: all of {', '.join(JOBS)})")
    ap.add_argument("--repeat", type=int, default=3, help="runs per tool and job (the best wall time counts)")
    ap.add_argument("--quick", action="store_true", help="--size 128M --repeat 1: a first look, not the benchmark")
    ap.add_argument("--scaling", action="store_true", help="also the ours style at 0.25 .. 2 GB (21 rounds)")
    ap.add_argument("--json", help="also write the results as JSON to this file")
    a = ap.parse_args(argv)
    if a.quick:
        a.size, a.repeat = 128 << 20, 1
    names = [n.strip() for n in a.styles.split(",") if n.strip()]
    unknown = [n for n in names if n not in JOBS]
    if unknown:
        ap.error(f"unknown job(s) {', '.join(unknown)}: choose from {', '.join(JOBS)}")
    data = Path(a.data)
    try:
        data.resolve().relative_to(ROOT)
        ap.error(f"--data {data} is inside the repository: the jobs are GBs, put them in /tmp or /work/bench-data")
    except ValueError:
        pass
    data.mkdir(parents=True, exist_ok=True)
    pat_rg, pat_ere = data / "patterns.rg", data / "patterns.ere"
    n_pat = patterns.write_pattern_files(str(pat_rg), str(pat_ere))
    cmds = tools(pat_rg, pat_ere)
    report_path = data / f"report-{os.getpid()}.json"  # (two runs at once do not read each other's)

    import compileall

    # the correlator the measured commands import (from RUN_DIR, as they do)
    where = Path(subprocess.run([sys.executable, "-c", "import correlator; print(correlator.__file__)"],
                                capture_output=True, text=True, cwd=RUN_DIR, check=True).stdout.strip()).parent
    head = subprocess.run(["git", "-C", str(where), "log", "-1", "--format=%h %cI"], capture_output=True, text=True)
    print(f"# correlate speed matrix  ({platform.node()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
          f"{n_pat} patterns for rg/grep{'' if cmds['rg'] else ', rg not installed'})")
    print(f"# correlator from {where} ({head.stdout.strip() or 'not a git checkout'}); {a.size / 1e6:.0f} MB per job, "
          f"best of {a.repeat}")
    print(f"# load average at start: {', '.join(f'{x:.2f}' for x in os.getloadavg())}")
    # the engine's compiled database is cached on disk: build it once before timing; and the
    # modules' bytecode, as ``pip install`` writes it
    subprocess.run([sys.executable, "-m", "correlator", "rules", "list"], capture_output=True, cwd=RUN_DIR)
    compileall.compile_dir(str(where), quiet=1)

    rows = []
    for n in names:
        job = JOBS[n]
        path = ensure_job(data, job, a.size)
        rows.append(bench_job(job, path, cmds, a.repeat, report_path))
        r = rows[-1]
        print(f"  {n}: correlate {r['correlate']['wall_s']:.2f} s, rg {_nan(r.get('rg', {}).get('wall_s')):.2f} s, "
              f"verdict {'right' if r['verdict_ok'] else 'WRONG'}", file=sys.stderr, flush=True)
    print_matrix(rows)
    scaling, base = ([], {})
    if a.scaling:
        scaling, base = scaling_series(data, cmds, a.repeat, report_path)
    print(f"# load average at end: {', '.join(f'{x:.2f}' for x in os.getloadavg())}")
    if a.json:
        Path(a.json).write_text(json.dumps({"jobs": rows, "scaling": scaling, "start": base, "patterns": n_pat,
                                            "cores": os.cpu_count(), "size": a.size, "repeat": a.repeat,
                                            "correlator": str(where), "commit": head.stdout.strip()}, indent=2))
    wrong = [r["job"] for r in rows if not r["verdict_ok"]]
    if wrong:
        print(f"WRONG VERDICT on {', '.join(wrong)}: the timings of those jobs measure a wrong answer", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
