from __future__ import annotations

import io
import random
from dataclasses import replace
from pathlib import Path

import pytest
from conftest import digest_of, findings
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from jobs import combined_srun, rank_lines

from correlator.extract import ExtractOptions, extract
from correlator.extract.timestamps import resolve_tz
from correlator.model import SourceInfo, TimeKind
from correlator.pipeline import correlate


def _text(n=8, per_node=4, root=5):
    return "\n".join(combined_srun(rank_lines(n, per_node, root), per_node)) + "\n"


def _sig(d):
    return [(m.rule_id, m.line, m.text, m.time_ns, m.who.rank) for m in d.matches]


def test_identity_and_time_of_matches(engine):
    d = digest_of(engine, _text())
    eio = [m for m in d.matches if m.rule_id == "storage.eio-on-checkpoint-save"]
    assert len(eio) == 1
    m = eio[0]
    assert (m.who.rank, m.who.local_rank, m.who.task) == (5, 1, 1)
    assert m.time_kind is TimeKind.INHERITED and m.time_ns is not None
    wd = [m for m in d.matches if m.rule_id == "nccl.watchdog-collective-timeout"]
    assert sorted(m.who.rank for m in wd) == [0, 1, 2, 3, 4, 6, 7]
    assert all(m.time_kind is TimeKind.OWN and m.capture("seq") == "301" for m in wd)


def test_line_numbers_and_paths(engine):
    text = _text()
    d = digest_of(engine, text, name="job.out")
    lines = text.split("\n")
    for m in d.matches:
        assert m.path == "job.out"
        assert m.text in lines[m.line - 1]


@settings(max_examples=40, deadline=None)
@given(st.integers(min_value=16, max_value=5000))
def test_chunk_boundaries_do_not_change_matches(engine, chunk):
    text = _text()
    whole = digest_of(engine, text)
    cut = digest_of(engine, text, chunk=chunk)
    assert _sig(cut) == _sig(whole)
    assert cut.lines == whole.lines == text.count("\n")


@settings(max_examples=25, deadline=None)
@given(st.randoms(use_true_random=False))
def test_interleaving_does_not_change_the_verdict(engine, rnd: random.Random):
    per = rank_lines(8, 4, 6)
    queues = {r: [f"{r // 4}: [default{r % 4}]:[rank{r}]:{x}" for x in ls] for r, ls in per.items()}
    out = []
    while queues:
        r = rnd.choice(sorted(queues))
        out.append(queues[r].pop(0))
        if not queues[r]:
            del queues[r]
    rep = correlate([digest_of(engine, "\n".join(out) + "\n")], engine.ruleset.rules)
    assert rep.verdict.value == "root_cause"
    assert rep.root_cause.rank == 6 and rep.root_cause.rule == "storage.eio-on-checkpoint-save"


def test_tqdm_frames_and_ansi_and_crlf(engine):
    text = ("\x1b[32mEpoch 1\x1b[0m:  50%|#####     | 5/10 [00:01<00:01]\r"
            "Epoch 1:  60%|######    | 6/10 [00:01<00:01]\rtorch.OutOfMemoryError: CUDA out of memory. "
            "Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.15 GiB of which 1.02 GiB is free.\r\n")
    d = digest_of(engine, text)
    assert [m.rule_id for m in d.matches][:1] == ["cuda.out-of-memory"]
    assert d.matches[0].text.startswith("torch.OutOfMemoryError")


@settings(max_examples=60, deadline=None)
@given(st.binary(max_size=3000))
def test_extract_never_raises_on_bytes(engine, data):
    d = digest_of(engine, data)
    assert d.bytes_read == len(data)


def test_huge_line_is_capped_with_a_diagnostic(engine):
    text = "x" * (5 << 20) + " OSError: [Errno 28] No space left on device\nnext line\n"
    d = digest_of(engine, text, chunk=1 << 20)
    assert any("longer than" in x.message for x in d.diagnostics)
    assert d.lines == 2


