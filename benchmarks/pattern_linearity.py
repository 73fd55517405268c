"""Issue 17 item 8: how the work of every built-in rule pattern grows with the line (not a test: it
times; the structure check is ``tests/test_rule_linearity.py``).

Each pattern searches lines of repeated partial matches cut from its own examples (``units`` in
the test module) and generic runs; the unit slowest on a 16 KiB line is grown by four until the
longer run takes INFORMATIVE_S of CPU or the line is 1 MiB. Linear work grows four times,
quadratic sixteen: a pattern above MAX_GROWTH is printed. Times are this thread's CPU time
(``time.thread_time``), the minimum of REPEATS interleaved runs; the ratio is measured in the same
run, so it compares across machines.

    python benchmarks/pattern_linearity.py            # every built-in pattern
    python benchmarks/pattern_linearity.py --old      # the quadratic forms the rules had before
    python benchmarks/pattern_linearity.py --from 468 --to 602   # patterns 468-601 only (indices as printed)
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import regex

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from test_rule_linearity import PATTERNS, units  # noqa: E402

BIG = 1 << 20  # the 1 MiB line cap of extraction
START = 1 << 14
GROWTH = 4
MAX_GROWTH = 8.0
REPEATS = 3
INFORMATIVE_S = 0.002


def _line(unit: str, n: int) -> str:
    return (unit * (n // len(unit) + 1))[:n]


def _cpu(p: regex.Pattern[str], text: str) -> float:
    t0 = time.thread_time()
    p.search(text)
    return time.thread_time() - t0


def growth(p: regex.Pattern[str], unit: str, big: int = BIG) -> tuple[float, int, float]:
    """(how many times the work grew from a line of ``n`` to one of ``GROWTH * n`` characters of
    ``unit``, that ``n``, the CPU seconds of the longer line): the first size at which the longer
    run is informative, else the last one below ``big``."""
    n = START
    while True:
        short, long_ = _line(unit, n), _line(unit, GROWTH * n)
        ts, tl = [], []
        for _ in range(REPEATS):  # interleaved: a slow spell of the machine touches both sizes
            ts.append(_cpu(p, short))
            tl.append(_cpu(p, long_))
        t_short, t_long = min(ts), min(tl)
        if t_long >= INFORMATIVE_S or GROWTH * n >= big:
            return t_long / max(t_short, 1e-6), n, t_long
        n *= GROWTH


def superlinear(pattern: str, lines: list[str], big: int = BIG) -> str | None:
    """Why ``pattern`` is not linear on a line of its repeated partial matches, or None."""
    p = regex.compile(pattern)
    # the unit slowest on a short line: a quadratic one is far slower than any linear one there
    screen = sorted(((_cpu(p, _line(u, START)), u) for u in units(p, lines)), reverse=True)
    for _, unit in screen[:1]:
        g, n, t_long = growth(p, unit, big)
        if t_long >= INFORMATIVE_S and g > MAX_GROWTH:
            return f"{g:.1f} times the work on {GROWTH} times the line ({n} -> {GROWTH * n} characters of {unit[:60]!r})"
    return None


#: the forms built-in rules had before they were made linear, with a line each matches
OLD_FORMS = {
    "deepspeed-command-list": (r"sigkill_handler\](?: \[[^\n]*?\])? exits with return code = (?P<exitcode>[1-9]\d*|-(?:6|15|2|1))$",
                               "[launch.py:319:sigkill_handler] ['/usr/bin/python', '-u', 'train.py'] exits with return code = 1"),
    "heartbeat-repeated-group": (r"(?:\[PG [^\]\n]{0,160}?Rank (?P<rank>\d+)\] {0,2})+Terminating the process after attempting "
                                 r"to dump debug info, due to collective timeout or exception",
                                 "[PG ID 0 PG GUID 0(default_pg) Rank 3] Terminating the process after attempting to dump "
                                 "debug info, due to collective timeout or exception."),
    "run-to-the-line-end": (r"No valid checkpoint found in output directory \((?P<path>[^)]+)\)",
                            "ValueError: No valid checkpoint found in output directory (/scratch/run7/out)"),
    "lib-run": (r"(?<library>lib[\w.+-]+\.so[\w.]*): cannot open shared object file: No such file or directory",
                "OSError: libcudnn.so.8: cannot open shared object file: No such file or directory"),
    "leading-run": (r"(?<library>[^\s:'\"]+\.so(?:\.[\d.]+)?): undefined symbol: (?<symbol>\S+)",
                    "ImportError: /opt/x/flash_attn_2_cuda.so: undefined symbol: _ZN3c104cuda9SetDeviceEi"),
}


def _flag(name: str, default: str) -> str:
    """The value after ``name`` on the command line, else ``default``."""
    return sys.argv[sys.argv.index(name) + 1] if name in sys.argv else default


def main() -> None:
    if "--old" in sys.argv:
        for name, (pattern, line) in sorted(OLD_FORMS.items()):
            print(name, superlinear(pattern, [line], big=1 << 18), flush=True)
        return
    first = int(_flag("--from", "0"))
    stop = int(_flag("--to", str(len(PATTERNS))))
    t0 = time.thread_time()
    for i, (rule_id, where, p, lines) in enumerate(PATTERNS[first:stop], start=first):
        why = superlinear(p, lines)
        if why:
            print(f"{i} {rule_id} {where}: {why}", flush=True)
    print(f"patterns {first}-{min(stop, len(PATTERNS)) - 1} of {len(PATTERNS)}, {time.thread_time() - t0:.1f} s CPU")


if __name__ == "__main__":
    main()
