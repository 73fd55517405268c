"""The report's parts from an outcome: groups, the causal chain, the timeline, the rank table.

Owns turning the verdict's labelled events into what the report shows (collateral grouped by rule
and label, the ``root -> cascade -> teardown`` chain, the capped timeline with its causal edges,
one row per rank, the clock table), and the last-resort verdict from torchrun's failure tables
when nothing else names a rank. Decides nothing else.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Sequence

from correlator.correlate.attribution import policy
from correlator.correlate.attribution.events import Ev, fmt_delay
from correlator.correlate.attribution.verdict import Outcome
from correlator.correlate.clocks import ClockEstimate, domain_of
from correlator.model import (
    NS,
    ChainLink,
    ClockRow,
    CollateralItem,
    Evidence,
    FactSource,
    Group,
    Label,
    MatchGroup,
    RankRow,
    RankState,
    Role,
    RootCause,
    Rule,
    StreamFacts,
    TimelineEvent,
    Verdict,
    compress_ranks,
    expand_ranks,
    iso,
)
from correlator.model.evidence import EvidenceKind
from correlator.model.vocabulary import Capture, Tag


def table_root(out: Outcome, facts: Sequence, rules: dict[str, Rule]) -> None:
    """When the logs hold nothing but torchrun's failure tables (a worker exited 1 and its traceback
    was not captured), the earliest table entry across all nodes is the best evidence there is:
    better than torchrun's own per-node pick, and said with low confidence."""
    if out.verdict is not Verdict.UNDETERMINED:
        return
    # when the ranks report collective timeouts, a SIGABRT entry is the NCCL watchdog aborting its
    # process: a consequence like the timeouts, not a failure of its own
    timeouts = any(e.rule.role is Role.COLLATERAL for e in out.events)
    entries = [f for f in facts if f.source == FactSource.FAILURE_TABLE and f.who.rank is not None
               and f.exitcode not in (None, -15, -2, -1) and not (timeouts and f.exitcode == -6)]
    # the rule that says what a failing table entry means (torchrun's "failed (exitcode: 1)")
    rule = next((r for r in rules.values() if Tag.FAILURE_TABLE in r.tags), None)
    if not entries or rule is None:
        return
    entries.sort(key=lambda f: (f.time_ns is None, f.time_ns or 0))
    first = entries[0]
    others = sorted({f.who.rank for f in entries[1:] if f.who.rank != first.who.rank})
    gap = None
    if len(entries) > 1 and first.time_ns is not None and entries[1].time_ns is not None:
        gap = (entries[1].time_ns - first.time_ns) / NS
    why = (f"only torchrun's failure tables tell of the failure: rank {first.who.rank} has the earliest "
           f"entry (exit code {first.exitcode})" + (f", {gap:.0f} s before the next" if gap else ""),
           "its own error output is not in the logs (redirected, or lost): look at the worker's log or its "
           "error_file for the cause")
    conf = policy.CONF_TABLE_APART if gap and gap >= 2 else policy.CONF_TABLE_CLOSE
    lines = [e for e in out.events if e.rank == first.who.rank and e.m.capture(Capture.EXITCODE) is not None]
    evidence = tuple(Evidence(e.m.path, e.m.line, e.m.text) for e in lines[:2]) or (
        Evidence(first.origin_path, 0, f"rank {first.who.rank} exitcode {first.exitcode}"),)
    tie = tuple(r for r in others if gap is not None and gap < 1) if gap is not None else tuple(others[:8])
    out.verdict = Verdict.ROOT_CAUSE
    out.root = RootCause(
        rank=first.who.rank, host=first.who.host, local_rank=first.who.local_rank, rule=rule.id,
        title=rule.title, category=rule.category, severity=str(rule.severity), time=iso(first.time_ns),
        confidence=conf, tie=tie, evidence=evidence,
        mechanism=rule.root_cause, fix=rule.fix, confirm=rule.confirm, references=rule.references, why=why,
        prevention=rule.prevention, decided_by=str(EvidenceKind.FAILURE_TABLE))


def counted_labels(out: Outcome, counted: Sequence[MatchGroup]) -> list[Label]:
    """The label of each counted group (``MatchGroup``: a source's matches of a rule by its writers past
    the first ones): the label most of the same rule's events of that source got, else of that rule's
    events anywhere, else context. The writers a source keeps come first in it, so the counted ones are
    its later lines of the same rule."""
    by_source: dict[tuple[str, str], Counter[Label]] = defaultdict(Counter)
    by_rule: dict[str, Counter[Label]] = defaultdict(Counter)
    for e in out.events:
        if e.label is not Label.ROOT:
            by_source[(e.rule.id, e.m.path)][e.label] += 1
            by_rule[e.rule.id][e.label] += 1
    labels = []
    for g in counted:
        seen = by_source.get((g.rule_id, g.path)) or by_rule.get(g.rule_id)
        labels.append(seen.most_common(1)[0][0] if seen else Label.CONTEXT)
    return labels


