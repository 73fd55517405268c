"""Metamorphic invariance: a rewrite of a job's logs that keeps what happened (``tests/metamorphic.py``)
must keep the verdict, the root rank and the root rule's category of the untransformed run.

Cases: every sample job, and every real log, recorded job and class case (``tests/real_logs``,
``tests/recorded``, ``tests/classes``) of two or more ranks. Each (case, transformation) is one test; a
transformation the case's shape does not allow is not collected as a test (and counted). The untransformed run
is analysed the same way (the files written to a temporary folder and passed in order), once per
case.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from random import Random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from metamorphic import ORDER_ONLY, TRANSFORMS, Composition, Files, read_job, st_transforms, write_job

from correlator.pipeline import Options, analyze

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent


def _cases(folder: Path) -> list[Path]:
    return sorted(p for p in folder.iterdir() if (p / "expected.toml").is_file()) if folder.is_dir() else []


Outcome = tuple[str, "int | None", "str | None"]
_FILES: dict[Path, Files] = {}
_BASE: dict[Path, Outcome] = {}
_RANKS: dict[Path, int] = {}


def files_of(case: Path) -> Files:
    if case not in _FILES:
        _FILES[case] = read_job(case)
    return _FILES[case]


def _analyse(files: Files, where: Path):
    return analyze(write_job(files, where / "job"), Options(tz="UTC", workers=1))


def outcome(files: Files, where: Path) -> Outcome:
    """Verdict, root rank and root category of the job's files written under ``where``."""
    rep = _analyse(files, where)
    rc = rep.root_cause
    return rep.verdict.value, rc.rank if rc else None, rc.category if rc else None


def _untransformed(case: Path) -> None:
    """The untransformed run of a case (written out and passed in order, as the transformed ones are):
    its outcome and how many ranks it shows, once per case."""
    if case in _BASE:
        return
    with tempfile.TemporaryDirectory(prefix="correlate-meta-") as d:
        rep = _analyse(files_of(case), Path(d))
    rc = rep.root_cause
    _BASE[case] = (rep.verdict.value, rc.rank if rc else None, rc.category if rc else None)
    rows = {r.rank for r in rep.ranks if r.rank is not None}
    n = rep.job.ranks
    _RANKS[case] = max(len(rows), n if isinstance(n, int) else 0)


def _ranks(case: Path) -> int:
    _untransformed(case)
    return _RANKS[case]


def baseline(case: Path) -> Outcome:
    _untransformed(case)
    return _BASE[case]


SAMPLES = _cases(ROOT / "sample_logs")
CASES = SAMPLES + [c for folder in ("real_logs", "recorded", "classes") for c in _cases(HERE / folder) if _ranks(c) >= 2]
IDS = [f"{c.parent.name}/{c.name}" for c in CASES]


def _show(o: Outcome) -> str:
    return f"{o[0]} rank {o[1]} ({o[2]})"


def _applicable() -> list[tuple[Path, str]]:
    """The (case, transformation) pairs the case's shape allows, decided at collection (a pair that
    does not apply is not a test: it is counted by ``test_every_transformation_applies_widely``)."""
    pairs = []
    for case in CASES:
        for name in sorted(TRANSFORMS):
            if TRANSFORMS[name](files_of(case), Random(f"{case.name}/{name}")) is not None:
                pairs.append((case, name))
    return pairs


PAIRS = _applicable()


def test_every_transformation_applies_widely() -> None:
    """No transformation is tested on a handful of cases only (a transformation that applies nowhere
    proves nothing); the layout changes need their layout, the others apply almost everywhere."""
    per = {name: sum(1 for _, n in PAIRS if n == name) for name in TRANSFORMS}
    assert all(n >= 2 for n in per.values()), per
    assert len(PAIRS) >= 8 * len(CASES) // 2, (len(PAIRS), len(CASES))


@pytest.mark.parametrize(("case", "name"), PAIRS, ids=[f"{c.parent.name}/{c.name}-{n}" for c, n in PAIRS])
def test_invariant(case: Path, name: str, tmp_path: Path) -> None:
    files = files_of(case)
    out = TRANSFORMS[name](files, Random(f"{case.name}/{name}"))
    assert out is not None
    base = baseline(case)
    got = outcome(out, tmp_path)
    assert got == base, f"{name}: {_show(base)} -> {_show(got)}"


HYPO_CASES = [c for c in SAMPLES if c.name in {"cuda-oom-per-rank", "skewed-clocks", "healthy", "lustre-eio-checkpoint"}]


@settings(max_examples=12, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(case=st.sampled_from(HYPO_CASES), comp=st_transforms())
def test_composed_invariant(case: Path, comp: Composition) -> None:
    got = comp.apply(files_of(case))
    if got is None:
        return  # none of the steps applies to this job: nothing to compare
    files, done = got
    base = baseline(case)
    with tempfile.TemporaryDirectory(prefix="correlate-meta-") as d:
        res = outcome(files, Path(d))
    assert res == base, f"{' then '.join(done)} (seed {comp.seed}): {_show(base)} -> {_show(res)}"


def _derived() -> list[tuple[str, Files]]:
    """The jobs a transformation is tried on for the change test: the cases, and the cases after
    a layout change (a combined stream made from per-rank files, for the transformations that split one)."""
    jobs = [(c.name, files_of(c)) for c in CASES]
    for c in SAMPLES:
        merged = TRANSFORMS["per_rank_to_srun"](files_of(c), Random(0))
        if merged is not None:
            jobs.append((f"{c.name}+srun", merged))
    return jobs


@pytest.mark.parametrize("name", sorted(TRANSFORMS))
def test_transform_changes_the_job(name: str) -> None:
    applied = 0
    for label, files in _derived():
        out = TRANSFORMS[name](files, Random(label))
        if out is None:
            continue
        applied += 1
        if name in ORDER_ONLY:
            assert out == files and list(out) != list(files), f"{label}: order unchanged"
        else:
            assert list(out.items()) != list(files.items()), f"{label}: {name} returned its input"
            meta = {p: b for p, b in files.items() if p.rsplit("/", 1)[-1] in ("expected.toml", "README.md", "source.md")}
            assert all(out.get(p) == b for p, b in meta.items()), f"{label}: {name} touched the case's notes"
    assert applied, f"{name} applies to no case"


def test_transforms_are_pure() -> None:
    case = next(c for c in SAMPLES if c.name == "cuda-oom-per-rank")
    files = files_of(case)
    before = dict(files)
    for name, fn in TRANSFORMS.items():
        a, b = fn(files, Random(7)), fn(files, Random(7))
        assert a == b and (a is None or list(a) == list(b)), f"{name} is not deterministic in its rng"
        assert files == before, f"{name} changed its input"


def test_strategy_composes_one_to_three() -> None:
    @settings(max_examples=30, deadline=None, derandomize=True)
    @given(st_transforms())
    def check(comp: Composition) -> None:
        assert 1 <= len(comp.names) <= 3 and set(comp.names) <= set(TRANSFORMS)

    check()
