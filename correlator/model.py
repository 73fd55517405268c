"""Frozen value types passed between the stages, and the enums whose values come from rule files.

This module owns the shapes of data (rules, matches, digests, the report); it computes nothing
beyond trivial derived properties and imports nothing from the rest of the package.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timezone
from enum import IntEnum, StrEnum


class Role(StrEnum):
    """What a rule's match can mean in a timeline."""

    #: can be the root cause: it starts a cascade (CUDA OOM, EIO on save, segfault, ECC)
    PRIMARY = "primary"
    #: typically a consequence of another rank's failure (NCCL watchdog timeout, peer closed)
    COLLATERAL = "collateral"
    #: the launcher or scheduler reacting (SIGTERM fan-out, ChildFailedError, step cancelled)
    TEARDOWN = "teardown"
    #: a job-level end with no failing rank (time limit, cancelled by user, preemption)
    JOB = "job"
    #: never decides; enriches (checkpoint save started, library versions)
    CONTEXT = "context"


class Severity(StrEnum):
    INFO = "info"
    LOW = "low"
    MEDIUM = "medium"
    HIGH = "high"
    CRITICAL = "critical"


class Scope(StrEnum):
    #: all patterns are matched against the one line
    LINE = "line"
    #: ``all``/``not`` patterns are matched against the rank's preceding context lines too
    EVENT = "event"


class Verdict(StrEnum):
    #: a rank's failure started the cascade
    ROOT_CAUSE = "root_cause"
    #: the job ended for a job-level reason (time limit, cancel, preemption) with no earlier failure
    JOB_LEVEL = "job_level"
    #: nothing failed
    NO_FAILURE = "no_failure"
    #: failures were seen but no rank can be named
    UNDETERMINED = "undetermined"


class RankState(StrEnum):
    ROOT = "root"
    COLLATERAL = "collateral"
    #: logged nothing about the failure, and its output stopped early (a hang suspect)
    SILENT = "silent"
    HEALTHY = "healthy"
    UNKNOWN = "unknown"


class Label(StrEnum):
    """The part an event plays in the causal chain."""

    ROOT = "root"
    COLLATERAL = "collateral"
    TEARDOWN = "teardown"
    JOB = "job"
    CONTEXT = "context"
    #: a second primary failure that the root does not explain
    INDEPENDENT = "independent"


class TimeKind(StrEnum):
    #: the line carried its own timestamp
    OWN = "own"
    #: taken from the nearest stamped line of the same rank; ``lo_ns``/``hi_ns`` bound it
    INHERITED = "inherited"
    #: no stamped line of the same stream before it: ordered by position only
    NONE = "none"


class ExitCode(IntEnum):
    #: analysis ran; the verdict is in the report (whatever it is)
    OK = 0
    #: the analysis ran and found a root cause or job-level end, and --fail-on-failure was given
    FAILURE_FOUND = 1
    #: bad usage or a broken rule file: nothing was analysed
    USAGE = 2
    #: no input could be read at all
    NO_INPUT = 3
    #: an internal error (a bug): please report it
    INTERNAL = 70


# --- rules -------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class MatchSpec:
    any: tuple[str, ...]
    all: tuple[str, ...] = ()
    not_: tuple[str, ...] = ()
    prefilter: tuple[str, ...] = ()
    scope: Scope = Scope.LINE
    context_lines: int = 40
    #: for event scope: lines of the same rank after the matching line that belong to the event
    context_after: int = 0
    #: for event scope: literals one of which must occur in the bytes before the line (within
    #: CONTEXT_REQUIRES_BYTES) for the rule to be tried at all: spares building the context of a
    #: line whose rule cannot match (a rule on every traceback's last line)
    context_requires: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Example:
    expect: str  # "match" | "no-match"
    log: str
    captures: tuple[tuple[str, str], ...] = ()
    note: str = ""


@dataclass(frozen=True, slots=True)
class Related:
    id: str
    kind: str = "see-also"


class Domain(StrEnum):
    """Where a failure lives, which decides who acts on it."""

    HARDWARE = "hardware"
    SOFTWARE = "software"
    INFRASTRUCTURE = "infrastructure"
    USER_CODE = "user-code"


class Restart(StrEnum):
    """What a resubmission of the same job can expect."""

    #: transient: the same job, resubmitted as it is, will likely run
    RETRY = "retry"
    #: the node is at fault: resubmit with it excluded (``--exclude``), and drain it
    EXCLUDE_NODE = "exclude-node"
    #: the job fails again the same way until the code or its configuration changes
    FIX_CODE = "fix-code"
    #: the environment (packages, drivers, paths, quotas, disk space) must change first
    FIX_ENVIRONMENT = "fix-environment"
    #: collateral or teardown: the outlook is the root cause's
    FOLLOW_ROOT = "follow-root"
    #: context: nothing to act on
    NONE = "none"


