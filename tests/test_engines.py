"""Engines and the fast paths of the hot path give exactly what the plain serial path gives.

- a big file split into pieces scanned elsewhere == the serial scan of the file (property test);
- the local pool == one process; Dask (a LocalCluster with two workers) == local;
- the scalar fallback scanner gives the same report as Hyperscan on every sample and real job;
- the Hyperscan window facts == the line-by-line window facts (property test);
- the one-copy buffer cut == the two-copy cut it replaces (property test).
"""

from __future__ import annotations

import io
import json
import os
import random
import re
import subprocess
import sys
from dataclasses import replace
from datetime import timedelta
from pathlib import Path

import pytest
from conftest import ROOT, findings, scanned_pieces
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from jobs import T0, combined_srun, glog, py, rank_lines

import correlator.extract.reader as reader
import correlator.extract.statements as statements
import correlator.extract.windows as windows
from correlator.extract import engines, scan
from correlator.extract.extractor import Engine, ExtractOptions, extract
from correlator.extract.scan import hyperscan_available
from correlator.extract.sources import identity_from_path
from correlator.extract.timestamps import resolve_tz
from correlator.model import SourceInfo
from correlator.pipeline import Options, analyze
from correlator.report import render

UTC = resolve_tz("UTC")
def needs_hs(fn):
    """Marks the tests that compare the Hyperscan path with the fallback. Hyperscan is a dependency
    (pyproject): its absence is a failed install, which ``test_hyperscan_is_installed`` reports."""
    return fn


def test_hyperscan_is_installed():
    assert hyperscan_available(), "hyperscan is not installed: pip install -e '.[test]'"


def _comparable(report) -> dict:
    doc = json.loads(render(report, "json"))
    # (how many reports and candidate lines a scanner gives is its own: the keyword fallback's net
    # is wider; what it confirms is not)
    for k in ("seconds", "engine", "scanner", "scan_reports", "candidate_lines", "analyzed_at"):
        doc.get("stats", {}).pop(k, None)
    return doc


def _job_text(rnd: random.Random, n: int = 8, per_node: int = 4) -> bytes:
    """A combined srun stream with noise, unstamped traceback lines and interleaving, so that
    candidates, inherited times and context lines fall on both sides of any cut."""
    root = rnd.randrange(n)
    per = rank_lines(n, per_node, root, fault=rnd.choice(["eio", "oom"]), steps=rnd.randint(2, 6))
    lines = []
    queues = {r: list(ls) for r, ls in per.items()}
    while queues:
        r = rnd.choice(sorted(queues))
        for _ in range(rnd.randint(1, 3)):
            if not queues.get(r):
                break
            lines.append(f"{r // per_node}: [default{r % per_node}]:[rank{r}]:{queues[r].pop(0)}")
        if not queues[r]:
            del queues[r]
        if rnd.random() < 0.3:
            lines.append(f"{rnd.randrange(n // per_node)}: noise line {rnd.random()} step={rnd.randint(0, 9)}")
    return ("\n".join(lines) + "\n").encode()


# --- split file == serial ------------------------------------------------------------------------

@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.randoms(use_true_random=False), st.lists(st.integers(min_value=0, max_value=20000), max_size=12),
       st.sampled_from([None, 64, 300, 4096]))
def test_split_file_merges_exactly_as_the_serial_scan(engine, rnd, cuts, chunk):
    data = _job_text(rnd)
    opts = ExtractOptions(tz=UTC, **({"chunk_bytes": chunk} if chunk else {}))
    src = SourceInfo(path="job.out", kind="memory", size=len(data))
    serial = extract(src, engine, opts, stream=io.BytesIO(data))
    replay = engines.ReplayScanner(scanned_pieces(engine, data, cuts))
    replay.name = engine.scanner.name
    split = extract(src, engine, opts, stream=io.BytesIO(data), scanner=replay)
    assert findings(split) == findings(serial)


def _dirty(rnd: random.Random, data: bytes) -> bytes:
    """``data`` with a few lines holding what ``Hygiene`` looks for: NUL bytes, non-ASCII text,
    invalid UTF-8 (or none of them)."""
    lines = data.split(b"\n")
    for _ in range(rnd.randint(0, 3)):
        i = rnd.randrange(len(lines))
        lines[i] += rnd.choice([b"\x00\x00", " caf\u00e9 \u2014 ok".encode(), b" \xff\xfe bad", b"\xe2\x80"])
    return b"\n".join(lines)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.randoms(use_true_random=False), st.lists(st.integers(min_value=0, max_value=20000), max_size=12),
       st.sampled_from([None, 300, 4096]), st.sampled_from([1, 97, 1000]))
def test_split_file_with_line_marks_and_hygiene_merges_exactly(engine, rnd, cuts, chunk, grid):
    """The pieces' line counts (marks every ``grid`` bytes) and clean-text flags give the serial
    line numbers and hygiene diagnostics, whatever the cuts, the buffer size and the text."""
    data = _dirty(rnd, _job_text(rnd))
    opts = ExtractOptions(tz=UTC, **({"chunk_bytes": chunk} if chunk else {}))
    src = SourceInfo(path="job.out", kind="memory", size=len(data))
    serial = extract(src, engine, opts, stream=io.BytesIO(data))
    before = engines.LINE_MARK_BYTES
    engines.LINE_MARK_BYTES = grid
    try:
        replay = engines.ReplayScanner(scanned_pieces(engine, data, cuts))
        replay.name = engine.scanner.name
        split = extract(src, engine, opts, stream=io.BytesIO(data), scanner=replay)
    finally:
        engines.LINE_MARK_BYTES = before
    assert findings(split) == findings(serial)


@settings(max_examples=80, deadline=None)
@given(st.randoms(use_true_random=False), st.lists(st.integers(min_value=0, max_value=20000), max_size=8),
       st.sampled_from([1, 64, 1000]))
def test_replayed_line_marks_count_as_count_nl(engine, rnd, cuts, grid):
    """Any range's line count from the marks equals counting it; a range said to be clean has no
    NUL and decodes, and a clean text's line-aligned ranges are said to be clean."""
    data = _dirty(rnd, _job_text(rnd))
    before = engines.LINE_MARK_BYTES
    engines.LINE_MARK_BYTES = grid
    try:
        replay = engines.ReplayScanner(scanned_pieces(engine, data, cuts))
        replay.scan(b"", len(data))
        for _ in range(50):
            a, b = sorted(rnd.randrange(len(data) + 1) for _ in range(2))
            base = rnd.randrange(a + 1)  # the caller's buffer may start anywhere before the range
            assert replay.lines_between(data[base:], a - base, b - base, base) == data.count(b"\n", a, b)
            a = data.rfind(b"\n", 0, a) + 1
            b = data.find(b"\n", b)
            if b < 0:
                continue
            b += 1
            said = replay.clean_between(data, a, b, 0)
            text = data[a:b]
            if said:
                assert b"\x00" not in text
                text.decode("utf-8")
            elif b"\x00" not in data and data.decode("utf-8", "replace") == data.decode("utf-8", "ignore"):
                assert a == b, (a, b)
    finally:
        engines.LINE_MARK_BYTES = before


#: messages of a combined stream's writers for the workers' reading of candidate lines: stamped and
#: unstamped failures (an event rule with its context, a primary one), a rule one writer says past
#: its first KEEP_FIRST, year-less (glog) stamps of a line and of the lines an inherited time is
#: read from, NCCL init facts and origins (a writer's host), a failure table and a rendezvous (facts
#: that read the lines around them), a progress frame with a rank's line cut into it (an embedded
#: prefix), a token cut by a frame, ANSI codes, non-ASCII text, an srun task's own stamped lines
_SAID_LINES = (
    "{py} - train - INFO - step={n} loss=2.31",
    "[{py}] [INFO] [loss_scaler.py:183:update_scale] [deepspeed] OVERFLOW! Rank {r} Skipping step. Attempted "
    "loss scale: 65536, reducing to 32768",
    "Traceback (most recent call last):",
    '  File "/opt/lightning/fabric/utilities/cloud_io.py", line 82, in _atomic_save',
    "    torch.save(checkpoint, bytesbuffer)",
    "OSError: [Errno 5] Input/output error",
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU {lr} has a total capacity of "
    "79.15 GiB of which 1.02 GiB is free.",
    "[{glog} ProcessGroupNCCL.cpp:616] [Rank {r}] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=301, "
    "OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600010 milliseconds before timing out.",
    "{glog} 12 train.cc:1] Iteration {n} done",
    "gpu-a0{node}:4000{lr}:4000{lr} [{lr}] NCCL INFO comm 0x55d0{h} rank {r} nranks 16 cudaDev {lr} busId {lr}8000 "
    "commId 0x9f3c{h} - Init COMPLETE",
    "gpu-a0{node}:4000{lr}:4007{lr} [{lr}] NCCL INFO [Service thread] Connection closed by localRank {lr}",
    "Failures:",
    "[1]:",
    "  time      : 2026-03-02_14:10:00",
    "  host      : gpu-a0{node}",
    "  rank      : {r} (local_rank: {lr})",
    "  exitcode  : 1 (pid: 424{lr})",
    "  traceback : OSError: [Errno 5] Input/output error",
    "I0302 14:00:00.964000 3187702 api.py:525]   global_ranks=[0, 1, 2, 3]",
    "Epoch 0:  5%|##  | 10/200 [rank{r}]:OSError: [Errno 5] Input/output error",
    "progress 10%\rhf_abcdefghijklmnop OSError: [Errno 5] Input/output error",
    "\x1b[31mERROR\x1b[0m ValueError: corrupt sample {n}",
    "d\u00e9j\u00e0 vu \u2713 RuntimeError: CUDA error: an illegal memory access was encountered",
    "{py} srun: error: gpu-a0{node}: task {r}: Exited with exit code 1",
    "filler line {n} with nothing in it",
)


def _said_text(rnd: random.Random, n_lines: int) -> bytes:
    """A combined stream of 16 writers under several launcher prefixes (and none), interleaved in
    runs, of ``_SAID_LINES`` in runs of one kind (a writer's rule past its first KEEP_FIRST; a run longer
    than the LOOK_LINES an inherited time is looked for in, whose unstamped lines take the writer's last stamp)."""
    styles = ["{node}: [default{lr}]:[rank{r}]:", "{node}: [default{lr}]:", "[rank{r}]:", "{node}: ", "",
              "[1,{r}]<stderr>:"]
    style = rnd.sample(styles, rnd.randint(1, 3))
    kinds = rnd.sample(_SAID_LINES, rnd.randint(3, len(_SAID_LINES)))
    lines: list[str] = []
    t = T0
    while len(lines) < n_lines:
        r = rnd.randrange(16)
        node, lr = divmod(r, 4)
        kind = rnd.choice(kinds)
        for _ in range(rnd.choice([1, 1, 2, 3, 12, 60, 420])):
            t += timedelta(milliseconds=rnd.randrange(900))
            msg = kind.format(py=py(t), glog=glog(t), n=len(lines), r=r, lr=lr, node=node,
                              h="".join(rnd.choice("0123456789abcdef") for _ in range(4)))
            lines.append(rnd.choice(style).format(node=node, lr=lr, r=r) + msg)
    return ("\n".join(lines) + rnd.choice(["\n", ""])).encode()