def groups_and_chain(out: Outcome, counted: Sequence[MatchGroup] = (), rules: dict[str, Rule] | None = None
                     ) -> tuple[list[Group], list[ChainLink], list[CollateralItem]]:
    """``counted``: the digests' ``MatchGroup``s, counted in the groups of their rule and label
    (``counted_labels``); ``rules`` names their rules."""
    root_t = out.root_ev.t if out.root_ev is not None else None
    by: dict[tuple[str, str], list[Ev]] = defaultdict(list)
    items: list[CollateralItem] = []
    root_rank = out.root_ev.rank if out.root_ev is not None else None
    root_rule = out.root_ev.rule.id if out.root_ev is not None else None
    for e in out.events:
        if e.label is Label.ROOT:
            continue
        if root_rank is not None and e.rank == root_rank and e.rule.id == root_rule:
            continue  # the root failure printed again (a wrapper, the agent's copy): part of the root event
        if root_rank is not None and e.rank == root_rank and e.label in (Label.COLLATERAL, Label.INDEPENDENT):
            # the root rank's own later lines (its abort, its launcher's report of it) are what the root
            # did, not another rank's error: a group of the root, never counted as collateral
            by[(e.rule.id, Label.ROOT.value)].append(e)
            continue
        by[(e.rule.id, e.label.value)].append(e)
        # (the first items only: the groups count every one, and the JSON says how many were left out)
        if e.label in (Label.COLLATERAL, Label.TEARDOWN, Label.INDEPENDENT, Label.JOB) \
                and len(items) < policy.COLLATERAL_ITEMS_CAP:
            items.append(CollateralItem(
                rank=e.rank, host=e.m.who.host, rule=e.rule.id, time=iso(e.t),
                after_root_s=round((e.t - root_t) / NS, 3) if e.t is not None and root_t is not None else None,
                path=e.m.path, line=e.m.line))
    more: dict[tuple[str, str], list[MatchGroup]] = defaultdict(list)
    for mg, lab in zip(counted, counted_labels(out, counted) if counted else ()):
        more[(mg.rule_id, lab.value)].append(mg)
    groups = []
    for rid, label in [*by, *(k for k in more if k not in by)]:
        es, cs = by.get((rid, label), []), more.get((rid, label), [])
        rule = es[0].rule if es else (rules or {}).get(rid)
        if rule is None:
            continue
        ranks = {e.rank for e in es if e.rank is not None}
        for mg in cs:
            ranks.update(expand_ranks(mg.ranks))
        ts = [e.t for e in es if e.t is not None]
        ts += [t for mg in cs for t in (mg.first_ns, mg.last_ns) if t is not None]  # (on their own clocks)
        first = min(ts) if ts else None
        last = max(ts) if ts else None
        groups.append(Group(
            rule=rid, role=str(rule.role), ranks=compress_ranks(sorted(ranks)), count=len(es) + sum(mg.count for mg in cs),
            first=iso(first), last=iso(last), label=label,
            first_after_s=round((first - root_t) / NS, 3) if first is not None and root_t is not None else None,
            last_after_s=round((last - root_t) / NS, 3) if last is not None and root_t is not None else None,
            title=rule.title))
    seq_of: dict[tuple[str, str], set[str]] = defaultdict(set)
    for e in out.events:
        sq = e.m.capture(Capture.SEQ)
        if sq:
            seq_of[(e.rule.id, e.label.value)].add(sq)
    order = {"root": 0, "independent": 1, "collateral": 2, "teardown": 3, "job": 4, "context": 5}
    groups.sort(key=lambda g: (order.get(g.label, 9), g.first or "~", g.rule))
    chain: list[ChainLink] = []
    if out.root is not None:
        r = out.root
        who = f"rank {r.rank}" if r.rank is not None else "the job"
        chain.append(ChainLink("root", r.rule, str(r.rank) if r.rank is not None else "", 1, f"{who} {r.rule}"))
    for stage in ("collateral", "teardown", "job"):
        gs = [g for g in groups if g.label == stage]
        for g in gs[:4]:
            n_ranks = len(_expand(g.ranks))
            subject = f"{n_ranks} rank{'s' if n_ranks != 1 else ''}" if n_ranks else f"{g.count} line{'s' if g.count != 1 else ''}"
            seqs = seq_of.get((g.rule, g.label), set())
            on = f" on SeqNum {next(iter(seqs))}" if len(seqs) == 1 else ""
            chain.append(ChainLink(stage, g.rule, g.ranks, g.count,
                                   f"{subject} {g.rule}{on} ({fmt_delay(g.first_after_s)})"))
    return groups, chain, items


