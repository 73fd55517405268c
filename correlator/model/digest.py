"""What extraction hands to the correlation stage: one ``Digest`` per source."""

from __future__ import annotations

from dataclasses import dataclass, fields
from enum import StrEnum
from operator import attrgetter
from typing import TypeVar

_T = TypeVar("_T")


def pickled_by_fields(cls: type[_T]) -> type[_T]:
    """Pickle instances of the frozen slots dataclass ``cls`` as its class and field values, made
    again by ``cls(*values)``. Every digest crosses from a pool worker to the parent by pickle, and
    the ``__getstate__``/``__setstate__`` that ``slots=True`` generates loop in Python per object:
    a 4096-file job's digests cost the parent ~0.35 ms each to load that way, ~0.1 ms this way.
    Apply it above ``@dataclass`` (which makes a new class for slots); every field is an init field,
    and an immutable value (a deep copy is then the instance itself)."""
    names = tuple(f.name for f in fields(cls))  # type: ignore[arg-type]
    assert len(names) > 1 and all(f.init for f in fields(cls))  # type: ignore[arg-type]
    values = attrgetter(*names)

    def __reduce__(self: _T) -> tuple[type[_T], tuple[object, ...]]:
        return type(self), values(self)

    def __deepcopy__(self: _T, memo: dict[int, object]) -> _T:
        return self

    cls.__reduce__ = __reduce__  # type: ignore[assignment,method-assign]
    # frozen, and every field an immutable value (numbers, strings, enums, tuples of them, other
    # such instances): a deep copy is the instance itself (``Extractor.snapshot`` copies an
    # extraction's kept matches on every look of a follower: 1.2 M deepcopy calls for 64 sources)
    cls.__deepcopy__ = __deepcopy__  # type: ignore[attr-defined]
    return cls


#: the writers with a rank whose matches of one rule a source keeps one by one; the matches of the
#: writers after them are counted in ``MatchGroup``s (a combined stream of a job of thousands of ranks)
GROUP_PAST_WRITERS = 4096


class TimeKind(StrEnum):
    #: the line carried its own timestamp
    OWN = "own"
    #: taken from the nearest stamped line of the same rank; ``lo_ns``/``hi_ns`` bound it
    INHERITED = "inherited"
    #: no stamped line of the same stream before it: ordered by position only
    NONE = "none"


@pickled_by_fields
@dataclass(frozen=True, slots=True)
class SourceInfo:
    """One input stream and what its name and place tell about who wrote it."""

    path: str
    #: "file", "gzip", "zstd", "bz2", "xz", "stdin"
    kind: str = "file"
    size: int | None = None
    #: rank from the file name (``rank-17.out``, ``slurm-1234_17.out``), if any
    file_rank: int | None = None
    #: local rank from a torchelastic ``attempt_N/<local_rank>/`` folder
    file_local_rank: int | None = None
    #: node from the path (``node-3/``, a host-named folder), if any
    file_node: str | None = None
    attempt: int | None = None
    #: "stdout", "stderr", "error.json", or ""
    stream: str = ""


@pickled_by_fields
@dataclass(frozen=True, slots=True)
class Who:
    """Identity of the process a line is about, as far as the line and its source say."""

    rank: int | None = None
    local_rank: int | None = None
    #: srun task id (``12: `` prefix): a node's agent when torchrun runs under srun
    task: int | None = None
    host: str | None = None
    pid: int | None = None


@pickled_by_fields
@dataclass(frozen=True, slots=True)
class Match:
    rule_id: str
    path: str
    #: 1-based line number in the (decompressed) source
    line: int
    #: byte offset of the line in the source: orders events of one stream without clocks
    offset: int
    #: the message text (prefixes and ANSI removed, capped)
    text: str
    who: Who
    time_ns: int | None
    lo_ns: int | None
    hi_ns: int | None
    time_kind: TimeKind
    captures: tuple[tuple[str, str], ...] = ()
    context: tuple[str, ...] = ()
    attempt: int | None = None
    #: the zone was not in the stamp and was assumed (``--tz``)
    tz_assumed: bool = False

    def capture(self, name: str) -> str | None:
        for key, value in self.captures:
            if key == name:
                return value
        return None


