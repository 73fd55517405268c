"""Accuracy benchmark: is the named root rank right when the easy answer is wrong?

Generates a seeded suite of realistic failing jobs with ``tools.synth`` (fault kinds x layouts x
8-1024 ranks x host clock skew x missing timestamps), runs correlate on each, and prints root-rank
accuracy, rule accuracy, collateral precision/recall and tie rate, beside two baselines computed on the
same jobs from the same extracted lines:

- ``torchrun``: what torchrun's "Root Cause (first observed failure)" tables say: the entry with the
  smallest whole-second time among all node agents' tables (first printed wins a tie);
- ``first-error``: the first error line in printed-timestamp order (no roles, no clock correction).

    python benchmarks/accuracy.py --jobs 200 --seed 1

After the suite it prints a healthy-jobs row: ``tests/healthy_jobs.py`` jobs (13 seeds x 4 log styles,
benign noise) and how many of them got a false alarm (a ``root_cause`` or ``undetermined`` verdict),
then one row per folder of committed cases -- the recorded real jobs (``tests/recorded``), the class
cases (``tests/classes``), the real logs (``tests/real_logs``) -- against their ``expected.toml``.
``--invariance`` instead prints, per metamorphic transformation of ``tests/metamorphic.py``, how often
the verdict, root rank and root category stay those of the untransformed job, over the sample jobs,
the real logs of two or more ranks and the recorded/class cases.

    python benchmarks/accuracy.py --invariance
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

# the checkout's packages: tools.synth is a development package (not installed), correlator beside it
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from correlator.correlate.identity import resolve_digests  # noqa: E402
from correlator.extract import Engine, ExtractOptions  # noqa: E402
from correlator.extract.engines import EngineSpec, run_local  # noqa: E402
from correlator.extract.sources import discover  # noqa: E402
from correlator.extract.timestamps import resolve_tz  # noqa: E402
from correlator.model import Digest, Role, Rule  # noqa: E402
from correlator.model.vocabulary import Tag  # noqa: E402
from correlator.pipeline import Options, correlate, load_engine_rules  # noqa: E402
from tools.synth import Truth, generate_suite  # noqa: E402


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


def baseline_first_error(digests: list[Digest], rules: list[Rule]) -> int | None:
    roles = {r.id: r.role for r in rules}
    matches, _, _ = resolve_digests(digests, {r.id for r in rules if Tag.LAUNCHER in r.tags})
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
    return Outcome(
        job=job.name, fault=truth.fault, layout=truth.layout, ranks=truth.ranks,
        truth_verdict=truth.verdict, truth_rank=truth.root_rank, truth_rule=truth.rule,
        verdict=rep.verdict.value, rank=rc.rank if rc else None, rule=rc.rule if rc else None,
        tie=bool(rc and rc.tie), coll_tp=len(coll_pred & coll_true), coll_fp=len(coll_pred - coll_true),
        coll_fn=len(coll_true - coll_pred), torchrun_rank=baseline_torchrun(digests),
        naive_rank=baseline_first_error(digests, rules), seconds=time.perf_counter() - t0)


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


TESTS = Path(__file__).resolve().parent.parent / "tests"


def _analyze_files(files: dict[str, bytes], where: Path) -> tuple[str, int | None, str | None, object]:
    from metamorphic import write_job

    from correlator.pipeline import analyze

    rep = analyze(write_job(files, where), Options(tz="UTC", workers=1))
    rc = rep.root_cause
    return rep.verdict.value, rc.rank if rc else None, rc.category if rc else None, rep


def _alarm_line(rep) -> str:
    """What a false alarm said: the root's rule and line, or the undetermined verdict's first
    primary/collateral line."""
    rc = rep.root_cause
    if rc is not None:
        ev = rc.evidence[0] if rc.evidence else None
        return f"{rc.rule}: {ev.text[:110] if ev else ''!r}"
    for e in rep.timeline:
        if e.role in ("primary", "collateral"):
            return f"{e.rule} ({e.role}): {e.text[:110]!r}"
    return "?"


def healthy_rows(seeds: int = 13) -> str:
    """The healthy-jobs row: false alarms over seeds x styles healthy jobs."""
    sys.path.insert(0, str(TESTS))
    from healthy_jobs import STYLES, healthy_job

    per: dict[str, list[str]] = defaultdict(list)
    n = 0
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="correlate-healthy-") as d:
        for style in sorted(STYLES):
            for seed in range(seeds):
                n += 1
                verdict, _, _, rep = _analyze_files(healthy_job(seed, style), Path(d) / f"{style}-{seed}")
                if verdict in ("root_cause", "undetermined"):
                    per[style].append(f"{verdict} {_alarm_line(rep)}")
    alarms = sum(len(v) for v in per.values())
    lines = ["", f"{'healthy jobs':28}{n:>6} in {len(STYLES)} styles   false alarms: {alarms}   "
                 f"({time.perf_counter() - t0:.1f} s)"]
    for style in sorted(STYLES):
        said = Counter(per[style])
        lines.append(f"  {style:26}{seeds:>6}{len(per[style]):>8} false alarms" +
                     ("" if not said else f"   e.g. {said.most_common(1)[0][0]}"))
    return "\n".join(lines) + "\n"


def case_rows() -> str:
    """One row per folder of committed cases (recorded real jobs, class cases, real logs): how many
    verdicts match their ``expected.toml`` (``tests/expectations.py``). These are what the model was
    built against, so they are not held-out accuracy."""
    sys.path.insert(0, str(TESTS))
    import expectations

    from correlator.pipeline import Options, analyze

    lines = [""]
    for folder in ("recorded", "classes", "real_logs"):
        cases = sorted(p for p in (TESTS / folder).iterdir() if (p / "expected.toml").is_file())
        wrong = []
        t0 = time.perf_counter()
        for case in cases:
            exp = expectations.read(case, frozenset({"class"}))
            if expectations.mismatch(analyze([str(case)], Options(tz="UTC", workers=1)), exp) is not None:
                wrong.append(case.name)
        lines.append(f"{'tests/' + folder:28}{len(cases):>6} cases   right: {len(cases) - len(wrong)}/{len(cases)}   "
                     f"({time.perf_counter() - t0:.1f} s)" + (f"   wrong: {', '.join(wrong[:5])}" if wrong else ""))
    return "\n".join(lines) + "\n"


def invariance(limit: int | None = None, seeds: int = 1) -> str:
    """The invariance rate per transformation over the sample jobs, the real logs of two or more
    ranks and the recorded/class cases (``seeds`` draws of each transformation per case; the first is
    the one the tests use)."""
    sys.path.insert(0, str(TESTS))
    from random import Random

    from metamorphic import TRANSFORMS, read_job

    from correlator.pipeline import analyze

    root = TESTS.parent
    cases = []
    for folder in (root / "sample_logs", TESTS / "real_logs", TESTS / "recorded", TESTS / "classes"):
        if folder.is_dir():
            cases += sorted(p for p in folder.iterdir() if (p / "expected.toml").is_file())
    cases = cases[:limit] if limit else cases
    kept = []
    for c in cases:
        if c.parent.name != "sample_logs":
            rep = analyze([str(c)], Options(tz="UTC", workers=1))
            if len({r.rank for r in rep.ranks if r.rank is not None}) < 2:
                continue
        kept.append(c)
    stats = {name: [0, 0] for name in TRANSFORMS}  # applicable, invariant
    broken: dict[str, list[str]] = defaultdict(list)
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="correlate-invariance-") as d:
        for i, c in enumerate(kept):
            files = read_job(c)
            base = _analyze_files(files, Path(d) / f"{i}-base")[:3]
            for name, fn in TRANSFORMS.items():
                for k in range(seeds):
                    out = fn(files, Random(f"{c.name}/{name}" + (f"/{k}" if k else "")))
                    if out is None:
                        break
                    got = _analyze_files(out, Path(d) / f"{i}-{name}-{k}")[:3]
                    stats[name][0] += 1
                    if got == base:
                        stats[name][1] += 1
                    else:
                        broken[name].append(f"{c.parent.name}/{c.name}{f' (draw {k})' if k else ''}: {base[0]} "
                                            f"rank {base[1]} ({base[2]}) -> {got[0]} rank {got[1]} ({got[2]})")
    lines = [f"cases: {len(kept)} (of {len(cases)}; real logs of one rank left out)   "
             f"analysis time: {time.perf_counter() - t0:.1f} s", "",
             f"{'transformation':28}{'applied':>11}{'invariant':>11}{'rate':>9}"]
    for name, (app, inv) in stats.items():
        rate = f"{100.0 * inv / app:7.1f}%" if app else "      - "
        lines.append(f"  {name:26}{app:>11}{inv:>11}{rate:>9}")
    for name, items in broken.items():
        lines += ["", f"{name}:"] + [f"  {x}" for x in items]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--jobs", type=int, default=200)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--keep", type=Path, default=None, help="write the generated jobs here and keep them")
    ap.add_argument("--invariance", action="store_true",
                    help="print the invariance rate per metamorphic transformation instead of the suite")
    ap.add_argument("--seeds", type=int, default=1, help="with --invariance: draws of each transformation per case")
    ap.add_argument("--healthy-seeds", type=int, default=13, help="healthy jobs per log style (0: no healthy row)")
    ap.add_argument("--no-cases", action="store_true", help="leave out the rows of committed cases (recorded, classes, real logs)")
    a = ap.parse_args(argv)
    if a.invariance:
        sys.stdout.write(invariance(seeds=a.seeds))
        return 0
    outs = run(a.jobs, a.seed, a.keep)
    sys.stdout.write(summarize(outs))
    if a.healthy_seeds:
        sys.stdout.write(healthy_rows(a.healthy_seeds))
    if not a.no_cases:
        sys.stdout.write(case_rows())
    return 0


if __name__ == "__main__":
    sys.exit(main())
