"""Issue 17, items 7 and 8: over-long lines keep their end, and rules' time budgets.

Item 7: an error printed after 20,000 tqdm ``\\r`` frames, or at the end of a line over the 1 MiB
cap, is still matched (the line's start, the start of its last frame and its end are kept), in a
job whose other ranks print the collateral NCCL watchdog timeouts later.

Item 8: a rule's patterns have a time budget per run across files; a catastrophic user rule is
switched off once, with one diagnostic, after a bounded number of abandoned lines; the built-in
patterns are linear (each runs on 1 MB adversarial lines within the per-line limit).
No test here asserts on wall time.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import digest_of
from jobs import rank_lines

ROOT = Path(__file__).resolve().parent.parent
ROOT_RANK = 5
EIO_RULE = "storage.eio-on-checkpoint-save"


def cli(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "correlator", *args], capture_output=True, text=True, cwd=ROOT,
                          timeout=timeout)


def _frames(n: int) -> str:
    return "".join(f"\r{100 * i // n:3d}%|{'█' * (10 * i // n):<10}| {i}/{n} [00:{i % 60:02d}<00:01,  5.61it/s]"
                   for i in range(n))


def _job(base: Path, make_last) -> Path:
    """Eight rank files: rank 5 fails with EIO, whose last line ``make_last`` turns over-long; the
    others time out 10 minutes later (collateral)."""
    per = rank_lines(8, 8, ROOT_RANK)
    per[ROOT_RANK][-1] = make_last(per[ROOT_RANK][-1])
    base.mkdir(parents=True, exist_ok=True)
    for r, ls in per.items():
        (base / f"rank-{r}.log").write_text("\n".join(ls) + "\n", encoding="utf-8")
    return base


LONG_LINES = {
    # 20,000 tqdm frames (1.2 MB) and the error in the last frame
    "after-20000-frames": lambda err: _frames(20000) + "\r" + err,
    # one line over the 1 MiB cap, the error at its end
    "over-the-cap": lambda err: "x" * ((1 << 20) + 4096) + " " + err,
    # the error in the last frame, that frame itself longer than what is kept of a line's end
    "long-last-frame": lambda err: _frames(20000) + "\r" + err + " " + "y" * (200 << 10),
    # a line longer than four caps (read in pieces), the error at its end
    "five-mib": lambda err: "z" * (5 << 20) + " " + err,
}


@pytest.mark.parametrize("kind", sorted(LONG_LINES))
def test_error_at_the_end_of_an_over_long_line_is_the_root(tmp_path, kind):
    job = _job(tmp_path / kind, LONG_LINES[kind])
    assert (job / f"rank-{ROOT_RANK}.log").stat().st_size > 1 << 20
    r = cli(str(job), "-f", "json", "--tz", "UTC")
    assert r.returncode in (0, 1), r.stderr
    rep = json.loads(r.stdout)
    root = rep["root_cause"]
    assert root["rank"] == ROOT_RANK and root["rule"] == EIO_RULE, root  # was the collateral watchdog timeout
    codes = [d["code"] for d in rep["diagnostics"]]
    assert "long-lines-cut" in codes  # the report still says the line was cut


def test_over_long_line_keeps_start_last_frame_start_and_end(engine):
    """Unit view: what of an over-long line is matched, and that the kept parts are separate frames."""
    from correlator.extract.extractor import LONG_LINE_END_BYTES, MAX_LINE_BYTES, _decode

    start = "[rank3]: first frame"
    last = "RuntimeError: CUDA error: an illegal memory access was encountered"
    line = (start + _frames(30000) + "\r" + last + " " + "q" * (LONG_LINE_END_BYTES + 10) + "END").encode()
    assert len(line) > MAX_LINE_BYTES
    text = _decode(line)
    assert len(text.encode()) <= MAX_LINE_BYTES
    assert text.startswith(start) and text.endswith("END")
    frames = text.split("\r")
    assert any(f.startswith(last) for f in frames)  # the start of the last frame, as its own frame
    # an ordinary line is decoded whole, as before
    assert _decode(b"plain line \x1b[31mred\x1b[0m") == "plain line red"


@pytest.mark.parametrize("chunk", [None, 1 << 20])
def test_over_long_line_in_one_stream_matches_its_end(engine, chunk):
    err = "OSError: [Errno 5] Input/output error"
    data = ("2026-03-02 14:00:00,000 - train - INFO - step=1\n" + "x" * (3 << 20) + " " + err + "\n"
            + "2026-03-02 14:00:10,000 - train - INFO - done\n")
    d = digest_of(engine, data, chunk=chunk)
    assert [m.rule_id for m in d.matches] == ["storage.eio-input-output-error"]  # the first 1 MiB holds no error
    assert d.lines_capped == 1 and d.lines == 3
