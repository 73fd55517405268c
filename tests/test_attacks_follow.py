"""Issue 17 item 12: ``--follow`` against files that change under it.

A followed file truncated and rewritten, rotated away, deleted, or grown by a piece of random
bytes: the failure read before stays the job's, what happened is said (a diagnostic and a live
line), and what comes after a binary piece is read. Driven through ``Follower.poll()`` and
``follow()`` with real files and a fake clock: no timed assertions."""

from __future__ import annotations

import io
import os
import random
from collections.abc import Callable

from jobs import rank_lines

from correlator import follow as fl
from correlator import pipeline
from correlator.model import DiagCode, Verdict
from correlator.pipeline import Options

EIO = "storage.eio-on-checkpoint-save"


def _rank2() -> list[str]:
    """Rank 2 of a 4-rank job: three steps, then an EIO on its checkpoint save (the root)."""
    return rank_lines(4, 2, 2, fault="eio")[2]


def _text(lines: list[str]) -> str:
    return "\n".join(lines) + "\n"


def _codes(report, code: DiagCode) -> list:
    return [d for d in report.diagnostics if d.code is code]


def _garbage(n: int, seed: int = 17) -> bytes:
    return random.Random(seed).randbytes(n)


def _run(inputs: list[str], actions: list[Callable[[], None]]) -> tuple[object, str]:
    """``follow()`` with a fake clock; each sleep runs the next action; quiet after the last."""
    now = [0.0]
    todo = list(actions)

    def sleep(s: float) -> None:
        now[0] += s
        if todo:
            todo.pop(0)()

    out = io.StringIO()
    rep = fl.follow(inputs, Options(tz="UTC"), interval_s=1.0, out=out, quiet_s=5, max_s=100,
                    clock=lambda: now[0], sleep=sleep)
    return rep, out.getvalue()


# -- truncation and rotation: what was read is kept, and said ------------------------------------


def test_truncated_to_zero_and_rewritten_keeps_the_earlier_root_and_says_so(tmp_path):
    """The attack: the root is read, the file is truncated to 0 and rewritten with harmless
    lines. It was: "no failure", nothing said. Now the root stands, from the kept generation."""
    p = tmp_path / "rank-2.log"
    lines = _rank2()
    p.write_text(_text(lines))
    f = fl.Follower([str(tmp_path)], Options(tz="UTC"))
    f.poll()
    assert f.report().root_cause.rule == EIO
    with open(p, "w") as fh:  # truncated to 0 ...
        fh.flush()
        os.fsync(fh.fileno())
    f.poll()
    p.write_text(_text(lines[:2]))  # ... and rewritten (same inode)
    f.poll(final=True)
    rep = f.report()
    assert rep.verdict is Verdict.ROOT_CAUSE and rep.root_cause.rank == 2 and rep.root_cause.rule == EIO
    ev = rep.root_cause.evidence[0]
    assert ev.path.startswith(str(p)) and ev.path != str(p)  # the marked earlier generation
    assert ev.line == len(lines)  # its own line number
    restart = _codes(rep, DiagCode.FOLLOW_RESTART)
    assert restart and restart[0].level == "warning" and restart[0].path == str(p)
    # the file itself is read again from its start: its current lines are the new ones
    assert f.sources[str(p)].lines == 2


def test_rotated_away_out_of_sight_keeps_the_earlier_root(tmp_path):
    """logrotate's rename: the followed name now holds a new, empty-ish file; the old one went
    where the follow does not look. Its failure is still the job's."""
    logs, archive = tmp_path / "logs", tmp_path / "archive"
    logs.mkdir()
    archive.mkdir()
    p = logs / "rank-2.log"
    lines = _rank2()
    p.write_text(_text(lines))
    f = fl.Follower([str(p)], Options(tz="UTC"))
    f.poll()
    os.replace(p, archive / "rank-2.log.1")
    p.write_text(_text(lines[:1]))
    f.poll(final=True)
    rep = f.report()
    assert rep.root_cause is not None and rep.root_cause.rule == EIO and rep.root_cause.rank == 2
    assert _codes(rep, DiagCode.FOLLOW_RESTART)
    assert any("replaced" in n for n in f.notes)


