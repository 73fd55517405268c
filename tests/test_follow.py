"""Follow mode: a verdict while the job is still writing, an update when a lagging rank flushes an
earlier failure, a stop at the job's end or on Ctrl-C, and only new bytes read each time."""

from __future__ import annotations

import gzip
import io
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import replace
from datetime import timedelta
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from jobs import T0, combined_srun, py, rank_lines

from correlator import follow as fl
from correlator.extract.confirmer import KEEP_FIRST, KEEP_LAST
from correlator.extract.extractor import extract
from correlator.extract.windows import ANCHORS_PER_WINDOW
from correlator.model.vocabulary import Tag
from correlator.pipeline import Options

ROOT = Path(__file__).resolve().parent.parent
CANCEL = "slurmstepd: error: *** STEP 77.0 ON gpu-a00 CANCELLED AT 2026-03-02T14:14:00 ***"


def scenario() -> dict[int, list[str]]:
    """4 ranks on 2 nodes: rank 2 fails on EIO at T0+210 s; rank 3 (a lagging host) ran out of GPU
    memory earlier, at T0+200 s; ranks 0 and 1 time out in the watchdog."""
    lines = rank_lines(4, 2, 2, fault="eio")
    r3 = [x for x in lines[3] if "Watchdog" not in x]
    r3 += [f"{py(T0 + timedelta(seconds=200))} - train - INFO - forward",
           "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 1 has a total capacity "
           "of 79.15 GiB of which 1.02 GiB is free."]
    lines[3] = r3
    return lines


class Recorder(io.StringIO):
    """``out`` for follow(): remembers when each line was printed, and wakes waiters on a verdict."""

    def __init__(self) -> None:
        super().__init__()
        self.events: list[tuple[float, str]] = []
        self.verdict = threading.Event()
        self.update = threading.Event()

    def write(self, s: str) -> int:
        for line in s.splitlines():
            self.events.append((time.monotonic(), line))
            if "verdict: root cause" in line:
                self.verdict.set()
            if "update: root cause: rank 3" in line:
                self.update.set()
        return super().write(s)


def _append(path: Path, lines: list[str], delay: float) -> None:
    for line in lines:
        with open(path, "a") as f:
            f.write(line + "\n")
        time.sleep(delay)


