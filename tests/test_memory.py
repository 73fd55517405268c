"""Memory does not grow with the input: peak RSS <= 256 MB for a big combined stream on stdin, for
one huge line, and for many files plus a big file that the pool splits.

Each case runs ``correlate`` in a child process and reads that process tree's peak RSS from
``getrusage(RUSAGE_CHILDREN)`` in a fresh wrapper process (so nothing else this test process ever
started counts). The inputs come from ``benchmarks/gen_speed.py``: streamed through a pipe, never
held anywhere, so the same test shape holds for 10 GB (see ``benchmarks/speed.py --memory``).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
GEN = [sys.executable, str(ROOT / "benchmarks" / "gen_speed.py")]
LIMIT_MB = 256

# Runs its argv as a child with this process's stdin, then prints the child tree's peak RSS (KiB).
_WRAPPER = (
    "import resource, subprocess, sys\n"
    "r = subprocess.run(sys.argv[1:], stdin=sys.stdin)\n"
    "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, r.returncode, file=sys.stderr)\n"
)


def peak_rss_mb(args: list[str], feed: list[str] | None = None, timeout: float = 300) -> tuple[float, dict]:
    """(peak RSS in MB of ``correlate args`` and its workers, the JSON report); ``feed``'s stdout is piped in."""
    producer = subprocess.Popen(feed, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL) if feed else None
    cmd = [sys.executable, "-c", _WRAPPER, sys.executable, "-m", "correlator", *args, "--format", "json",
           "--tz", "UTC"]
    try:
        done = subprocess.run(cmd, stdin=producer.stdout if producer else subprocess.DEVNULL,
                              capture_output=True, timeout=timeout, cwd=ROOT)
    finally:
        if producer:
            producer.stdout.close()  # type: ignore[union-attr]
            producer.wait(timeout=60)
    kib, code = done.stderr.decode().strip().splitlines()[-1].split()
    assert code == "0", done.stderr.decode()[-2000:]
    return int(kib) / 1024, json.loads(done.stdout)


@pytest.mark.slow
def test_big_combined_stream_on_stdin():
    mb, report = peak_rss_mb(["-"], GEN + ["combined", "--ranks", "64", "--size", "300M", "-o", "-"])
    assert report["stats"]["bytes"] > 300e6
    assert report["verdict"] == "root_cause"
    assert mb <= LIMIT_MB, f"peak RSS {mb:.0f} MB for a 300 MB stream"


def test_one_huge_line():
    mb, report = peak_rss_mb(["-"], GEN + ["long-line", "--size", "256M", "-o", "-"])
    assert report["stats"]["bytes"] > 256e6
    assert any("longer than" in d["message"] for d in report["diagnostics"])
    assert mb <= LIMIT_MB, f"peak RSS {mb:.0f} MB for one 256 MB line"


@pytest.mark.slow
@pytest.mark.parametrize("workers", ["2"])
def test_many_files_and_a_split_big_file(tmp_path, workers):
    subprocess.run(GEN + ["ranks", "--ranks", "256", "--per-rank", "200K", "-o", str(tmp_path / "ranks")],
                   check=True, stderr=subprocess.DEVNULL)
    subprocess.run(GEN + ["combined", "--ranks", "32", "--size", "300M", "-o", str(tmp_path / "slurm-77.out")],
                   check=True, stderr=subprocess.DEVNULL)
    mb, report = peak_rss_mb([str(tmp_path), "-j", workers])
    assert report["stats"]["sources"] >= 258
    assert mb <= LIMIT_MB, f"peak RSS {mb:.0f} MB for 256 files and a 300 MB file"