def _split_and_serial(engine, data: bytes, cuts: list[int], chunk: int | None, margin: int | None):
    opts = ExtractOptions(tz=UTC, **({"chunk_bytes": chunk} if chunk else {}))
    src = SourceInfo(path="job.out", kind="memory", size=len(data))
    serial = extract(src, engine, opts, stream=io.BytesIO(data))
    replay = engines.ReplayScanner(scanned_pieces(engine, data, cuts, src, opts, margin))
    replay.name = engine.scanner.name
    return extract(src, engine, opts, stream=io.BytesIO(data), scanner=replay), serial


@pytest.mark.slow  # (80 split extractions of up to 1,500 lines, both scanners: ~20-35 s)
@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.randoms(use_true_random=False), st.lists(st.integers(min_value=0, max_value=60000), max_size=10),
       st.sampled_from([None, 300, 4096]), st.sampled_from([None, 0, 700, 5000]), st.integers(50, 1500))
def test_split_file_read_by_the_workers_merges_exactly_as_the_serial_scan(engine, rnd, cuts, chunk, margin, n):
    """What the workers read of the candidate lines (``replay.Said``), taken in line order, gives the
    serial digest: whatever the cuts, the buffer size (a buffer that does not hold what a line was
    read from sends it the plain way) and the bytes a worker reads around its piece."""
    split, serial = _split_and_serial(engine, _said_text(rnd, n), cuts, chunk, margin)
    # (the test below counts the reports too, with the whole database off)
    assert findings(split) == findings(serial)


@pytest.mark.slow  # (40 split extractions of up to 1,200 lines, both scanners: ~25-45 s)
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.randoms(use_true_random=False), st.lists(st.integers(min_value=0, max_value=60000), max_size=6),
       st.sampled_from([300, 2000]), st.integers(200, 1200))
def test_a_line_read_past_the_serial_buffer_takes_the_plain_path(engine, rnd, cuts, chunk, n):
    """The same with the serial extract's look-back and look-ahead made small (4 KiB kept before a
    region, 8 lines or 1 KiB held after it): a worker's reading often looked further than the buffer
    the line is taken in holds, and such a line must take the plain path (dropping that check in
    ``replay_line`` fails this)."""
    from correlator.extract import reader

    names = ("KEEP_BYTES", "HOLD_LINES", "HOLD_BYTES", "HOLD_MAX")
    was = [getattr(reader, k) for k in names]
    for k, v in zip(names, (4096, 8, 1024, 8192), strict=True):
        setattr(reader, k, v)
    try:
        split, serial = _split_and_serial(engine, _said_text(rnd, n), cuts, chunk, None)
    finally:
        for k, v in zip(names, was, strict=True):
            setattr(reader, k, v)
    assert split == serial


def test_the_workers_reading_is_taken_for_most_lines(engine, monkeypatch):
    """With the default buffers and margins, the serial extract takes a good part of the candidate
    lines as the workers read them (else the property test above would prove little: about half of
    these, whose writers' kinds are drawn to send many lines the plain way), and the lines it may not
    take -- a fact that reads the lines around it, a stamp without a year around an unstamped line --
    take the plain path."""
    import correlator.extract.extractor as extractor
    import correlator.extract.replay as replay

    taken: list[bool] = []

    def counting(c, told, block, start):
        got = replay.replay_line(c, told, block, start)
        taken.append(got)
        return got

    monkeypatch.setattr(extractor, "replay_line", counting)
    # (a confirmation slower than a linear pattern may be makes no Said: on a loaded machine wall
    # time decides that for some of these lines, which is not what this counts)
    monkeypatch.setattr(replay, "allowance", lambda text: 3600.0)
    # (every range by the main database: the pieces' reports then add up to the serial scan's)
    monkeypatch.setattr(scan, "WHOLE_WHEN_DENSE", False)
    data = _said_text(random.Random(7), 3000)
    split, serial = _split_and_serial(engine, data, [9000, 20000, 31000, 52000], None, None)
    assert split == serial
    # (558 of 1,374 with hyperscan, 619 of 1,435 with regex: the bar is well under both, and far
    # over what a reading that is never taken gives)
    assert len(taken) > 500 and sum(taken) > 0.3 * len(taken)
    assert not all(taken)


def test_piece_bounds_are_line_starts(tmp_path):
    data = _job_text(random.Random(3)) * 40
    p = tmp_path / "big.out"
    p.write_bytes(data)
    bounds = engines.piece_bounds(str(p), len(data), piece=5000)
    assert bounds[0][0] == 0 and bounds[-1][1] == len(data)
    assert all(a == b for (_, a), (b, _) in zip(bounds, bounds[1:]))
    assert all(data[a - 1:a] == b"\n" for a, _ in bounds[1:])
    assert len(bounds) > 10


@pytest.mark.slow
def test_pool_with_a_split_file_equals_one_process(tmp_path, rules, monkeypatch):
    rnd = random.Random(11)
    big = b"".join(_job_text(rnd, n=16) for _ in range(30))
    (tmp_path / "slurm-4242.out").write_bytes(big)
    for r in range(3):  # and a few whole files beside it
        (tmp_path / f"rank-{r}.log").write_bytes(b"\n".join(
            f"{py(T0)} - train - INFO - step={s} rank {r}".encode() for s in range(200)) + b"\n")
    monkeypatch.setattr(engines, "POOL_MIN_BYTES", 0)
    monkeypatch.setattr(engines, "SPLIT_MIN_BYTES", 1000)
    monkeypatch.setattr(engines, "PIECE_BYTES", 7000)
    srcs = [replace(identity_from_path(str(p)), size=p.stat().st_size) for p in sorted(tmp_path.iterdir())]
    eng = Engine(rules)
    spec = engines.EngineSpec((), True, None, ExtractOptions(tz=UTC))
    pooled = engines.run_local(srcs, spec, eng, 2)
    serial = engines.run_local(srcs, spec, eng, 1)
    assert list(map(findings, pooled)) == list(map(findings, serial))
    assert sum(len(d.matches) for d in pooled) > 0


# --- Dask ----------------------------------------------------------------------------------------

def test_dask_two_workers_same_report_as_local(tmp_path):
    import dask.distributed  # noqa: F401 - the [dask] extra is installed by .ci/run and the Quickstart
    from dask.distributed import LocalCluster

    job = tmp_path / "job"
    job.mkdir()
    per = rank_lines(8, 4, 5)
    for node in range(2):
        lines = combined_srun({r: per[r] for r in range(node * 4, node * 4 + 4)}, 4)
        (job / f"node-{node}.out").write_text("\n".join(lines) + "\n")
    local = analyze([str(job)], Options(tz="UTC"))
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster:
        remote = analyze([str(job)], Options(tz="UTC", engine="dask", scheduler=cluster.scheduler_address))
    assert remote.stats.engine == "dask"
    assert _comparable(remote) == _comparable(local)
    assert local.root_cause is not None and local.root_cause.rank == 5


_CLUSTER = """
import sys
from dask.distributed import LocalCluster
cluster = LocalCluster(n_workers=1, threads_per_worker=1, processes=True, dashboard_address=None)
print(cluster.scheduler_address, flush=True)
sys.stdin.read()
cluster.close()
"""


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([sys.executable, "-m", "correlator", *args], capture_output=True, cwd=cwd, timeout=300,
                          env={**os.environ, "PYTHONPATH": os.environ.get("PYTHONPATH", str(ROOT))})


def test_dask_scheduler_in_another_folder_reads_relative_paths_and_names_what_a_worker_cannot(tmp_path):
    """A scheduler and worker started in another working folder (as on a cluster) once opened
    ``job/slurm-4242.out`` relative to theirs and found nothing: a silent "no failure". Paths are
    made absolute before they are shipped and the report names them as the user did; a source a
    worker cannot open is said as the worker's."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    job = tmp_path / "job"
    job.mkdir()
    (job / "slurm-4242.out").write_text("\n".join(combined_srun(rank_lines(8, 4, 5), 4)) + "\n")
    env = {**os.environ, "PYTHONPATH": os.environ.get("PYTHONPATH", str(ROOT))}
    with subprocess.Popen([sys.executable, "-c", _CLUSTER], cwd=elsewhere, env=env, stdin=subprocess.PIPE,
                          stdout=subprocess.PIPE, text=True) as cluster:
        try:
            assert cluster.stdout is not None
            address = cluster.stdout.readline().strip()
            assert address.startswith("tcp://"), address
            r = _cli("--engine", "dask", "--scheduler", address, "job/slurm-4242.out", "-f", "json", "--tz", "UTC",
                     cwd=tmp_path)
            assert r.returncode == 0, r.stderr.decode()
            doc = json.loads(r.stdout)
            assert doc["stats"]["engine"] == "dask"
            assert doc["verdict"] == "root_cause" and doc["root_cause"]["rank"] == 5
            assert {e["path"] for e in doc["timeline"]} == {"job/slurm-4242.out"}
            # a file the worker cannot open (here: gone after discovery) is the worker's problem, said so
            gone = SourceInfo(path=str(tmp_path / "vanished.log"), kind="file")
            spec = engines.EngineSpec((), True, None, ExtractOptions(tz=resolve_tz("UTC")))
            (d,) = engines.run_dask([gone], spec, address)
            (diag,) = [x for x in d.diagnostics if x.level == "error"]
            assert diag.path == gone.path and "No such file" in diag.message
            assert "on Dask worker tcp://" in diag.message and "the workers must see the logs" in diag.message
        finally:
            assert cluster.stdin is not None
            cluster.stdin.close()
            cluster.wait(60)


@pytest.mark.slow
def test_dask_scheduler_nobody_listens_on_is_one_line_naming_it(tmp_path):
    """Once an "internal error" after 30 s of silence: now one ``error:`` line with the address,
    exit 2, after the client's connection timeout (``DASK_CONNECT_S``, said in the message)."""
    import socket

    with socket.socket() as s:  # a port that was free a moment ago: nobody listens on it
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    (tmp_path / "x.log").write_text("hello\n")
    address = f"tcp://127.0.0.1:{port}"
    r = _cli("--engine", "dask", "--scheduler", address, "x.log", cwd=tmp_path)
    err = r.stderr.decode().strip().splitlines()
    assert r.returncode == 2, err
    assert len(err) == 1 and err[0].startswith(f"error: cannot reach the Dask scheduler at {address}"), err
    assert "internal error" not in err[0] and f"after {engines.DASK_CONNECT_S} s" in err[0]