def test_rotated_within_the_followed_folder_is_not_counted_twice(tmp_path):
    """Renamed to a name the follow also reads: read there, not also kept as a generation."""
    p = tmp_path / "rank-2.log"
    lines = _rank2()
    p.write_text(_text(lines))
    f = fl.Follower([str(tmp_path)], Options(tz="UTC"))
    f.poll()
    os.replace(p, tmp_path / "rank-2.log.1")
    p.write_text(_text(lines[:1]))
    f.poll(final=True)
    rep = f.report()
    assert rep.root_cause is not None and rep.root_cause.rule == EIO
    assert rep.root_cause.evidence[0].path == str(tmp_path / "rank-2.log.1")
    assert sum(len(g) for g in f.generations.values()) == 0
    eio = [e for e in rep.timeline if e.rule == EIO]
    assert len(eio) == 1


def test_many_truncations_keep_a_bounded_number_of_generations(tmp_path):
    p = tmp_path / "rank-2.log"
    lines = _rank2()
    f = fl.Follower([str(tmp_path)], Options(tz="UTC"))
    for i in range(fl.MAX_GENERATIONS + 5):
        p.write_text(_text(lines if i == 0 else lines[: 1 + i % 3]))
        f.poll()
        with open(p, "w"):
            pass
        f.poll()
    rep = f.report()
    assert len(f.generations[str(p)]) == fl.MAX_GENERATIONS
    assert rep.root_cause is not None and rep.root_cause.rule == EIO  # the first generation is kept
    not_kept = [d for d in _codes(rep, DiagCode.MATCHES_NOT_KEPT) if d.path == str(p)]
    assert [d.count for d in not_kept] == [5]
    # one restart note, on the file itself (the generations do not repeat it)
    assert [d.path for d in _codes(rep, DiagCode.FOLLOW_RESTART)] == [str(p)]


def test_deleted_file_stays_in_the_report_and_is_not_called_missing(tmp_path):
    p = tmp_path / "rank-2.log"
    p.write_text(_text(_rank2()))
    f = fl.Follower([str(p)], Options(tz="UTC"))
    f.poll()
    p.unlink()
    assert f.poll()  # the deletion is a change: said once
    assert not f.poll()
    rep = f.report()
    assert rep.root_cause is not None and rep.root_cause.rule == EIO
    gone = _codes(rep, DiagCode.FOLLOW_GONE)
    assert len(gone) == 1 and gone[0].path == str(p)
    assert not _codes(rep, DiagCode.MISSING)  # it was read: not "a source not read"
    assert rep.stats.sources_skipped == 0 and "missing" not in rep.stats.skipped


def test_live_notes_on_truncation_rotation_and_deletion(tmp_path):
    """One live line each, printed by the ``follow()`` loop; the final verdict keeps the root."""
    logs, archive = tmp_path / "logs", tmp_path / "archive"
    logs.mkdir()
    archive.mkdir()
    a, b = logs / "rank-2.log", logs / "rank-0.log"
    lines = _rank2()
    a.write_text(_text(lines))
    b.write_text(_text(lines[:3]))
    actions = [
        lambda: a.write_text(_text(lines[:2])),  # truncated, rewritten shorter
        lambda: (os.replace(a, archive / "x"), a.write_text(_text(lines[:1]))),  # rotated out of sight
        lambda: b.unlink(),  # deleted
    ]
    rep, said = _run([str(a), str(b)], actions)
    notes = [x for x in said.splitlines() if x.startswith("[follow")]
    assert sum("was truncated" in x for x in notes) == 1, said
    assert sum("was replaced (rotated)" in x for x in notes) == 1, said
    assert sum("was deleted" in x for x in notes) == 1, said
    assert rep.root_cause is not None and rep.root_cause.rule == EIO, said
    assert len(_codes(rep, DiagCode.FOLLOW_GONE)) == 1


# -- binary pieces: skipped, named, and what follows them read ------------------------------------


def test_random_bytes_appended_do_not_stop_the_reading(tmp_path):
    """The attack: 1 MiB of random bytes appended to a growing log, then its failure. It was:
    the whole file marked binary, nothing after it analysed. Now the piece is skipped and named,
    the failure is found at its true line, as batch mode finds it."""
    p = tmp_path / "rank-2.log"
    lines = _rank2()
    lines[1:1] = [f"2026-03-02 14:00:{i % 60:02d},000 - train - INFO - data loader warm-up {i}" for i in range(400)]
    p.write_text(_text(lines[:-4]))  # over 8 KiB of text before the garbage: batch mode reads the file
    f = fl.Follower([str(tmp_path)], Options(tz="UTC"))
    f.poll()
    junk = _garbage(1 << 20)
    start = p.stat().st_size
    with open(p, "ab") as fh:
        fh.write(junk + b"\n")
    f.poll()
    with open(p, "a") as fh:
        fh.write(_text(lines[-4:]))
    f.poll(final=True)
    rep = f.report()
    assert rep.root_cause is not None and rep.root_cause.rule == EIO and rep.root_cause.rank == 2
    data = p.read_bytes()
    assert rep.root_cause.evidence[0].line == data.count(b"\n")  # line numbers survive the blanking
    binary = _codes(rep, DiagCode.BINARY)
    assert len(binary) == 1 and binary[0].level == "warning"
    assert f"bytes {start}-" in binary[0].message
    assert 0.9 * len(junk) <= binary[0].count <= len(junk) + 1
    assert rep.stats.skipped["binary"]["bytes"] == binary[0].count
    assert not f.sources[str(p)].binary
    batch = pipeline.analyze([str(tmp_path)], Options(tz="UTC"))
    assert batch.root_cause is not None and (batch.root_cause.rule, batch.root_cause.evidence[0].line) == (
        EIO, rep.root_cause.evidence[0].line)


