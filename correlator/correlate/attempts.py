"""torchelastic attempts: which matches belong to which run of the worker group.

With ``--log-dir`` the folder names the attempt (``attempt_0/``); otherwise the agents' "will restart
worker group" lines divide the job by time. The verdict is the last attempt's; each attempt's is
reported too.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Sequence
from dataclasses import dataclass, replace

from correlator.model import NS, Match, Role, Rule, StreamFacts
from correlator.model.vocabulary import Tag

#: restart lines of the node agents closer than this are one restart (every node's agent says it)
RESTART_GAP_NS = 120 * NS


def restart_bounds(matches: Sequence[Match], rules: dict[str, Rule]) -> list[int]:
    """The times the workers were restarted (torchelastic's "will restart worker group"), one per
    restart however many agents said it."""
    ts = sorted(m.time_ns for m in matches if m.time_ns is not None and m.rule_id in rules
                and Tag.RESTART in rules[m.rule_id].tags and rules[m.rule_id].role is Role.TEARDOWN)
    out: list[int] = []
    for t in ts:
        if not out or t - out[-1] > RESTART_GAP_NS:
            out.append(t)
        else:
            out[-1] = t  # the last agent's line of one restart ends that attempt
    return out


@dataclass(frozen=True, slots=True)
class Attempts:
    matches: list[Match]
    #: the attempts seen, oldest first (empty: one run, nothing to split)
    numbers: list[int]
    #: the restart times that end each attempt but the last
    bounds: list[int]


def split(matches: Sequence[Match], streams: Sequence[StreamFacts], rules: dict[str, Rule]) -> Attempts:
    """Give every match its attempt (when the layout did not), and list the attempts."""
    bounds = restart_bounds(matches, rules)
    out = list(matches)
    if bounds and all(m.attempt is None for m in out):
        # A torchelastic restart outside a --log-dir layout: the agents' "will restart worker group"
        # lines divide the job into attempts by time -- a line's earliest possible time (an unstamped
        # traceback may have inherited the next stamped line's, the new process's after a restart),
        # and another node's agent stopping its workers just after a restart line is in the attempt
        # that ended.
        def attempt_of(m: Match) -> int:
            t = m.lo_ns if m.lo_ns is not None else m.time_ns
            assert t is not None
            if m.rule_id in rules and Tag.SIGNAL_SENT in rules[m.rule_id].tags:
                t -= RESTART_GAP_NS
            return bisect_left(bounds, t)

        out = [m if m.time_ns is None else replace(m, attempt=attempt_of(m)) for m in out]
    numbers = sorted({m.attempt for m in out if m.attempt is not None})
    if bounds and numbers and numbers[-1] < len(bounds) and any(
            max(s.last_step_ns or 0, s.last_ns or 0) > bounds[-1] + RESTART_GAP_NS for s in streams):
        numbers.append(len(bounds))  # the attempt after the last restart ran on, quietly
    return Attempts(out, numbers, bounds)
