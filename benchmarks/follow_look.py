"""What one look of ``--follow`` costs: N rank files of ~2 MB (a sample job's rank log repeated)
are followed; after the first look, three lines are appended to each and the CPU time of the next
look (poll and report) is taken, best of 5. Not a test: it times.

    python benchmarks/follow_look.py            # 64 files
    python benchmarks/follow_look.py -n 256
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from correlator import follow as fl  # noqa: E402
from correlator.pipeline import Options  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-n", type=int, default=64, help="files followed")
    args = ap.parse_args()
    one = (ROOT / "sample_logs" / "cuda-oom-per-rank" / "rank-0.out").read_bytes()
    body = one * (2_000_000 // len(one) + 1)
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        for r in range(args.n):
            (d / f"rank-{r}.out").write_bytes(body)
        f = fl.Follower([tmp], Options(tz="UTC"))
        t = time.process_time()
        f.poll()
        f.report()
        first = time.process_time() - t
        line = one.split(b"\n")[3] + b"\n"
        costs = []
        for _ in range(5):
            for r in range(args.n):
                with open(d / f"rank-{r}.out", "ab") as fh:
                    fh.write(line * 3)
            t = time.process_time()
            f.poll()
            f.report()
            costs.append(time.process_time() - t)
    print(f"{args.n} files of {len(body) / 1e6:.1f} MB: first look {first:.2f} s CPU; a look after 3 new lines "
          f"in each: {min(costs) * 1000:.0f} ms CPU (best of 5)")


if __name__ == "__main__":
    main()
