"""Matches as events of the timeline: clock-corrected times with their uncertainty, and who.

Owns turning resolved matches into ``Ev`` (time corrected by the host's clock offset, the interval
a line without a stamp of its own can lie in, the residual skew) and the small wordings of a rank
or a delay that every step uses. Decides nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from correlator.correlate.attribution import policy
from correlator.correlate.clocks import ClockEstimate, domain_of
from correlator.model import Label, Match, Rule, TimeKind, expand_ranks
from correlator.model.vocabulary import Capture


@dataclass
class Ev:
    m: Match
    rule: Rule
    t: int | None
    lo: int | None
    hi: int | None
    unc: int | None
    domain: str
    label: Label = Label.CONTEXT
    #: the residual clock skew bound of its host (already part of ``unc``)
    skew: int = 0
    #: where in its source the event began, when that is before its line (``m.offset``): an event
    #: named by a later, more specific line of the same crash is ordered by its first line
    pos: int | None = None

    @property
    def rank(self) -> int | None:
        return self.m.who.rank

    def sort_key(self) -> tuple:
        return (self.t is None, self.t or 0, self.m.path, self.m.offset if self.pos is None else self.pos)

    def retimed(self, other: Ev) -> Ev:
        """This event's rule and line at ``other``'s (earlier) time: one crash named by its most
        specific line and ordered by its first."""
        return Ev(self.m, self.rule, other.t, other.lo, self.hi, max(self.unc or 0, other.unc or 0), self.domain,
                  skew=self.skew)


def make_events(matches: Sequence[Match], rules: dict[str, Rule], clocks: dict[str, ClockEstimate]) -> list[Ev]:
    evs = []
    for m in matches:
        rule = rules.get(m.rule_id)
        if rule is None:
            continue
        dom = domain_of(m.who.host, m.who.rank, m.path)
        est = clocks.get(dom)
        off = est.offset_ns if est else 0
        res = est.residual_ns if est else 0
        t = lo = hi = unc = None
        if m.time_ns is not None:
            t = m.time_ns - off
            lo = (m.lo_ns - off) if m.lo_ns is not None else t
            hi = (m.hi_ns - off) if m.hi_ns is not None else None
            if m.time_kind is TimeKind.OWN:
                unc = (hi - t if hi is not None else 0) + res
            else:
                span = (hi - lo) if hi is not None and lo is not None else policy.INHERIT_UNC_NS
                unc = min(span, policy.INHERIT_UNC_NS) + res
        evs.append(Ev(m, rule, t, lo, hi, unc, dom, skew=res))
    evs.sort(key=Ev.sort_key)
    return evs


def fmt_delay(seconds: float | None) -> str:
    if seconds is None:
        return "?"
    return f"+{seconds:.1f} s" if seconds >= 0 else f"{seconds:.1f} s"


def who_text(ev: Ev) -> str:
    w = ev.m.who
    if w.rank is not None:
        extra = []
        if w.host:
            extra.append(f"node {w.host}")
        if w.local_rank is not None:
            extra.append(f"local rank {w.local_rank}")
        return f"rank {w.rank}" + (f" ({', '.join(extra)})" if extra else "")
    if w.host:
        return f"node {w.host}"
    return ev.m.path


def exit_names(e: Ev) -> set[int]:
    """The tasks a launcher's line for several workers names (srun's ``tasks 1,6-7: Exited with exit
    code 1``), for a line with no rank of its own; empty otherwise."""
    tasks = e.m.capture(Capture.TASKS) if e.rank is None else None
    if not tasks:
        return set()
    try:
        return set(expand_ranks(tasks.strip("[]")))
    except ValueError:
        return set()


def rank_list(text: str | None) -> set[int]:
    """``"0, 1, 2"`` -> {0, 1, 2} (a desync report's or a stall report's rank list)."""
    return {int(x) for x in text.replace(" ", "").split(",") if x.isdecimal()} if text else set()
