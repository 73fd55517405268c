"""The causal timeline: which rank failed first, which failures are collateral, how sure we are.

A model in steps, each its own module: ``events`` (matches as clock-corrected events),
``lifecycle`` (per-rank lifecycles: terminal or survived), ``causal`` (candidates, explanation,
waves), ``hang`` (each hang signal a pure function returning ``Clue``s), ``verdict`` (the chain of
steps), ``assemble`` (groups, chain, timeline, rank rows). Every weight and threshold is in
``policy``; the kinds of evidence a verdict rests on are ``correlator.model.evidence.EvidenceKind``.
Reads no files and renders nothing.
"""

from __future__ import annotations

from correlator.correlate.attribution.assemble import (
           clock_rows,
           groups_and_chain,
           rank_rows,
           table_root,
           timeline,
)
from correlator.correlate.attribution.events import Ev, make_events
from correlator.correlate.attribution.verdict import Outcome, attribute

__all__ = ["Ev", "Outcome", "attribute", "clock_rows", "groups_and_chain", "make_events", "rank_rows", "table_root",
           "timeline"]