def test_verdict_before_the_writer_finishes_and_a_late_earlier_failure_changes_it(tmp_path):
    job = tmp_path / "job"
    job.mkdir()
    lines = scenario()
    rec = Recorder()
    done: dict[str, float] = {}

    def writer() -> None:
        # ranks write at different speeds; rank 2's failure goes out with its last lines
        ts = [threading.Thread(target=_append, args=(job / f"rank-{r}.log", lines[r][:-1], 0.004 * (r + 1)))
              for r in (0, 1, 2)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        _append(job / "rank-2.log", lines[2][-1:], 0)
        done["rank2_failed"] = time.monotonic()
        done["saw_verdict"] = rec.verdict.wait(15)  # the follower must say it while the job still runs
        _append(job / "rank-0.log", lines[0][-1:], 0.05)  # the watchdog timeouts
        _append(job / "rank-1.log", lines[1][-1:], 0.05)
        _append(job / "rank-3.log", lines[3], 0.01)  # the lagging host: a new file, with an earlier failure
        done["saw_update"] = rec.update.wait(15)
        _append(job / "slurm-77.out", [CANCEL], 0)
        done["finished"] = time.monotonic()

    w = threading.Thread(target=writer, daemon=True)
    w.start()
    t0 = time.monotonic()
    report = fl.follow([str(job)], Options(tz="UTC"), interval_s=0.05, out=rec, grace_s=0.3, max_s=60)
    returned = time.monotonic()
    w.join(5)

    assert done.get("saw_verdict") is True and done.get("saw_update") is True, rec.getvalue()
    said = [(t, line) for t, line in rec.events if "verdict:" in line or "update:" in line]
    first_t, first = said[0]
    assert "verdict: root cause: rank 2" in first and "storage.eio-on-checkpoint-save" in first
    assert first_t < done["finished"]
    assert any("update: root cause: rank 3" in line and "cuda.out-of-memory" in line for _, line in said[1:])
    assert report.root_cause is not None and report.root_cause.rank == 3
    assert report.root_cause.rule == "cuda.out-of-memory"
    assert returned - done["finished"] < 5, "follow did not stop at the job's end"
    assert returned - t0 < 40
    # incremental reading lost nothing and counted every line once
    assert report.stats.lines == sum(len(x) for x in lines.values()) + 1
    ev = report.root_cause.evidence[0]
    assert ev.path.endswith("rank-3.log") and ev.line == len(lines[3])
    eio = [e for e in report.timeline if e.rule == "storage.eio-on-checkpoint-save"]
    assert eio and eio[0].line == len(lines[2])
    ranks = {r.rank: r for r in report.ranks}
    assert all(ranks[r].lines == len(lines[r]) for r in range(4))


def _follower(tmp_path: Path) -> fl.Follower:
    return fl.Follower([str(tmp_path)], Options(tz="UTC"))


def test_partial_last_line_waits_for_its_newline(tmp_path):
    f = _follower(tmp_path)
    p = tmp_path / "rank-0.log"
    p.write_text("step=1\nOSError: [Errno 5] Input/output")  # the writer is mid-line
    assert f.poll()
    st = f.sources[str(p)]
    assert st.offset == len("step=1\n") and st.lines == 1
    assert not f.poll()  # nothing new
    with open(p, "a") as fh:
        fh.write(" error\n")
    assert f.poll()
    assert st.offset == p.stat().st_size and st.lines == 2
    with open(p, "a") as fh:
        fh.write("tail without newline")
    f.poll(final=True)  # at the end the last line is read too
    assert st.offset == p.stat().st_size and st.digest().lines == 3


def test_only_new_bytes_are_read(tmp_path, monkeypatch):
    f = _follower(tmp_path)
    p = tmp_path / "rank-0.log"
    p.write_text("x\n" * 200_000)  # 400 KB
    f.poll()
    seen: list[int] = []
    real = fl._Window.__init__

    def spy(self, path, start, end):
        seen.append(end - start)
        real(self, path, start, end)

    monkeypatch.setattr(fl._Window, "__init__", spy)
    with open(p, "a") as fh:
        fh.write("y\n" * 10)
    f.poll()
    # the 20 new bytes only: the source's extractor holds what it needs of the earlier ones
    assert seen == [20]
    assert f.sources[str(p)].digest().lines == 200_010


_SAMPLES = sorted(p for p in (ROOT / "sample_logs").glob("*/*.out") if p.stat().st_size > 2000)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_a_file_followed_in_pieces_has_the_digest_of_one_read(tmp_path_factory, data):
    """Metamorphic: how the bytes of a log arrived (how many looks, where each one cut it: inside a
    line, inside a multi-byte character, between a traceback's lines) does not change what is
    read from it: the followed source's digest is batch mode's digest of the whole file."""
    sample = data.draw(st.sampled_from(_SAMPLES), label="sample")
    raw = sample.read_bytes()
    cuts = sorted(set(data.draw(st.lists(st.integers(1, len(raw) - 1), max_size=6), label="cuts")))
    tmp = tmp_path_factory.mktemp("pieces")
    p = tmp / sample.name
    p.write_bytes(b"")
    f = fl.Follower([str(p)], Options(tz="UTC"))
    prev = 0
    for cut in [*cuts, len(raw)]:
        with open(p, "ab") as fh:
            fh.write(raw[prev:cut])
        prev = cut
        f.poll()
    f.poll(final=True)
    followed = f.sources[str(p)].digest()
    whole = extract(replace(f.sources[str(p)].src, size=len(raw)), f.engine, f.xopts)  # as batch mode finds it
    for name in ("matches", "streams", "anchors", "identities", "lines", "bytes_read", "bytes_skipped",
                 "lines_capped"):
        assert getattr(followed, name) == getattr(whole, name), name
    assert [(d.code, d.message) for d in followed.diagnostics] == [(d.code, d.message) for d in whole.diagnostics]


def test_rotation_and_truncation_read_again(tmp_path):
    f = _follower(tmp_path)
    p = tmp_path / "rank-0.log"
    p.write_text("a\n" * 100)
    f.poll()
    p.write_text("b\n" * 10)  # truncated in place
    assert f.poll()
    st = f.sources[str(p)]
    assert st.lines == 10 and any("read again" in d.message for d in st.digest().diagnostics)
    os.replace(tmp_path / "rank-0.log", tmp_path / "old.bak")  # rotated away; a new file takes its name
    p.write_text("c\n" * 3)
    f.poll()
    assert f.sources[str(p)].lines == 3


def test_compressed_file_is_read_whole_when_it_changes(tmp_path):
    f = _follower(tmp_path)
    p = tmp_path / "slurm-77.out.gz"
    p.write_bytes(gzip.compress("\n".join(combined_srun(scenario(), 2)[:10]).encode() + b"\n"))
    f.poll()
    p.write_bytes(gzip.compress("\n".join(combined_srun(scenario(), 2)).encode() + b"\n"))
    f.poll()
    rep = f.report()
    assert rep.root_cause is not None and rep.root_cause.rank == 3
    assert f.sources[str(p)].lines == len(combined_srun(scenario(), 2))


def test_memory_stays_bounded_over_a_long_follow(tmp_path):
    """Thousands of matches over many polls: kept like extract keeps them (first and last)."""
    f = _follower(tmp_path)
    p = tmp_path / "rank-0.log"
    for i in range(30):
        with open(p, "a") as fh:
            for k in range(100):
                t = T0 + timedelta(seconds=i * 100 + k)
                fh.write(f"{py(t)} - train - INFO - step={i * 100 + k}\n")
                fh.write(f"[{(T0 + timedelta(seconds=i * 100 + k)).strftime('E%m%d %H:%M:%S.%f')}000 "
                         f"ProcessGroupNCCL.cpp:616] [Rank 0] Watchdog caught collective operation timeout: "
                         f"WorkNCCL(SeqNum={i * 100 + k}, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, "
                         f"Timeout(ms)=600000) ran for 600010 milliseconds before timing out.\n")
        f.poll()
    d = f.sources[str(p)].digest()
    assert len(d.matches) <= KEEP_FIRST + KEEP_LAST
    assert d.matches[-1].line == 6000  # the newest is kept, with its true line number
    assert len(d.anchors) <= 2 * ANCHORS_PER_WINDOW  # one writer: the first of its head, the last of its tail
    assert d.lines == 6000
    assert any("more matches of nccl.watchdog-collective-timeout not kept" in x.message for x in d.diagnostics)


def test_quiet_period_and_no_end(tmp_path):
    (tmp_path / "rank-2.log").write_text("\n".join(scenario()[2]) + "\n")
    out = io.StringIO()
    t0 = time.monotonic()
    rep = fl.follow([str(tmp_path)], Options(tz="UTC"), interval_s=0.05, out=out, quiet_s=0.5)
    assert time.monotonic() - t0 < 10
    assert rep.root_cause is not None and rep.root_cause.rank == 2
    assert "verdict: root cause: rank 2" in out.getvalue() and "nothing new for 0.5 s" in out.getvalue()


def _cli(*args: str, **kw) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "correlator", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, cwd=ROOT, **kw)


