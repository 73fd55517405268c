"""Running ``extract`` over many sources: a local process pool, or Dask.

Owns parallelism only; what a digest contains is ``extract``'s business.

``local`` (the default) runs one task per source on a process pool with one worker per core.
Workers are forked from the process that already compiled the rule engine, so they inherit it
(no recompiling; where ``fork`` is unavailable each worker builds it once, from the on-disk
Hyperscan cache). Sources are submitted largest first so the pool stays busy to the end.

A big plain file (one combined ``srun --label`` stream of the whole job) would leave all but one
core idle. It is cut at line starts into pieces that the workers *scan* in parallel (the
multi-pattern pass over the bytes, which is most of the work), while this process runs the
ordinary serial ``extract`` over the file with a scanner that replays the pieces' candidate lines
instead of scanning. Everything that depends on order -- line numbers, byte offsets, times
inherited across a piece edge, the head and tail windows, the per-writer state -- is computed by
the same serial code as for any other file, so the digest is exactly the serial one (a property
test checks it). Which lines are candidates does not depend on where a buffer is cut, because
candidates are confirmed line by line with the rules' own regexes. Pieces are submitted a few at
a time, so memory stays bounded whatever the file's size.

``dask`` submits the same extract function as tasks to a ``dask.distributed`` cluster (a
scheduler address, or a LocalCluster) and ships each digest back as Arrow IPC bytes
(``correlator.digest_io``); each worker process compiles the engine once and keeps it.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import dataclass, replace
from multiprocessing.context import BaseContext
from pathlib import Path
from typing import NamedTuple

from correlator.extract.extractor import Engine, ExtractOptions, extract
from correlator.extract.reader import count_nl
from correlator.extract.replay import Reader, Said, Told, read_lines
from correlator.extract.statements import ONE_WRITER_PROBE
from correlator.memory import gc_paused
from correlator.model import DiagCode, Diagnostic, Digest, SourceInfo

ENGINES = ("local", "dask")

#: below this many bytes in all, the sources are read in this process (a pool costs more than it saves)
POOL_MIN_BYTES = 32 << 20
#: a plain file at least this big (and a big share of the job) is scanned in pieces
SPLIT_MIN_BYTES = 128 << 20
#: size of one scanned piece of a split file
PIECE_BYTES = 32 << 20
#: pieces of one split file in flight at once (bounds the memory of candidate lists)
PIECES_AHEAD_PER_WORKER = 2


@dataclass(frozen=True, slots=True)
class EngineSpec:
    """What a worker needs to rebuild the rule engine: picklable, small."""

    rule_dirs: tuple[str, ...]
    include_builtin: bool
    scanner: str | None
    opts: ExtractOptions


# engines built in this process, by what they were built from (a worker keeps its engine)
_ENGINES: dict[tuple, Engine] = {}
# the engine and options the local pool's workers use (set before forking, or by _init)
_ENGINE: Engine | None = None
_OPTS: ExtractOptions | None = None


_MALLOC_TUNED = False


def tune_malloc() -> None:
    """Keep freed buffers in the heap instead of giving them back to the system (glibc only).

    Extraction allocates and frees buffers of a few MiB per read (the read, the cut region, the
    kept bytes before it). With glibc's defaults, big blocks are mmap'ed or the heap is trimmed
    when they are freed, so every read pays page faults on fresh memory again: about a third of
    the time per byte. A fixed mmap threshold of 32 MiB, no mmap for bigger blocks either, and a
    trim threshold of 256 MiB keep them in the heap; the peak stays the same (buffers are reused,
    not added). Inherited by forked workers. ``CORRELATE_MALLOC_TUNE=0`` leaves malloc alone.
    """
    global _MALLOC_TUNED
    if _MALLOC_TUNED or os.environ.get("CORRELATE_MALLOC_TUNE", "1") == "0":
        return
    _MALLOC_TUNED = True
    try:
        import ctypes
        import ctypes.util

        name = ctypes.util.find_library("c")
        if not name or not hasattr(os, "fork"):
            return
        libc = ctypes.CDLL(name)
        mallopt = getattr(libc, "mallopt", None)
        if mallopt is None:  # not glibc
            return
        m_trim_threshold, m_mmap_threshold, m_mmap_max = -1, -3, -4
        mallopt(m_mmap_threshold, 32 << 20)
        mallopt(m_trim_threshold, 256 << 20)
        # blocks of 32 MiB and more (glibc's largest threshold) would still be mmap'ed afresh on
        # every read: a whole rank file of up to WHOLE_FILE_BYTES comes from the heap instead
        mallopt(m_mmap_max, 0)
    except Exception:  # noqa: BLE001 - an optimisation only
        return


def _spec_key(spec: EngineSpec) -> tuple:
    return (spec.rule_dirs, spec.include_builtin, spec.scanner)


def build_engine(spec: EngineSpec) -> Engine:
    """The compiled engine for ``spec``: built once per process, then reused."""
    key = _spec_key(spec)
    eng = _ENGINES.get(key)
    if eng is None:
        from correlator.ruleset import load_rules

        rules = load_rules([Path(d) for d in spec.rule_dirs], include_builtin=spec.include_builtin)
        eng = _ENGINES[key] = Engine(rules, spec.scanner)
    return eng


def _ignore_sigint() -> None:
    """In a worker: Ctrl-C is the parent's to handle (it stops the workers, see ``stop_pool``); a
    terminal sends it to the whole process group, and a worker taking it would print a traceback
    and carry on with its next task."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


