"""Every format states the same verdict: each output is read back on its own (the terminal's first
block, the Markdown's headline and verdict line, the HTML banner and verdict line, the trace's root
mark, the JSON's root_cause) and the verdicts, ranks, rules and times they state must agree.

Used by the sample jobs' test (``test_views.py``) and by the recorded and real-log cases, which
already analyse every case (the check adds the rendering only)."""

from __future__ import annotations

import html
import json
import re

from correlator.model import Report, Verdict, expand_ranks
from correlator.model.evidence import HANG_KINDS
from correlator.report import render

__all__ = ["check", "render"]

#: the verdict words every format writes, back to the verdict
_WORDS = {"root cause found": "root_cause", "job-level end (no failing rank)": "job_level",
          "no failure found": "no_failure", "failures seen, but no rank can be named": "undetermined"}
_TERMINAL_LABELS = {"root cause": "root_cause", "job ended": "job_level", "no failure": "no_failure",
                    "undetermined": "undetermined"}
_VERDICT_LINE = re.compile(r"^verdict: (?P<words>.+?)(?: · rank (?P<rank>\d+))?(?: · rule (?P<rule>\S+))?"
                           r"(?: · (?:at (?P<time>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}) UTC .*?|no timestamp))?"
                           r"(?: · confidence .*)?$")


def _time_text(iso_time: str | None) -> str | None:
    """``2026-03-18T00:33:02.084Z`` -> ``2026-03-18 00:33:02.084`` (how the documents write it)."""
    return iso_time.replace("T", " ").removesuffix("Z") if iso_time else None


def _from_verdict_line(line: str) -> dict[str, object]:
    m = _VERDICT_LINE.match(line.strip())
    assert m, line
    return {"verdict": _WORDS[m["words"]], "rank": int(m["rank"]) if m["rank"] else None,
            "rule": m["rule"].strip("`") if m["rule"] else None, "time": m["time"]}


def read_terminal(text: str) -> dict[str, object]:
    lines = text.splitlines()
    label = lines[0][:14].strip()
    block = [lines[0][14:]]
    for line in lines[1:]:
        if line[:14].strip():
            break
        block.append(line[14:])
    headline = block[0]
    rule = next((m[1] for x in block if (m := re.match(r"rule (\S+)", x))), None)
    time = next((m[1] for x in block if (m := re.match(r"at (\S+ \S+) UTC", x))), None)
    rank = re.match(r"rank (\d+) ", headline)
    return {"verdict": _TERMINAL_LABELS[label], "rank": int(rank[1]) if rank else None, "rule": rule, "time": time,
            "headline": headline}


def read_markdown(text: str) -> dict[str, object]:
    lines = text.splitlines()
    assert lines[2].startswith("**") and lines[2].endswith("**"), lines[2]
    headline = re.sub(r"\\(.)", r"\1", lines[2][2:-2])
    verdict = next(x for x in lines if x.startswith("verdict: "))
    out = _from_verdict_line(re.sub(r"\\(.)", r"\1", verdict))
    return {**out, "headline": headline}


def read_html(page: str) -> dict[str, object]:
    banner = re.search(r'<div class="banner [^"]*" id="verdict"([^>]*)>(.*?)</div>\s*<div class="sub">(.*?)</div>', page, re.S)
    assert banner, "no verdict banner"
    attrs = dict(re.findall(r'data-(\w+)="([^"]*)"', banner[1]))
    line = html.unescape(re.sub(r"<[^>]+>", "", banner[3]))
    out = _from_verdict_line(line)
    assert attrs["verdict"] == out["verdict"]
    if "rule" in attrs:
        assert attrs["rule"] == out["rule"] and (attrs["rank"] or None) == (str(out["rank"]) if out["rank"] is not None else None)
    return {**out, "headline": html.unescape(banner[2])}


def read_trace(text: str) -> dict[str, object]:
    data = json.loads(text)
    other = data["otherData"]
    roots = [e for e in data["traceEvents"] if e.get("cat") == "root"]
    assert len(roots) <= 1
    out: dict[str, object] = {"verdict": other["verdict"], "rank": None, "rule": None, "time": None,
                              "headline": other.get("headline")}
    if roots:
        root = roots[0]
        assert root["args"]["root"] is True and root["name"].startswith("ROOT CAUSE: ")
        out["rule"] = root["args"]["rule"]
        out["rank"] = root["tid"] if root["tid"] < 1_000_000 else None
        out["time"] = _time_text(root["args"]["time"])
    return out


def read_json(text: str) -> dict[str, object]:
    doc = json.loads(text)
    rc = doc["root_cause"]
    return {"verdict": doc["verdict"], "rank": rc["rank"] if rc else None, "rule": rc["rule"] if rc else None,
            "time": _time_text(rc["time"]) if rc else None}


def check(report: Report, where: str = "") -> None:
    """Every format states ``report``'s verdict, rank, rule and time, and the same headline."""
    said = {
        "terminal": read_terminal(render(report, "terminal", width=10_000)),
        "markdown": read_markdown(render(report, "markdown")),
        "html": read_html(render(report, "html")),
        "trace": read_trace(render(report, "trace")),
        "json": read_json(render(report, "json")),
    }
    rc = report.root_cause
    truth = {"verdict": str(report.verdict), "rank": rc.rank if rc else None, "rule": rc.rule if rc else None,
             "time": _time_text(rc.time) if rc else None}
    for fmt, got in said.items():
        for key in ("verdict", "rank", "rule", "time"):
            if fmt == "trace" and key != "verdict" and (rc is None or rc.time is None):
                continue  # the trace can mark only a root that has a time
            assert got[key] == truth[key], f"{where}: {fmt} says {key} {got[key]!r}, the report {truth[key]!r}"
    headlines = {fmt: got["headline"] for fmt, got in said.items() if fmt != "json" and got.get("headline")}
    assert len(set(headlines.values())) == 1, f"{where}: headlines differ: {headlines}"
    if rc is not None and rc.decided_by in HANG_KINDS:
        for fmt, got in headlines.items():
            assert "failed first" not in got, f"{where}: {fmt} calls a hang's culprit the first failure"
    if rc is not None and rc.rank is not None and report.verdict is Verdict.ROOT_CAUSE:
        for g in report.groups:
            if g.label == "collateral" and g.ranks:
                assert rc.rank not in expand_ranks(g.ranks), f"{where}: the root rank counted as collateral ({g.rule})"
