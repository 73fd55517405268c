"""One reading of a case's ``expected.toml`` and one comparison of a report with it.

Used by the tests of real logs, recorded jobs and class cases, and by ``benchmarks/accuracy.py``.
Keys (each optional but ``verdict``):

    verdict = "root_cause" | "job_level" | "no_failure" | "undetermined"
    root_rank = 11            # the rank that failed first
    node = "gpu-b03"          # a node-level root: that host, and no rank
    rule = "cuda.out-of-memory" / rule_any = ["a", "b"]
    tie_ok = true             # the logs cannot order the truth against another failure: it may be in the tie
"""

from __future__ import annotations

import tomllib
from pathlib import Path

from correlator.model import Report

KEYS = frozenset({"verdict", "root_rank", "node", "rule", "rule_any", "tie_ok"})


def read(case: Path, extra: frozenset[str] = frozenset()) -> dict:
    exp = tomllib.loads((case / "expected.toml").read_text(encoding="utf-8"))
    unknown = set(exp) - KEYS - extra
    assert not unknown, f"{case.name}/expected.toml: unknown keys {sorted(unknown)}"
    return exp


def mismatch(report: Report, exp: dict) -> str | None:
    """What in ``report`` differs from ``exp`` (None: it matches)."""
    rc = report.root_cause
    got = (f"verdict={report.verdict.value} rank={rc.rank if rc else None} host={rc.host if rc else None} "
           f"rule={rc.rule if rc else None} why={list(rc.why) if rc else []}")
    if report.verdict.value != exp["verdict"]:
        return got
    tied = False
    if "root_rank" in exp:
        named = {rc.rank, *rc.tie} if rc is not None and exp.get("tie_ok") else {rc.rank if rc else None}
        if rc is None or exp["root_rank"] not in named:
            return got
        tied = rc.rank != exp["root_rank"]  # the truth is in the tie: the rule is the root's, not its
    if "node" in exp and (rc is None or rc.host != exp["node"] or rc.rank is not None):
        return got
    if not tied and "rule" in exp and (rc is None or rc.rule != exp["rule"]):
        return got
    if not tied and "rule_any" in exp and (rc is None or rc.rule not in exp["rule_any"]):
        return got
    return None