# --- the scalar fallback == Hyperscan ------------------------------------------------------------

JOBS = sorted({p for p in (ROOT / "sample_logs").glob("*/") if p.is_dir()}
              | {p for p in (ROOT / "tests" / "real_logs").glob("*/") if p.is_dir()})


@needs_hs
@pytest.mark.parametrize("job", JOBS, ids=[f"{p.parent.name}/{p.name}" for p in JOBS])
def test_scalar_fallback_gives_the_same_report(job):
    hs = analyze([str(job)], Options(tz="UTC", scanner="hyperscan"))
    rx = analyze([str(job)], Options(tz="UTC", scanner="regex"))
    assert _comparable(hs) == _comparable(rx)


# --- window facts: Hyperscan fast path == line by line -------------------------------------------

_WINDOW_LINES = [
    "{py} - train - INFO - step={n} loss=2.1",
    "{py} - data - DEBUG - micro_step={n} fwd=1",
    "[{py}] [INFO] [timer.py:1:stop] epoch=0/micro_step={n}/global_step={n}, x",
    "{glogI} 12 train.cc:1] Iteration {n} done",
    "ITER {n} no stamp",
    "Step {n}: loss nan",
    " iteration {n}/ 100 | lm loss: 1.0",
    "plain text line without anything",
    "",
    "   ",
    "Epoch 0:  1%|\u2588 | {n}/2000 [00:01<1:00,  1.2it/s]",
    "1772460000.5 epoch stamped step {n}",
    "tcp 10:5x ratio 3:4 global step {n}",
    "\u00fcn\u00efcode \u2713 step: {n}",
    "\t",
    "global_step={n} without stamp",
    "[rank1]:[{glogE} ProcessGroupNCCL.cpp:1] step {n} watchdog",
    "[rank1]:plain text after prefix",
    "3: [default1]:{py} - x - step={n}",
    "3: agent line step {n}",
    "[rank2]: {py} iteration {n}",
    "[default0]:Iteration {n}",
    "gpu-a01:1234:1234 [1] NCCL INFO comm 0x55 rank 1 nranks 8 - Init COMPLETE step {n}",
    "[rank1]:gpu-a02:4321:4321 [1] NCCL INFO Using network IB",
    "3: [default1]:gpu-a03:77:77 [1] NCCL INFO Bootstrap : Using ib0",
    "NCCL version 2.21.5+cuda12.4",
    "{py} step=1234567890 is too long, then step {n}",
    "{py} global step {n} ITERATION 7",
    "steps {n} stepping iter={n}x iter = {n}",
    "[rank1]:{py} Step : {n}",
    "worker-1: {py} - train - INFO - step={n} loss=2.1",
    "worker-2: [rank5]: {py} iteration {n}",
    "10.0.0.6: {py} - x - global_step={n}",
    "gpu-a01.cluster: gpu-a01:77:77 [1] NCCL INFO Bootstrap : Using ib0",
    "(WorkerDict pid=26110, ip=10.0.0.7) {py} step {n}",
    "WARNING: not a prefix, step {n}",
    "bench.cn-n001.nolog [stderr] [rank14]: {py} step {n}",
    "bench.cn-n002.nolog [stdout] plain step {n}",
    "(pid=34272) {py} step {n}",
    "2026-03-02T14:00:44.884Z: [1,12]<stdout>:step {n}",
    "2026-03-02T14:00:45.001Z: [1,3]<stderr>:gpu-a01:815:864 [0] NCCL INFO Using network IB",
    "[node1:4]:{py} step {n}",
    "2025-12-31T23:59:59.000Z: [1,4]<stdout>:step {n}",  # a run across New Year: glog years follow both ways alike
    "[ip-10-0-1-5:3]:[rank11]:{py} iteration {n}",
    # ANSI codes (loguru, rich): read in place by the fast path unless they hide a prefix or a stamp
    "\x1b[32m{py}\x1b[0m | \x1b[1mINFO    \x1b[0m | \x1b[36mtrain\x1b[0m:\x1b[36mstep\x1b[0m:\x1b[36m42\x1b[0m - step {n}",
    "{py} \x1b[33mWARNING\x1b[0m plain step {n}",
    "\x1b[31m\x1b[0m",
    "\x1b[1m[rank1]:\x1b[0m{py} iteration {n}",
    "\x1b[0m3: [default1]:{py} - x - step={n}",
    "2026-03-02 14\x1b[0m:00:01 a stamp split by a code, step {n}",
]


def _window_text(rnd: random.Random, n: int, pool: list[str] = _WINDOW_LINES) -> bytes:
    from datetime import timedelta

    out, step = [], rnd.randint(0, 5)
    for _ in range(n):
        step = max(0, step + rnd.choice([0, 0, 1, -1, 2]))
        t = T0 + timedelta(seconds=rnd.randint(0, 59), milliseconds=rnd.randint(0, 999))
        out.append(rnd.choice(pool).format(py=py(t), glogI=glog(t, "I"), glogE=glog(t, "E"), n=step))
    return ("\n".join(out) + ("\n" if rnd.random() < 0.8 else "")).encode()


@needs_hs
@settings(max_examples=300, deadline=None)
@given(st.randoms(use_true_random=False), st.integers(0, 200), st.sampled_from([1, 2, 3, 8]))
def test_one_writer_through_the_window_finder_is_one_writer(rnd, n, kinds):
    """The census of a window's prefixes through Hyperscan's window finder == ``lines.one_writer``'s
    ``findall`` over every line, for windows of few or many kinds of prefixed lines."""
    from correlator.extract.lines import one_writer

    pool = rnd.sample(_WINDOW_LINES, min(len(_WINDOW_LINES), kinds * 4))
    data = _window_text(rnd, n, pool)
    if rnd.random() < 0.3:
        data = data[rnd.randrange(len(data) + 1):]  # (a window may start anywhere after a cut)
    assert windows.one_writers(data, True) == one_writer(data) == windows.one_writers(data, False)


def _windows(engine) -> windows.Windows:
    from correlator.extract.lines import Context, Stamps

    return windows.Windows(Context(SourceInfo(path="x.log", kind="memory"), Stamps(UTC, None), engine.scanner))


def _window_run(engine, head: bytes, tail: bytes, tail_base: int = 5000):
    w = _windows(engine)
    w.facts(head, 0, head=True)
    w.facts(tail, tail_base, head=False)
    return ({k: (w.lines, w.first_ns, w.last_ns, w.last_offset, w.last_step, w.last_step_ns, w.who)
             for k, w in w.writers.items()}, list(w.anchors.items()))


@pytest.mark.slow
@needs_hs
@settings(max_examples=300, deadline=None)
@given(st.randoms(use_true_random=False), st.integers(0, 120), st.integers(0, 120))
def test_window_facts_fast_path_equals_line_by_line(rules, rnd, a, b):
    head, tail = _window_text(rnd, a), _window_text(rnd, b)
    if head and not head.endswith(b"\n"):
        head += b"\n"
    fast, slow = Engine(rules, "hyperscan"), Engine(rules, "regex")
    assert _window_run(fast, head, tail) == _window_run(slow, head, tail)
    saved = windows.ANCHORS_PER_WINDOW
    windows.ANCHORS_PER_WINDOW = rnd.choice([1, 3])  # the per-writer cap on step anchors, exercised
    try:
        assert _window_run(fast, head, tail) == _window_run(slow, head, tail)
        assert _window_run(fast, head, head, 0) == _window_run(slow, head, head, 0)  # a small file
        assert _window_run(fast, head, head + tail, 0) == _window_run(slow, head, head + tail, 0)  # under 2 MiB
    finally:
        windows.ANCHORS_PER_WINDOW = saved


_HIDING = ("\x1b[1m[rank1]:", "\x1b[0m3: ", "14\x1b[0m:00")
_ONE_WRITER_ANSI = [x for x in _WINDOW_LINES if not any(h in x for h in _HIDING) and not x.startswith(("[", "3:", "w", "1", "g", "(", "b", "2026-03-02T", "2025"))]


@needs_hs
@settings(max_examples=150, deadline=None)
@given(st.randoms(use_true_random=False), st.integers(1, 120), st.integers(1, 120))
def test_window_facts_fast_path_reads_ansi_coloured_lines_as_line_by_line(rules, rnd, a, b):
    """A one-writer window whose lines carry ANSI codes (loguru, rich) that hide no prefix or stamp
    is read by the fast path, with the same facts as the line-by-line loop."""
    head, tail = _window_text(rnd, a, _ONE_WRITER_ANSI), _window_text(rnd, b, _ONE_WRITER_ANSI)
    head += b"\n" if not head.endswith(b"\n") else b""
    fast, slow = Engine(rules, "hyperscan"), Engine(rules, "regex")
    if b"\x1b" in tail:
        assert _windows(fast).facts_fast(tail, 0, head=False)  # (not the loop)
    assert _window_run(fast, head, tail) == _window_run(slow, head, tail)
    hidden = tail + (b"" if tail.endswith(b"\n") else b"\n") + b"\x1b[0m3: [default1]:agent step 9\n"
    assert not _windows(fast).facts_fast(hidden, 0, head=False)
    assert _window_run(fast, head, hidden) == _window_run(slow, head, hidden)


@needs_hs
@settings(max_examples=300, deadline=None)
@given(st.randoms(use_true_random=False), st.integers(0, 150))
def test_progress_lines_from_the_window_finder_are_each_lines_first_progress_match(rnd, n):
    """``windows.progress_lines`` (numpy over the window finder's matches) == ``PROGRESS.search`` on
    each line: the line's first match and its step, job steps (``.0 ON node``) left out, the
    unterminated last line left to the caller."""
    from correlator.extract.lines import PROGRESS, SLURM_STEP_TAIL
    from correlator.extract.scan import window_finder

    pool = [*_WINDOW_LINES, "*** STEP {n}.0 ON node14 CANCELLED AT 2026-03-02T14:00:00 ***",
            "step {n}.5 ON x then step 3", "step 123456789 ok", "iter 1234567890 too long", "step {n}"]
    data = _window_text(rnd, n, pool)
    hits = window_finder().classify(data, 1 << 20)[0]
    expect: tuple[list[int], list[int], list[int]] = ([], [], [])
    pos = 0
    for raw in data.split(b"\n")[:-1]:  # (the last piece: the unterminated line, or empty)
        m = PROGRESS.search(raw)
        if m is not None and not SLURM_STEP_TAIL.match(raw, m.end()):
            expect[0].append(pos)
            expect[1].append(int(m.group(1)))
            expect[2].append(pos + m.start())
        pos += len(raw) + 1
    assert windows.progress_lines(data, hits) == (expect, data.count(b"\n"))


