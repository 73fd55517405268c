"""Where a GB's extraction time goes, per style: the phases of one rank file of each matrix job.

    python benchmarks/cost.py                     # the jobs speed.py generated under --data (1 GB size)
    python benchmarks/cost.py --size 128M

For each 64-rank job of ``benchmarks/speed.py`` (generated there, at ``--size``), one rank file is
extracted in this process (``extract()``: the work one pool worker does for it, without the
pool), once untimed (caches), then ``--repeat`` times with the extractor's phases timed: its
functions named in ``PHASES`` are wrapped with a CPU clock (``time.thread_time``: a shared
machine's load does not count; each is called per block, window or candidate, so the clock costs
a few percent at most). Printed per style: the extraction's CPU and wall seconds per GB, and each
phase's CPU seconds per GB and share: the scan (Hyperscan over the
bytes, candidate lines), the candidates (confirmation, stamps, identity, context: their line
counting included), the line counting between candidates, the head/tail window facts, the
NUL/UTF-8 checks, the finish (the digest), and the rest (reading, buffers, the loop). The
parent's work after extraction (correlation, the report) and the start of a run are not in it:
``speed.py`` measures the whole. A phase the extractor no longer has is left out and said.
"""

from __future__ import annotations

import argparse
import functools
import importlib
import os
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import gen_speed  # noqa: E402
import speed  # noqa: E402

#: (label, where the phase's function is called from: (module of correlator.extract, attribute path));
#: a function imported by name is wrapped in each module that calls it (``count_nl`` is called
#: within ``reader``: by ``count_lines`` and ``LineNumbers``). ``count_nl`` inside a candidate is the
#: candidates' (the clock knows which it is in)
PHASES = (("scan", (("extractor", "scan_region"),)), ("candidates", (("confirmer", "Confirmer.process"),)),
          ("line counts", (("reader", "count_nl"),)),
          ("windows", (("windows", "Windows.facts"),)), ("NUL/UTF-8", (("reader", "Hygiene.check"),)),
          ("finish", (("extractor", "Extractor.finish"),)))


class Clock:
    def __init__(self) -> None:
        self.spent: dict[str, float] = {}
        self.inside: list[str] = []

    def wrap(self, label: str, fn):
        @functools.wraps(fn)
        def timed(*args, **kwargs):
            if self.inside:  # nested in another phase: that phase's time
                return fn(*args, **kwargs)
            self.inside.append(label)
            t = time.thread_time()
            try:
                return fn(*args, **kwargs)
            finally:
                self.spent[label] = self.spent.get(label, 0.0) + time.thread_time() - t
                self.inside.pop()
        return timed


def profile_file(path: Path, repeat: int) -> tuple[float, float, dict[str, float], list[str]]:
    import correlator.extract.extractor as ex
    from correlator.extract.sources import identity_from_path
    from correlator.extract.timestamps import resolve_tz
    from correlator.ruleset import load_rules

    engine = ex.Engine(load_rules(), "auto")
    opts = ex.ExtractOptions(tz=resolve_tz("UTC"))
    src = identity_from_path(str(path))
    src = type(src)(**{**{f: getattr(src, f) for f in src.__dataclass_fields__}, "size": path.stat().st_size})
    ex.extract(src, engine, opts)  # warm: caches, page cache
    clock = Clock()
    missing, undo = [], []
    for label, places in PHASES:
        for module, name in places:
            owner = importlib.import_module(f"correlator.extract.{module}")
            *path, attr = name.split(".")
            for part in path:
                owner = getattr(owner, part)
            fn = getattr(owner, attr, None)
            if fn is None:
                missing.append(f"{module}.{name}")
                continue
            setattr(owner, attr, clock.wrap(label, fn))
            undo.append((owner, attr, fn))
    try:
        c, t = time.process_time(), time.perf_counter()
        for _ in range(repeat):
            ex.extract(src, engine, opts)
        cpu, wall = (time.process_time() - c) / repeat, (time.perf_counter() - t) / repeat
    finally:
        for owner, attr, fn in undo:
            setattr(owner, attr, fn)
    spent = {k: v / repeat for k, v in clock.spent.items()}
    spent["rest"] = max(0.0, cpu - sum(spent.values()))
    return cpu, wall, spent, missing


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default=os.environ.get("CORRELATE_BENCH_DATA", "/tmp/correlate-bench"))
    ap.add_argument("--size", type=gen_speed.parse_size, default=speed.GB)
    ap.add_argument("--styles", default=",".join(j.name for j in speed.MATRIX if j.ranks == 64 and not j.combined))
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args(argv)
    for name in a.styles.split(","):
        job = speed.JOBS[name]
        folder = speed.ensure_job(Path(a.data), job, a.size)
        path = folder / "rank-0005.log"
        gb = path.stat().st_size / 1e9
        cpu, wall, spent, missing = profile_file(path, a.repeat)
        print(f"{name}: {path.stat().st_size / 1e6:.1f} MB rank file: {cpu / gb:.2f} CPU s per GB, {wall / gb:.2f} wall"
              + (f" (not in this extractor: {', '.join(missing)})" if missing else ""))
        print("    " + ", ".join(f"{k} {v / gb:.2f} ({100 * v / cpu:.0f}%)" for k, v in spent.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