@pickled_by_fields
@dataclass(frozen=True, slots=True)
class MatchGroup:
    """The matches of one rule, in one source, by the writers past the first ``GROUP_PAST_WRITERS``
    of that rule with a rank: counted instead of kept one ``Match`` per line (a combined stream of
    100,000 ranks' watchdog timeouts would be 100,000 matches). One group per (rule, host, attempt);
    the correlation stage counts them in the report's groups with the label the same rule's kept
    matches of the source got, and attributes nothing to them one by one."""

    rule_id: str
    path: str
    host: str | None
    attempt: int | None
    #: lines, and the ranks that wrote them (``0-3,5`` notation); the group's earliest line is not
    #: counted here: the digest keeps it as a match
    count: int
    ranks: str
    first_offset: int
    last_offset: int
    first_line: int
    last_line: int
    #: the earliest and latest own or inherited time of its lines (uncorrected), if any had one
    first_ns: int | None = None
    last_ns: int | None = None


@pickled_by_fields
@dataclass(frozen=True, slots=True)
class StreamFacts:
    """What one writer (a rank, an agent, a plain stream) in one source did over time."""

    who: Who
    path: str
    lines: int = 0
    first_ns: int | None = None
    last_ns: int | None = None
    #: byte offset of its last line: orders output stops within one source
    last_offset: int = 0
    last_step: int | None = None
    last_step_ns: int | None = None
    attempt: int | None = None
    #: byte offset of the line that gave ``last_step``: a failure of this writer before it, in the
    #: same source, was followed by training progress (its lifecycle went on)
    last_step_offset: int | None = None


@pickled_by_fields
@dataclass(frozen=True, slots=True)
class Anchor:
    """An instant that every rank logs at (nearly) the same true time: aligns host clocks."""

    kind: str  # "step" | "seq"
    key: str
    who: Who
    time_ns: int
    path: str = ""


class FactSource(StrEnum):
    """What kind of statement an identity fact comes from."""

    #: an NCCL communicator's init line (``comm 0x... rank 5 nRanks 16 ... busId 3b000``)
    NCCL_INIT = "nccl-init"
    #: a row of torchrun's ``ChildFailedError`` failure table
    FAILURE_TABLE = "failure-table"
    #: torchelastic's rendezvous result (``global_ranks=[...]``)
    RENDEZVOUS = "rendezvous"
    #: Ray's table of its train workers, or its process-group setup line
    RAY = "ray"


@pickled_by_fields
@dataclass(frozen=True, slots=True)
class IdentityFact:
    """A statement in the logs that ties identities together (rank <-> host/local rank/pid)."""

    who: Who
    #: srun task / node that printed the statement (an agent's table names its own node's ranks)
    origin_task: int | None = None
    origin_path: str = ""
    source: FactSource = FactSource.NCCL_INIT
    #: for failure-table records: time, exit code, and whether it was the table's "Root Cause"
    time_ns: int | None = None
    exitcode: int | None = None
    is_root_entry: bool = False
    #: for NCCL init lines: the communicator's size (a sub-communicator's rank is not the global
    #: one) and the GPU's PCI bus id (which a kernel's Xid line names)
    comm_size: int | None = None
    bus: int | None = None