@needs_hs
@settings(max_examples=200, deadline=None)
@given(st.randoms(use_true_random=False), st.integers(1, 160), st.sampled_from([1, 2, 3, 8]))
def test_tail_window_through_the_window_finder_is_the_plain_one(rules, rnd, n, kinds):
    """The tail window chosen with the window finder's look at each short window (one writer's? holds
    progress?) is the one ``one_writers`` and ``PROGRESS.search`` choose."""
    pool = rnd.sample(_WINDOW_LINES, min(len(_WINDOW_LINES), kinds * 4))
    data = _window_text(rnd, n, pool)
    saved = windows.TAIL_SIZES_ONE
    windows.TAIL_SIZES_ONE = (rnd.randint(50, 400), rnd.randint(400, 2000))
    try:
        got = []
        for engine in (Engine(rules, "hyperscan"), Engine(rules, "regex")):
            w = _windows(engine)
            w.tail = data
            got.append(w.tail_window(5000 + len(data)))
    finally:
        windows.TAIL_SIZES_ONE = saved
    assert got[0] == got[1]


@needs_hs
@settings(max_examples=200, deadline=None)
@given(st.randoms(use_true_random=False), st.integers(0, 120), st.integers(20, 4000))
def test_progress_in_the_head_through_the_window_finder_is_the_plain_search(rules, rnd, n, size):
    """Whether the head's first ``size`` bytes hold a progress match, asked first of the window
    finder's look at the head window that size makes, == ``PROGRESS.search(head, 0, size)``."""
    from correlator.extract.lines import PROGRESS

    pool = [*_WINDOW_LINES, "step\n5 across a newline", "plain", "ITER"]
    head = _window_text(rnd, n, pool)
    w = _windows(Engine(rules, "hyperscan"))
    w.head = head
    if len(head) >= size:
        assert w._progress_in_head(size) == (PROGRESS.search(head, 0, size) is not None)


@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=9000), st.integers(0, 3))
def test_text_probe_without_nul_runs_is_the_plain_one(data, nuls):
    """``text_probe`` looks for runs of NULs only where there is a NUL: the same judgement."""
    import correlator.extract.sources as sources

    data = data + b"\x00" * (8 * nuls)
    sample = sources._NUL_RUN.sub(b"", data[:8192])
    if not sample:
        plain = True
    elif len(sample.translate(None, sources._TEXT_BYTES)) / len(sample) >= 0.05:
        plain = False
    elif sample.isascii():
        plain = True
    else:
        text = sample.decode("utf-8", "replace")
        plain = text.count("\ufffd") / len(text) < 0.2
    assert sources.text_probe(data) == plain


# --- the cut found without joining ----------------------------------------------------------------

def _two_copy_cut(carry: bytes, chunk: bytes, hold_lines: int, hold_bytes: int):
    """The plain cut of the read loop: join, cut at the last newline, hold lines back."""
    data = carry + chunk
    cut = data.rfind(b"\n") + 1
    if cut == 0:
        return None
    saved = reader.HOLD_LINES, reader.HOLD_BYTES, reader.HOLD_MAX
    reader.HOLD_LINES, reader.HOLD_BYTES, reader.HOLD_MAX = hold_lines, hold_bytes, 100
    try:
        cut = reader.hold_back(data, cut)
    finally:
        reader.HOLD_LINES, reader.HOLD_BYTES, reader.HOLD_MAX = saved
    return data[:cut], data[cut:]


@settings(max_examples=2000, deadline=None)
@given(st.binary(max_size=60).map(lambda b: b.replace(b"\x00", b"\n")),
       st.binary(max_size=120).map(lambda b: b.replace(b"\x00", b"\n").replace(b"\x01", b"\n")))
def test_cut_found_without_joining_equals_the_two_copy_cut(carry, chunk):
    saved = reader.HOLD_LINES, reader.HOLD_BYTES, reader.HOLD_MAX
    # small holds, so that they reach back into the carry and to the buffer's start
    reader.HOLD_LINES, reader.HOLD_BYTES, reader.HOLD_MAX = 5, 40, 100
    try:
        cut = reader.cut_index(carry, chunk)
        got = None if cut is None else ((carry + chunk)[:cut], (carry + chunk)[cut:])
    finally:
        reader.HOLD_LINES, reader.HOLD_BYTES, reader.HOLD_MAX = saved
    if got is not None:
        assert got == _two_copy_cut(carry, chunk, 5, 40)


_ = (os, Path)


# --- the prefix census of check_writers ------------------------------------------------------------

_PREFIX_PARTS = [b"\n", b" ", b"\t", b"5: ", b"12: ", b"[rank3]:", b"[default1]:", b"x", b"1234567: ", b"[rank",
                 b"9", b": ", b"\r", b"gpu-a01: ", b"10.0.0.6: ", b"(pid=12) ", b"(Actor pid=3, ip=10.0.0.1) ",
                 b"bench.n1.nolog [stdout]", b"b [stderr] ", b"]", b")", b"step 7: ", b"[rank=4] ", b"\x0b", b"      "]


@settings(max_examples=1500, deadline=None)
@given(st.lists(st.sampled_from(_PREFIX_PARTS), max_size=30).map(b"".join))
def test_line_start_captures_equal_the_census_of_every_line(text):
    """The census looks only at the lines the dialects' census hints find: it misses none of the
    writers the stacked prefixes name at any line start."""
    want = set()
    for ls in [0] + [i + 1 for i, c in enumerate(text) if c == 10]:
        m = statements._STACK.match(text, ls)
        want |= {m.group(g) for g in statements._WRITER_GROUPS if m.group(g)}
    assert statements.line_start_captures(text, False) == want
    if hyperscan_available():
        assert statements.line_start_captures(text, True) == want


_TEXT_PARTS = [b"\n", b" ", b"[default1]:", b"[default2]:", b"[rank3]:", b"3: ", b"[Rank 5]", b"[RANK 6]", b"[rank 7] ",
               b"[olmo.util:158, rank=6]", b"[x,\n rank=9]", b"]:", b"[", b"]", b"x", b"rank=", b", rank=2]",
               b"\x1b[0m", b"[trainer5]:"]


@settings(max_examples=1500, deadline=None)
@given(st.lists(st.sampled_from(_TEXT_PARTS), max_size=40).map(b"".join))
def test_the_writers_census_prefilters_find_what_the_plain_searches_find(text):
    """``several_local_tags`` (which looks for a tag's end first) and ``prefixes.ranks_in_text`` (without
    its ``rank=`` branch where the bytes hold no ``rank=``) == their plain searches over every line."""
    from correlator.extract import prefixes

    first = statements._LOCAL_TAG_NL.match(b"\n" + text[:200])
    tags = {first.group(1)} if first else set()
    tags |= {m.group(1) for m in statements._LOCAL_TAG_NL.finditer(text)}
    assert statements.several_local_tags(text) == (len(tags) >= 2)
    for limit in (2, 3, 100):
        plain: set[int] = set()
        for m in prefixes._RANK_IN_TEXT_B.finditer(text):
            plain.add(int(m.group(1) or m.group(2)))
            if len(plain) >= limit:
                break
        assert prefixes.ranks_in_text(text, limit) == plain


def test_batches_keep_order_and_cover_every_file():
    from correlator.extract.engines import _batches
    from correlator.model import SourceInfo as S

    srcs = [S(path=f"f{i}", size=sz) for i, sz in enumerate([50 << 20, 1 << 20, 1 << 20, 3 << 20] + [1 << 20] * 200)]
    order = sorted(range(len(srcs)), key=lambda i: -(srcs[i].size or 0))
    batches = _batches(order, srcs, 2)
    assert [i for b in batches for i in b] == order
    assert batches[0] == [0]  # a big file travels alone
    assert all(len(b) <= 64 for b in batches) and len(batches) >= 8  # several per worker


@settings(max_examples=1500, deadline=None)
@given(st.binary(max_size=200).map(lambda b: b.replace(b"\x00", b"\n").replace(b"\x01", b"\n")),
       st.integers(1, 6), st.integers(1, 60), st.integers(20, 400))
def test_the_region_ends_at_the_last_line_with_its_look_ahead_after_it(data, lines, nbytes, hold_max):
    """``hold_back``: the region ends at the last line start with ``HOLD_LINES`` lines and
    ``HOLD_BYTES`` bytes after it up to the cut (so each line has its look-ahead, however the input
    was cut); at 0 (all held) when no line has that yet; never more than ``HOLD_MAX`` held, and
    nothing when the unfinished last line is longer than that (it is read as an over-long line)."""
    cut = data.rfind(b"\n") + 1
    if cut == 0:
        return
    saved = reader.HOLD_LINES, reader.HOLD_BYTES, reader.HOLD_MAX
    reader.HOLD_LINES, reader.HOLD_BYTES, reader.HOLD_MAX = lines, nbytes, hold_max
    try:
        end = reader.hold_back(data, cut)
    finally:
        reader.HOLD_LINES, reader.HOLD_BYTES, reader.HOLD_MAX = saved
    starts = [0] + [i + 1 for i in range(cut - 1) if data[i] == 10]
    assert end == cut or end in starts
    if len(data) - cut > hold_max:  # an unfinished line longer than the hold: nothing is held
        assert end == cut
    elif cut <= hold_max:  # the whole buffer within reach: the exact answer
        good = [p for p in starts if data.count(b"\n", p, cut) >= lines and cut - p >= nbytes]
        assert end == (max(good) if good else 0)
    else:
        assert cut - end <= hold_max


# --- the bulk lane of plain candidate lines == one by one -----------------------------------------