class Phase(StrEnum):
    STARTUP = "startup"
    INIT = "init"
    TRAINING = "training"
    CHECKPOINT = "checkpoint"
    EVALUATION = "evaluation"
    SHUTDOWN = "shutdown"
    ANY = "any"


@dataclass(frozen=True, slots=True)
class When:
    phase: Phase
    #: what sets it off, in a few words
    trigger: str


@dataclass(frozen=True, slots=True)
class VersionNote:
    """Which versions of which software print which wording, and where that text comes from."""

    software: str
    #: a version range as the project writes it (``>= 2.23``, ``2.18-2.22``, ``all``)
    range: str
    wording: str
    #: a pinned reference (a commit or release) to the source that prints it, or a thread quoting it
    source: str


@dataclass(frozen=True, slots=True)
class Rule:
    id: str
    title: str
    category: str
    severity: Severity
    role: Role
    root_cause: str
    fix: str
    match: MatchSpec
    priority: int = 50
    confirm: tuple[str, ...] = ()
    prevention: str = ""
    affects: tuple[str, ...] = ()
    references: tuple[str, ...] = ()
    tags: tuple[str, ...] = ()
    related: tuple[Related, ...] = ()
    explains: tuple[str, ...] = ()
    window_s: float = 3600.0
    examples: tuple[Example, ...] = ()
    path: str = ""
    #: what this failure is mistaken for, and how to tell them apart
    looks_like: tuple[str, ...] = ()
    domain: Domain | None = None
    restart: Restart | None = None
    #: one command or test that confirms it fastest
    cheapest_check: str = ""
    when: When | None = None
    #: the metric or alert that shows it coming or happening
    fingerprint: str = ""
    versions: tuple[VersionNote, ...] = ()
    #: why a line at INFO level is this failure (only then may a primary or collateral rule match one)
    info_level: str = ""


# --- extraction --------------------------------------------------------------------------------


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


@dataclass(frozen=True, slots=True)
class Who:
    """Identity of the process a line is about, as far as the line and its source say."""

    rank: int | None = None
    local_rank: int | None = None
    #: srun task id (``12: `` prefix): a node's agent when torchrun runs under srun
    task: int | None = None
    host: str | None = None
    pid: int | None = None


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


@dataclass(frozen=True, slots=True)
class Anchor:
    """An instant that every rank logs at (nearly) the same true time: aligns host clocks."""

    kind: str  # "step" | "seq"
    key: str
    who: Who
    time_ns: int
    path: str = ""


@dataclass(frozen=True, slots=True)
class IdentityFact:
    """A statement in the logs that ties identities together (rank <-> host/local rank/pid)."""

    who: Who
    #: srun task / node that printed the statement (an agent's table names its own node's ranks)
    origin_task: int | None = None
    origin_path: str = ""
    source: str = ""  # "nccl-init:<nranks>", "failure-table", "rendezvous", ...
    #: for failure-table records: time, exit code, and whether it was the table's "Root Cause"
    time_ns: int | None = None
    exitcode: int | None = None
    is_root_entry: bool = False


@dataclass(frozen=True, slots=True)
class Diagnostic:
    level: str  # "info" | "warning" | "error"
    path: str | None
    message: str


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


# --- report ------------------------------------------------------------------------------------


