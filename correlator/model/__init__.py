"""Frozen value types passed between the stages, and the enums whose values come from rule files.

The package owns the shapes of data and computes nothing beyond trivial derived properties; it
imports nothing from the rest of ``correlator``. ``rules`` is what a rule file becomes, ``digest``
what extraction hands on, ``report`` the verdict and everything rendered from it, ``evidence`` the
kinds of evidence a verdict rests on (one wording for every renderer), ``ranks`` the rank-set
notation. Everything is re-exported here: ``from correlator.model import Match`` (what ``report`` defines on
first use).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from correlator.model.digest import (
    GROUP_PAST_WRITERS,
    Anchor,
    DiagCode,
    Diagnostic,
    Digest,
    FactSource,
    IdentityFact,
    Match,
    MatchGroup,
    SourceInfo,
    StreamFacts,
    TimeKind,
    Who,
)
from correlator.model.ranks import compress_ranks, expand_ranks

if TYPE_CHECKING:
    from correlator.model.report import (
        SURVIVED_NOTE_END,
        UNDETERMINED_NOTE,
        AttemptVerdict,
        ChainLink,
        ClockRow,
        CollateralItem,
        Evidence,
        ExitCode,
        Group,
        JobFacts,
        Label,
        LauncherTableRow,
        RankRow,
        RankState,
        Report,
        RootCause,
        Stats,
        SurvivedNote,
        TimelineEvent,
        TornDownNote,
        UnreadSource,
        Verdict,
        field_names,
        iso,
        omitted_when_empty,
    )
from correlator.model.rules import (
    Domain,
    Example,
    MatchSpec,
    Phase,
    Related,
    Restart,
    Role,
    Rule,
    Scope,
    Severity,
    VersionNote,
    When,
    rules_version,
)

#: what ``report`` defines, imported on first use (PEP 562): its ~30 dataclasses cost ~20-30 ms to
#: create, which a pool's worker, forked before (``launch``), never needs
_FROM_REPORT = frozenset((
    "SURVIVED_NOTE_END",
    "UNDETERMINED_NOTE",
    "AttemptVerdict",
    "ChainLink",
    "ClockRow",
    "CollateralItem",
    "Evidence",
    "ExitCode",
    "Group",
    "JobFacts",
    "Label",
    "LauncherTableRow",
    "RankRow",
    "RankState",
    "Report",
    "RootCause",
    "Stats",
    "SurvivedNote",
    "TimelineEvent",
    "TornDownNote",
    "UnreadSource",
    "Verdict",
    "field_names",
    "iso",
    "omitted_when_empty",
))


def __getattr__(name: str) -> object:
    if name in _FROM_REPORT:
        from correlator.model import report

        value = getattr(report, name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


#: nanoseconds per second: every time in the model is an int of UTC nanoseconds
NS = 1_000_000_000

__all__ = [
    "NS", "Anchor", "AttemptVerdict", "DiagCode", "FactSource", "ChainLink", "ClockRow", "CollateralItem", "Diagnostic", "Digest", "Domain", "Evidence",
    "Example", "ExitCode", "Group", "IdentityFact", "JobFacts", "Label", "LauncherTableRow", "GROUP_PAST_WRITERS", "Match", "MatchGroup", "MatchSpec", "Phase", "RankRow", "RankState",
    "Related", "Report", "Restart", "Role", "RootCause", "Rule", "Scope", "Severity", "SourceInfo", "Stats",
    "StreamFacts", "SURVIVED_NOTE_END", "SurvivedNote", "TornDownNote", "TimeKind", "TimelineEvent", "UNDETERMINED_NOTE", "UnreadSource", "Verdict", "VersionNote",
    "When", "Who", "compress_ranks", "expand_ranks", "field_names", "iso", "omitted_when_empty", "rules_version",
]