#: lines that take the bulk lane, and lines beside them that must not (prefixed, stamped, framed,
#: non-ASCII, a `not` pattern, a host, an embedded prefix, a context rule's literal, another rule)
_LANE_LINES = (
    "ValueError: corrupt sample {i} in shard {j}",
    "KeyError: 'sample_{i}'",
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {j}.00 MiB",
    "RuntimeError: DataLoader worker (pid {i}) is killed by signal: Killed.",
    "  ValueError: indented {i}",
    "ValueError",
    "ValueError:",
    "ValueError: Broken pipe {i}",
    "OSError: [Errno 5] Input/output error: '/lustre/shard{j}'",
    "ValueError: at 12:{j:02d}:00 things went wrong",
    "ValueError: failed at 2026-03-02 14:01:0{d} on shard {j}",
    "E0302 14:01:0{d}.123456 {i} foo.cc:12] ValueError: glog {i}",
    "ValueError: bad \u00e9t\u00e9 {i}",
    "ValueError: tab\there {i}",
    "progress 10%\rValueError: framed {i}",
    "\x1b[31mValueError: red {i}\x1b[0m",
    "[rank{j}]:ValueError: tagged {i}",
    "{j}: ValueError: srun {i}",
    "{j}: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {j}.00 MiB",
    "gpu-a{j:02d}: RuntimeError: CUDA error: an illegal memory access was encountered",
    "[default{d}]:RuntimeError: CUDA error: an illegal memory access was encountered",
    "gpu-a{j:02d}:{i}:{i} [0] NCCL WARN ValueError: nccl {i}",
    "Mar  3 10:00:0{d} gpu-a01 kernel: ValueError: kernel {i}",
    "Exception ignored in: <function _Loader.__del__ at 0x7f{i}>",
    "Traceback (most recent call last):",
    '  File "/workspace/data/shards.py", line {j}, in __getitem__',
    "    raise ValueError(f\"corrupt sample {{idx}}\")",
    "2026-03-02 14:01:0{d},000 - data - WARNING - skipping sample {i}",
    "2026-03-02 14:01:0{d},000 - train - ERROR - ValueError: logged {i}",
    "filler line {i} with nothing in it",
    # lines of other rules that take the lane (a block's lane lines searched rule by rule)
    "Duplicate GPU detected : rank {d} and rank 0 both on CUDA device f000",
    "Handling auto-requeue signal: 1{d}",
    "terminate called after throwing an instance of 'c10::Error'",
)


@st.composite
def _lane_log(draw) -> bytes:
    rnd = draw(st.randoms(use_true_random=False))
    # a few kinds of line, each often: the lane's last lines of a block are built, and what they say
    # (their stamp, their writer) shows in the digest
    kinds = draw(st.lists(st.sampled_from(_LANE_LINES), min_size=1, max_size=5))
    n = draw(st.integers(0, 600))
    lines = [rnd.choice(kinds).format(i=i, j=rnd.randrange(100), d=rnd.randrange(10)) for i in range(n)]
    text = "\n".join(lines) + ("\n" if draw(st.booleans()) else "")
    return text.encode()


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_lane_log(), st.sampled_from([None, 300, 4096]))
def test_bulk_lane_gives_the_digest_of_the_line_by_line_path(engine, data, chunk):
    import correlator.extract.confirmer as confirmer

    opts = ExtractOptions(tz=UTC, **({"chunk_bytes": chunk} if chunk else {}))
    src = SourceInfo(path="rank-3.log", kind="memory", size=len(data), file_rank=3)
    # (not monkeypatch: a function-scoped fixture under hypothesis)
    confirmer.BULK_MIN_CANDIDATES = 0  # the lane in small blocks too
    try:
        fast = extract(src, engine, opts, stream=io.BytesIO(data))
        confirmer.BULK_LANE = False
        slow = extract(src, engine, opts, stream=io.BytesIO(data))
    finally:
        confirmer.BULK_LANE, confirmer.BULK_MIN_CANDIDATES = True, confirmer.KEEP_FIRST
    assert fast == slow


@pytest.mark.parametrize("mix", [
    # plain lines first (their rule's first KEEP_FIRST are counted), then lines of the same rule that
    # only look plain to a pattern without an anchor: a launcher prefix, a stamp
    ("Failed to initialize NVML: Driver/library version mismatch", "{j}: Failed to initialize NVML: "
     "Driver/library version mismatch", "gpu-a{j:02d}: Failed to initialize NVML: Driver/library version mismatch"),
    ("Failed to initialize NVML: Driver/library version mismatch",
     "2026-03-02 14:{j:02d}:00 Failed to initialize NVML: Driver/library version mismatch"),
    ("ValueError: corrupt sample {i}", "ValueError: failed at 2026-03-02 14:01:{j:02d} on shard {i}",
     "Exception ignored in: <function _Loader.__del__ at 0x7f{i}>"),
])
def test_bulk_lane_leaves_prefixed_and_stamped_lines_to_the_line_by_line_path(engine, monkeypatch, mix):
    import correlator.extract.confirmer as confirmer

    rnd = random.Random(5)
    lines = [mix[0].format(i=i, j=0) for i in range(60)]
    lines += [rnd.choice(mix).format(i=i, j=rnd.randrange(60)) for i in range(400)]
    data = ("\n".join(lines) + "\n").encode()
    src = SourceInfo(path="x.log", kind="memory", size=len(data))
    for chunk in (None, 2000):
        opts = ExtractOptions(tz=UTC, **({"chunk_bytes": chunk} if chunk else {}))
        monkeypatch.setattr(confirmer, "BULK_LANE", True)
        fast = extract(src, engine, opts, stream=io.BytesIO(data))
        monkeypatch.setattr(confirmer, "BULK_LANE", False)
        assert fast == extract(src, engine, opts, stream=io.BytesIO(data))


def test_bulk_lane_takes_the_repeated_plain_exceptions(engine, monkeypatch):
    """The lane is taken (not only equal): a log of 2,000 plain exception lines confirms all but the
    first KEEP_FIRST and the survivors of each block in bulk, not one by one."""
    import correlator.extract.confirmer as confirmer
    from correlator.ruleset import RuleSet

    data = "".join(f"ValueError: corrupt sample {i}\n" for i in range(2000)).encode()
    calls = []
    real = RuleSet.confirm
    monkeypatch.setattr(RuleSet, "confirm", lambda self, *a, **k: calls.append(1) or real(self, *a, **k))
    src = SourceInfo(path="x.log", kind="memory", size=len(data))
    fast = extract(src, engine, ExtractOptions(tz=UTC), stream=io.BytesIO(data))
    n_fast = len(calls)
    monkeypatch.setattr(confirmer, "BULK_LANE", False)
    calls.clear()
    slow = extract(src, engine, ExtractOptions(tz=UTC), stream=io.BytesIO(data))
    assert fast == slow and fast.confirmed_matches == 2000
    assert n_fast <= confirmer.KEEP_FIRST * 2 + confirmer.KEEP_LAST < len(calls)


# --- dense logs: NCCL init lines said again, the count lane == one by one ----------------------------

#: lines of a dense log: NCCL init chatter (the same facts again and again, a communicator's pointer
#: and id varying), lines one rule fires on over and over -- unstamped with an NCCL origin (a host), with
#: a stamp (ISO, and glog's year-less one, whose year the ISO stamps set), plain --, and beside them
#: what must not take a lane: prefixed, framed, coloured, non-ASCII, over-long lines, another rule
_DENSE_LINES = (
    "gpu-a{j:02d}:4000{d}:4000{d} [{d}] NCCL INFO comm 0x55d0{h} rank {d} nranks 8 cudaDev {d} busId {d}8000 "
    "commId 0x9f3c{h} - Init START",
    "gpu-a{j:02d}:4000{d}:4000{d} [{d}] NCCL INFO comm 0x55d0{h} rank {d} nranks 8 cudaDev {d} busId {d}8000 "
    "commId 0x9f3c{h} - Init COMPLETE",
    "gpu-a01:40000:40000 [0] NCCL INFO ncclCommInitRank comm 0x{h} rank {d} nranks 8 cudaDev 0 nvmlDev 0 busId "
    "08000 commId 0x{h}{h} - Init START",
    "gpu-a01:40000:40000 [0] NCCL INFO comm 0x{h} rank 0 nRanks 8 nNodes 1 localRanks 8 localRank 0 MNNVL 0",
    "[rank{d}]:gpu-a01:40000:40000 [0] NCCL INFO comm 0x{h} rank {d} nranks 8 cudaDev 0 busId 08000 - Init START",
    "gpu-a01:40000:40000 [0] NCCL INFO comm 0x{h} rank 0 nranks 8 cudaDev 0 busId 08000 \x1b[0m- Init START",
    "gpu-a{j:02d}:40000:4007{d} [0] NCCL INFO [Service thread] Connection closed by localRank {d}",
    "gpu-a01:40000:4007{d} [0] NCCL INFO [Service thread] Connection closed by localRank {d}",
    "gpu-a01:40000:4007{d} [0] NCCL INFO [Service thread] Connection closed by localRank 1{i}",
    "[2024-03-05 10:12:{j:02d},118] [INFO] [fused_optimizer.py:171:step] [deepspeed] fp16 dynamic loss scale "
    "overflow! Skipping step. Attempted loss scale: 65536",
    "W0616 00:37:{j:02d}.830000 4015698 torch/distributed/elastic/agent/server/api.py:719] Received "
    "Signals.SIGTERM death signal, shutting down workers",
    "2026-01-0{d} 00:00:{j:02d} W0616 00:37:{j:02d}.830000 4015698 torch/distributed/elastic/agent/server/api.py:719] "
    "Received Signals.SIGTERM death signal, shutting down workers",
    "gpu-a09:12345:12399 [5] include/alloc.h:114 NCCL WARN Cuda failure 'out of memory'",
    "Mar  3 02:1{d}:07 gpu-a{j:02d} kernel: Out of memory: Kill process 48211 (python) score 912 or sacrifice child",
    "ValueError: corrupt sample {i} in shard {j}",
    "ValueError: Broken pipe {i}",
    "{d}: gpu-a01:40000:4007{d} [0] NCCL INFO [Service thread] Connection closed by localRank {d}",
    "[rank{d}]:[2024-03-05 10:12:{j:02d},118] [INFO] [fused_optimizer.py:171:step] [deepspeed] fp16 dynamic loss "
    "scale overflow! Skipping step. Attempted loss scale: 65536",
    "progress {i}%\rgpu-a01:40000:4007{d} [0] NCCL INFO [Service thread] Connection closed by localRank {d}",
    "\x1b[32mgpu-a01:40000:4007{d} [0] NCCL INFO [Service thread] Connection closed by localRank {d}\x1b[0m",
    "gpu-\u00e901:40000:4007{d} [0] NCCL INFO [Service thread] Connection closed by localRank {d}",
    "2026-03-02 14:01:{j:02d},000 - train - INFO - step={i} loss=2.9067",
    "filler line {i} with nothing in it",
    # (lines the scan finds that their rule's ``not`` pattern then rejects)
    "DataLoader worker (pid {i}) is killed by signal: Terminated.",
    "2026-01-0{d} 00:00:{j:02d} DataLoader worker (pid {i}) is killed by signal: Terminated.",
    "2026-01-0{d} 00:00:{j:02d} DataLoader worker (pid {i}) is killed by signal: Killed.",
)