def test_glog_year_comes_from_the_files_own_dates(engine):
    # the file's Python-logging lines say 2026; its glog lines carry no year; today is irrelevant
    text = ("[rank0]:2026-03-02 14:00:00,000 - train - INFO - step=100\n"
            "[rank0]:[E302 14:13:30.000000000 ProcessGroupNCCL.cpp:616] [Rank 0] Watchdog caught collective "
            "operation timeout: WorkNCCL(SeqNum=3, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) "
            "ran for 600010 milliseconds before timing out.\n")
    d = digest_of(engine, text)
    from jobs import T0
    wd = [m for m in d.matches if m.rule_id == "nccl.watchdog-collective-timeout"][0]
    assert 0 < (wd.time_ns - int(T0.timestamp()) * 10**9) / 1e9 < 1000


def test_look_ahead_reaches_across_buffers(engine):
    # a worker-exit line whose rank comes from the failure-table line *after* it is still resolved
    # when the buffer boundary falls between them: the held-back lines are the region's look-ahead
    body = "".join(f"[rank0]:2026-03-02 14:00:{i % 60:02d},000 - train - INFO - step={i}\n" for i in range(3000))
    text = body + ("[rank0]:Traceback (most recent call last):\n[rank0]:  File \"t.py\", line 1\n"
                   "[rank0]:torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a "
                   "total capacity of 79.15 GiB of which 1.02 GiB is free.\n"
                   "[rank0]:2026-03-02 14:01:00,500 - train - INFO - exiting\n")
    whole = digest_of(engine, text)
    for chunk in (len(body) - 10, len(body) + 40, 4096):
        cut = digest_of(engine, text, chunk=chunk)
        assert [(m.rule_id, m.line, m.time_ns, m.context) for m in cut.matches] == \
               [(m.rule_id, m.line, m.time_ns, m.context) for m in whole.matches]
    oom = [m for m in whole.matches if m.rule_id == "cuda.out-of-memory"][0]
    assert oom.context[-1].endswith("exiting")  # the line after it is in its context


# --- head and tail windows: small for one writer, large for a combined stream -----------------------

def _window_sizes(engine, text: str, monkeypatch) -> list[tuple[bool, int]]:
    from correlator.extract.windows import Windows

    seen: list[tuple[bool, int]] = []
    real = Windows.facts

    def spy(self, data, base, head):
        seen.append((head, len(data)))
        return real(self, data, base, head)

    monkeypatch.setattr(Windows, "facts", spy)
    d = digest_of(engine, text)
    assert d.streams  # the windows still gave the facts
    return seen


def test_one_writers_file_gets_small_windows_a_combined_stream_large_ones(engine, monkeypatch):
    import correlator.extract.windows as ex
    from correlator.extract.lines import one_writer

    # a rank's own file: plain lines, and torchrun's [rank5]: tag on its stderr lines
    own = "".join(f"2026-03-02 14:{i // 60 % 60:02d}:{i % 60:02d},000 - train - INFO - step={i} loss=2.1\n"
                  + (f"[rank5]:[W302 14:00:00.000000000 x.cpp:1] warning {i}\n" if i % 500 == 0 else "")
                  for i in range(60000))
    assert len(own) > ex.HEAD_BYTES + ex.TAIL_BYTES
    assert one_writer(own.encode())
    sizes = _window_sizes(engine, own, monkeypatch)
    assert [h for h, _ in sizes] == [True, False]
    assert ex.HEAD_SIZES_ONE[0] - 200 < sizes[0][1] <= ex.HEAD_SIZES_ONE[0]
    assert ex.TAIL_SIZES_ONE[0] - 200 < sizes[1][1] <= ex.TAIL_SIZES_ONE[0]
    d = digest_of(engine, own)
    assert [s.last_step for s in d.streams if s.who.rank is None] == [59999]

    # the same rank, then a dump longer than the small tail window: the window grows to show the step
    dump = "".join(f"  frame {i}: /usr/lib/python3/site-packages/torch/nn/modules/module.py in _call_impl\n"
                   for i in range(3000))
    monkeypatch.undo()
    sizes = _window_sizes(engine, own + dump, monkeypatch)
    assert ex.TAIL_SIZES_ONE[1] - 200 < sizes[1][1] <= ex.TAIL_SIZES_ONE[1]
    monkeypatch.undo()
    d = digest_of(engine, own + dump)
    assert [s.last_step for s in d.streams if s.who.rank is None] == [59999]

    combined = "".join(f"{r % 4}: [default{r % 2}]:2026-03-02 14:{i // 60 % 60:02d}:{i % 60:02d},000 - train - "
                       f"INFO - step={i} loss=2.1\n" for i in range(9000) for r in range(4))
    assert not one_writer(combined.encode())
    monkeypatch.undo()
    sizes = _window_sizes(engine, combined, monkeypatch)
    assert ex.HEAD_BYTES - 200 < sizes[0][1] <= ex.HEAD_BYTES
    assert ex.TAIL_BYTES - 200 < sizes[1][1] <= ex.TAIL_BYTES