def test_cli_follow_stops_at_the_job_end(tmp_path):
    lines = scenario()
    for r in range(4):
        (tmp_path / f"rank-{r}.log").write_text("\n".join(lines[r]) + "\n")
    (tmp_path / "slurm-77.out").write_text(CANCEL + "\n")
    p = _cli("--follow", str(tmp_path), "--interval", "0.1", "--tz", "UTC")
    out, err = p.communicate(timeout=60)
    assert p.returncode == 0, err.decode()
    text = out.decode()
    assert "verdict: root cause: rank 3" in text and "Traceback" not in err.decode()


def test_cli_follow_ctrl_c_exits_130(tmp_path):
    (tmp_path / "rank-2.log").write_text("\n".join(scenario()[2]) + "\n")  # no end line: it would wait
    p = _cli("--follow", str(tmp_path), "--interval", "0.1", "--tz", "UTC")
    assert p.stdout is not None
    first = p.stdout.readline().decode()  # blocks until the verdict is printed
    assert "verdict: root cause: rank 2" in first
    p.send_signal(signal.SIGINT)
    _, err = p.communicate(timeout=30)
    assert p.returncode == 130 and "Traceback" not in err.decode()


def test_cli_follow_stdin(tmp_path):
    text = "\n".join(combined_srun(scenario(), 2)) + "\n"
    p = _cli("--follow", "-", "--interval", "0.05", "--tz", "UTC", stdin=subprocess.PIPE)
    out, err = p.communicate(input=text.encode(), timeout=60)
    assert p.returncode == 0, err.decode()
    assert "verdict: root cause: rank 3" in out.decode()


