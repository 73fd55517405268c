"""Small unit tests for the pure modules: clocks, identity, sources, ruleset, explain."""

from __future__ import annotations

import gzip
import os
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from correlator.correlate.clocks import estimate
from correlator.correlate.identity import short_host
from correlator.errors import RuleError
from correlator.explain import explain
from correlator.extract.sources import discover, identity_from_path, open_source
from correlator.model import compress_ranks, expand_ranks
from correlator.ruleset import load_rules, parse_rule

NS = 10**9


# --- clocks ---------------------------------------------------------------------------------------


def test_offsets_recovered_and_centred():
    pts = []
    true = {"a": 0.0, "b": 3.0, "c": -1.5, "d": 0.01}
    for k in range(30):
        for d, o in true.items():
            pts.append((d, f"step:{k}", int((k * 20 + o) * NS)))
    est = estimate(pts)
    rel = {d: (est[d].offset_ns - est["a"].offset_ns) / NS for d in true}
    for d, o in true.items():
        assert abs(rel[d] - o) < 1e-6
    assert all(e.residual_ns == 0 and e.anchors == 30 for e in est.values())


def test_outlier_anchors_do_not_move_the_estimate():
    pts = [(d, f"k{k}", int((k + o) * NS)) for k in range(40) for d, o in (("a", 0.0), ("b", 2.0), ("c", 0.0))]
    pts += [("b", "k3", int(500 * NS)), ("b", "k7", int(-900 * NS))]  # two wild stamps
    est = estimate(pts)
    assert abs((est["b"].offset_ns - est["a"].offset_ns) / NS - 2.0) < 0.01


def test_single_domain_keys_say_nothing():
    assert estimate([("a", "k", 1), ("a", "k2", 2)]) == {}


# --- identity -------------------------------------------------------------------------------------


@given(st.sets(st.integers(min_value=0, max_value=5000), max_size=200))
def test_rank_sets_round_trip(ranks):
    assert expand_ranks(compress_ranks(sorted(ranks))) == sorted(ranks)


def test_rank_set_format():
    assert compress_ranks([0, 1, 2, 3, 5, 7, 8, 9]) == "0-3,5,7-9"
    assert expand_ranks("2,4-5") == [2, 4, 5]


def test_short_host():
    assert short_host("gpu-b03.hpc.internal") == "gpu-b03"
    assert short_host("10.0.0.7") == "10.0.0.7"
    assert short_host(None) is None


# --- sources --------------------------------------------------------------------------------------


@pytest.mark.parametrize(("path", "rank", "local", "attempt", "node"), [
    ("slurm-1234/rank-17.out", 17, None, None, None),
    ("slurm-1234_17.out", 17, None, None, None),
    ("slurm-88123.out", None, None, None, None),
    ("logs/node-3/run1/attempt_1/5/stderr.log", None, 5, 1, "node-3"),
    ("x/attempt_0/2/error.json", None, 2, 0, None),
    ("worker_12.log.gz", 12, None, None, None),
])
def test_identity_from_path(path, rank, local, attempt, node):
    s = identity_from_path(path)
    assert (s.file_rank, s.file_local_rank, s.attempt, s.file_node) == (rank, local, attempt, node)


def test_discover_walks_skips_and_reports(tmp_path: Path):
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "out.3.log").write_text("x\n")
    (tmp_path / "a" / "out.4.log").write_text("x\n")
    (tmp_path / "a" / "README.md").write_text("OSError: [Errno 5] Input/output error\n")
    os.symlink(tmp_path / "a", tmp_path / "a" / "loop")
    srcs, diags = discover([str(tmp_path / "a"), str(tmp_path / "missing.out"), str(tmp_path / "*.nothing")])
    names = sorted(Path(s.path).name for s in srcs)
    assert names == ["out.3.log", "out.4.log"]
    assert {s.file_rank for s in srcs} == {3, 4}
    msgs = " | ".join(f"{d.path}: {d.message}" for d in diags)
    assert "README.md" in msgs and "not a log" in msgs
    assert "missing.out" in msgs and "no such file" in msgs
    assert "no file matches" in msgs