@settings(max_examples=30, deadline=None)
@given(st.integers(min_value=200, max_value=6000), st.booleans())
def test_regions_scanned_in_place_or_copied_give_the_same_digest(engine, chunk, in_place):
    """A region is scanned inside the buffer that also holds its look-back and look-ahead, or copied
    out when it is small beside them: the digest is the whole read's either way."""
    import correlator.extract.reader as ex

    text = _text()
    whole = digest_of(engine, text)
    saved = ex.SCAN_IN_PLACE
    ex.SCAN_IN_PLACE = 0 if in_place else 10**9
    try:
        cut = digest_of(engine, text, chunk=chunk)
    finally:
        ex.SCAN_IN_PLACE = saved
    assert _sig(cut) == _sig(whole)
    assert (cut.lines, cut.streams, cut.anchors, cut.identities) == (whole.lines, whole.streams, whole.anchors,
                                                                     whole.identities)


@settings(max_examples=30, deadline=None)
@given(st.integers(min_value=64, max_value=20000), st.integers(min_value=0, max_value=2000))
def test_blocks_of_a_whole_file_give_the_whole_files_digest(engine, tmp_path_factory, block, at):
    """A file read in one piece is scanned in line-aligned blocks (``reader.blocks``): any block size gives
    the digest of one block (matches, line numbers, windows, and where the first NUL and the first
    invalid UTF-8 byte are)."""
    import correlator.extract.extractor as ex
    import correlator.extract.reader as reader
    from correlator.model import SourceInfo

    lines = _text().split("\n")
    at = at % len(lines)
    lines[at] = lines[at] + "\x00\x00 stray"
    lines[-at // 2] = lines[-at // 2] + " caf\udce9"
    data = "\n".join(lines).encode("utf-8", "surrogateescape") + b"x" * 3000 + b"\n"
    path = tmp_path_factory.mktemp("blocks") / "rank-5.log"
    path.write_bytes(data)
    src = SourceInfo(path=str(path), kind="file", size=len(data))
    from correlator.extract.timestamps import resolve_tz

    opts = ex.ExtractOptions(tz=resolve_tz("UTC"))
    whole = ex.extract(src, engine, opts)
    saved = reader.BLOCK_BYTES
    reader.BLOCK_BYTES = block
    try:
        pieces = list(reader.blocks(data, 0, len(data)))
        assert pieces[0][0] == 0 and pieces[-1][1] == len(data)
        assert all(b == c and data[b - 1:b] == b"\n" for (_, b), (c, _) in zip(pieces, pieces[1:]))
        if block < len(data) // 2:
            assert len(pieces) > 1
        cut = ex.extract(src, engine, opts)
    finally:
        reader.BLOCK_BYTES = saved
    assert _sig(cut) == _sig(whole)
    assert (cut.lines, cut.streams, cut.anchors, cut.identities, cut.diagnostics) == (
        whole.lines, whole.streams, whole.anchors, whole.identities, whole.diagnostics)
    said = " ".join(d.message for d in whole.diagnostics)
    assert f"first at byte {data.index(bytes(1))}" in said
    assert f"invalid UTF-8 (first at byte {data.index(bytes([0xE9]))})" in said


def test_scanners_scan_a_range_in_place_as_they_scan_it_copied(engine):
    """``scan_range(data, begin, end)`` finds the candidate lines ``scan`` finds in ``data[begin:end]``,
    offset by ``begin``."""
    data = _text().encode()
    starts = [0] + [i + 1 for i, c in enumerate(data) if c == 10][:-1]
    sc = engine.scanner
    for begin in starts[::7]:
        for end in (len(data), *(s for s in starts[::11] if s > begin)):
            copied = {s + begin: ids for s, ids in sc.scan(data[begin:end], end - begin).items()}
            assert sc.scan_range(data, begin, end) == copied


def test_an_mpirun_tag_inside_a_line_hands_the_rest_to_that_rank(engine):
    """Open MPI writes each process's stream as it comes: a rank's unfinished line can be followed,
    without a newline, by another rank's tagged output; the text after the inner tag is that rank's."""
    text = ("[1,2]<stderr>:[hpc-03:18405] *** Process received signal ***\n"
            "[1,2]<stderr>:[hpc-03:18405] [ 0] [1,0]<stderr>:  what():  cudaEventQuery failed: an illegal memory "
            "access was encountered\n"
            "[1,2]<stderr>:  what():  CUDA error: an illegal memory access was encountered\n")
    d = digest_of(engine, text)
    ima = sorted((m.line, m.who.rank) for m in d.matches if m.rule_id == "cuda.illegal-memory-access")
    assert ima == [(2, 0), (3, 2)]
    assert [m.text for m in d.matches if m.line == 2 and m.rule_id == "cuda.illegal-memory-access"] == [
        "what():  cudaEventQuery failed: an illegal memory access was encountered"]


def test_an_extractor_fed_in_pieces_gives_the_digest_of_one_read_and_a_snapshot_changes_nothing(engine):
    """``Extractor.feed`` takes the source in pieces of any size; ``snapshot`` is the digest so far
    and leaves the extraction as it was."""
    from correlator.extract.extractor import Extractor

    path = Path(__file__).resolve().parent.parent / "sample_logs" / "lustre-eio-checkpoint"
    logs = sorted(p for p in path.rglob("*") if p.is_file() and p.suffix not in (".md", ".toml"))
    data = max((p.read_bytes() for p in logs), key=len)
    assert len(data) > 20_000
    opts = ExtractOptions(tz=resolve_tz("UTC"))
    src = SourceInfo(path="rank.log", kind="memory", size=len(data))
    whole = extract(src, engine, opts, stream=io.BytesIO(data))
    x = Extractor(src, engine, opts)
    snaps = []
    for i, at in enumerate(range(0, len(data), 7_777)):
        x.feed(data[at:at + 7_777])
        if i % 3 == 0:
            snaps.append(x.snapshot())
    assert findings(x.snapshot()) == findings(whole)  # all fed, ending in a newline: the snapshot is the whole digest
    x.end_of_input()
    assert findings(x.finish()) == findings(whole)
    assert snaps[0].matches != whole.matches or len(snaps) == 1  # an early snapshot saw less
    assert all(len(s.matches) <= len(whole.matches) for s in snaps)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.data())