_FORK_HOOK = False


def _workers_ignore_sigint() -> None:
    """From now on a forked child ignores SIGINT from its first instruction (``os.register_at_fork``),
    not only once its initializer runs: a Ctrl-C at the moment of a fork prints no traceback there."""
    global _FORK_HOOK
    if not _FORK_HOOK and hasattr(os, "register_at_fork"):
        os.register_at_fork(after_in_child=_ignore_sigint)
        _FORK_HOOK = True


def stop_pool(pool: ProcessPoolExecutor) -> None:
    """Stop ``pool`` at once (Ctrl-C, or an error that ends the run): its queued tasks are cancelled
    and its workers, which may be in the middle of a file, are terminated rather than waited for."""
    procs = list((getattr(pool, "_processes", None) or {}).values())
    pool.shutdown(wait=False, cancel_futures=True)
    for proc in procs:
        if proc.is_alive():
            proc.terminate()
    for proc in procs:
        proc.join(timeout=1.0)


def _init(spec: EngineSpec | None) -> None:
    global _ENGINE, _OPTS
    _ignore_sigint()
    if spec is not None:  # spawned worker: nothing inherited
        _ENGINE = build_engine(spec)
        _OPTS = spec.opts


def _safe_extract(src: SourceInfo, engine: Engine, opts: ExtractOptions) -> Digest:
    try:
        return extract(src, engine, opts)
    except MemoryError:
        return Digest(src, diagnostics=(Diagnostic("error", src.path, "out of memory while reading: skipped",
                                                        DiagCode.OUT_OF_MEMORY),))
    except Exception as e:  # noqa: BLE001 - one bad source must not sink the job; said in the report
        return Digest(src, diagnostics=(Diagnostic(
            "error", src.path, f"internal error while reading ({type(e).__name__}: {e}); the rest was analysed; "
                               f"please report this", DiagCode.INTERNAL_ERROR),))


def _worker_engine(spec: EngineSpec | None) -> tuple[Engine, ExtractOptions]:
    """The engine and options of a task: inherited from the parent (``spec`` None), or built from
    ``spec`` once per worker (a pool started early, before the engine existed)."""
    if spec is None:
        assert _ENGINE is not None and _OPTS is not None
        return _ENGINE, _OPTS
    return build_engine(spec), spec.opts


def _work(src: SourceInfo, spec: EngineSpec | None = None) -> Digest:
    eng, opts = _worker_engine(spec)
    return _safe_extract(src, eng, opts)


def _work_batch(srcs: list[SourceInfo], spec: EngineSpec | None = None) -> list[Digest]:
    return [_work(s, spec) for s in srcs]


#: small files travel to the workers in batches: one task per 1 MB file spends more on the pool's
#: bookkeeping (on a core the workers need) than on the file
BATCH_BYTES, BATCH_FILES = 32 << 20, 64