def test_garbage_and_the_failure_in_one_piece(tmp_path):
    """The random bytes and the lines after them arrive between two looks: the lines are read
    (line granularity, not the piece), and the text just before the garbage too."""
    p = tmp_path / "rank-2.log"
    lines = _rank2()
    p.write_text(_text(lines[:2]))
    f = fl.Follower([str(tmp_path)], Options(tz="UTC"))
    f.poll()
    with open(p, "ab") as fh:
        fh.write(_text(lines[2:5]).encode() + _garbage(300_000, seed=3) + b"\n" + _text(lines[5:]).encode())
    f.poll(final=True)
    rep = f.report()
    assert rep.root_cause is not None and rep.root_cause.rule == EIO
    assert rep.root_cause.evidence[0].line == p.read_bytes().count(b"\n")
    assert f.sources[str(p)].lines == p.read_bytes().count(b"\n")
    assert rep.ranks and {r.rank: r for r in rep.ranks}[2].last_step == 300  # the steps before the garbage
    assert len(_codes(rep, DiagCode.BINARY)) == 1


def test_a_text_log_with_odd_bytes_is_not_blanked(tmp_path):
    """Ordinary input: UTF-8, a Latin-1 word, colour escapes, tabs, CRs are text; nothing blanked."""
    body = ("step=1 naïve ünïcødé 日本語 ✓\n\x1b[31mERROR\x1b[0m\tcol\r\n").encode() + b"caf\xe9 au lait\n"
    body *= 2000
    p = tmp_path / "rank-0.log"
    p.write_bytes(body)
    assert fl._garbage_ranges(str(p), 0, len(body)) == []
    f = fl.Follower([str(tmp_path)], Options(tz="UTC"))
    f.poll(final=True)
    assert not _codes(f.report(), DiagCode.BINARY)


def test_a_file_that_is_binary_from_its_head_is_still_skipped_whole(tmp_path):
    """As in batch mode: a file whose head is not text is no log (one diagnostic, nothing read)."""
    p = tmp_path / "rank-0.log"
    p.write_bytes(_garbage(64 << 10))
    f = fl.Follower([str(tmp_path)], Options(tz="UTC"))
    f.poll(final=True)
    st = f.sources[str(p)]
    assert st.binary
    binary = _codes(f.report(), DiagCode.BINARY)
    assert len(binary) == 1


def test_a_piece_still_not_text_after_blanking_is_skipped_not_read(tmp_path):
    """A piece of a followed log whose clearly binary lines are blanked but whose other lines still
    hold control bytes (one in five bytes): it is skipped whole -- its line ends kept, so the failure
    after it has its true line -- and counted as skipped, not as read."""
    p = tmp_path / "rank-2.log"
    lines = _rank2()
    p.write_text(_text(lines[:-4]))
    f = fl.Follower([str(tmp_path)], Options(tz="UTC"))
    f.poll()
    read_before = f.sources[str(p)].digest().bytes_read
    piece = b"".join(b"\x01\x02\x03\x04garbage\n" if i % 2 else b"abc\x01\n" for i in range(2000))
    with open(p, "ab") as fh:
        fh.write(piece)
    f.poll()
    with open(p, "a") as fh:
        fh.write(_text(lines[-4:]))
    f.poll(final=True)
    rep = f.report()
    assert rep.root_cause is not None and rep.root_cause.rule == EIO
    assert rep.root_cause.evidence[0].line == p.read_bytes().count(b"\n")
    d = f.sources[str(p)].digest()
    (binary,) = _codes(rep, DiagCode.BINARY)
    assert binary.count == len(piece)  # the whole piece, not its blanked lines only
    assert d.bytes_read == read_before + len(_text(lines[-4:]).encode())