@st.composite
def _dense_log(draw) -> bytes:
    rnd = random.Random(draw(st.integers(0, 1 << 32)))  # (not st.randoms: a log of a thousand lines is many draws)
    kinds = draw(st.lists(st.sampled_from(_DENSE_LINES), min_size=1, max_size=6))
    n = draw(st.integers(0, 900))
    lines: list[str] = []
    while len(lines) < n:  # (in runs of one kind: a lane's lines one after the other, past its first ones)
        kind = rnd.choice(kinds)
        lines += [kind.format(i=len(lines) + i, j=rnd.randrange(60), d=rnd.randrange(4),
                              h="".join(rnd.choice("0123456789abcdef") for _ in range(rnd.randint(1, 12))))
                  for i in range(rnd.choice([1, 2, 5, 30, 80, 450]))]
    if lines and draw(st.integers(0, 7)) == 0:  # an over-long line among them (not often: it costs)
        lines.insert(rnd.randrange(len(lines)), lines[0] + " x" * 530_000)
    return ("\n".join(lines) + ("\n" if draw(st.booleans()) else "")).encode()


@pytest.mark.slow  # (60 dense logs read three ways, both scanners: ~10-20 s)
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_dense_log(), st.sampled_from([None, 700, 4096]), st.sampled_from([None, 3]), st.sampled_from([4096, 3]))
def test_dense_lines_give_the_digest_of_the_line_by_line_path(engine, data, chunk, file_rank, kept_lines):
    """NCCL init lines judged said-before at once (``Confirmer.unsaid``) and the count lane
    (``Confirmer.count_lane``: lines confirmed at once and, past the first KEEP_FIRST of their rule,
    counted with their stamps read and only the last KEEP_LAST built, line numbers counted only for
    them) give the digest of the line-by-line path, in any block size, with the bulk lane on or off,
    and with a cap on the NCCL lines remembered that is reached."""
    import correlator.extract.confirmer as confirmer

    opts = ExtractOptions(tz=UTC, **({"chunk_bytes": chunk} if chunk else {}))
    src = SourceInfo(path="rank-3.log", kind="memory", size=len(data), file_rank=file_rank)
    saved = (confirmer.NCCL_SAID_AT_ONCE, confirmer.COUNT_LANE, confirmer.BULK_LANE, confirmer.BULK_MIN_CANDIDATES,
             statements.NCCL_LINES_KEPT)
    statements.NCCL_LINES_KEPT = kept_lines
    confirmer.BULK_MIN_CANDIDATES = 0  # the lanes in small blocks too
    try:
        fast = extract(src, engine, opts, stream=io.BytesIO(data))
        confirmer.BULK_LANE = False
        fast_alone = extract(src, engine, opts, stream=io.BytesIO(data))
        confirmer.NCCL_SAID_AT_ONCE = confirmer.COUNT_LANE = False
        slow = extract(src, engine, opts, stream=io.BytesIO(data))
    finally:
        (confirmer.NCCL_SAID_AT_ONCE, confirmer.COUNT_LANE, confirmer.BULK_LANE, confirmer.BULK_MIN_CANDIDATES,
         statements.NCCL_LINES_KEPT) = saved
    assert fast == slow
    assert fast_alone == slow


_HS_ENGINES: dict[int, Engine] = {}


@needs_hs
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_dense_log(), st.sampled_from([None, 700]))
# (past their rule's first KEEP_FIRST lines, lines the scan finds and the rule's ``not`` rejects)
@example(data="".join(f"2026-01-01 00:00:{i % 60:02d} DataLoader worker (pid {i}) is killed by signal: "
                      f"{'Killed' if i < 60 or i % 3 else 'Terminated'}.\n" for i in range(200)).encode(), chunk=None)
def test_the_count_lane_confirms_by_hyperscan_what_regex_confirms(rules, data, chunk):
    """The count lane asks the rule's exact Hyperscan database (``lanes.ExactLines``) which lines it
    confirms, and picks its plain lines with C-level maps: the digest equals the one where ``regex``
    confirms them (``EXACT_LANE`` off) and the line-by-line one, in any block size."""
    import correlator.extract.confirmer as confirmer

    engine = _HS_ENGINES.setdefault(id(rules), Engine(rules, "hyperscan"))
    opts = ExtractOptions(tz=UTC, **({"chunk_bytes": chunk} if chunk else {}))
    src = SourceInfo(path="rank-3.log", kind="memory", size=len(data), file_rank=3)
    saved = (confirmer.EXACT_LANE, confirmer.BULK_LANE, confirmer.COUNT_LANE, confirmer.BULK_MIN_CANDIDATES)
    confirmer.BULK_MIN_CANDIDATES = 0
    confirmer.BULK_LANE = False  # (every line the count lane leaves goes line by line)
    try:
        exact = extract(src, engine, opts, stream=io.BytesIO(data))
        confirmer.EXACT_LANE = False
        by_regex = extract(src, engine, opts, stream=io.BytesIO(data))
        confirmer.COUNT_LANE = False
        slow = extract(src, engine, opts, stream=io.BytesIO(data))
    finally:
        confirmer.EXACT_LANE, confirmer.BULK_LANE, confirmer.COUNT_LANE, confirmer.BULK_MIN_CANDIDATES = saved
    assert findings(exact) == findings(by_regex) == findings(slow)


def test_the_count_lane_takes_a_dense_nccl_log(engine, monkeypatch):
    """The lanes are taken (not only equal): in a log of NCCL init blocks and 'Connection closed' lines
    (an ``NCCL_DEBUG=INFO`` log), the init lines said again are not parsed and the closed lines past the
    first KEEP_FIRST are not confirmed one by one; a line number is counted only for a match built."""
    import correlator.extract.confirmer as confirmer
    import correlator.extract.reader as reader_module
    from correlator.extract import lines as lines_module
    from correlator.ruleset import RuleSet

    text = "".join(
        f"gpu-a01:40000:40000 [0] NCCL INFO comm 0x55d0{i:08x} rank 3 nranks 8 cudaDev 3 busId 38000 - Init START\n"
        f"gpu-a01:40000:40000 [0] NCCL INFO Channel 00/0 : 3 -> 4 via P2P\n"
        f"gpu-a01:40000:40000 [0] NCCL INFO comm 0x55d0{i:08x} rank 3 nranks 8 cudaDev 3 busId 38000 - Init COMPLETE\n"
        f"gpu-a01:40000:4007{i % 8} [0] NCCL INFO [Service thread] Connection closed by localRank {i % 8}\n"
        for i in range(3000))
    data = text.encode()
    confirms, parses, counts = [], [], []
    real_confirm, real_parse, real_count = RuleSet.confirm, lines_module.parse_line, reader_module.count_lines
    monkeypatch.setattr(RuleSet, "confirm", lambda self, *a, **k: confirms.append(1) or real_confirm(self, *a, **k))
    monkeypatch.setattr(confirmer, "parse_line", lambda raw: parses.append(1) or real_parse(raw))
    monkeypatch.setattr(reader_module, "count_lines", lambda *a: counts.append(1) or real_count(*a))
    src = SourceInfo(path="rank-3.log", kind="memory", size=len(data), file_rank=3)
    fast = extract(src, engine, ExtractOptions(tz=UTC), stream=io.BytesIO(data))
    n_fast = (len(confirms), len(parses), len(counts))
    monkeypatch.setattr(confirmer, "NCCL_SAID_AT_ONCE", False)
    monkeypatch.setattr(confirmer, "COUNT_LANE", False)
    confirms.clear(), parses.clear(), counts.clear()
    slow = extract(src, engine, ExtractOptions(tz=UTC), stream=io.BytesIO(data))
    assert fast == slow and fast.confirmed_matches == 3000
    assert len(confirms) == 3000 and len(parses) == 3000 + 2  # (the one fact's first START and COMPLETE lines)
    # (the first KEEP_FIRST closed lines and the kept last ones; the fact's two lines; a count per match built)
    assert n_fast[0] <= confirmer.KEEP_FIRST + 2 * confirmer.KEEP_LAST
    assert n_fast[1] <= confirmer.KEEP_FIRST + 3
    assert n_fast[2] <= 2 * (confirmer.KEEP_FIRST + 2 * confirmer.KEEP_LAST)


def test_a_stamp_the_count_lane_reads_dates_the_unstamped_lines_after_it(engine, monkeypatch):
    """A stamped line counted in the count lane is its writer's last stamp for the lines after it (an
    unstamped line with no stamped line within LOOK_LINES before it falls back on it), as line by line."""
    import correlator.extract.confirmer as confirmer

    def overflow(minute: int) -> str:
        return (f"[2024-03-05 10:{minute:02d}:44,118] [INFO] [fused_optimizer.py:171:step] [deepspeed] fp16 dynamic "
                "loss scale overflow! Skipping step. Attempted loss scale: 65536")

    def closed(i: int) -> str:
        return f"gpu-a01:40000:4007{i % 8} [0] NCCL INFO [Service thread] Connection closed by localRank {i % 8}"

    lines = [overflow(1) for _ in range(45)] + [closed(i) for i in range(45)]
    lines += [closed(0), overflow(30)] + [closed(i) for i in range(450)]
    data = ("\n".join(lines) + "\n").encode()
    src = SourceInfo(path="rank-3.log", kind="memory", size=len(data), file_rank=3)
    fast = extract(src, engine, ExtractOptions(tz=UTC), stream=io.BytesIO(data))
    monkeypatch.setattr(confirmer, "COUNT_LANE", False)
    slow = extract(src, engine, ExtractOptions(tz=UTC), stream=io.BytesIO(data))
    assert fast == slow
    last = max((m for m in fast.matches if "Connection closed" in m.text), key=lambda m: m.line)
    assert last.lo_ns is not None and last.lo_ns % (3600 * 10**9) == (30 * 60 + 44) * 10**9 + 118 * 10**6


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(["x", "y\n", "\n", "zz\n\n"]), max_size=60), st.lists(st.integers(0, 10 ** 6), max_size=30),
       st.integers(0, 100))