def test_an_extractor_parked_between_pieces_cut_anywhere_gives_the_digest_of_one_read(engine, data):
    """Metamorphic: the digest does not depend on how the source was cut into pieces (a
    follower's looks, a big file's buffers): an unstamped line's bounds come from its writer's
    next stamped line however far the cut was (before, a cut within 400 lines of it lost the bound).
    And ``park`` (letting go of the bytes the extraction keeps: look-back, held-back lines, head
    and tail windows, the writers' probe) with ``resume`` (reading them back) changes nothing."""
    from correlator.extract.extractor import Extractor

    root = Path(__file__).resolve().parent.parent / "sample_logs"
    logs = sorted(p for p in root.rglob("*.out") if p.stat().st_size > 20_000)
    raw = data.draw(st.sampled_from(logs), label="log").read_bytes()
    raw *= data.draw(st.integers(1, 24), label="times")  # up to ~2 MB: past the look-back and the windows
    cuts = sorted(set(data.draw(st.lists(st.integers(1, len(raw) - 1), min_size=1, max_size=6), label="cuts")))
    opts = ExtractOptions(tz=resolve_tz("UTC"))
    src = SourceInfo(path="rank.log", kind="memory", size=len(raw))
    reads: list[tuple[int, int]] = []

    def read(a: int, b: int) -> bytes:
        reads.append((a, b))
        return raw[a:b]

    digests = []
    for parked in (False, True):
        x = Extractor(src, engine, opts)
        prev = 0
        for cut in [*cuts, len(raw)]:
            x.resume(read)
            x.feed(raw[prev:cut])
            prev = cut
            if parked:
                x.park()
                with pytest.raises(RuntimeError, match="parked"):
                    x.snapshot()
        x.resume(read)
        x.end_of_input()
        digests.append(x.finish())
    assert digests[1] == digests[0]
    assert reads  # something was let go of and read back
    # and where the pieces were cut changes nothing: every line had its look-ahead (``hold_back``)
    assert findings(digests[0]) == findings(extract(src, engine, opts, stream=io.BytesIO(raw)))


