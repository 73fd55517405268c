"""Hostile input at scale (issue 17, items 9 and 10), at sizes that run in seconds; the full-size
measurements (100,000 ranks, a million traceback lines: time, MB/s, peak RSS) are
``benchmarks/hostile_scale.py``. No test here asserts wall time.

- 9: one file naming thousands of ranks, each with its watchdog timeout. The JSON lists the
  collateral as groups with every count; its per-rank lists are cut to ``PER_RANK_CAP`` and it
  says what each left out. Cutting changes no verdict: the same job with 50 and with 20,000
  collateral ranks names the same root (a metamorphic check).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from jobs import combined_srun, rank_lines

from correlator.correlate.attribution import policy
from correlator.model import expand_ranks
from correlator.pipeline import Options, analyze
from correlator.report import jsonout

ROOT = Path(__file__).resolve().parent.parent
ROOT_RANK = 5


def _job(tmp_path: Path, n: int) -> Path:
    p = tmp_path / f"slurm-{n}.out"
    p.write_text("\n".join(combined_srun(rank_lines(n, 8, ROOT_RANK, steps=1), 8)) + "\n")
    return p


@pytest.fixture(scope="module")
def big(tmp_path_factory) -> dict:
    path = _job(tmp_path_factory.mktemp("scale"), 20_000)
    return jsonout.to_dict(analyze([str(path)], Options(workers=1)))


def test_many_ranks_json_caps_per_rank_lists_and_says_so(big):
    cap = jsonout.PER_RANK_CAP
    assert big["verdict"] == "root_cause" and big["root_cause"]["rank"] == ROOT_RANK
    assert len(big["collateral"]) == cap and len(big["ranks"]) == cap and len(big["clocks"]) <= cap
    capped = big["capped"]
    assert capped["collateral"] == {"listed": cap, "total": 19_999}
    assert capped["ranks"] == {"listed": cap, "total": 20_000}
    assert "note" in capped
    # the root's row is kept whatever its rank number
    assert any(r["rank"] == ROOT_RANK and r["state"] == "root" for r in big["ranks"])


def test_many_ranks_groups_carry_every_count(big):
    (g,) = [g for g in big["groups"] if g["rule"] == "nccl.watchdog-collective-timeout"]
    assert g["count"] == 19_999 and g["label"] == "collateral"
    assert len(expand_ranks(g["ranks"])) == 19_999 and ROOT_RANK not in expand_ranks(g["ranks"])


def test_collateral_items_are_grouped_before_they_are_listed_per_rank(tmp_path):
    """The correlation stage builds at most COLLATERAL_ITEMS_CAP items, whatever the job's size."""
    rep = analyze([str(_job(tmp_path, policy.COLLATERAL_ITEMS_CAP + 500))], Options(workers=1))
    assert len(rep.collateral) == policy.COLLATERAL_ITEMS_CAP
    assert sum(g.count for g in rep.groups if g.label == "collateral") == policy.COLLATERAL_ITEMS_CAP + 499


def test_same_root_with_50_and_20000_collateral_ranks(tmp_path, big):
    small = jsonout.to_dict(analyze([str(_job(tmp_path, 51))], Options(workers=1)))
    assert "capped" not in small  # below the cap, the JSON is what it always was
    # (not the time: the clocks of 2,500 hosts are aligned from other anchors than those of 7)
    for key in ("rank", "rule", "decided_by", "category"):
        assert small["root_cause"][key] == big["root_cause"][key], key
    assert small["verdict"] == big["verdict"]


def test_many_ranks_through_the_cli(tmp_path):
    path = _job(tmp_path, 3000)
    out = tmp_path / "r.json"
    r = subprocess.run([sys.executable, "-m", "correlator", str(path), "--format", "json", "-o", str(out)],
                       capture_output=True, cwd=ROOT, timeout=120)
    assert r.returncode == 0, r.stderr
    d = json.loads(out.read_text())
    assert d["capped"]["collateral"]["total"] == 2999 and len(d["collateral"]) == jsonout.PER_RANK_CAP
    assert d["root_cause"]["rank"] == ROOT_RANK
