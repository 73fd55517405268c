"""Golden tests over every bundled sample job: the expected verdict, root rank and rule; the JSON
contract of DESIGN §6; and the terminal summary against its golden file (regenerate with
``CORRELATE_UPDATE_GOLDEN=1 pytest tests/test_samples.py`` and review the diff)."""

from __future__ import annotations

import json
import os
import tomllib
from pathlib import Path

import pytest

from correlator.pipeline import Options, analyze
from correlator.report import render

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = sorted(p for p in (ROOT / "sample_logs").iterdir() if (p / "expected.toml").exists())
GOLDEN = Path(__file__).resolve().parent / "golden"


@pytest.fixture(scope="module")
def reports():
    return {p.name: analyze([str(p)], Options(tz="UTC")) for p in SAMPLES}


def test_there_are_enough_samples():
    names = {p.name for p in SAMPLES}
    assert len(SAMPLES) >= 8
    assert {"healthy", "slurm-time-limit", "skewed-clocks", "nccl-hang-silent-culprit"} <= names


@pytest.mark.parametrize("sample", SAMPLES, ids=[p.name for p in SAMPLES])
def test_expected_verdict(sample, reports):
    exp = tomllib.loads((sample / "expected.toml").read_text())
    rep = reports[sample.name]
    assert rep.verdict.value == exp["verdict"]
    rc = rep.root_cause
    if "root_rank" in exp:
        assert rc is not None and rc.rank == exp["root_rank"]
    if exp.get("rule") and exp["verdict"] != "no_failure":
        assert rc is not None and rc.rule == exp["rule"]
    if exp.get("root_host"):
        assert rc.host == exp["root_host"]
    if exp["verdict"] == "root_cause":
        assert rc.fix and rc.confirm  # what to do, and how to check it, for every sample root cause


CONTRACT = {
    "schema": str, "verdict": str, "root_cause": (dict, type(None)), "collateral": list, "groups": list,
    "timeline": list, "ranks": list, "clocks": list, "diagnostics": list, "stats": dict,
}
ROOT_KEYS = {"rank", "host", "local_rank", "rule", "title", "category", "severity", "time", "confidence", "tie",
             "evidence", "mechanism", "fix", "confirm", "references", "why"}
ITEM_KEYS = {
    "collateral": {"rank", "host", "rule", "time", "after_root_s", "path", "line"},
    "groups": {"rule", "role", "ranks", "count", "first", "last"},
    "timeline": {"time", "rank", "host", "rule", "role", "path", "line", "text"},
    "ranks": {"rank", "host", "local_rank", "state", "first_time", "last_time", "lines"},
    "clocks": {"host", "offset_s", "residual_s", "anchors"},
    "diagnostics": {"level", "path", "message"},
}


@pytest.mark.parametrize("sample", SAMPLES, ids=[p.name for p in SAMPLES])
def test_json_contract(sample, reports):
    doc = json.loads(render(reports[sample.name], "json"))
    assert doc["schema"] == "correlate.report/1"
    for key, typ in CONTRACT.items():
        assert isinstance(doc[key], typ), key
    assert doc["verdict"] in ("root_cause", "job_level", "no_failure", "undetermined")
    if doc["root_cause"] is not None:
        assert ROOT_KEYS <= set(doc["root_cause"])
        assert 0.0 <= doc["root_cause"]["confidence"] <= 1.0
        for ev in doc["root_cause"]["evidence"]:
            assert set(ev) == {"path", "line", "text"}
    for key, need in ITEM_KEYS.items():
        for item in doc[key]:
            assert need <= set(item), (key, need - set(item))
    for r in doc["ranks"]:
        assert r["state"] in ("root", "collateral", "silent", "healthy", "unknown")
    assert {"sources", "bytes", "lines", "seconds"} <= set(doc["stats"])
    for t in [e["time"] for e in doc["timeline"]] + [doc["root_cause"]["time"] if doc["root_cause"] else None]:
        assert t is None or (t.endswith("Z") and "T" in t)


def _terminal(rep) -> str:
    lines = render(rep, "terminal").splitlines()
    return "\n".join(x for x in lines if not x.startswith("read ")) + "\n"


@pytest.mark.parametrize("sample", SAMPLES, ids=[p.name for p in SAMPLES])
def test_terminal_golden(sample, reports):
    text = _terminal(reports[sample.name]).replace(str(ROOT) + "/", "")
    path = GOLDEN / f"{sample.name}.txt"
    if os.environ.get("CORRELATE_UPDATE_GOLDEN") or not path.exists():
        GOLDEN.mkdir(exist_ok=True)
        path.write_text(text)
    assert text == path.read_text()