@pytest.mark.parametrize("secret", ["hf_" + "Ab3" * 12])
def test_follow_output_is_redacted(tmp_path, secret):
    lines = scenario()
    lines[3][-1] = f"torch.OutOfMemoryError: CUDA out of memory. token={secret}"
    (tmp_path / "rank-3.log").write_text("\n".join(lines[3]) + "\n")
    out = io.StringIO()
    rep = fl.follow([str(tmp_path)], Options(tz="UTC"), interval_s=0.05, out=out, quiet_s=0.3)
    assert secret not in out.getvalue() and secret not in repr(rep)


def test_the_job_end_is_a_tag_of_the_rules_not_a_list_of_ids(tmp_path):
    """``--follow`` stops at a line of any rule tagged ``job-end`` (a user's own too), and at no
    other: the set comes from the rules."""
    from dataclasses import replace as dc_replace

    from correlator.ruleset import load_rules

    rules = load_rules()
    by_id = {r.id: r for r in rules}
    tagged = {r.id for r in rules if Tag.JOB_END in r.tags}
    assert {"slurm.time-limit", "launcher.child-failed-error", "slurm.task-exited"} <= tagged
    assert all(by_id[i].role.value in ("teardown", "job") for i in tagged)
    line = "slurmstepd: error: *** JOB 4242 ON gpu-a01 CANCELLED AT 2026-11-30T10:00:00 DUE TO TIME LIMIT ***\n"
    (tmp_path / "slurm-4242.out").write_text("step=1\n" + line)
    f = fl.Follower([str(tmp_path)], Options(tz="UTC"), rules=rules)
    f.poll()
    assert f.end_seen
    untagged = [dc_replace(r, tags=tuple(t for t in r.tags if t != Tag.JOB_END)) for r in rules]
    g = fl.Follower([str(tmp_path)], Options(tz="UTC"), rules=untagged)
    g.poll()
    assert not g.end_seen  # the same line, its rule without the tag: the job goes on


def test_live_lines_show_the_control_characters_of_log_text(tmp_path):
    """A root line carrying terminal escapes (a window title, a screen clear) is printed with
    them made visible, not obeyed."""
    import io

    evil = "\x1b]0;pwned\x07\x1b[2J"
    (tmp_path / "rank-0.log").write_text(f"step=1\nOSError: [Errno 5] Input/output error {evil}\n")
    out = io.StringIO()
    fl.follow([str(tmp_path)], Options(tz="UTC"), interval_s=0.05, out=out, quiet_s=0.5, max_s=20)
    said = out.getvalue()
    assert "Input/output error" in said
    assert "\x1b" not in said and "\x07" not in said
    assert "\\x07" in said  # (the extractor strips the ESC sequences; the BEL left is shown)


# --- provisional until the job's end, and a heartbeat while waiting (issue 15 item 9) ----------------