#: pieces of lines: launcher prefixes of several dialects, stamps, ANSI codes, \r frames, UTF-8 cut
#: inside a character, Unicode digits and spaces (which ``MAYBE_PREFIX_RE`` counts as possible ones)
_CONTEXT_PIECES = [b"\n", b"\n", b"\n", b"plain text ", b"ValueError: x", b"3: ", b"[rank5]:", b"[default2]:",
                   b"[1,3]<stdout>:", b"gpu-a01: ", b"(pid=12) ", b"2026-03-02T14:01:00.123Z: [1,2]<stderr>:",
                   b"2026-03-02 14:01:00,000 - INFO - ", b"\x1b[31m", b"\r", b"\xe2\x82", b"\xc3\xa9",
                   b"\xd9\xa3: ", b"\xc2\xa0", b"  ", b"\t", b"node-7 [stdout] ", b"x" * 50]


@settings(max_examples=400, deadline=None)
@given(st.lists(st.sampled_from(_CONTEXT_PIECES), max_size=80).map(b"".join), st.integers(0, 4000),
       st.integers(0, 30), st.integers(0, 30))
def test_messages_of_adjacent_lines_are_each_lines_own(data, at, n_before, n_after):
    # Buffer.context decodes a writer's adjacent lines at once and splits prefixes only where one
    # may be: each message must be what parse_line gives for that line alone
    from correlator.extract.lines import Buffer, parse_line
    buf = Buffer(data, 0, 0, 1)
    start = data.rfind(b"\n", 0, min(at, len(data))) + 1
    for pbytes in (b"", b"[rank5]:", b"3: "):  # (a writer's lines among others': not always adjacent)
        before, after = buf.context(start, pbytes, n_before, n_after)
        want_before = [parse_line(data[s:e])[1].rstrip("\r")
                       for s, e in buf.writer_before(start, pbytes, n_before)][::-1]
        want_after = [parse_line(data[s:e])[1].rstrip("\r") for s, e in buf.writer_after(start, pbytes, n_after)]
        assert (before, after) == (want_before, want_after), pbytes


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from([b"a", b"b", b"\n", b"x"]), max_size=300).map(b"".join),
       st.lists(st.tuples(st.integers(0, 320), st.integers(0, 320)), max_size=12),
       st.sampled_from([b"a", b"ab", b"ba", b"aab", b"\n", b"ababa"]))
# (a question from further back than one before it, after a jump: the places the jump passed over
# were not recorded, and its answer was False where rfind finds one)
@example(b"xaxxx", [(0, 1), (3, 5), (1, 5)], b"a")
def test_holds_before_answers_as_rfind_does_whatever_the_order_of_the_questions(data, spans, lit):
    # the confirmer asks a context rule's required literals of a block in line order, and the buffer
    # remembers where it found them; out of order, or twice, the answer must still be rfind's (with
    # its places found by bytes.find, or by Hyperscan as over a long span: ``scan.literal_places``)
    from correlator.extract import scan
    from correlator.extract.lines import Buffer
    for by_hyperscan in (False, True):
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(scan, "LITERAL_SCAN_BYTES", 0 if by_hyperscan else 1 << 30)
            buf = Buffer(data, 0, 0, 1)
            for a, b in spans:
                lo, start = min(a, b), max(a, b)
                assert buf.holds_before(lit, lo, start) == (data.rfind(lit, lo, start) >= 0), (lo, start, by_hyperscan)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.sampled_from([b"[rank1]: x", b"[rank2]: y", b"plain", b"[rank1]: z z", b""]),
                min_size=1, max_size=60),
       st.integers(0, 250), st.sampled_from([b"", b"[rank1]:", b"[rank2]:"]))
