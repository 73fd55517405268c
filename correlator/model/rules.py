"""What a rule file becomes: the rule, its match spec, its examples and its encyclopedia entry."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum


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


def rules_version(rules: Sequence[Rule]) -> str:
    """``"287 rules, 6a9050f494c1"``: how many rules a verdict rests on and a digest of what in them
    decides a verdict or is shown with it (patterns, roles, priorities, tags, what they explain,
    titles and fixes; not the examples or the encyclopedia prose), so two reports name the same
    rules only when they are."""
    import hashlib

    h = hashlib.sha256()
    for r in sorted(rules, key=lambda r: r.id):
        key = (r.id, r.title, r.category, r.severity, r.role, r.priority, r.match, r.tags, r.explains, r.window_s,
               r.domain, r.restart, r.when, r.info_level, r.fix)
        h.update(repr(key).encode("utf-8", "backslashreplace"))
    return f"{len(rules)} rules, {h.hexdigest()[:12]}"