def iso(time_ns: int | None) -> str | None:
    """UTC ISO-8601 with milliseconds and a ``Z``: the one time format of every output."""
    if time_ns is None:
        return None
    dt = datetime.fromtimestamp(time_ns // 1_000_000_000, tz=timezone.utc)
    return dt.strftime("%Y-%m-%dT%H:%M:%S") + f".{(time_ns // 1_000_000) % 1000:03d}Z"


@dataclass(frozen=True, slots=True)
class Evidence:
    path: str
    line: int
    text: str


@dataclass(frozen=True, slots=True)
class RootCause:
    rank: int | None
    host: str | None
    local_rank: int | None
    rule: str
    title: str
    category: str
    severity: str
    time: str | None
    confidence: float
    tie: tuple[int, ...]
    evidence: tuple[Evidence, ...]
    mechanism: str
    fix: str
    confirm: tuple[str, ...]
    references: tuple[str, ...]
    why: tuple[str, ...]
    prevention: str = ""
    #: which evidence decided: "primary", "signal-exit", "dump-pointer", "desync-report",
    #: "missing-from-collective", "nccl-work-counters", "progress-stopped", "output-stopped",
    #: "failure-table"
    decided_by: str = "primary"
    attempt: int | None = None
    #: the root line's surroundings in its own stream: lines before, ``>> <the line>``, lines after
    context: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class CollateralItem:
    rank: int | None
    host: str | None
    rule: str
    time: str | None
    after_root_s: float | None
    path: str
    line: int


@dataclass(frozen=True, slots=True)
class Group:
    rule: str
    role: str
    ranks: str
    count: int
    first: str | None
    last: str | None
    label: str = ""
    #: delay of the group's first and last event after the root, seconds
    first_after_s: float | None = None
    last_after_s: float | None = None
    title: str = ""


@dataclass(frozen=True, slots=True)
class TimelineEvent:
    #: clock-corrected UTC time (ISO-8601); ``time_kind`` says whether the line carried it
    time: str | None
    rank: int | None
    host: str | None
    rule: str
    role: str
    path: str
    line: int
    text: str
    label: str = ""
    time_kind: str = "own"
    #: corrected time minus the root's, seconds
    after_root_s: float | None = None
    local_rank: int | None = None
    attempt: int | None = None
    #: position of this event in ``timeline``
    id: int = 0
    #: ``id`` of the event it follows from (collateral and teardown -> the root): the causal edges
    caused_by: int | None = None


@dataclass(frozen=True, slots=True)
class ChainLink:
    """One step of the causal chain: ``root -> cascade -> teardown``."""

    stage: str  # "root" | "collateral" | "teardown" | "job"
    rule: str
    ranks: str
    count: int
    summary: str


@dataclass(frozen=True, slots=True)
class RankRow:
    rank: int
    host: str | None
    local_rank: int | None
    state: RankState
    first_time: str | None
    last_time: str | None
    lines: int
    last_step: int | None = None


@dataclass(frozen=True, slots=True)
class ClockRow:
    host: str
    offset_s: float
    residual_s: float
    anchors: int


@dataclass(frozen=True, slots=True)
class Stats:
    sources: int
    bytes: int
    lines: int
    seconds: float
    bytes_skipped: int = 0
    lines_capped: int = 0
    sources_unreadable: int = 0
    matches: int = 0
    engine: str = "local"
    scanner: str = ""
    #: inputs passed over without being read (missing, not a log, not a regular file, unreadable)
    sources_skipped: int = 0
    #: why inputs, bytes or lines were passed over or altered, by reason (``binary``, ``empty``,
    #: ``truncated``, ``not-a-log``, ``nul-bytes``, ...): ``{"sources": n, "bytes": b, "lines": l}``
    skipped: dict[str, dict[str, int]] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Report:
    verdict: Verdict
    root_cause: RootCause | None
    collateral: tuple[CollateralItem, ...]
    groups: tuple[Group, ...]
    timeline: tuple[TimelineEvent, ...]
    ranks: tuple[RankRow, ...]
    clocks: tuple[ClockRow, ...]
    diagnostics: tuple[Diagnostic, ...]
    stats: Stats
    chain: tuple[ChainLink, ...] = ()
    #: job facts: ``id`` (str), ``ranks`` (int), ``hosts`` (list[str]), ``start``/``end`` (ISO-8601 of
    #: the first/last stamp seen), ``procs_per_node`` (int|None), ``attempts`` (list[int]), and when
    #: torchrun printed failure tables ``launcher_root_cause_tables`` (list of {node, rank, local_rank,
    #: exitcode, time}: each node agent's "Root Cause (first observed failure)")
    job: dict[str, object] = field(default_factory=dict)
    #: one verdict per torchelastic attempt when there were restarts (last attempt first), each
    #: {attempt: int, verdict: str, rank: int|None, rule: str|None, time: str|None}
    attempts: tuple[dict[str, object], ...] = ()
    schema: str = "correlate.report/1"


#: the start of a report diagnostic that says why no root cause was named (the renderers show them
#: with the "undetermined" verdict)
UNDETERMINED_NOTE = "no root cause named: "
#: how such a note about a failure its rank went on from ends (the renderers list them under a
#: no-failure verdict too)
SURVIVED_NOTE_END = "(the failure was caught and survived)"


def field_names(cls: type) -> tuple[str, ...]:
    """A dataclass's field names, computed once per class (the report walkers visit ~200,000
    values for a 4096-rank job)."""
    names = _FIELD_NAMES.get(cls)
    if names is None:
        import dataclasses

        names = _FIELD_NAMES[cls] = tuple(f.name for f in dataclasses.fields(cls))
    return names


_FIELD_NAMES: dict[type, tuple[str, ...]] = {}