class FakeTime:
    """``clock`` and ``sleep`` for follow(): time passes only when it sleeps; ``at`` runs actions
    (a writer appending lines) when the clock reaches their time."""

    def __init__(self, at: dict[float, object] | None = None) -> None:
        self.now = 0.0
        self.at = dict(at or {})

    def clock(self) -> float:
        return self.now

    def sleep(self, s: float) -> None:
        self.now += s
        for t in sorted(self.at):
            if t <= self.now:
                self.at.pop(t)()  # type: ignore[operator]


def _said(out: io.StringIO) -> list[str]:
    return [line.split("] ", 1)[1] for line in out.getvalue().splitlines()]


def test_verdict_is_provisional_and_a_heartbeat_says_what_it_waits_for(tmp_path):
    (tmp_path / "rank-2.log").write_text("\n".join(scenario()[2]) + "\n")  # a failure, no end of the job
    size = (tmp_path / "rank-2.log").stat().st_size
    t, out = FakeTime(), io.StringIO()
    rep = fl.follow([str(tmp_path)], Options(tz="UTC"), interval_s=1.0, out=out, quiet_s=50, heartbeat_s=10,
                    clock=t.clock, sleep=t.sleep)
    said = _said(out)
    assert said[0].startswith("provisional verdict: root cause: rank 2")
    beats = [s for s in said if s.startswith("waiting:")]
    read = fl._size(size)
    assert beats == [f"waiting: 1 source ({read} read), last new line {n} s ago; no end of the job in the logs yet"
                     for n in (10, 20, 30, 40)]
    assert said[-2:] == ["nothing new for 50 s: stopping",
                         "stopped before the job's end was in the logs: the verdict is provisional"]
    notes = [d for d in rep.diagnostics if d.code is fl.DiagCode.FOLLOW_PROVISIONAL]
    assert len(notes) == 1 and notes[0].level == "warning" and "provisional" in notes[0].message
    assert rep.root_cause is not None and rep.root_cause.rank == 2


def test_the_job_end_makes_the_verdict_final(tmp_path):
    (tmp_path / "rank-2.log").write_text("\n".join(scenario()[2]) + "\n")
    end = lambda: (tmp_path / "slurm-77.out").write_text(CANCEL + "\n")  # noqa: E731
    t, out = FakeTime({5.0: end}), io.StringIO()
    rep = fl.follow([str(tmp_path)], Options(tz="UTC"), interval_s=1.0, out=out, grace_s=2, heartbeat_s=3,
                    max_s=60, clock=t.clock, sleep=t.sleep)
    said = _said(out)
    assert said[0].startswith("provisional verdict: root cause: rank 2")
    assert "waiting: 1 source" in said[1] and said[1].endswith("last new line 3 s ago; no end of the job in the logs yet")
    assert said[2] == "the job's end is in the logs: collecting late lines for 2 s"
    assert said[-1].startswith("final verdict: root cause: rank 2") and t.now < 10
    assert not any("provisional" in s for s in said[2:])
    assert not [d for d in rep.diagnostics if d.code is fl.DiagCode.FOLLOW_PROVISIONAL]


def test_a_job_already_ended_gets_no_provisional_verdict(tmp_path):
    (tmp_path / "rank-2.log").write_text("\n".join(scenario()[2]) + "\n")
    (tmp_path / "slurm-77.out").write_text(CANCEL + "\n")
    t, out = FakeTime(), io.StringIO()
    fl.follow([str(tmp_path)], Options(tz="UTC"), interval_s=1.0, out=out, grace_s=2, clock=t.clock, sleep=t.sleep)
    said = _said(out)
    assert said[0].startswith("verdict: root cause: rank 2") and said[-1].startswith("final verdict: root cause: rank 2")
    assert not any("provisional" in s for s in said)


def test_heartbeat_while_no_log_has_appeared(tmp_path):
    t, out = FakeTime(), io.StringIO()
    pattern = str(tmp_path / "slurm-*.out")
    fl.follow([pattern], Options(tz="UTC"), interval_s=1.0, out=out, heartbeat_s=10, max_s=25,
              clock=t.clock, sleep=t.sleep)
    said = _said(out)
    assert said[0] == f"waiting for logs to appear in {pattern}"
    assert [s for s in said if s.startswith("waiting for")][1:] == [
        f"waiting for logs to appear in {pattern} ({n} s)" for n in (10, 20)]


