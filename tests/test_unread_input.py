"""Input that could not be read is never a healthy job (issue 15 item 1).

Nothing read at all is exit 3 with one line naming each input; a job some of whose sources could
not be read gets its verdict over what was read, and every format's headline says over how much;
compressed standard input is read as a compressed file is.
"""

from __future__ import annotations

import bz2
import gzip
import json
import lzma
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import zstandard
from jobs import combined_srun, rank_lines

ROOT = Path(__file__).resolve().parent.parent
SAMPLE = ROOT / "sample_logs" / "cuda-oom-per-rank"


def cli(*args: str, input: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([sys.executable, "-m", "correlator", *args], capture_output=True, input=input,
                          env={**os.environ, "CORRELATE_EARLY_POOL": "0"}, timeout=180)


@pytest.fixture()
def job(tmp_path: Path) -> Path:
    p = tmp_path / "slurm-4242.out"
    p.write_text("\n".join(combined_srun(rank_lines(8, 4, 5), 4)) + "\n")
    return p


COMPRESSORS = {
    "gzip": gzip.compress,
    "zstd": lambda b: zstandard.ZstdCompressor().compress(b),
    "bz2": bz2.compress,
    "xz": lzma.compress,
}


@pytest.mark.parametrize("kind", sorted(COMPRESSORS))
def test_compressed_stdin_is_decompressed_like_a_compressed_file(job, kind):
    """``gzip -c job.out | correlate -`` once said "looks binary" and "no failure" with exit 0."""
    packed = COMPRESSORS[kind](job.read_bytes())
    as_file = job.with_name(job.name + {"gzip": ".gz", "zstd": ".zst", "bz2": ".bz2", "xz": ".xz"}[kind])
    as_file.write_bytes(packed)
    piped = cli("-", "-f", "json", "--tz", "UTC", "--fail-on-failure", input=packed)
    assert piped.returncode == 1, piped.stderr.decode()
    doc = json.loads(piped.stdout)
    assert doc["verdict"] == "root_cause" and doc["root_cause"]["rank"] == 5
    assert not [d for d in doc["diagnostics"] if d["code"] == "binary"]
    read = json.loads(cli(str(as_file), "-f", "json", "--tz", "UTC").stdout)
    assert doc["stats"]["lines"] == read["stats"]["lines"] > 0
    assert doc["root_cause"]["rule"] == read["root_cause"]["rule"]


def test_plain_stdin_in_small_pieces_is_still_read(job):
    """The sniffing of stdin's first bytes puts them back: a plain log piped in reads whole."""
    data = job.read_bytes()
    feeder = subprocess.Popen([sys.executable, "-c",
                               "import sys, time\n"
                               "d = sys.stdin.buffer.read()\n"
                               "for i in range(0, 12, 3):\n"
                               "    sys.stdout.buffer.write(d[i:i + 3]); sys.stdout.flush(); time.sleep(0.05)\n"
                               "sys.stdout.buffer.write(d[12:])\n"],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert feeder.stdin is not None
    feeder.stdin.write(data)
    feeder.stdin.close()
    r = subprocess.run([sys.executable, "-m", "correlator", "-", "-f", "json", "--tz", "UTC"], stdin=feeder.stdout,
                       capture_output=True, timeout=180)
    feeder.wait(30)
    doc = json.loads(r.stdout)
    assert doc["stats"]["bytes"] == len(data) and doc["root_cause"]["rank"] == 5


@pytest.mark.parametrize("case", ["binary-file", "empty-stdin", "binary-stdin", "empty-file-and-binary"])
def test_nothing_read_is_exit_3_naming_the_input(tmp_path, case):
    """``correlate /bin/ls --fail-on-failure`` and empty stdin once exited 0 with "no failure"."""
    binary = tmp_path / "core.log"
    binary.write_bytes(bytes(range(256)) * 64)
    args, stdin, named = {
        "binary-file": ([str(binary)], None, str(binary)),
        "empty-stdin": (["-"], b"", "<stdin>"),
        "binary-stdin": (["-"], binary.read_bytes(), "<stdin>"),
        "empty-file-and-binary": ([str(tmp_path / "stderr.log"), str(binary)], None, str(binary)),
    }[case]
    (tmp_path / "stderr.log").write_bytes(b"")
    for fmt in ("terminal", "json"):
        r = cli(*args, "-f", fmt, "--fail-on-failure", input=stdin)
        err = r.stderr.decode().strip().splitlines()
        assert r.returncode == 3, (case, fmt, r.stdout[:300], err)
        assert len(err) == 1 and err[0].startswith("error: no log could be read") and named in err[0], err
        assert r.stdout == b""  # no report: not a "no failure" of a job nothing of was read


@pytest.mark.parametrize("why", ["links-leaving-the-folder", "binary-files"])
def test_nothing_read_names_a_few_inputs_and_counts_the_rest(tmp_path, why):
    """A folder of 12 inputs none of which can be read (each link leaves the folder; each file is
    binary): the one error line names the first five and counts the others, whichever stage found
    them unreadable (discovery or extraction), instead of naming all (4,096 links: 40 KB)."""
    job = tmp_path / "job"
    job.mkdir()
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    for i in range(12):
        if why == "binary-files":
            (job / f"rank-{i:02d}.log").write_bytes(bytes(range(256)) * 64)
        else:
            target = outside / f"rank-{i:02d}.log"
            target.write_text("2026-03-02 14:00:00,000 - root - INFO - step 1\n")
            (job / f"rank-{i:02d}.log").symlink_to(target)
    r = cli(str(job), "-f", "json")
    err = r.stderr.decode().strip().splitlines()
    assert r.returncode == 3 and len(err) == 1, err
    named = [i for i in range(12) if f"rank-{i:02d}.log" in err[0]]
    assert len(named) == 5 and err[0].count("; and 7 more") == 1, err[0]


def _partial_job(tmp_path: Path) -> tuple[Path, list[str]]:
    """The sample OOM job (a file per rank) with two healthy ranks' files unreadable: one is binary,
    one is named but gone."""
    folder = tmp_path / "job"
    shutil.copytree(SAMPLE, folder)
    (folder / "rank-12.out").write_bytes(bytes(range(256)) * 64)
    (folder / "rank-13.out").unlink()
    return folder, [str(folder), str(folder / "rank-13.out")]


def test_a_partly_read_job_says_so_in_every_format(tmp_path):
    folder, args = _partial_job(tmp_path)
    full = json.loads(cli(str(SAMPLE), "-f", "json").stdout)
    n = full["stats"]["sources"]
    assert n >= 16 and full["coverage"] == {"sources_read": n, "sources": n, "note": ""}
    out = {fmt: cli(*args, "-f", fmt) for fmt in ("terminal", "json", "markdown", "html")}
    for fmt, r in out.items():
        assert r.returncode == 0, (fmt, r.stderr.decode())
    doc = json.loads(out["json"].stdout)
    assert doc["verdict"] == full["verdict"] and doc["root_cause"]["rank"] == full["root_cause"]["rank"]
    assert doc["coverage"]["sources_read"] == n - 2 and doc["coverage"]["sources"] == n
    assert {u["path"] for u in doc["stats"]["unread"]} == {str(folder / "rank-12.out"), str(folder / "rank-13.out")}
    said = f"verdict over {n - 2} of {n} sources: 2 could not be read"
    assert doc["coverage"]["note"].startswith(said)
    term = out["terminal"].stdout.decode().splitlines()
    first_block = term[: next(i for i, line in enumerate(term) if line.startswith("partial"))]
    assert first_block and first_block[0].startswith("root cause")  # right below the verdict
    assert any(line.startswith("partial") and said in " ".join(term) for line in term)
    md = out["markdown"].stdout.decode().splitlines()
    headline = next(line for line in md if line.startswith("**"))
    assert said in headline
    html = out["html"].stdout.decode()
    banner = html[html.index('<div class="banner'):]
    assert said in banner[: banner.index("</div>")]
    # and nothing of this when every source was read
    for fmt in ("terminal", "markdown", "html"):
        assert "verdict over" not in cli(str(SAMPLE), "-f", fmt).stdout.decode()


def test_the_library_raises_input_error_when_nothing_was_read(tmp_path):
    from correlator.errors import InputError
    from correlator.pipeline import Options, analyze

    (tmp_path / "a.log").write_bytes(b"\x7fELF" + bytes(range(256)) * 40)
    (tmp_path / "b.log").write_bytes(b"")
    with pytest.raises(InputError) as e:
        analyze([str(tmp_path)], Options(tz="UTC", workers=1))
    assert str(tmp_path / "a.log") in str(e.value) and "looks binary" in str(e.value)