def _expand(text: str) -> list[int]:
    from correlator.model import expand_ranks

    return expand_ranks(text) if text else []


def timeline(out: Outcome) -> list[TimelineEvent]:
    root_t = out.root_ev.t if out.root_ev is not None else None
    evs = out.events
    if len(evs) > policy.TIMELINE_CAP:
        keep = [e for e in evs if e.label in (Label.ROOT, Label.INDEPENDENT, Label.JOB)]
        rest = [e for e in evs if e.label not in (Label.ROOT, Label.INDEPENDENT, Label.JOB)]
        evs = sorted(keep + rest[: policy.TIMELINE_CAP - len(keep)], key=Ev.sort_key)
    root_id = next((i for i, e in enumerate(evs) if out.root_ev is not None and e.m is out.root_ev.m),
                   next((i for i, e in enumerate(evs) if e.label is Label.ROOT), None))
    return [TimelineEvent(
        time=iso(e.t), rank=e.rank, host=e.m.who.host, rule=e.rule.id, role=str(e.rule.role), path=e.m.path,
        line=e.m.line, text=e.m.text, label=e.label.value, time_kind=str(e.m.time_kind),
        after_root_s=round((e.t - root_t) / NS, 3) if e.t is not None and root_t is not None else None,
        local_rank=e.m.who.local_rank, attempt=e.m.attempt, id=i,
        caused_by=root_id if e.label in (Label.COLLATERAL, Label.TEARDOWN) and i != root_id else None)
        for i, e in enumerate(evs)]


def rank_rows(out: Outcome, streams: Sequence[StreamFacts], known: set[int],
              clocks: dict[str, ClockEstimate], counted: Sequence[MatchGroup] = ()) -> list[RankRow]:
    """One row per rank the streams, ``known`` or the events name; a rank only counted in a group
    (``counted``) has no row of its own unless a stream names it, and then the state of its group."""
    info: dict[int, dict] = {r: {"host": None, "local": None, "first": None, "last": None, "lines": 0, "step": None}
                             for r in known}
    for s in streams:
        r = s.who.rank
        if r is None:
            continue
        d = info.setdefault(r, {"host": None, "local": None, "first": None, "last": None, "lines": 0, "step": None})
        d["host"] = d["host"] or s.who.host
        d["local"] = d["local"] if d["local"] is not None else s.who.local_rank
        off = clocks.get(domain_of(s.who.host, r, s.path))
        o = off.offset_ns if off else 0
        if s.first_ns is not None:
            f = s.first_ns - o
            d["first"] = f if d["first"] is None else min(d["first"], f)
        if s.last_ns is not None:
            la = s.last_ns - o
            d["last"] = la if d["last"] is None else max(d["last"], la)
        d["lines"] += s.lines
        if s.last_step is not None:
            d["step"] = max(d["step"] or 0, s.last_step)
    state: dict[int, RankState] = {}
    for e in out.events:
        r = e.rank
        if r is None:
            continue
        if r not in info:  # (not setdefault: a new dict per event of 50,000)
            info[r] = {"host": None, "local": None, "first": None, "last": None, "lines": 0, "step": None}
        d = info[r]
        d["host"] = d["host"] or e.m.who.host
        d["local"] = d["local"] if d["local"] is not None else e.m.who.local_rank
        if e.label is Label.ROOT:
            state[r] = RankState.ROOT
        elif e.label in (Label.COLLATERAL, Label.INDEPENDENT, Label.TEARDOWN) and state.get(r) is not RankState.ROOT:
            state[r] = RankState.COLLATERAL
    if counted:
        with_row = set(info)
        for g, label in zip(counted, counted_labels(out, counted)):
            if label in (Label.COLLATERAL, Label.INDEPENDENT, Label.TEARDOWN):
                for r in with_row.intersection(expand_ranks(g.ranks)):
                    state.setdefault(r, RankState.COLLATERAL)
    if out.root is not None and out.root.rank is not None:
        state[out.root.rank] = RankState.ROOT
    for r in out.silent:
        if state.get(r) not in (RankState.ROOT,):
            state[r] = RankState.SILENT
    rows = []
    for r in sorted(info):
        d = info[r]
        st = state.get(r)
        if st is None:
            st = RankState.HEALTHY if d["lines"] or d["first"] is not None else RankState.UNKNOWN
        rows.append(RankRow(r, d["host"], d["local"], st, iso(d["first"]), iso(d["last"]), d["lines"], d["step"]))
    return rows


def clock_rows(clocks: dict[str, ClockEstimate]) -> list[ClockRow]:
    return [ClockRow(c.domain, round(c.offset_ns / NS, 3), round(c.residual_ns / NS, 3), c.anchors)
            for c in sorted(clocks.values(), key=lambda c: c.domain)]
