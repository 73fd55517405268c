"""The speed matrix's jobs (``benchmarks/speed.py``) are read right: every style and layout of
``benchmarks/gen_speed.py``, at a small size, gives the verdict the benchmark asserts (rank 37's CUDA
OOM, every other rank's watchdog timeout its collateral), and the benchmark's check and its
process-tree meter measure what they say."""

from __future__ import annotations

import copy
import json
import subprocess
import sys

import pytest
from conftest import ROOT

from correlator.pipeline import Options, analyze
from correlator.report import render

sys.path.insert(0, str(ROOT / "benchmarks"))

import gen_speed  # noqa: E402
import speed  # noqa: E402


def _report(path) -> dict:
    return json.loads(render(analyze([str(path)], Options(tz="UTC")), "json"))


def _small(job: speed.Job, out) -> None:
    """The job's style and layout with few bytes per rank (and 128 files for the many-files job)."""
    if job.combined:
        with open(out / f"slurm-{gen_speed.JOB_ID}.out", "wb") as f:
            gen_speed.gen_combined(f, 2 << 20, job.ranks, style=job.style)
    else:
        gen_speed.gen_ranks(str(out), min(job.ranks, 128), 16 << 10, style=job.style)


@pytest.mark.parametrize("name", list(speed.JOBS))
def test_every_job_of_the_matrix_gets_the_verdict_the_benchmark_asserts(name, tmp_path):
    job = speed.JOBS[name]
    _small(job, tmp_path)
    ranks = job.ranks if job.combined else min(job.ranks, 128)
    report = _report(tmp_path)
    assert speed.check_verdict(report, speed.Job(job.name, job.style, ranks, job.combined)) == []
    # the style is what it says: its density shows in the fast path's counts
    stats = report["stats"]
    assert stats["confirmed_matches"] <= stats["candidate_lines"] <= stats["scan_reports"]


def test_the_styles_differ_as_described(tmp_path):
    """Each style's mark: OVERFLOW lines, unstamped NCCL destroys, non-ASCII \\r frames, caught
    tracebacks; and the DeepSpeed style's lines are short (millions per GB)."""
    texts = {}
    for style in gen_speed.STYLES:
        out = tmp_path / style
        gen_speed.gen_ranks(str(out), 4, 1 << 20, style=style)
        texts[style] = (out / "rank-0003.log").read_bytes()
    ds = texts["deepspeed"]
    assert b"[deepspeed] OVERFLOW! Rank 3 Skipping step. Attempted loss scale:" in ds
    assert b"\x1b[32m" in ds and b"[INFO|trainer.py:" in ds
    assert 100 < len(ds) / ds.count(b"\n") < 170
    assert b"NCCL INFO [Service thread] Connection closed by localRank 3\n" in texts["nccl"]
    assert "█".encode() in texts["tqdm"] and texts["tqdm"].count(b"\r") > 10 * texts["tqdm"].count(b"\n")
    for style in ("traceback", "deepspeed"):
        assert b"Traceback (most recent call last):" in texts[style]
    assert texts["traceback"].count(b"Traceback (most recent") > 4 * texts["deepspeed"].count(b"Traceback (most recent")
    assert b"OVERFLOW!" not in texts["ours"] and "█".encode() not in texts["ours"]


def test_the_check_rejects_a_wrong_verdict(tmp_path):
    job = speed.Job("t", "ours", 16)
    gen_speed.gen_ranks(str(tmp_path), 16, 16 << 10)
    report = _report(tmp_path)
    assert speed.check_verdict(report, job) == []
    wrong_rank = copy.deepcopy(report)
    wrong_rank["root_cause"]["rank"] = 3
    assert any("rank 3" in w for w in speed.check_verdict(wrong_rank, job))
    no_root = copy.deepcopy(report)
    no_root["verdict"], no_root["root_cause"] = "hang", None
    assert len(speed.check_verdict(no_root, job)) == 2
    short = copy.deepcopy(report)
    for g in short["groups"]:
        if g["rule"] == "nccl.watchdog-collective-timeout":
            g["ranks"] = "0-4,6-14"  # rank 15's timeout is missing
    assert any("collateral" in w for w in speed.check_verdict(short, job))


def test_the_meter_sees_every_process_of_the_tree():
    """Two processes holding ~120 MB and ~60 MB at once: the largest process, the parent and the
    tree's sum are each seen."""
    child = "import time; b = bytearray(60 << 20); b[::4096] = b'x' * len(b[::4096]); time.sleep(0.6)"
    parent = ("import subprocess, sys, time; p = subprocess.Popen([sys.executable, '-c', sys.argv[1]]); "
              "b = bytearray(120 << 20); b[::4096] = b'x' * len(b[::4096]); time.sleep(0.6); p.wait()")
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "measure.py"), sys.executable, "-c", parent, child],
                         capture_output=True, text=True, check=True)
    got = json.loads(out.stdout)
    assert got["exit"] == 0 and got["processes"] == 2
    assert 120 <= got["top_rss_mb"] < 170 and got["max_rss_mb"] == got["top_rss_mb"]
    assert got["tree_rss_mb"] >= got["top_rss_mb"] + 60
    assert got["cpu_s"] > 0
