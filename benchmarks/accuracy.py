"""Accuracy benchmark: is the named root rank right when the easy answer is wrong?

Generates a seeded suite of realistic failing jobs with ``correlator.synth`` (fault kinds x layouts x
8-1024 ranks x host clock skew x missing timestamps), runs correlate on each, and prints root-rank
accuracy, rule accuracy, collateral precision/recall and tie rate, beside two baselines computed on the
same jobs from the same extracted lines:

- ``torchrun``: what torchrun's "Root Cause (first observed failure)" tables say: the entry with the
  smallest whole-second time among all node agents' tables (first printed wins a tie);
- ``first-error``: the first error line in printed-timestamp order (no roles, no clock correction).

    python benchmarks/accuracy.py --jobs 200 --seed 1
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path

from correlator.engines import EngineSpec, run_local
from correlator.extract import Engine, ExtractOptions
from correlator.identity import resolve_digests
from correlator.model import Digest, Role
from correlator.pipeline import correlate, load_engine_rules, Options
from correlator.sources import discover
from correlator.synth import Truth, generate_suite
from correlator.timestamps import resolve_tz


@dataclass
class Outcome:
    job: str
    fault: str
    layout: str
    ranks: int
    truth_verdict: str
    truth_rank: int | None
    truth_rule: str | None
    verdict: str
    rank: int | None
    rule: str | None
    tie: bool
    coll_tp: int
    coll_fp: int
    coll_fn: int
    torchrun_rank: int | None
    naive_rank: int | None
    seconds: float

    @property
    def right(self) -> bool:
        if self.truth_verdict != self.verdict:
            return False
        return self.truth_rank == self.rank if self.truth_verdict == "root_cause" else True


def baseline_torchrun(digests: list[Digest]) -> int | None:
    entries = [(f.time_ns // 10**9 if f.time_ns is not None else 1 << 62, i, f.who.rank)
               for i, f in enumerate(x for d in digests for x in d.identities)
               if f.source == "failure-table" and f.is_root_entry]
    return min(entries)[2] if entries else None


def baseline_first_error(digests: list[Digest], roles: dict[str, Role]) -> int | None:
    matches, _, _ = resolve_digests(digests)
    timed = [m for m in matches if m.time_ns is not None and roles.get(m.rule_id) is not Role.CONTEXT]
    if not timed:
        return None
    return min(timed, key=lambda m: (m.time_ns, m.path, m.offset)).who.rank


def evaluate(job: Path, truth: Truth, engine: Engine, rules) -> Outcome:
    t0 = time.perf_counter()
    srcs, diags = discover([str(job)])
    spec = EngineSpec((), True, None, ExtractOptions(tz=resolve_tz("UTC")))
    digests = run_local(srcs, spec, engine, 1)
    rep = correlate(digests, rules, diags)
    rc = rep.root_cause
    # ranks that printed a collateral failure (the generator's truth: ranks with errors after the root;
    # ranks that were only stopped by their launcher are teardown, not counted here)
    coll_pred = {e.rank for e in rep.timeline if e.rank is not None and e.label in ("collateral", "independent")
                 and (rc is None or e.rank != rc.rank)}
    coll_true = set(truth.collateral_ranks)
    roles = {r.id: r.role for r in rules}
    return Outcome(
        job=job.name, fault=truth.fault, layout=truth.layout, ranks=truth.ranks,
        truth_verdict=truth.verdict, truth_rank=truth.root_rank, truth_rule=truth.rule,
        verdict=rep.verdict.value, rank=rc.rank if rc else None, rule=rc.rule if rc else None,
        tie=bool(rc and rc.tie), coll_tp=len(coll_pred & coll_true), coll_fp=len(coll_pred - coll_true),
        coll_fn=len(coll_true - coll_pred), torchrun_rank=baseline_torchrun(digests),
        naive_rank=baseline_first_error(digests, roles), seconds=time.perf_counter() - t0)


def baseline_right(o: Outcome, rank: int | None) -> bool:
    if o.truth_verdict == "root_cause":
        return rank is not None and rank == o.truth_rank
    return rank is None


def summarize(outs: list[Outcome]) -> str:
    n = len(outs)
    pct = lambda k, m: f"{100.0 * k / m:5.1f}%" if m else "   - "  # noqa: E731
    with_rule = [o for o in outs if o.truth_rule]
    tp = sum(o.coll_tp for o in outs)
    fp = sum(o.coll_fp for o in outs)
    fn = sum(o.coll_fn for o in outs)
    lines = [
        f"jobs: {n}   ranks: {min(o.ranks for o in outs)}-{max(o.ranks for o in outs)}   "
        f"analysis time: {sum(o.seconds for o in outs):.1f} s",
        "",
        f"{'':28}{'correlate':>12}{'torchrun':>12}{'first-error':>14}",
        f"{'root-rank accuracy':28}{pct(sum(o.right for o in outs), n):>12}"
        f"{pct(sum(baseline_right(o, o.torchrun_rank) for o in outs), n):>12}"
        f"{pct(sum(baseline_right(o, o.naive_rank) for o in outs), n):>14}",
        f"{'rule accuracy':28}{pct(sum(o.rule == o.truth_rule for o in with_rule), len(with_rule)):>12}",
        f"{'collateral precision':28}{pct(tp, tp + fp):>12}",
        f"{'collateral recall':28}{pct(tp, tp + fn):>12}",
        f"{'tie rate':28}{pct(sum(o.tie for o in outs), n):>12}",
        "",
        f"{'by fault':28}{'jobs':>6}{'correlate':>12}{'torchrun':>12}{'first-error':>14}",
    ]
    by = defaultdict(list)
    for o in outs:
        by[o.fault].append(o)
    for fault in sorted(by):
        os_ = by[fault]
        lines.append(f"  {fault:26}{len(os_):>6}{pct(sum(o.right for o in os_), len(os_)):>12}"
                     f"{pct(sum(baseline_right(o, o.torchrun_rank) for o in os_), len(os_)):>12}"
                     f"{pct(sum(baseline_right(o, o.naive_rank) for o in os_), len(os_)):>14}")
    wrong = [o for o in outs if not o.right]
    if wrong:
        lines += ["", "wrong:"]
        lines += [f"  {o.job}: expected {o.truth_verdict} rank {o.truth_rank} ({o.truth_rule}); "
                  f"got {o.verdict} rank {o.rank} ({o.rule})" for o in wrong]
    return "\n".join(lines) + "\n"


def run(jobs: int, seed: int, keep: Path | None = None) -> list[Outcome]:
    rules = load_engine_rules(Options())
    engine = Engine(rules)
    tmp = Path(tempfile.mkdtemp(prefix="correlate-accuracy-")) if keep is None else keep
    try:
        suite = generate_suite(tmp, jobs=jobs, seed=seed)
        return [evaluate(d, t, engine, rules) for d, t in suite]
    finally:
        if keep is None:
            shutil.rmtree(tmp, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--jobs", type=int, default=200)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--keep", type=Path, default=None, help="write the generated jobs here and keep them")
    a = ap.parse_args(argv)
    outs = run(a.jobs, a.seed, a.keep)
    sys.stdout.write(summarize(outs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
