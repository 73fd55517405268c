"""The published JSON Schema of the JSON report (``schemas/report.schema.json``, issue 15 item 12):
every sample job's report validates, reports built by hand for each verdict and a capped one do
too, the schema's enums are the model's, and every key the JSON writes is described in it."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
from report_fixtures import empty_report, make_report

from correlator.model import Label, RankState, TimeKind, Verdict
from correlator.model.evidence import EvidenceKind
from correlator.pipeline import Options, analyze
from correlator.report import jsonout, render

ROOT = Path(__file__).resolve().parent.parent
SCHEMA = json.loads((ROOT / "schemas" / "report.schema.json").read_text(encoding="utf-8"))
SAMPLES = sorted(p for p in (ROOT / "sample_logs").iterdir() if (p / "expected.toml").exists())
VALIDATOR = jsonschema.Draft202012Validator(SCHEMA, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER)


def _errors(doc: dict) -> list[str]:
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in VALIDATOR.iter_errors(doc)]


def test_the_schema_is_a_valid_draft_2020_12_schema() -> None:
    jsonschema.Draft202012Validator.check_schema(SCHEMA)
    assert SCHEMA["properties"]["schema"]["const"] == jsonout.SCHEMA


@pytest.mark.parametrize("sample", SAMPLES, ids=[p.name for p in SAMPLES])
def test_every_sample_jobs_report_validates(sample: Path) -> None:
    doc = json.loads(render(analyze([str(sample)], Options(tz="UTC")), "json"))
    assert _errors(doc) == []
    _described(doc, SCHEMA, "")


@pytest.mark.parametrize("verdict", list(Verdict))
def test_reports_of_every_verdict_and_a_capped_one_validate(verdict: Verdict) -> None:
    for report in (empty_report(verdict), make_report()):
        doc = json.loads(render(report, "json"))
        assert _errors(doc) == []
    big = json.loads(render(make_report(n_hosts=160, per_host=8), "json"))  # 1280 ranks: the lists are capped
    assert "capped" in big and _errors(big) == []


def test_a_report_that_breaks_the_contract_is_caught() -> None:
    doc = json.loads(render(make_report(), "json"))
    doc["verdict"] = "probably_fine"
    doc["root_cause"]["confidence"] = 1.5
    doc["timeline"][0]["time"] = "2026-03-02 14:07:31"
    errors = _errors(doc)
    assert any(e.startswith("verdict:") for e in errors) and any("confidence" in e for e in errors)
    assert any(e.startswith("timeline/0/time") for e in errors)


def test_the_schemas_enums_are_the_models() -> None:
    defs = SCHEMA["$defs"]
    assert set(defs["verdict"]["enum"]) == {v.value for v in Verdict}
    assert set(defs["decided_by"]["enum"]) == {k.value for k in EvidenceKind}
    assert set(defs["label"]["enum"]) == {x.value for x in Label} | {""}
    assert set(defs["rank_row"]["properties"]["state"]["enum"]) == {s.value for s in RankState}
    assert set(defs["timeline_event"]["properties"]["time_kind"]["enum"]) == {t.value for t in TimeKind}


def _resolve(node: dict) -> dict:
    while "$ref" in node:
        node = SCHEMA["$defs"][node["$ref"].rsplit("/", 1)[1]]
    for option in node.get("oneOf", ()):
        if option.get("type") != "null":
            return _resolve(option)
    return node


def _described(value: object, node: dict, where: str) -> None:
    """Every key of ``value`` is a property of its schema ``node`` (objects may hold more in a later
    version, but this version's writer may not write a field its schema does not describe)."""
    node = _resolve(node)
    if isinstance(value, dict):
        if "properties" in node:
            extra = set(value) - set(node["properties"])
            assert not extra, f"{where}: {sorted(extra)} not described in schemas/report.schema.json"
            for key, item in value.items():
                _described(item, node["properties"][key], f"{where}/{key}")
    elif isinstance(value, list) and "items" in node:
        for index, item in enumerate(value[:50]):
            _described(item, node["items"], f"{where}/{index}")