def test_line_numbers_asked_in_any_order_are_counted_lines(pieces, asks, base_line):
    """``reader.LineNumbers.at`` gives the first offset's line plus the newlines before the asked
    offset, whatever offsets were asked before and in whatever order."""
    from correlator.extract.reader import LineNumbers
    from correlator.extract.scan import Scanner

    data = "".join(pieces).encode()
    first = len(data) // 3
    numbers = LineNumbers(Scanner.__new__(Scanner), data, first, base_line, 0)
    for a in asks:
        at = first + a % (len(data) - first + 1)
        assert numbers.at(at) == base_line + data.count(b"\n", first, at)
    assert numbers.offsets == sorted(set(numbers.offsets))
    line, offset = numbers.last
    assert line == base_line + data.count(b"\n", first, offset)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.sampled_from([
    "gpu-a01:1:1 [0] NCCL INFO comm 0x{h} rank {r} nranks 8 busId 1000 commId 0x{h} - Init {e}",
    "gpu-a01:1:1 [0] NCCL INFO ncclCommInitRank comm 0x{h} rank {r} nranks 8 - Init {e}",
    "gpu-a01:1:1 [0] NCCL INFO comm 0x{h}  rank {r} nRanks 8 - Init {e}",
    "gpu-a01:1:1 [0] NCCL INFO comm 0x{h}",
    "[rank{r}]:gpu-a01:1:1 [0] NCCL INFO comm 0x{h} rank {r} nranks 8 - Init {e}",
    "gpu-a01:1:1 [0] NCCL INFO comm 0x{h} rank {r} nranks 8 \x1b[0m- Init {e}",
    "gpu-a01:1:1 [0] NCCL INFO comm 0x{h} rank {r} nranks 8 \r- Init {e}",
    "gpu-\u00e9:1:1 [0] NCCL INFO comm 0x{h} rank {r} nranks 8 - Init {e}",
    "gpu-a01:1:1 [0] NCCL INFO comm 0x{h} rank {r} \xff nranks 8",
    "gpu-a01:1:1 [0] NCCL INFO {h}omm 0x{h} rank {r} nranks 8 busId {h}",
    "gpu-a01:1:1 [0] NCCL INFO comm {h}x{h} rank {r} nranks 8 {h}ommI{h} 0x{h} - Init {e}",
    "gpu-a01:1:1 [0] NCCL INFO comm 0x{h} rank {r} nranks 8 commId 0x{h} - Init {e}",
    "gpu-a01:1:1 [0] NCCL INFO comm 0x{h}{h} rank {r} nranks 8 commId 0x{h}",
    "",
]), st.integers(0, 3), st.text("0123456789abcdefABCDEF", min_size=1, max_size=3),
    st.sampled_from(["START", "COMPLETE", "STARTED", ""])), max_size=60), st.integers(0, 60))
def test_nccl_lines_said_at_once_are_the_lines_said_one_by_one(lines, cap):
    """``Statements.nccl_lines_said`` (the keys of a block's init lines worked out at once) says of
    each line what ``nccl_line_said`` one by one says, and remembers the same lines, up to the same cap."""
    raws = [t.format(h=h, r=r, e=e).encode("utf-8", "surrogateescape") if "\xff" not in t
            else t.format(h=h, r=r, e=e).encode("latin-1") for t, r, h, e in lines]
    saved = statements.NCCL_LINES_KEPT
    statements.NCCL_LINES_KEPT = cap
    try:
        one, many = statements.Statements.__new__(statements.Statements), statements.Statements.__new__(statements.Statements)
        one._nccl_lines, many._nccl_lines = set(), set()
        half = len(raws) // 2
        by_one = [one.nccl_line_said(raw) for raw in raws]
        at_once = many.nccl_lines_said(raws[:half]) + many.nccl_lines_said(raws[half:])
    finally:
        statements.NCCL_LINES_KEPT = saved
    assert at_once == by_one
    assert many._nccl_lines == one._nccl_lines


#: pieces of lines around stamps and prefixes: digits and colons that make or nearly make a clock
_STAMPISH = st.lists(st.sampled_from([
    "2026-03-02 14:01:0", "1", ":", "5", "9", "12:3", "4:59:", "60", " ", "x", "[", "]", "1764496800", "[1764496800]",
    "0: ", "[rank3]:", "[default1]:", "gpu-a01:40000:40071 [0] NCCL INFO ", "\u0663", "\t", "\x1b[0m", "E0302 ",
    "2019-06-02T16:13:44.884Z: [1,12]<stdout>:", "a" * 190, "\r", "(pid=12) ", "host-1: "]), max_size=12).map("".join)


@settings(max_examples=400, deadline=None)
@given(st.lists(st.tuples(st.sampled_from([0, 0, 190, 193, 194, 195]), _STAMPISH).map(lambda t: "a" * t[0] + t[1]),
                max_size=12))
def test_stamps_and_prefixes_looked_for_in_lines_joined_are_found_line_by_line(texts):
    """``timestamps.lines_may_hold_stamp`` and ``lines.maybe_prefixed`` (one search of the lines
    joined) say of each line what ``may_hold_stamp`` and ``MAYBE_PREFIX_RE`` say of it alone; and a
    line ``may_hold_stamp_bytes`` rules out has no stamp by ``Stamps.of_line``'s full reading."""
    from correlator.extract import timestamps
    from correlator.extract.lines import MAYBE_PREFIX_RE, Stamps, maybe_prefixed, parse_line, with_stamp
    from correlator.extract.timestamps import lines_may_hold_stamp, may_hold_stamp, may_hold_stamp_bytes

    texts = [t.replace("\n", " ") for t in texts]
    assert lines_may_hold_stamp(texts) == [may_hold_stamp(t) for t in texts]
    # (the fast searches are in use, and say what the dialects' own needs say)
    assert timestamps.FAST_NEEDS, "dialects.stamp_needs() changed: write timestamps' fast needs for it"
    assert [may_hold_stamp(t) for t in texts] == [timestamps._NEEDS.search(t, 0, timestamps.SEARCH_CHARS) is not None
                                                  for t in texts]
    raws = [t.encode() for t in texts]
    alone = [MAYBE_PREFIX_RE.match(b"\n" + raw) is not None for raw in raws]
    assert maybe_prefixed(raws) == alone
    assert maybe_prefixed(raws, hyperscan=True) == alone
    stamps = Stamps(UTC, None)
    for raw in raws:
        if not may_hold_stamp_bytes(raw):
            assert stamps.of(with_stamp(*parse_line(raw)), observe=False) is None


@settings(max_examples=500, deadline=None)
@given(st.lists(st.sampled_from(["a", "\\", "[", "]", "^", "(", ")", "?", ":", "P", "<", ">", "=", "!", "x", "4", "1",
                                 "0", "d", "s", "n", "+", "*", "{", "}", "|", "\n", "[[:alpha:]]", "(?i)"]), max_size=14))
def test_pattern_atoms_spell_the_pattern(pieces):
    """The line rewriters' reader (``ruleset.pattern_atoms``, shared by ``line_bounded`` and
    ``lanes.exact_expression``): where it reads a pattern, its atoms spell the pattern again, each
    is of one kind, and a class is one whole ``[...]`` that nests no set."""
    from correlator.ruleset import pattern_atoms

    pattern = "".join(pieces)
    atoms = pattern_atoms(pattern, lambda d: d != "q")
    if atoms is None:
        return
    assert "".join(a.text for a in atoms) == pattern
    for a in atoms:
        assert a.kind in ("flags", "escape", "class", "group", "named", "other", "char"), a
        if a.kind == "char":
            assert len(a.text) == 1 and a.text not in "\\["
        if a.kind == "class":
            assert a.text.startswith("[") and a.text.endswith("]") and "[" not in re.sub(r"\\.", "", a.text[1:])
        if a.kind == "escape":
            assert a.text[0] == "\\" and len(a.text) in (2, 4)