def test_compressed_by_magic(tmp_path: Path):
    p = tmp_path / "rank-1.log"  # no .gz ending: sniffed by magic bytes
    p.write_bytes(gzip.compress(b"hello\n"))
    srcs, _ = discover([str(p)])
    stream, kind = open_source(srcs[0])
    assert kind == "gzip" and stream.read() == b"hello\n"


# --- ruleset --------------------------------------------------------------------------------------

BASE = {
    "schema": 1, "id": "custom.x", "title": "t", "category": "custom", "severity": "high", "role": "primary",
    "root_cause": "r", "fix": "f", "confirm": ["c"], "references": ["u"],
    "match": {"any": ["boom"], "prefilter": ["boom"]},
    "examples": [{"expect": "match", "log": "boom"}, {"expect": "no-match", "log": "bam"}],
}


@pytest.mark.parametrize(("change", "message"), [
    ({"bogus": 1}, "unknown key 'bogus'"),
    ({"severity": "huge"}, "severity 'huge'"),
    ({"role": "victim"}, "role 'victim'"),
    ({"match": {"any": ["(unclosed"], "prefilter": ["x"]}}, "match.any[0]: invalid regex"),
    ({"match": {"any": ["x"]}}, "missing required key 'prefilter'"),
    ({"id": "other.x"}, "must be '<category>.<name>'"),
    ({"schema": 2}, "schema 2 is not supported"),
    ({"priority": 500}, "priority 500 is outside 0-100"),
    ({"related": [{"id": "a", "kind": "cousin"}]}, "related[0].kind"),
])
def test_rule_errors_name_the_key(change, message):
    with pytest.raises(RuleError) as e:
        parse_rule({**BASE, **change}, "rules/custom/x.toml")
    assert message in str(e.value) and "rules/custom/x.toml" in str(e.value)


def test_user_rules_override_builtin(tmp_path: Path):
    d = tmp_path / "cuda"
    d.mkdir()
    builtin = {r.id: r for r in load_rules()}["cuda.out-of-memory"]
    text = Path(builtin.path).read_text().replace(f'title = "{builtin.title}"', 'title = "site override"')
    (d / "out-of-memory.toml").write_text(text)
    rules = {r.id: r for r in load_rules([tmp_path])}
    assert rules["cuda.out-of-memory"].title == "site override"


def test_explain_has_every_section():
    r = {x.id: x for x in load_rules()}["storage.eio-on-checkpoint-save"]
    text = explain(r)
    for part in ("Mechanism", "Fix", "Confirm", "References", r.id):
        assert part in text


def test_rule_cache_sees_an_edited_file(tmp_path: Path, monkeypatch):
    monkeypatch.setenv("CORRELATE_CACHE", str(tmp_path / "cache"))
    d = tmp_path / "rules" / "custom"
    d.mkdir(parents=True)
    src = "\n".join([
        'schema = 1', 'id = "custom.x"', 'title = "first"', 'category = "custom"', 'severity = "high"',
        'role = "primary"', 'root_cause = "r"', 'fix = "f"', 'confirm = ["c"]', 'references = ["u"]',
        '[match]', 'any = ["boom"]', 'prefilter = ["boom"]',
        '[[examples]]', 'expect = "match"', 'log = "boom"', '[[examples]]', 'expect = "no-match"', 'log = "x"', ""])
    (d / "x.toml").write_text(src)
    assert load_rules([tmp_path / "rules"], include_builtin=False)[0].title == "first"
    assert list((tmp_path / "cache").glob("rules-*.pickle"))
    (d / "x.toml").write_text(src.replace('title = "first"', 'title = "second, longer"'))
    assert load_rules([tmp_path / "rules"], include_builtin=False)[0].title == "second, longer"
    (d / "y.toml").write_text(src.replace("custom.x", "custom.y"))
    assert [r.id for r in load_rules([tmp_path / "rules"], include_builtin=False)] == ["custom.x", "custom.y"]