def test_cli_follow_heartbeat_and_provisional_note(tmp_path):
    (tmp_path / "rank-2.log").write_text("\n".join(scenario()[2]) + "\n")
    p = _cli("--follow", str(tmp_path), "--interval", "0.05", "--tz", "UTC", "--quiet", "1.5", "--heartbeat", "0.5",
             "-f", "json")
    out, err = p.communicate(timeout=60)
    assert p.returncode == 0, err.decode()
    live = err.decode()  # with --format json the live lines go to stderr
    assert "provisional verdict: root cause: rank 2" in live and "waiting: 1 source" in live
    import json

    doc = json.loads(out)
    assert any(d["code"] == "follow-provisional" for d in doc["diagnostics"]), doc["diagnostics"]


def test_a_follower_of_many_files_holds_none_of_their_bytes_between_looks(tmp_path):
    """Each followed file's extractor is parked after its look (``Extractor.park``): the look-back,
    head and tail windows it needs are read back from the file at the next look, so following
    many files does not hold megabytes of each (measured: 2.8 MB for the 12 files
    parked, 37 MB unparked)."""
    import gc
    import tracemalloc

    one = (ROOT / "sample_logs" / "cuda-oom-per-rank" / "rank-0.out").read_bytes()
    body = one * (1_500_000 // len(one) + 1)
    for r in range(12):
        (tmp_path / f"rank-{r}.out").write_bytes(body)
    f = _follower(tmp_path)
    tracemalloc.start()
    try:
        f.poll()
        for r in range(12):
            with open(tmp_path / f"rank-{r}.out", "ab") as fh:
                fh.write(one)
        f.poll()
        for st in f.sources.values():
            st.digest()
        gc.collect()  # (the copies ``snapshot`` finished are cycles: freed by the collector)
        held, _peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(f.sources) == 12 and all(st.x is not None and st.x.parked for st in f.sources.values())
    assert held < 8_000_000, f"{held / 1e6:.1f} MB held for 12 files of {len(body) / 1e6:.1f} MB"
    d = f.sources[str(tmp_path / "rank-3.out")].digest()
    assert d.lines == (len(body) + len(one)) // len(one) * one.count(b"\n")  # and every line was read


@pytest.mark.parametrize("parts", [1, 3])
def test_a_followed_stream_of_many_ranks_counts_the_writers_past_the_first(tmp_path, parts):
    """Followed in pieces, a combined stream of more writers of a rule than extraction keeps one by
    one keeps as many, and counts the others' lines in groups: every rank is in the report's group
    (whether one piece holds them all, and its digest has groups, or each piece has fewer)."""
    from correlator.model import GROUP_PAST_WRITERS, expand_ranks

    n = GROUP_PAST_WRITERS + 700
    lines = combined_srun(rank_lines(n, 8, 5, steps=1), 8)
    f = _follower(tmp_path)
    p = tmp_path / "slurm-9.out"
    for part in range(parts):
        with open(p, "a") as fh:
            fh.write("\n".join(lines[part * len(lines) // parts:(part + 1) * len(lines) // parts]) + "\n")
        assert f.poll()
    d = f.sources[str(p)].digest()
    watchdog = "nccl.watchdog-collective-timeout"
    kept = {m.who.rank for m in d.matches if m.rule_id == watchdog}
    counted = [r for g in d.groups for r in expand_ranks(g.ranks)]
    assert len(kept) == GROUP_PAST_WRITERS + len(d.groups)  # (and each group's earliest line)
    assert sum(g.count for g in d.groups) == n - 1 - len(kept)
    assert kept | set(counted) == set(range(n)) - {5}
    rep = f.report()
    (g,) = [g for g in rep.groups if g.rule == watchdog]
    assert g.count == n - 1 and g.label == "collateral" and rep.root_cause is not None and rep.root_cause.rank == 5