@pytest.mark.slow  # (every rule pattern over its examples joined and cut: ~20 s)
def test_line_bounded_patterns_find_in_joined_lines_what_they_find_in_each_line(rules):
    """Every rule pattern the bulk lane may use (``ruleset.line_bounded``), searched over all the rules'
    example lines (printable ASCII, the lane's lines) joined, finds a match in exactly the lines the
    pattern itself matches one by one -- also lines cut to their first half, where anchors and
    optional tails decide."""
    import regex

    from correlator.ruleset import RuleSet, line_bounded

    lines: list[str] = []
    for ln in dict.fromkeys(ln for r in rules for ex in r.examples for ln in ex.log.splitlines()):
        if all(c == "\t" or " " <= c <= "~" for c in ln):
            # and the line cut in two at each third of its spaces, the halves one after the other: a
            # pattern reaching across the newline would find them where it finds the whole line
            spaces = [k for k, c in enumerate(ln) if c == " "]
            lines.append(ln)
            for k in spaces[len(spaces) // 3::max(1, len(spaces) // 3)][:2]:
                lines += [ln[:k], ln[k:], ln[:k + 1], ln[k + 1:]]
    tried = 0
    for i, r in enumerate(rules):
        bulk = RuleSet(rules).bulk(i) if not r.match.all and r.match.scope.value == "line" else None
        for p in (*r.match.any, *r.match.not_):
            bounded = line_bounded(p)
            if bounded is None:
                continue
            tried += 1
            own = regex.compile(p)
            joined = "\n".join(lines)
            starts, at = [], 0
            for ln in lines:
                starts.append(at)
                at += len(ln) + 1
            from bisect import bisect_right
            hits = {bisect_right(starts, m.start()) - 1 for m in regex.compile(bounded).finditer(joined)}
            assert hits == {k for k, ln in enumerate(lines) if own.search(ln)}, (r.id, p)
        if bulk is not None:
            want = [any(regex.search(p, ln) for p in r.match.any) and not any(regex.search(p, ln) for p in r.match.not_)
                    for ln in lines]
            assert bulk.confirms(lines) == want, r.id
    assert tried > 200


#: lines of caught and uncaught tracebacks, and what may sit beside them: prefixes, ANSI codes,
#: progress frames, non-ASCII and broken UTF-8 (the window then cannot be read as it lies)
_EVENT_LINES = (
    b"Traceback (most recent call last):",
    b'  File "/usr/lib/python3.11/multiprocessing/resource_sharer.py", line 86, in get_connection',
    b'  File "/opt/torch/serialization.py", line {i}, in save',
    b"    torch.save(state, path)",
    b"Exception ignored in: <function _Loader.__del__ at 0x7f{i}>",
    b"ConnectionResetError: [Errno 104] Connection reset by peer",
    b"OSError: [Errno 5] Input/output error: '/lustre/shard-{i}.tar'",
    b"ValueError: corrupt sample {i}",
    b"2026-03-02 14:01:0{d},000 - data - ERROR - reading shard {i} failed",
    b"2026-03-02 14:01:0{d},000 - lightning - INFO - Saving checkpoint to /ckpt/{i}",
    b"[rank{d}]:OSError: [Errno 5] Input/output error",
    b"{d}: [default0]:  File \"/opt/torch/serialization.py\", line 1, in save",
    b"\x1b[31mConnectionResetError: [Errno 104] Connection reset by peer\x1b[0m",
    b"Epoch 0:  {d}%|\xe2\x96\x88\xe2\x96\x88 | {i}/100\rConnectionResetError: [Errno 104] Connection reset by peer",
    b"caf\xc3\xa9 {i} \xe2\x96\x88",
    b"broken \xff\xfe utf-8 {i}",
    b"",
)


@st.composite
def _window_log(draw) -> bytes:
    rnd = draw(st.randoms(use_true_random=False))
    kinds = draw(st.lists(st.sampled_from(_EVENT_LINES), min_size=1, max_size=8))
    n = draw(st.integers(0, 300))
    lines = [rnd.choice(kinds).replace(b"{i}", str(i).encode()).replace(b"{d}", str(rnd.randrange(10)).encode())
             for i in range(n)]
    return b"\n".join(lines) + (b"\n" if draw(st.booleans()) else b"")


@needs_hs
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_window_log(), st.integers(0, 250), st.booleans())
def test_raw_window_is_the_window_built_line_by_line(engine, data, k, after):
    """``Confirmer.raw_window``, when it answers, is the UTF-8 of the window ``process`` builds for an
    event rule at that line (its message, and the messages of the lines before it as far as the rule
    looks, joined by newlines): asking the prefilter of those bytes is asking it of the window."""
    from correlator.extract.confirmer import CONTEXT_MAX_BEFORE, Confirmer
    from correlator.extract.lines import Buffer, parse_line
    from correlator.model import MatchSpec, Scope

    rule = replace(engine.ruleset.rules[0], match=MatchSpec(any=("x",), scope=Scope.EVENT, context_lines=k,
                                                           context_after=3 if after else 0))
    buf = Buffer(data, 0, 0, 1)
    c = Confirmer.__new__(Confirmer)
    start = 0
    answered = 0
    while start <= len(data):
        end = data.find(b"\n", start)
        end = len(data) if end < 0 else end
        prefix, msg = parse_line(data[start:end])
        if not prefix.length and "\r" not in msg:
            got = c.raw_window(buf, start, rule)
            if got is not None:
                answered += 1
                before = buf.context(start, b"", min(k, CONTEXT_MAX_BEFORE), 0)[0]
                assert got == "\n".join([*(before[-k:] if k else []), msg]).encode("utf-8"), (start, data)
                assert not after
        start = end + 1
    if data.count(b"\n") > 3 and not after and b"\x1b" not in data and b"\r" not in data and b"\xff" not in data \
            and b"]:" not in data and k <= 3:
        assert answered  # (not a test that cannot fail: plain lines are answered)


@needs_hs
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_window_log(), st.sampled_from([None, 700, 4096]))
def test_window_prefilter_gives_the_digest_of_the_patterns_alone(engine, data, chunk):
    """Event rules' windows asked of the Hyperscan prefilter first (built, or as they lie in the
    source) or searched by their patterns alone: the same digest."""
    import correlator.extract.confirmer as confirmer

    opts = ExtractOptions(tz=UTC, **({"chunk_bytes": chunk} if chunk else {}))
    src = SourceInfo(path="rank-3.log", kind="memory", size=len(data), file_rank=3)
    try:
        fast = extract(src, engine, opts, stream=io.BytesIO(data))
        confirmer.WINDOW_PREFILTER = False
        slow = extract(src, engine, opts, stream=io.BytesIO(data))
    finally:
        confirmer.WINDOW_PREFILTER = True
    assert fast == slow


def _example_lines(rules) -> list[str]:
    """Every rule's example lines of printable ASCII (the lane's lines), and each cut in two at every
    seventh character, the halves one after the other (a match reaching across the newline between
    them would be found in the second)."""
    lines: list[str] = []
    for ln in dict.fromkeys(ln for r in rules for ex in r.examples for ln in ex.log.splitlines()):
        if all(c == "\t" or " " <= c <= "~" for c in ln):
            lines.append(ln)
            for k in range(3, len(ln), 7):
                lines += [ln[:k], ln[k:]]
    return lines


def _joined(lines: list[str]) -> tuple[bytes, list[int]]:
    places, at = [], 0
    for ln in lines:
        places.append(at)
        at += len(ln) + 1
    return ("\n" + "\n".join(lines)).encode(), places


@needs_hs
@pytest.mark.slow  # (every rule's exact database built and checked: ~10-15 s)
def test_exact_lane_confirms_the_lines_regex_confirms(rules):
    """Every line-scope rule's exact Hyperscan database (``lanes.ExactLines``) confirms, among all the
    rules' example lines joined (and their halves), exactly the lines its patterns confirm one by one."""
    import regex

    from correlator.extract.lanes import exact_expression, exact_lines
    from correlator.ruleset import RuleSet

    rs = RuleSet(rules)
    lines = _example_lines(rules)
    joined, places = _joined(lines)
    tried = 0
    for i, r in enumerate(rules):
        bulk = rs.bulk(i)
        exact = exact_lines(r, bulk.not_literals) if bulk is not None else None
        if exact is None:
            # (a database built is checked against the rule's own lines: every one read here passes)
            assert bulk is None or any(exact_expression(p) is None for p in (*r.match.any, *r.match.not_)), r.id
            continue
        tried += 1
        anys = [regex.compile(p) for p in r.match.any]
        nots = [regex.compile(p) for p in r.match.not_]
        want = [k for k, ln in enumerate(lines) if any(p.search(ln) for p in anys) and not any(p.search(ln) for p in nots)]
        assert exact.confirmed(joined, places) == want, r.id
    assert tried > 200


@needs_hs
@pytest.mark.slow  # (200 random rule-and-line draws, each rule's exact database built: ~20-35 s)
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_exact_lane_confirms_what_regex_confirms_on_any_line(rules, data):
    """The same on lines made of pieces of a rule's own example lines and random printable ASCII:
    anchors, optional parts, classes and case cut and joined anyhow."""
    import regex

    from correlator.extract.lanes import exact_lines
    from correlator.ruleset import RuleSet

    rs = RuleSet(rules)
    i = data.draw(st.sampled_from([k for k, r in enumerate(rules) if rs.bulk(k) is not None]))
    r = rules[i]
    bulk = rs.bulk(i)
    assert bulk is not None
    exact = exact_lines(r, bulk.not_literals)
    if exact is None:
        return
    own = [ln for ex in r.examples for ln in ex.log.splitlines() if all(c == "\t" or " " <= c <= "~" for c in ln)]
    piece = st.one_of(st.sampled_from(own or ["x"]).flatmap(
        lambda ln: st.integers(0, len(ln)).flatmap(lambda a: st.integers(a, len(ln)).map(lambda b: ln[a:b]))),
        st.text(alphabet=[chr(c) for c in range(0x20, 0x7f)] + ["\t"], max_size=6))
    # lines of pieces, and an example line cut anywhere into two adjacent lines (a match of the whole
    # line that reached across the newline would be found in the second)
    cut = st.sampled_from(own or ["x"]).flatmap(lambda ln: st.integers(0, len(ln)).map(lambda c: [ln[:c], ln[c:]]))
    groups = data.draw(st.lists(st.one_of(st.lists(piece, max_size=5).map(lambda ps: ["".join(ps)]), cut),
                                min_size=1, max_size=8))
    lines = [ln for g in groups for ln in g]
    anys = [regex.compile(p) for p in r.match.any]
    nots = [regex.compile(p) for p in r.match.not_]
    want = [k for k, ln in enumerate(lines) if any(p.search(ln) for p in anys) and not any(p.search(ln) for p in nots)]
    assert exact.confirmed(*_joined(lines)) == want, (r.id, lines)


@settings(max_examples=300, deadline=None)
@given(st.randoms(use_true_random=False), st.integers(0, 120))
def test_stamp_of_a_line_is_the_stamp_of_its_message(rnd, n):
    """``confirmer.stamp_of`` (a line that cannot hold a prefix read by the stamp parser alone) ==
    ``Stamps.of_line`` on every line of windows of all prefix and stamp dialects, ANSI codes and
    traceback lines, line by line from two parsers that end in the same state (a full date read is
    the reference of the year-less stamps after it)."""
    from correlator.extract.confirmer import stamp_of
    from correlator.extract.lines import Stamps

    pool = [*_WINDOW_LINES, "Traceback (most recent call last):", '  File "/x.py", line {n}, in f',
            "ValueError: step {n} at 14:0{n}:00", "E0302 14:01:02.000000 1 x.cc:1] {n}"]
    data = _window_text(rnd, n, pool)
    if rnd.random() < 0.3:
        data = data[rnd.randrange(len(data) + 1):]
    fast, plain = Stamps(UTC, None), Stamps(UTC, None)
    s = 0
    while s < len(data):
        e = data.find(b"\n", s)
        e = len(data) if e < 0 else e
        assert stamp_of(fast, data, s, e) == plain.of_line(data[s:e]), data[s:e]
        s = e + 1
    assert vars(fast.parser) == vars(plain.parser) and (fast.tz_assumed, fast.year_inferred) == (
        plain.tz_assumed, plain.year_inferred)


@needs_hs
def test_window_prefilter_never_rules_out_a_window_the_patterns_match(rules):
    """``WindowFinder.may_match_all`` says False only where a rule's ``all`` patterns do not all match:
    over every event rule's example logs (the whole log and each of its tails, as windows grow), with
    and without non-ASCII text and ANSI codes around them."""
    import regex

    from correlator.extract.scan import window_finder

    finder = window_finder()
    assert finder is not None
    tried = ruled_out = 0
    for r in rules:
        if not r.match.all:
            continue
        pats = [regex.compile(p) for p in r.match.all]
        for ex in r.examples:
            lines = ex.log.splitlines()
            for k in range(len(lines)):
                for window in ("\n".join(lines[k:]), "caf\u00e9 \u2588\u2588\n" + "\n".join(lines[k:]) + " \u00fc"):
                    tried += 1
                    may = finder.may_match_all(r.match.all, window)
                    if all(p.search(window) for p in pats):
                        assert may, (r.id, window)
                    ruled_out += not may
    assert tried > 100 and ruled_out > 0