def test_the_nearest_n_context_lines_are_the_last_n_of_the_nearest_200(lines, n, pbytes):
    # an event rule's context is built only as far back as it looks (context_lines, at most 200)
    from correlator.extract.lines import Buffer
    data = b"\n".join(lines) + b"\n"
    start = data.rfind(b"\n", 0, len(data) - 1) + 1
    buf = Buffer(data, 0, 0, 1)
    far = buf.context(start, pbytes, 200, 0)[0]
    near = buf.context(start, pbytes, n, 0)[0]
    assert near == (far[-n:] if n else [])


def _nccl_init(rank: int, comm: int, *, nranks: int = 16, bus: str = "38000", end: str = "Init START") -> str:
    return (f"gpu-a001:4000{rank % 8}:4000{rank % 8} [{rank % 8}] NCCL INFO ncclCommInitRank comm 0x55d3a8e{comm:05x} "
            f"rank {rank} nranks {nranks} cudaDev {rank % 8} nvmlDev {rank % 8} busId {bus} "
            f"commId 0x2f6c1e9a{comm:08x} - {end}")


def test_an_nccl_init_fact_stated_again_is_kept_once_in_the_order_first_stated(engine):
    """A rank creates a communicator per group and step: its init lines (START and COMPLETE, each
    with its own comm pointer) state one fact, kept once; a line stating anything else is kept too."""
    lines = [_nccl_init(3, c, end=e) for c in range(40) for e in ("Init START", "Init COMPLETE")]
    lines[10:10] = [_nccl_init(3, 999, nranks=4)]  # a sub-communicator's size
    lines[30:30] = [_nccl_init(3, 998, bus="b7000")]  # another bus id
    lines[50:50] = [_nccl_init(3, 997, nranks=4)]  # said before
    digest = digest_of(engine, "\n".join(lines) + "\n")
    # what each line states on its own (a file of that line alone), first statements in order
    alone = [f for ln in lines for f in digest_of(engine, ln + "\n").identities]
    assert len(alone) == len(lines)
    expect = [replace(f, origin_path=digest.source.path) for f in dict.fromkeys(
        replace(f, origin_path="") for f in alone)]
    assert list(digest.identities) == expect
    assert len(expect) == 3


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 5), st.integers(0, 2)), min_size=1, max_size=40), st.randoms(use_true_random=False))
def test_joining_identity_facts_does_not_depend_on_a_fact_said_again(facts, rnd):
    """``identity.build`` keeps a key's first statement and forgets a key two statements disagree
    on: an NCCL init fact repeated anywhere after its first statement changes nothing."""
    from correlator.correlate import identity
    from correlator.model import Digest, FactSource, IdentityFact, Who

    pool = [IdentityFact(Who(rank=r, local_rank=r % 2 if h != 2 else None, host=f"gpu-{h}", pid=100 + r),
                         None, "", FactSource.NCCL_INIT, comm_size=8 if r != 5 else 2, bus=0x38000 + r)
            for r in range(6) for h in range(3)]
    said = [pool[r * 3 + h] for r, h in facts]
    srcs = [SourceInfo(path=f"rank-{i}.log", kind="file", file_rank=i) for i in range(2)]
    once = [list(dict.fromkeys(said[i::2])) for i in range(2)]
    again = [list(x) for x in once]
    for x, full in zip(again, (said[0::2], said[1::2])):
        for f in full:  # repeats at random places after the first statement
            x.insert(rnd.randint(x.index(f) + 1, len(x)), f)
    build = [identity.build([Digest(s, identities=tuple(f)) for s, f in zip(srcs, fs)], set()) for fs in (once, again)]
    assert build[0] == build[1]


