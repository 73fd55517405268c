"""The causal timeline: which rank failed first, which failures are collateral, how sure we are.

A model in steps, each its own module: ``events`` (matches as clock-corrected events),
``lifecycle`` (per-rank lifecycles: terminal or survived), ``causal`` (candidates, explanation,
waves), ``hang`` (each hang signal a pure function returning ``evidence.Clue``s), ``verdict`` (the
chain of steps), ``assemble`` (groups, chain, timeline, rank rows). Every weight and threshold is in
``policy``; the kinds of evidence a verdict rests on are ``evidence.EvidenceKind``. Reads no files and
renders nothing.
"""

from __future__ import annotations

from correlator.attribution.assemble import clock_rows, groups_and_chain, rank_rows, table_root, timeline
from correlator.attribution.events import Ev, domain_of, make_events
from correlator.attribution.evidence import EvidenceKind, describe
from correlator.attribution.verdict import Outcome, attribute

__all__ = ["EvidenceKind", "Ev", "Outcome", "attribute", "clock_rows", "describe", "domain_of", "groups_and_chain",
           "make_events", "rank_rows", "table_root", "timeline"]