class DiagCode(StrEnum):
    """What a diagnostic is about. Behaviour keys on the code, never on the message's wording; the
    values of the codes that count as input not read or altered are the keys of ``Stats.skipped``."""

    #: a note for the reader with no other meaning
    NOTE = "note"
    MISSING = "missing"
    UNREADABLE = "unreadable"
    NOT_A_LOG = "not-a-log"
    NOT_A_REGULAR_FILE = "not-a-regular-file"
    PATTERN_MATCHED_NOTHING = "pattern-matched-nothing"
    FOLDER_BY_PATTERN = "folder-by-pattern"
    SYMLINK_LOOP = "symlink-loop"
    TOO_MANY_FILES = "too-many-files"
    BINARY = "binary"
    EMPTY = "empty"
    TRUNCATED = "truncated"
    READ_ERROR = "read-error"
    INTERNAL_ERROR = "internal-error"
    OUT_OF_MEMORY = "out-of-memory"
    #: ``count`` NUL bytes were removed
    NUL_BYTES = "nul-bytes"
    INVALID_UTF8 = "invalid-utf8"
    #: ``count`` lines were longer than the cap and cut for matching
    LONG_LINES_CUT = "long-lines-cut"
    #: a rule's pattern hit the time limit
    RULE_TIMEOUT = "rule-timeout"
    #: ``count`` more matches of one rule were not kept
    MATCHES_NOT_KEPT = "matches-not-kept"
    #: ``count`` matches of one rule, by writers past the first ``GROUP_PAST_WRITERS``, were counted
    #: in ``Digest.groups`` instead of kept one by one
    MATCHES_GROUPED = "matches-grouped"
    #: what was assumed to read the stamps (the year of glog/syslog stamps)
    TIME_ASSUMED = "time-assumed"
    #: stamps without a zone were read in the analysis zone (``--tz``, else this machine's)
    ZONE_ASSUMED = "zone-assumed"
    #: an error file that is not torchelastic's JSON
    ERROR_FILE_AS_TEXT = "error-file-as-text"
    #: how identities were joined or inferred
    IDENTITY = "identity"
    #: hosts whose clocks could not be corrected
    CLOCKS_UNANCHORED = "clocks-unanchored"
    #: torchrun's root-cause tables name other ranks than the verdict
    TABLES_DISAGREE = "tables-disagree"
    #: why the verdict names no rank (one reason a diagnostic)
    VERDICT_REASON = "verdict-reason"
    #: a failure the ranks went on from (caught and survived): why it is not the root
    VERDICT_SURVIVED = "verdict-survived"
    #: the launcher tore the job down, and no failure was found
    VERDICT_TORN_DOWN = "verdict-torn-down"
    #: a followed file was replaced or truncated
    FOLLOW_RESTART = "follow-restart"
    #: a followed file was deleted (what was read from it stays)
    FOLLOW_GONE = "follow-gone"
    #: a follow stopped before the job's end was in the logs: the verdict may still change
    FOLLOW_PROVISIONAL = "follow-provisional"
    #: an entry of a Parquet dataset that is no partition's Parquet file (left out by ``history``)
    STRAY_FILE = "stray-file"
    #: the job id the logs state cannot name a Parquet partition; a stable hash of it stands in
    JOB_ID_REPLACED = "job-id-replaced"
    #: folders below the walk's depth cap were not read
    TOO_DEEP = "too-deep"
    #: a symbolic link that leads out of the folder given was not followed
    LINK_OUTSIDE = "link-outside"
    #: a rule's capture name or tag is one slip away from a word the correlator reads
    RULE_VOCABULARY = "rule-vocabulary"


@pickled_by_fields
@dataclass(frozen=True, slots=True)
class Diagnostic:
    level: str  # "info" | "warning" | "error"
    path: str | None
    message: str
    code: DiagCode = DiagCode.NOTE
    #: the number the code is about (NUL bytes removed, lines cut, matches not kept), else 0
    count: int = 0


@pickled_by_fields
@dataclass(frozen=True, slots=True)
class Digest:
    """Everything the global stage needs from one source; small whatever the source's size."""

    source: SourceInfo
    matches: tuple[Match, ...] = ()
    streams: tuple[StreamFacts, ...] = ()
    anchors: tuple[Anchor, ...] = ()
    identities: tuple[IdentityFact, ...] = ()
    diagnostics: tuple[Diagnostic, ...] = ()
    bytes_read: int = 0
    lines: int = 0
    bytes_skipped: int = 0
    #: lines whose text was cut to the line cap (the rest of the line was still scanned)
    lines_capped: int = 0
    #: what the fast path cost, as counts: the scanner's reports (Hyperscan callbacks; keyword hits
    #: of the fallback), the candidate lines they fell on, and the candidates a rule confirmed
    #: (before the per-writer caps on kept matches)
    scan_reports: int = 0
    candidate_lines: int = 0
    confirmed_matches: int = 0
    #: the matches of writers past the first ``GROUP_PAST_WRITERS`` of a rule, counted per (rule, host)
    groups: tuple[MatchGroup, ...] = ()