_NCCL_HEAD = ["", "12: ", "[default1]:", "12: [default1]:[rank3]:", "(pid=12) ", "gpu-b7: "]
_NCCL_ORIGIN = ["", "gpu-a001:4001:4001 [1] ", "0x{h}:1:1 [0] ", "node-0x{h}:1:2 [1] ", "h:1:2 [1] ib.c:3 "]
_NCCL_EXTRA = ["cudaDev 1 ", "busId {h} ", "busId 38000 ", "commId 0x{h} ", "rank 0x{h} ", "0x{h}:12:12 [0] NCCL ",
               "comm 0x{h} ", "comm 0x{h}", "x" * 250, "- Init ", "rank 5 nranks 2 "]


@settings(max_examples=400, deadline=None)
@given(st.sampled_from(_NCCL_HEAD), st.sampled_from(_NCCL_ORIGIN), st.booleans(), st.sampled_from(["r", "R"]),
       st.lists(st.sampled_from(_NCCL_EXTRA), max_size=6), st.randoms(use_true_random=False),
       st.sampled_from(["", " - Init START", " - Init COMPLETE", " - Init STARTED"]),
       st.sampled_from(["", " - Init START", " - Init COMPLETE"]))
def test_nccl_init_lines_with_the_same_key_state_the_same_fact(engine, head, origin, init, r, extra, rnd, end1, end2):
    """Two lines that ``nccl_line_key`` calls the same state the same fact (each read alone), so
    that the second need not be parsed: init lines whose hex digits (of the same count) vary,
    each piece's digits varying or not, with other pieces around them."""
    from correlator.extract.statements import nccl_line_key

    pieces = [head, origin, "NCCL INFO ", "ncclCommInitRank " if init else "", "comm 0x{h} ", f"rank 3 n{r}anks 16 ",
              *extra]
    sizes = [rnd.randint(1, 12) for _ in pieces]
    fixed = [None if rnd.random() < 0.5 else "".join(rnd.choice("0123456789abcdefABCDEF") for _ in range(n))
             for n in sizes]

    def line(end: str) -> str:
        return "".join(p.format(h=f if f is not None else "".join(rnd.choice("0123456789abcdefABCDEF")
                                                                   for _ in range(n)))
                       for p, n, f in zip(pieces, sizes, fixed)).rstrip(" ") + end

    one, two = line(end1), line(end2)
    if nccl_line_key(one.encode()) != nccl_line_key(two.encode()):
        return
    assert digest_of(engine, one + "\n").identities == digest_of(engine, two + "\n").identities


def test_an_extracted_source_is_freed_without_the_cyclic_collector(engine, tmp_path):
    """Once ``extract`` returns, its extractor (with the source's buffer, of which the look-back and
    the tail window are views, and its kept matches) is freed by reference counting alone: a pool
    worker, which allocates few containers, would otherwise hold about a file's size per file
    until a collection."""
    import gc

    from correlator.extract.extractor import Extractor
    from correlator.extract.sources import identity_from_path

    p = tmp_path / "rank-3.log"
    p.write_bytes((_text() * 40).encode())
    src = replace(identity_from_path(str(p)), size=p.stat().st_size)
    opts = ExtractOptions(tz=resolve_tz("UTC"))
    gc.collect()
    gc.disable()
    try:
        digests = [extract(src, engine, opts) for _ in range(3)]
        alive = [o for o in gc.get_objects() if isinstance(o, Extractor)]
    finally:
        gc.enable()
    assert digests[0].matches and digests[0] == digests[2]
    assert alive == []


@settings(max_examples=60, deadline=None)
@given(st.binary(max_size=3000), st.data())
def test_count_nl_counts_as_bytes_count(data, draw):
    """``count_nl`` takes numpy past a few KiB, a cache-sized step at a time: the count is
    ``bytes.count``'s, whatever the span and the step (small ones here, so that every path runs)."""
    from correlator.extract import reader

    data = data.replace(b"x", b"\n")
    start = draw.draw(st.integers(0, len(data)))
    end = draw.draw(st.integers(start, len(data)))
    for small, step in ((4 << 10, 256 << 10), (0, 7), (16, 1), (1, 100)):
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(reader, "COUNT_NUMPY_BYTES", small)
            mp.setattr(reader, "COUNT_STEP_BYTES", step)
            assert reader.count_nl(data, start, end) == data.count(b"\n", start, end), (small, step)