def _batches(order: list[int], sources: Sequence[SourceInfo], n: int) -> list[list[int]]:
    """Consecutive runs of ``order`` (largest first) of at most BATCH_BYTES / BATCH_FILES, and small
    enough that every worker gets several: at most a quarter of a worker's share of the bytes still
    to come, so batches shrink toward the end and the workers finish together (the last batch of
    32 MB on one core while the other waited was ~0.1 s of a 4096-file job's wall time)."""
    remaining = sum(sources[i].size or 0 for i in order)
    out: list[list[int]] = []
    cur: list[int] = []
    size = 0
    cap_bytes = max(1, min(BATCH_BYTES, remaining // max(1, 4 * n)))
    for i in order:
        sz = sources[i].size or 0
        if cur and (size + sz > cap_bytes or len(cur) >= BATCH_FILES):
            out.append(cur)
            remaining -= size
            cur, size = [], 0
            cap_bytes = max(1, min(BATCH_BYTES, remaining // max(1, 4 * n)))
        cur.append(i)
        size += sz
    if cur:
        out.append(cur)
    return out


# --- split files: parallel scan, serial extract ---------------------------------------------------

Candidates = list[tuple[int, tuple[int, ...]]]


def _read_at(path: str, start: int, size: int) -> bytes:
    with open(path, "rb") as f:
        f.seek(start)
        return f.read(size)


#: a piece's line counts are known at every multiple of this many bytes of the source (and at its
#: candidate lines): this process counts at most half of it again to find a line number in between
LINE_MARK_BYTES = 64 << 10


class Piece(NamedTuple):
    """A scanned piece of a split file, with what its worker found out that does not depend on order."""

    start: int
    end: int
    #: its candidate lines (absolute offsets) with their pattern ids
    candidates: Candidates
    #: the scanner's reports on it
    reports: int
    #: source offset -> newlines in ``[start, offset)``: at ``start``, ``end``, every candidate and every
    #: multiple of LINE_MARK_BYTES in between (None: not counted, without numpy)
    lines_at: dict[int, int] | None = None
    #: no NUL byte and valid UTF-8 (then so is every line-aligned range of it)
    clean: bool = False
    #: what its candidate lines say (``replay.Said``, by source offset): the lines it could read
    said: dict[int, Said] | None = None


#: the bytes a worker reads before and after its piece, for the lines around its candidate lines
#: (what an event's context, a failure's context and an inherited time read: a writer's lines within
#: ``lines.WRITER_WINDOW``, or a few hundred lines without a prefix); a line whose reading looks
#: further is read by the serial extract
MARGIN_BYTES = 1 << 20

#: the reader of candidate lines of the split file a worker scans (``replay.Reader``), kept for its next
#: pieces: (what it was made for, the reader)
_READER: tuple[tuple, Reader] | None = None


def _reader_for(engine: Engine, opts: ExtractOptions, src: SourceInfo) -> Reader:
    """The worker's reader of ``src``'s candidate lines (made once per file and run: it reads the
    file's first bytes, which its census of the writers needs)."""
    global _READER
    key = (id(engine), opts, src)
    if _READER is None or _READER[0] != key:
        _READER = (key, Reader(engine, opts, src, _read_at(src.path, 0, ONE_WRITER_PROBE)))
    return _READER[1]


def _scan_piece(src: SourceInfo, start: int, end: int) -> Piece:
    """Candidate lines of ``src[start:end]`` (``start`` is a line start) as absolute offsets, with what
    they say: the piece is read with MARGIN_BYTES on either side."""
    assert _ENGINE is not None and _OPTS is not None
    size = src.size or 0
    lo, hi = max(0, start - MARGIN_BYTES), min(size, end + MARGIN_BYTES)
    data = _read_at(src.path, lo, hi - lo)
    if len(data) != hi - lo:  # (the file changed under us: the piece alone, nothing more taken from it)
        data = _read_at(src.path, start, end - start)
        return _scan_bytes(_ENGINE, data, 0, len(data), start, end)
    return _scan_bytes(_ENGINE, data, start - lo, end - start, start, end, _reader_for(_ENGINE, _OPTS, src), hi >= size)


def _scan_bytes(engine: Engine, data: bytes, begin: int, n: int, start: int, end: int, reader: Reader | None = None,
                last: bool = False) -> Piece:
    """The piece ``[start, end)`` of a source, which ``data[begin:begin + n]`` holds (``data`` holds the
    source from ``start - begin``); ``reader``: its candidate lines are read too (``last``: ``data``
    ends where the source does)."""
    scanner = engine.scanner
    before = getattr(scanner, "reports", 0)
    base = start - begin
    in_range = getattr(scanner, "scan_range", None)
    if in_range is not None:
        lines = in_range(data, begin, begin + n)
    else:
        lines = {s + begin: ids for s, ids in scanner.scan(data[begin:begin + n], n).items()}
    cands = sorted((base + s, tuple(sorted(ids))) for s, ids in lines.items())
    reports = getattr(scanner, "reports", 0) - before
    if n != end - start:  # (the file changed under us: nothing more is taken from this piece)
        return Piece(start, end, cands, reports)
    clean = data.find(b"\x00", begin, begin + n) < 0 and _valid_utf8(data, begin, begin + n)
    said = None
    if reader is not None:
        if last and not data.endswith(b"\n"):
            data += b"\n"  # (the serial extract reads the last line with a newline)
        said = read_lines(reader, data, begin, base, last, cands)
    return Piece(start, end, cands, reports, _line_marks(data, begin, n, start, [c for c, _ in cands]), clean, said)


def _valid_utf8(data: bytes, begin: int, end: int) -> bool:
    from correlator.extract.reader import valid_utf8

    return data.isascii() or valid_utf8(memoryview(data)[begin:end])


def _line_marks(data: bytes, begin: int, n: int, start: int, at: list[int]) -> dict[int, int] | None:
    """Newlines in ``data[begin:begin + n]`` (the source's bytes from ``start``) before each of the
    source offsets ``at``, ``start``, its end and every multiple of LINE_MARK_BYTES in between
    (``Piece.lines_at``)."""
    from correlator.extract import reader

    reader.warm_up()
    np = reader._np
    if not np:
        return None
    grid = LINE_MARK_BYTES
    end = start + n
    points = sorted({start, *range(start - start % grid + grid, end, grid), *at, end})
    # the newlines of each span between two points counted on their own (numpy over a long span: its
    # comparison's array stays in the cache; not every newline's place, which cost twice as much)
    raw = np.frombuffer(data, np.uint8)
    count_nonzero, count = np.count_nonzero, data.count
    out: dict[int, int] = {}
    total = 0
    prev = begin
    for p in points:
        at_ = p - start + begin
        total += count(b"\n", prev, at_) if at_ - prev < 4096 else int(count_nonzero(raw[prev:at_] == 10))
        out[p] = total
        prev = at_
    return out


def piece_bounds(path: str, size: int, piece: int | None = None) -> list[tuple[int, int]]:
    """Cut ``path`` into pieces of about ``piece`` bytes (PIECE_BYTES), each starting at a line start."""
    if piece is None:
        piece = PIECE_BYTES
    cuts = [0]
    pos = piece
    with open(path, "rb") as f:
        while pos < size:
            f.seek(pos)
            nl = -1
            probe = pos
            while nl < 0 and probe < size:  # a line longer than the probe: keep looking
                block = f.read(1 << 16)
                if not block:
                    break
                i = block.find(b"\n")
                if i >= 0:
                    nl = probe + i
                probe += len(block)
            if nl < 0 or nl + 1 >= size:
                break
            cuts.append(nl + 1)
            pos = max(nl + 1, cuts[-1]) + piece
    cuts.append(size)
    return [(a, b) for a, b in zip(cuts, cuts[1:]) if b > a]


class ReplayScanner:
    """A scanner that replays candidate lines found earlier (by other processes) instead of scanning.

    ``extract`` calls ``scan`` on consecutive regions of the source; this keeps the cursor and
    returns the candidates that fall in each region, relative to its start.
    """

    name = "replay"
    rejected: tuple[int, ...] = ()  # the scanner that found the candidates left none to keywords here

    def __init__(self, pieces: Iterator[Piece]) -> None:
        self._pieces = pieces
        #: the reports of the scans being replayed (counted as the pieces arrive)
        self.reports = 0
        self._pending: deque[tuple[int, tuple[int, ...]]] = deque()
        self._covered = 0  # candidates are known for [0, _covered)
        self._cursor = 0
        #: the pieces not yet passed, with their line marks as newlines since the source's start
        #: (None: not known) and whether they are clean text
        self._marks: deque[tuple[int, int, dict[int, int] | None, bool]] = deque()
        self._counted: int | None = 0  # newlines in [0, _covered) while every piece was counted
        #: what the pieces' workers read of their candidate lines (``replay.replay_line`` takes it)
        self.told = Told()

    def scan(self, buf: bytes | memoryview, end: int) -> dict[int, set[int]]:
        lo, hi = self._cursor, self._cursor + end
        marks = self._marks
        while marks and marks[0][1] <= lo:  # passed: the caller counts and checks only in [lo, hi)
            marks.popleft()
        while self._covered < hi:
            try:
                piece = next(self._pieces)
            except StopIteration:
                break
            start, stop, cands = piece.start, piece.end, piece.candidates
            self.reports += piece.reports
            if start != self._covered:
                raise RuntimeError(f"replayed pieces out of order: {start} != {self._covered}")
            self._pending.extend(cands)
            self._covered = stop
            if piece.said:
                self.told.add(start, stop, piece.said)
            before, lines_at = self._counted, piece.lines_at
            if before is None or lines_at is None:
                self._counted = None
                marks.append((start, stop, None, piece.clean))
            else:
                marks.append((start, stop, {k: before + v for k, v in lines_at.items()}, piece.clean))
                self._counted = before + lines_at[stop]
        out: dict[int, set[int]] = {}
        pend = self._pending
        while pend and pend[0][0] < hi:
            at, ids = pend.popleft()
            if at >= lo:
                out.setdefault(at - lo, set()).update(ids)
        self._cursor = hi
        return out

    def _lines_to(self, data: bytes, base: int, at: int) -> int | None:
        """Newlines in the source before offset ``at`` (``data[at - base]``), from the nearest line
        mark counted by the worker and the bytes between it and ``at``; None: no mark in reach."""
        for start, stop, known, _clean in self._marks:
            if at > stop:
                continue
            if at < start or known is None:
                return None
            n = known.get(at)
            if n is not None:
                return n
            grid = LINE_MARK_BYTES
            below, above = max(start, at - at % grid), min(stop, at - at % grid + grid)
            if at - below <= above - at and below >= base:
                return known[below] + data.count(b"\n", below - base, at - base)
            if above - base <= len(data):
                return known[above] - data.count(b"\n", at - base, above - base)
            if below >= base:
                return known[below] + data.count(b"\n", below - base, at - base)
            return None
        return None

    def lines_between(self, data: bytes, start: int, end: int, base: int) -> int:
        """``count_nl(data, start, end)`` (``base``: the source offset of ``data[0]``) from the pieces'
        line marks: only the bytes between a mark and each end are counted here."""
        if end - start > LINE_MARK_BYTES:
            a = self._lines_to(data, base, base + start)
            if a is not None:
                b = self._lines_to(data, base, base + end)
                if b is not None:
                    return b - a
        return count_nl(data, start, end)

    def clean_between(self, data: bytes, start: int, end: int, base: int) -> bool:
        """Whether ``data[start:end]`` lies in pieces with no NUL byte and valid UTF-8 and is cut at
        line ends, as theirs are (then each of its characters is whole)."""
        if start >= end or data[end - 1] != 10 or (start > 0 and data[start - 1] != 10) or (start == 0 and base != 0):
            return False
        lo, hi = base + start, base + end
        covered = lo
        for a, b, _known, clean in self._marks:
            if b <= covered:
                continue
            if a > covered or not clean:
                return False
            covered = b
            if covered >= hi:
                return True
        return False

    def scan_range(self, data: bytes, begin: int, end: int) -> dict[int, set[int]]:
        """``scan`` of the region ``data[begin:end]``, as offsets in ``data`` (only its length counts)."""
        return {s + begin: ids for s, ids in self.scan(b"", end - begin).items()}


def _pieces_in_order(pool: ProcessPoolExecutor, src: SourceInfo, bounds: list[tuple[int, int]], ahead: int,
                     on_piece: Callable[[int], None] | None = None) -> Iterator[Piece]:
    """The scanned pieces of ``src`` in order, ``ahead`` in flight; ``on_piece(bytes)`` as each is taken."""
    queue: deque[Future] = deque()
    it = iter(bounds)
    for a, b in it:
        queue.append(pool.submit(_scan_piece, src, a, b))
        if len(queue) >= ahead:
            break
    while queue:
        res = queue.popleft().result()
        nxt = next(it, None)
        if nxt is not None:
            queue.append(pool.submit(_scan_piece, src, *nxt))
        if on_piece is not None:
            on_piece(res.end - res.start)
        yield res


def extract_split(src: SourceInfo, engine: Engine, opts: ExtractOptions,
                  pieces: Iterator[Piece]) -> Digest:
    """``extract`` of a plain file whose candidate lines were found piece by piece elsewhere: the
    pieces' candidates are replayed in order to one extractor (rules and facts are the engine's)."""
    replay = ReplayScanner(pieces)
    replay.name = engine.scanner.name  # the same kind of scan, done elsewhere
    return extract(src, engine, opts, scanner=replay)


def _splittable(s: SourceInfo, total: int, n: int) -> bool:
    if s.kind != "file" or not s.size or s.size < SPLIT_MIN_BYTES or s.stream == "error.json":
        return False
    try:
        with open(s.path, "rb") as f:
            magic = f.read(6)
    except OSError:
        return False
    from correlator.extract.sources import _sniff

    # worth it when the file is a big share of the job (otherwise whole files keep the cores busy)
    return _sniff(magic) == "file" and s.size * n >= total


# --- extraction started early -------------------------------------------------------------------
#
# ``correlate PATH...`` spends its first ~0.3 s in this process alone: the interpreter, the command
# line (typer imports pydantic for it), the rules. When the command line names only inputs and
# options that do not change extraction (the CLI checks that with click's parser, before typer's
# coercion), the inputs are discovered and the pool is forked at once, and the workers start on
# the files with the default EngineSpec (built in each worker from the disk caches) while this
# process finishes its start. ``run_local`` takes those tasks over when it is asked for the same
# sources (paths, sizes, modification times) with the same spec; otherwise they are cancelled and
# the work is done as usual. The result is the same digests either way (a test compares them).

_EARLY: tuple[ProcessPoolExecutor, int] | None = None
_SPECULATION: tuple[tuple, EngineSpec, list[tuple[list[int], Future]]] | None = None
#: the inputs ``speculate`` was last asked about
_ASKED: list[str] | None = None


def default_spec() -> EngineSpec:
    """The spec of ``correlate PATH...`` without options: built-in rules, any scanner, local zone."""
    from correlator.extract.timestamps import resolve_tz

    return EngineSpec((), True, None, ExtractOptions(tz=resolve_tz(None)))


def _warm() -> None:
    """A worker of the early pool: warmed (inherited from the parent, or built from the caches)."""
    _ignore_sigint()
    _warm_up()


def _warm_up() -> None:
    tune_malloc()
    try:
        from correlator.extract.extractor import warm_up

        warm_up()
        build_engine(default_spec())
    except Exception:  # noqa: BLE001 - a broken rule file is reported by the parent, not here
        pass


def _sources_key(sources: Sequence[SourceInfo]) -> tuple | None:
    """What must not change between an early start and the run that takes it over: each source
    with its modification time; None when a source is not a regular file (reading a FIFO early
    would consume its bytes)."""
    import stat

    key = []
    for s in sources:
        try:
            st = os.stat(s.path) if s.kind == "file" else None
        except OSError:
            return None
        if st is None or not stat.S_ISREG(st.st_mode):
            return None
        key.append((s, st.st_mtime_ns))
    return tuple(key)


def speculate(inputs: list[str]) -> None:
    """Discover ``inputs`` and, when the job is one for the pool (big enough, nothing to split, no
    stdin), fork the pool and submit every file with ``default_spec()`` (see above)."""
    global _EARLY, _SPECULATION, _ASKED
    if _EARLY is not None or not hasattr(os, "fork") or inputs == _ASKED:
        return
    _ASKED = list(inputs)  # (asked again by the CLI after ``launch`` did: the answer stands)
    from correlator.extract.sources import discover

    try:
        srcs, _diags = discover(list(inputs))
    except Exception:  # noqa: BLE001 - the real run reports it
        return
    n = os.cpu_count() or 1
    total = sum(s.size or 0 for s in srcs if s.kind != "stdin")
    key = _sources_key(srcs)
    if n <= 1 or total < POOL_MIN_BYTES or not srcs or key is None or any(_splittable(s, total, n) for s in srcs):
        return
    spec = default_spec()
    _warm_up()  # once here, inherited by every worker, instead of once per worker competing for the cores
    _workers_ignore_sigint()
    pool = ProcessPoolExecutor(max_workers=n, mp_context=multiprocessing.get_context("fork"), initializer=_warm)
    order = sorted(range(len(srcs)), key=lambda i: -(srcs[i].size or 0))
    futures = [(b, pool.submit(_work_batch, [srcs[i] for i in b], spec)) for b in _batches(order, srcs, n)]
    _EARLY, _SPECULATION = (pool, n), (key, spec, futures)


def drop_early(now: bool = False) -> None:
    """Cancel what was started early and shut its pool down (nothing took it over); ``now`` (the
    run was interrupted) also terminates the workers' tasks under way."""
    global _EARLY, _SPECULATION, _ASKED
    _ASKED = None
    if _SPECULATION is not None:
        for _b, fut in _SPECULATION[2]:
            fut.cancel()
        _SPECULATION = None
    if _EARLY is not None:
        if now:
            stop_pool(_EARLY[0])
        else:
            _EARLY[0].shutdown(wait=False, cancel_futures=True)
        _EARLY = None


def _take_early(sources: Sequence[SourceInfo], spec: EngineSpec, n: int
                ) -> tuple[ProcessPoolExecutor, list[tuple[list[int], Future]]] | None:
    """The early pool and its tasks when they are for exactly these sources and this spec."""
    global _EARLY, _SPECULATION, _ASKED
    _ASKED = None
    if _EARLY is None or _SPECULATION is None:
        drop_early()
        return None
    (pool, size), (key, early_spec, futures) = _EARLY, _SPECULATION
    if size != n or early_spec != spec or key != _sources_key(sources):
        drop_early(now=True)  # (its workers would only compete with the run's for the cores)
        return None
    _EARLY = _SPECULATION = None
    return pool, futures


def run_local(sources: Sequence[SourceInfo], spec: EngineSpec, engine: Engine | None, workers: int | None,
              progress: Callable[[int, int, int, int], None] | None = None, *,
              engine_is_spec: bool = True) -> list[Digest]:
    """Extract every source on a process pool (or in this process when the job is small).

    ``engine`` is this process's engine; ``engine_is_spec`` says it is the one ``spec`` builds
    (not hand-made rules), so that workers of an early pool may build it themselves."""
    global _ENGINE, _OPTS
    tune_malloc()
    n = workers or os.cpu_count() or 1
    total_bytes = sum(s.size or 0 for s in sources if s.kind != "stdin")
    eng = engine or build_engine(spec)
    out: dict[int, Digest] = {}
    done = done_bytes = 0

    def report() -> None:
        if progress:
            progress(done, len(sources), min(done_bytes, total_bytes), total_bytes)

    def tick(i: int | None = None) -> None:
        """Source ``i`` is read (None: its bytes were counted piece by piece)."""
        nonlocal done, done_bytes
        done += 1
        if i is not None and sources[i].kind != "stdin":
            done_bytes += sources[i].size or 0
        report()

    def piece_read(nbytes: int) -> None:
        nonlocal done_bytes
        done_bytes += nbytes
        report()

    files = [i for i, s in enumerate(sources) if s.kind != "stdin"]
    early = _take_early(sources, spec, n) if engine_is_spec else None
    if early is not None:  # started before this process had the engine: take the results over
        pool, started = early
        try:
            with gc_paused():
                for batch, fut in started:
                    for i, d in zip(batch, fut.result()):
                        out[i] = d
                        tick(i)
        except BaseException:
            stop_pool(pool)  # Ctrl-C: the workers stop now, not after their files
            raise
        pool.shutdown()
        return [out[i] for i in range(len(sources))]
    drop_early()
    if n <= 1 or total_bytes < POOL_MIN_BYTES or not files:
        for i, s in enumerate(sources):
            out[i] = _safe_extract(s, eng, spec.opts)
            tick(i)
        return [out[i] for i in range(len(sources))]

    split = [i for i in files if _splittable(sources[i], total_bytes, n)]
    whole = sorted((i for i in files if i not in set(split)), key=lambda i: -(sources[i].size or 0))
    try:
        ctx: BaseContext = multiprocessing.get_context("fork")
        _ENGINE, _OPTS = eng, spec.opts  # inherited by the forked workers
        init_arg: EngineSpec | None = None
    except ValueError:  # no fork on this platform: each worker builds the engine once
        ctx = multiprocessing.get_context("spawn")
        init_arg = spec
    _workers_ignore_sigint()
    pool = ProcessPoolExecutor(max_workers=n, mp_context=ctx, initializer=_init, initargs=(init_arg,))
    try:
        futures = {pool.submit(_work_batch, [sources[i] for i in b]): b for b in _batches(whole, sources, n)}
        for i in split:  # this process extracts, the workers scan
            s = sources[i]
            try:
                bounds = piece_bounds(s.path, s.size or 0)
                pieces = _pieces_in_order(pool, s, bounds, max(2, n * PIECES_AHEAD_PER_WORKER), piece_read)
                out[i] = extract_split(s, eng, spec.opts, pieces)
                tick()
            except Exception:  # noqa: BLE001 - whatever went wrong with the pieces, read it whole
                out[i] = _safe_extract(s, eng, spec.opts)
                tick(i)
        with gc_paused():
            for fut, batch in futures.items():
                for i, d in zip(batch, fut.result()):
                    out[i] = d
                    tick(i)
        for i, s in enumerate(sources):
            if s.kind == "stdin":
                out[i] = _safe_extract(s, eng, spec.opts)
                tick(i)
    except BaseException:
        stop_pool(pool)  # Ctrl-C: the workers stop now, not after their files
        raise
    pool.shutdown()
    return [out[i] for i in range(len(sources))]


# --- dask ------------------------------------------------------------------------------------------

#: how long a connection to a Dask scheduler may take before the run stops and says so (the
#: client's own default waits 30 s in silence for an address nobody listens on)
DASK_CONNECT_S = 5


def _dask_task(src: SourceInfo, spec: EngineSpec) -> bytes:
    """One source on a Dask worker: the worker process keeps its compiled engine between tasks. A
    source the worker cannot open is said as the worker's (its file system is not the client's)."""
    from correlator.extract.digest_io import digest_to_arrow

    tune_malloc()
    digest = _safe_extract(src, build_engine(spec), spec.opts)
    if any(d.code is DiagCode.UNREADABLE for d in digest.diagnostics):
        try:
            from dask.distributed import get_worker

            where = f"Dask worker {get_worker().address}"
        except (ImportError, ValueError):
            where = "a Dask worker"
        digest = replace(digest, diagnostics=tuple(
            replace(d, message=f"{d.message} on {where}: the workers must see the logs at this path (run them on "
                               f"nodes that mount it)") if d.code is DiagCode.UNREADABLE else d
            for d in digest.diagnostics))
    return digest_to_arrow(digest)


def _with_path(digest: Digest, shipped: str, path: str) -> Digest:
    """The digest a worker made of ``shipped`` (the absolute path it was sent) as the source the
    user named (``path``): the report names files as the user did, whichever engine read them."""
    if shipped == path:
        return digest

    def name(p: str | None) -> str | None:
        return path if p == shipped else p

    return replace(
        digest, source=replace(digest.source, path=path),
        matches=tuple(replace(m, path=path) if m.path == shipped else m for m in digest.matches),
        streams=tuple(replace(s, path=path) if s.path == shipped else s for s in digest.streams),
        anchors=tuple(replace(a, path=path) if a.path == shipped else a for a in digest.anchors),
        identities=tuple(replace(f, origin_path=path) if f.origin_path == shipped else f for f in digest.identities),
        diagnostics=tuple(replace(d, path=name(d.path)) if d.path == shipped else d for d in digest.diagnostics))


def run_dask(sources: Sequence[SourceInfo], spec: EngineSpec, scheduler: str | None,
             progress: Callable[[int, int, int, int], None] | None = None,
             n_workers: int | None = None) -> list[Digest]:
    """Extract the sources on Dask workers (a local cluster, or the scheduler at ``scheduler``).

    Paths are made absolute before they are shipped (a worker's working folder is not this
    process's); an address nobody answers on is a ``UsageError`` naming it after ``DASK_CONNECT_S``."""
    from correlator.errors import UsageError
    from correlator.extract.digest_io import digest_from_arrow

    try:
        from dask.distributed import Client, LocalCluster, as_completed
    except ImportError:
        raise UsageError("--engine dask needs the optional extra: pip install 'correlate-ranks[dask]'") from None

    remote = [s for s in sources if s.kind != "stdin"]  # stdin is only readable here
    shipped = [replace(s, path=os.path.abspath(s.path)) for s in remote]
    cluster = None
    if scheduler:
        try:
            client = Client(scheduler, timeout=DASK_CONNECT_S)
        except (OSError, TimeoutError, ValueError) as e:  # refused, unreachable, or not an address
            raise UsageError(f"cannot reach the Dask scheduler at {scheduler} ({type(e).__name__}: {e})",
                             hint="check the address (tcp://host:8786) and that the scheduler runs; "
                                  "without --scheduler a local cluster is started") from None
    else:
        cluster = LocalCluster(n_workers=n_workers or min(os.cpu_count() or 1, 4), threads_per_worker=1,
                               processes=True, dashboard_address=None)
        client = Client(cluster)
    try:
        futures = client.map(_dask_task, shipped, spec=spec, pure=False)
        order = {f.key: i for i, f in enumerate(futures)}
        got: dict[int, Digest] = {}
        total_bytes, done_bytes = sum(s.size or 0 for s in remote), 0
        for k, fut in enumerate(as_completed(futures), start=1):
            i = order[fut.key]
            got[i] = _with_path(digest_from_arrow(fut.result()), shipped[i].path, remote[i].path)
            done_bytes += remote[i].size or 0
            if progress:
                progress(k, len(sources), done_bytes, total_bytes)
    finally:
        client.close()
        if cluster is not None:
            cluster.close()
    by_path = {id(s): d for s, d in zip(remote, (got[i] for i in range(len(remote))))}
    eng: Engine | None = None  # built here only for stdin
    out = []
    for s in sources:
        if s.kind == "stdin":
            eng = eng if eng is not None else build_engine(spec)
            out.append(_safe_extract(s, eng, spec.opts))
        else:
            out.append(by_path[id(s)])
    return out
