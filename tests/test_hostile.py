"""Hostile input: whatever a broken cluster wrote, the run survives, says what it could not read,
and the verdict over the rest holds.

The main test builds one folder with every kind of bad input beside a real failing job and runs
the real CLI on it. The others reach the cases a folder cannot stage: a file that vanishes between
discovery and reading, a read that fails half-way (a file losing its permission, EIO), a FIFO.
"""

from __future__ import annotations

import errno
import gzip
import io
import json
import os
import string
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from conftest import digest_of
from jobs import combined_srun, rank_lines

ROOT = Path(__file__).resolve().parent.parent
BIG_LINE = 64 << 20
MANY = 10_000


def cli(*args: str, timeout: float = 120, **kw):
    return subprocess.run([sys.executable, "-m", "correlator", *args], capture_output=True, cwd=ROOT,
                          timeout=timeout, **kw)


def job_text(root: int = 5) -> str:
    return "\n".join(combined_srun(rank_lines(8, 4, root), 4)) + "\n"


def _letters(i: int) -> str:
    """A name without digits: a folder of files named like ranks would make a 10,000-rank job."""
    out = ""
    for _ in range(4):
        i, r = divmod(i, 26)
        out += string.ascii_lowercase[r]
    return out


def build_hostile(base: Path) -> dict[str, Path]:
    """A folder of every hostile input beside the real job; returns the bad files by kind."""
    base.mkdir(parents=True, exist_ok=True)
    (base / "slurm-4242.out").write_text(job_text())
    bad: dict[str, Path] = {}

    bad["binary"] = base / "core-dump.log"
    bad["binary"].write_bytes(os.urandom(64 << 10))

    normal = b"".join(b"[data] shard %d of 5000 loaded\n" % i for i in range(5000))
    packed = gzip.compress(normal)
    bad["truncated"] = base / "loader.log.gz"
    bad["truncated"].write_bytes(packed[: len(packed) // 2])

    bad["empty"] = base / "stderr-early.log"
    bad["empty"].write_bytes(b"")

    bad["long-lines-cut"] = base / "tensor-dump.log"
    with open(bad["long-lines-cut"], "wb") as f:  # one 64 MiB line, no newline
        block = b"0.1234 " * ((1 << 20) // 7)
        for _ in range(BIG_LINE // len(block)):
            f.write(block)
        f.write(b"x" * (BIG_LINE - f.tell()))

    bad["nul-bytes"] = base / "node-crash.log"  # text, a hole of blocks that never reached the disk, text
    bad["nul-bytes"].write_bytes(b"[train] epoch 0 batch 17\n" * 50 + b"\x00" * 16384
                                 + b"[train] restarted from the last checkpoint\n")

    bad["invalid-utf8"] = base / "latin1.log"
    bad["invalid-utf8"].write_bytes("[data] Daten geladen: Größe 12 MB\n"
                                    .encode("latin-1") * 20)

    bad["not-a-regular-file"] = base / "pipe.log"
    os.mkfifo(bad["not-a-regular-file"])

    bad["symlink-loop"] = base / "loop"
    os.symlink(".", bad["symlink-loop"])

    many = base / "many"
    many.mkdir()
    for i in range(MANY):
        (many / f"note-{_letters(i)}.log").write_bytes(b"[eval] ok\n")
    return bad


def test_hostile_folder_beside_a_real_job(tmp_path):
    base = tmp_path / "job"
    t0 = time.perf_counter()
    bad = build_hostile(base)
    built = time.perf_counter() - t0
    gone = tmp_path / "rank-9.log"  # named, but gone before the run reads it
    nothing = str(tmp_path / "nomatch-*.out")
    t0 = time.perf_counter()
    r = cli(str(base), str(gone), nothing, "-f", "json", "--tz", "UTC")
    took = time.perf_counter() - t0
    err = r.stderr.decode()
    assert r.returncode == 0, err
    assert "Traceback" not in err  # correlate's own: the log's tracebacks are in the report, as data
    doc = json.loads(r.stdout)
    assert doc["verdict"] == "root_cause" and doc["root_cause"]["rank"] == 5
    assert doc["root_cause"]["rule"] == "storage.eio-on-checkpoint-save"

    diags = doc["diagnostics"]
    for kind, path in bad.items():
        about = [d for d in diags if d["path"] == str(path)]
        assert len(about) == 1, (kind, about)
    assert [d for d in diags if d["path"] == str(gone)][0]["level"] == "error"
    assert [d for d in diags if d["path"] == nothing][0]["message"] == "no file matches this pattern"
    # the good files say nothing: no diagnostic for the job file's neighbours in many/
    assert not [d for d in diags if d["path"] and "/many/" in d["path"]]

    stats = doc["stats"]
    assert stats["sources"] >= MANY + 2
    assert stats["lines"] >= MANY + 1000  # the decodable part of the truncated gzip counts
    assert stats["bytes"] >= BIG_LINE
    assert stats["lines_capped"] == 1
    assert stats["sources_skipped"] == 2  # the FIFO and the vanished file
    why = stats["skipped"]
    for kind in bad:
        assert why[kind]["sources"] == 1, (kind, why)
    assert why["binary"]["bytes"] == 64 << 10 == stats["bytes_skipped"]
    assert why["nul-bytes"]["bytes"] == 16384
    assert why["long-lines-cut"]["lines"] == 1
    assert why["missing"]["sources"] == 1 and why["pattern-matched-nothing"]["sources"] == 1
    # the half of the truncated gzip that decodes was read, not thrown away with the rest
    trunc = [d for d in diags if d["path"] == str(bad["truncated"])][0]["message"]
    assert trunc.startswith("truncated or corrupt gzip stream after ") and " 0 bytes" not in trunc
    print(f"\nhostile folder: built in {built:.2f} s, analysed in {took:.2f} s ({stats['sources']} sources, "
          f"{stats['bytes'] / 2**20:.0f} MiB; correlate's own time {stats['seconds']:.2f} s)")
    assert took < 60


def test_file_vanishing_between_discovery_and_reading(tmp_path, monkeypatch):
    from correlator import pipeline
    from correlator.extract import sources

    (tmp_path / "slurm-4242.out").write_text(job_text())
    victim = tmp_path / "rank-3.log"
    victim.write_text("2026-03-02 14:00:00,000 - root - INFO - step=100\n")
    real = sources.discover

    def discover_then_delete(*a, **kw):
        found = real(*a, **kw)
        victim.unlink()
        return found

    monkeypatch.setattr(sources, "discover", discover_then_delete)
    report = pipeline.analyze([str(tmp_path)], pipeline.Options(tz="UTC", workers=1))
    assert report.root_cause is not None and report.root_cause.rank == 5
    about = [d for d in report.diagnostics if d.path == str(victim)]
    assert len(about) == 1 and about[0].level == "error" and "No such file" in about[0].message
    assert report.stats.skipped["unreadable"]["sources"] == 1


class _FailsAfter(io.RawIOBase):
    """A stream that gives ``data`` and then fails like a file whose permission or disk went away."""

    def __init__(self, data: bytes, fail_at: int, err: int) -> None:
        self.data, self.fail_at, self.err, self.pos = data, fail_at, err, 0

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:
        if self.pos >= self.fail_at:
            raise OSError(self.err, os.strerror(self.err))
        n = min(len(b), self.fail_at - self.pos, 4096)
        b[:n] = self.data[self.pos:self.pos + n]
        self.pos += n
        return n


@pytest.mark.parametrize("err", [errno.EACCES, errno.EIO, errno.ESTALE])
def test_read_failing_half_way_keeps_what_came_before(engine, err):
    from correlator.extract.extractor import ExtractOptions, extract
    from correlator.extract.timestamps import resolve_tz
    from correlator.model import SourceInfo

    text = job_text().encode()
    cut = text.index(b"Input/output error") + 200  # the failure is before the break
    stream = io.BufferedReader(_FailsAfter(text, cut, err))
    d = extract(SourceInfo(path="rank-5.log", size=len(text)), engine, ExtractOptions(tz=resolve_tz("UTC")),
                stream=stream)
    assert "storage.eio-on-checkpoint-save" in {m.rule_id for m in d.matches}
    errs = [x for x in d.diagnostics if x.level == "error"]
    assert len(errs) == 1 and errs[0].message.startswith("read error after ") and os.strerror(err) in errs[0].message
    assert d.bytes_read == cut


def test_truncated_gzip_keeps_the_decodable_part(tmp_path):
    packed = gzip.compress(job_text().encode() + b"2026-03-02 15:00:00,000 - root - INFO - filler line\n" * 20000)
    p = tmp_path / "slurm-4242.out.gz"
    p.write_bytes(packed[: len(packed) * 2 // 3])
    r = cli(str(p), "-f", "json", "--tz", "UTC")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["root_cause"]["rank"] == 5
    (msg,) = [d["message"] for d in doc["diagnostics"] if d["level"] == "error"]
    assert msg.startswith("truncated or corrupt gzip stream after ")
    assert doc["stats"]["bytes"] > len(job_text())


def test_a_named_fifo_is_read(tmp_path):
    """``correlate <(ssh node cat log)`` hands over a pipe: a FIFO named on the command line is read."""
    fifo = tmp_path / "slurm-4242.out"
    os.mkfifo(fifo)

    def writer() -> None:
        with open(fifo, "w") as f:
            f.write(job_text())

    t = threading.Thread(target=writer, daemon=True)
    t.start()
    r = cli(str(fifo), "-f", "json", "--tz", "UTC", timeout=60)
    t.join(5)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["root_cause"]["rank"] == 5


def test_a_device_is_never_opened(tmp_path):
    job = tmp_path / "slurm-4242.out"
    job.write_text(job_text())
    r = cli("/dev/zero", str(job), "-f", "json", "--tz", "UTC", timeout=60)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["root_cause"]["rank"] == 5
    assert [d["message"] for d in doc["diagnostics"] if d["path"] == "/dev/zero"] == [
        "not a regular file (a device): skipped; pipe it in with - if meant"]


def test_unreadable_file(tmp_path, monkeypatch):
    """A file the user may not read. chmod 0 means nothing to root (CI runs as root), so the open
    itself is made to fail as it does for a normal user: EACCES from the kernel."""
    import builtins
    import errno

    from correlator.pipeline import Options, analyze

    (tmp_path / "slurm-4242.out").write_text(job_text())
    locked = tmp_path / "rank-2.log"
    locked.write_text("x\n")
    locked.chmod(0)
    real_open = builtins.open

    def guarded(file, *a, **k):
        if str(file) == str(locked) and os.geteuid() == 0:
            raise PermissionError(errno.EACCES, "Permission denied", str(file))
        return real_open(file, *a, **k)

    monkeypatch.setattr(builtins, "open", guarded)
    rep = analyze([str(tmp_path)], Options(tz="UTC", workers=1))
    assert rep.root_cause.rank == 5
    mine = [d for d in rep.diagnostics if d.path == str(locked)]
    assert len(mine) == 1 and "Permission denied" in mine[0].message and mine[0].level == "error"


def test_only_bad_inputs_is_one_line_and_exit_3(tmp_path):
    r = cli(str(tmp_path / "nope-*.log"), str(tmp_path / "gone.log"))
    assert r.returncode == 3
    err = r.stderr.decode().strip().splitlines()
    assert len(err) == 1 and "Traceback" not in r.stderr.decode()


def test_nul_only_and_binary_sources_in_process(engine):
    d = digest_of(engine, b"\x00" * 100_000)
    assert d.bytes_read == 100_000 and not d.matches
    assert [x.message.split(" ", 1)[0] for x in d.diagnostics] == ["100000"]
    d = digest_of(engine, bytes(range(256)) * 64, name="x.bin")
    assert [x.message for x in d.diagnostics] == ["looks binary, not a text log: skipped (pass a text log)"]
    assert d.bytes_skipped == 256 * 64


@pytest.mark.parametrize("prefix", ["", "3: [default1]:"])
def test_unstamped_error_spam_costs_a_few_parses_per_line(engine, monkeypatch, prefix):
    """A log of thousands of unstamped error lines (NCCL WARN spam, print-based training loops) once
    cost LOOK_LINES stamp parses per line (16 MiB: over 5 minutes); each line's search for the
    nearest stamps now continues where the previous line's stopped."""
    from correlator.extract import confirmer, lines, statements, windows

    n = 5000
    data = "".join(f"{prefix}RuntimeError: CUDA out of memory. Tried {i}\n" for i in range(n)).encode()
    calls = {"stamp": 0, "parse": 0}
    stamp_of, parse_line = lines.Stamps.of, lines.parse_line

    def count_stamp(*a):
        calls["stamp"] += 1
        return stamp_of(*a)

    def count_parse(*a):
        calls["parse"] += 1
        return parse_line(*a)

    monkeypatch.setattr(lines.Stamps, "of", count_stamp)
    for module in (lines, confirmer, statements, windows):  # (each reads lines through its own name)
        monkeypatch.setattr(module, "parse_line", count_parse)
    d = digest_of(engine, data)
    assert d.lines == n and d.matches
    assert calls["stamp"] <= 10 * n and calls["parse"] <= 30 * n, calls  # was ~800 stamp parses a line
