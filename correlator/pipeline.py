"""``analyze(inputs, options) -> Report``: the only module that knows the order of the stages.

discover sources -> extract (engine: local pool or Dask) -> resolve identities -> estimate clocks
-> attribute (per torchelastic attempt) -> assemble the report -> mask secrets.
"""

from __future__ import annotations

import time
from bisect import bisect_left
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from correlator import attribution, clocks, identity
from correlator.errors import InputError, UsageError
from correlator.extract import Engine, ExtractOptions
from correlator.model import (
    UNDETERMINED_NOTE, Anchor, Diagnostic, Digest, Match, Report, Role, Rule, Stats, StreamFacts, TimeKind, Verdict,
    iso,
)
from correlator.timestamps import NS, resolve_tz


@dataclass(frozen=True, slots=True)
class Options:
    rule_dirs: tuple[str, ...] = ()
    include_builtin_rules: bool = True
    tz: str | None = None
    engine: str = "local"
    scheduler: str | None = None
    workers: int | None = None
    scanner: str | None = None
    redact: bool = True
    all_files: bool = False
    job_id: str | None = None
    chunk_bytes: int | None = None


def load_engine_rules(opts: Options) -> list[Rule]:
    from correlator.ruleset import load_rules

    return load_rules([Path(d) for d in opts.rule_dirs], include_builtin=opts.include_builtin_rules)


def _seq_anchors(matches: Sequence[Match]) -> list[tuple[str, str, int]]:
    pts = []
    for m in matches:
        seq, ran = m.capture("seq"), m.capture("ran_for_ms")
        if seq and ran and ran.isdecimal() and m.time_ns is not None and m.time_kind is TimeKind.OWN:
            dom = attribution.domain_of(m.who.host, m.who.rank, m.path)
            pts.append((dom, f"seq:{seq}", m.time_ns - int(ran) * 1_000_000))
    return pts


def _anchor_points(anchors: Sequence[Anchor], imap: identity.IdentityMap) -> list[tuple[str, str, int]]:
    pts = []
    domains: dict[tuple, str] = {}  # a writer's anchors share its identity: resolved once
    for a in anchors:
        k = (a.who, a.path)
        dom = domains.get(k)
        if dom is None:
            who, _ = identity.resolve(a.who, a.path, imap)
            dom = domains[k] = attribution.domain_of(who.host, who.rank, a.path)
        pts.append((dom, f"{a.kind}:{a.key}", a.time_ns))
    return pts


def _known_ranks(matches: Sequence[Match], streams: Sequence[StreamFacts], imap: identity.IdentityMap) -> set[int]:
    known = {m.who.rank for m in matches if m.who.rank is not None}
    known |= {s.who.rank for s in streams if s.who.rank is not None}
    known |= set(imap.by_task_local.values()) | set(imap.host_of_rank)
    if imap.world_size and imap.world_size <= 65536:
        known |= set(range(imap.world_size))
    if known and max(known) < 65536:
        known |= set(range(max(known) + 1))  # global ranks are 0..N-1: one that never spoke is still a rank
    return known


#: restart lines of the node agents closer than this are one restart (every node's agent says it)
RESTART_GAP_NS = 120 * NS


def _restart_bounds(matches: Sequence[Match], rules: dict[str, Rule]) -> list[int]:
    """The times the workers were restarted (torchelastic's "will restart worker group"), one per
    restart however many agents said it."""
    ts = sorted(m.time_ns for m in matches if m.time_ns is not None and m.rule_id in rules
                and "restart" in rules[m.rule_id].tags and rules[m.rule_id].role is Role.TEARDOWN)
    out: list[int] = []
    for t in ts:
        if not out or t - out[-1] > RESTART_GAP_NS:
            out.append(t)
        else:
            out[-1] = t  # the last agent's line of one restart ends that attempt
    return out


def _job_id(digests: Sequence[Digest], given: str | None) -> str:
    import hashlib
    import re

    if given:
        return given
    for d in digests:
        m = re.search(r"slurm-(\d+)", d.source.path)
        if m:
            return m.group(1)
    for d in digests:
        for m in d.matches:
            j = m.capture("job_id") or m.capture("jobid")
            if j:
                return j.split(".")[0]
    h = hashlib.sha1("\n".join(sorted(d.source.path for d in digests)).encode()).hexdigest()[:12]
    return f"job-{h}"


def analyze(inputs: Sequence[str], opts: Options | None = None, *,
            progress: Callable[[int, int], None] | None = None,
            rules: Sequence[Rule] | None = None) -> Report:
    """Analyse the logs at ``inputs``; raises ``RuleError``/``InputError``/``UsageError`` only."""
    from correlator import engines, sources
    from correlator.redact import redact_report

    opts = opts or Options()
    started = time.perf_counter()
    if opts.engine not in engines.ENGINES:
        raise UsageError(f"unknown engine {opts.engine!r}: use one of {', '.join(engines.ENGINES)}")
    rule_list = list(rules) if rules is not None else load_engine_rules(opts)
    srcs, diags = sources.discover(list(inputs), all_files=opts.all_files)
    if not srcs:
        problems = "; ".join(f"{d.path}: {d.message}" for d in diags if d.level != "info") or "nothing to read"
        raise InputError(f"no log could be read ({problems})", hint="pass files, folders, globs or - for stdin")
    try:
        tz = resolve_tz(opts.tz)
    except Exception as e:  # zoneinfo raises several types for a bad name
        raise UsageError(f"unknown time zone {opts.tz!r} ({e})", hint="use an IANA name like Europe/Berlin, or UTC") from None
    xopts = ExtractOptions(tz=tz, scanner=opts.scanner,
                           **({"chunk_bytes": opts.chunk_bytes} if opts.chunk_bytes else {}))
    spec = engines.EngineSpec(opts.rule_dirs, opts.include_builtin_rules, opts.scanner, xopts)
    engine = None
    if opts.engine == "dask":
        digests = engines.run_dask(srcs, spec, opts.scheduler)
    else:
        engine = Engine(rule_list, opts.scanner)
        digests = engines.run_local(srcs, spec, engine, opts.workers, progress, engine_is_spec=rules is None)
    report = correlate(digests, rule_list, diags, started=started, job_id=opts.job_id,
                       engine_name=opts.engine, scanner=engine.scanner.name if engine else "")
    return redact_report(report) if opts.redact else report


def correlate(digests: Sequence[Digest], rule_list: Sequence[Rule], diags: Sequence[Diagnostic] = (), *,
              started: float | None = None, job_id: str | None = None, engine_name: str = "local",
              scanner: str = "") -> Report:
    """The global stage over digests only: identities, clocks, attribution, report assembly."""
    started = started if started is not None else time.perf_counter()
    rules = {r.id: r for r in rule_list}
    matches, streams, imap = identity.resolve_digests(digests)
    all_diags = list(diags)
    for d in digests:
        all_diags.extend(d.diagnostics)
    all_diags.extend(Diagnostic("info", None, n) for n in imap.notes)

    anchors = [a for d in digests for a in d.anchors]
    points = _anchor_points(anchors, imap) + _seq_anchors(matches)
    est = clocks.estimate(points)
    domains = {attribution.domain_of(m.who.host, m.who.rank, m.path) for m in matches if m.who.host}
    skew_note = ""
    if len(est) >= 2:
        worst = max(abs(c.offset_ns) for c in est.values())
        resid = max(c.residual_ns for c in est.values())
        skew_note = (f"clocks aligned on {len(est)} hosts from {sum(c.anchors for c in est.values())} anchors; "
                     f"largest offset {worst / NS:.3f} s, residual skew <= {resid / NS:.3f} s")
        unanchored = sorted(domains - set(est))
        if unanchored:
            all_diags.append(Diagnostic("info", None, f"no clock anchors for {', '.join(unanchored[:8])}: "
                                                      f"their clocks are not corrected"))
    elif len(domains) >= 2:
        skew_note = (f"{len(domains)} hosts, but no shared anchors (steps or collectives logged by all) to "
                     f"align their clocks: cross-host order assumes synchronised clocks")

    known = _known_ranks(matches, streams, imap)
    bounds = _restart_bounds(matches, rules)
    if bounds and all(m.attempt is None for m in matches):
        # A torchelastic restart outside a --log-dir layout: the agents' "will restart worker group"
        # lines divide the job into attempts by time -- a line's earliest possible time (an unstamped
        # traceback may have inherited the next stamped line's, the new process's after a restart),
        # and another node's agent stopping its workers just after a restart line is in the attempt
        # that ended.
        def attempt_of(m: Match) -> int:
            t = m.lo_ns if m.lo_ns is not None else m.time_ns
            assert t is not None
            if m.rule_id in rules and "signal-sent" in rules[m.rule_id].tags:
                t -= RESTART_GAP_NS
            return bisect_left(bounds, t)

        matches = [m if m.time_ns is None else replace(m, attempt=attempt_of(m)) for m in matches]
    attempts = sorted({m.attempt for m in matches if m.attempt is not None})
    if bounds and attempts and attempts[-1] < len(bounds) and any(
            max(s.last_step_ns or 0, s.last_ns or 0) > bounds[-1] + RESTART_GAP_NS for s in streams):
        attempts.append(len(bounds))  # the attempt after the last restart ran on, quietly
    facts = [f for d in digests for f in d.identities]
    ranks_of_host: dict[str, set[int]] = {}
    for r, h in imap.host_of_rank.items():
        ranks_of_host.setdefault(h, set()).add(r)
    per_attempt = []
    if len(attempts) > 1:
        for a in reversed(attempts):
            ms = [m for m in matches if m.attempt in (a, None)]
            ss = [s for s in streams if s.attempt in (a, None)]
            o = attribution.attribute(ms, ss, rules, est, known, skew_note=skew_note, single_node=imap.single_node,
                                      inferred=imap.inferred_how, facts=facts, ranks_of_host=ranks_of_host,
                                      until_ns=bounds[a] if bounds and a < len(bounds) else None)
            per_attempt.append((a, o))
        out = per_attempt[0][1]
    else:
        out = attribution.attribute(matches, streams, rules, est, known, skew_note=skew_note,
                                    single_node=imap.single_node, inferred=imap.inferred_how, facts=facts,
                                    ranks_of_host=ranks_of_host)
    attribution.table_root(out, [f for d in digests for f in d.identities], rules)
    if out.root is None:  # what kept the verdict from naming a rank, said where every format shows it
        all_diags.extend(Diagnostic("info", None, f"{UNDETERMINED_NOTE}{w}") for w in out.why)
    groups, chain, items = attribution.groups_and_chain(out)
    tl = attribution.timeline(out)
    rows = attribution.rank_rows(out, streams, known, est)
    times = [t for s in streams for t in (s.first_ns, s.last_ns) if t is not None]
    times += [m.time_ns for m in matches if m.time_ns is not None]
    hosts = sorted({r.host for r in rows if r.host} | {m.who.host for m in matches if m.who.host})
    tables = [f for d in digests for f in d.identities if f.source == "failure-table" and f.is_root_entry]
    job: dict[str, object] = {
        "id": _job_id(digests, job_id),
        "ranks": len(known),
        "hosts": hosts,
        "start": iso(min(times)) if times else None,
        "end": iso(max(times)) if times else None,
        "procs_per_node": imap.procs_per_node,
        "attempts": attempts,
    }
    if tables:
        named = sorted({f.who.rank for f in tables if f.who.rank is not None})
        job["launcher_root_cause_tables"] = [
            {"node": f.who.host, "rank": f.who.rank, "local_rank": f.who.local_rank, "exitcode": f.exitcode,
             "time": iso(f.time_ns)} for f in tables]
        if out.root is not None and out.root.rank is not None and named and out.root.rank not in named:
            note = (f"torchrun's 'Root Cause (first observed failure)' tables name rank(s) "
                    f"{identity.compress_ranks(named)}, not rank {out.root.rank}: each agent picks the earliest "
                    f"whole-second failure of its own node and cannot see the others")
            all_diags.append(Diagnostic("info", None, note))
            out.root = replace(out.root, why=(*out.root.why, note))
    attempt_rows = []
    for a, o in per_attempt:
        attempt_rows.append({"attempt": a, "verdict": o.verdict.value,
                             "rank": o.root.rank if o.root else None, "rule": o.root.rule if o.root else None,
                             "time": o.root.time if o.root else None})
    stats = Stats(
        sources=len(digests), bytes=sum(d.bytes_read for d in digests), lines=sum(d.lines for d in digests),
        seconds=round(time.perf_counter() - started, 3), bytes_skipped=sum(d.bytes_skipped for d in digests),
        lines_capped=sum(d.lines_capped for d in digests),
        sources_unreadable=sum(1 for d in digests if any(x.level == "error" for x in d.diagnostics)),
        matches=len(matches), engine=engine_name, scanner=scanner,
        sources_skipped=len({d.path for d in diags if _reason(d.message) in _NOT_READ}),
        skipped=_skip_accounting(diags, digests))
    return Report(
        verdict=out.verdict, root_cause=out.root, collateral=tuple(items), groups=tuple(groups),
        timeline=tuple(tl), ranks=tuple(rows), clocks=tuple(attribution.clock_rows(est)),
        diagnostics=tuple(_dedupe(all_diags)), stats=stats, chain=tuple(chain), job=job,
        attempts=tuple(attempt_rows))


#: diagnostic message start -> reason in ``Stats.skipped`` (the messages of ``sources`` and ``extract``)
_REASONS: tuple[tuple[str, str], ...] = (
    ("no such file or folder", "missing"), ("broken symbolic link", "missing"), ("cannot read", "unreadable"),
    ("cannot open", "unreadable"), ("not a log", "not-a-log"), ("not a regular file", "not-a-regular-file"),
    ("no file matches", "pattern-matched-nothing"), ("folder matched by a pattern", "folder-by-pattern"),
    ("symlink loop", "symlink-loop"), ("more than", "too-many-files"), ("looks binary", "binary"),
    ("empty: nothing to read", "empty"), ("truncated or corrupt", "truncated"), ("read error", "read-error"),
    ("internal error while reading", "internal-error"), ("out of memory while reading", "out-of-memory"),
)
_NOT_READ = frozenset({"missing", "unreadable", "not-a-log", "not-a-regular-file"})


def _reason(message: str) -> str | None:
    for start, reason in _REASONS:
        if message.startswith(start):
            return reason
    if " NUL byte(s) " in message:
        return "nul-bytes"
    if message.startswith("invalid UTF-8"):
        return "invalid-utf8"
    if " line(s) longer than " in message:
        return "long-lines-cut"
    return None


def _skip_accounting(discovered: Sequence[Diagnostic], digests: Sequence[Digest]) -> dict[str, dict[str, int]]:
    """reason -> {"sources": n, "bytes": b, "lines": l}: what was passed over or altered, and why."""
    import os

    out: dict[str, dict[str, int]] = {}

    def add(reason: str, sources: int = 1, nbytes: int = 0, lines: int = 0) -> None:
        row = out.setdefault(reason, {"sources": 0, "bytes": 0, "lines": 0})
        row["sources"] += sources
        row["bytes"] += nbytes
        row["lines"] += lines

    for d in discovered:
        reason = _reason(d.message)
        if reason is None:
            continue
        size = 0
        if reason in ("not-a-log", "not-a-regular-file") and d.path:
            try:
                size = os.path.getsize(d.path) if reason == "not-a-log" else 0
            except OSError:
                size = 0
        add(reason, nbytes=size)
    for dg in digests:
        for d in dg.diagnostics:
            reason = _reason(d.message)
            if reason is None:
                continue
            if reason == "binary":
                add(reason, nbytes=dg.bytes_skipped)
            elif reason == "nul-bytes":
                n = d.message.split(" ", 1)[0]
                add(reason, nbytes=int(n) if n.isdecimal() else 0)
            elif reason == "long-lines-cut":
                add(reason, lines=dg.lines_capped)
            else:
                add(reason)
    return out


def _dedupe(diags: Sequence[Diagnostic]) -> list[Diagnostic]:
    seen = set()
    out = []
    for d in diags:
        k = (d.level, d.path, d.message)
        if k not in seen:
            seen.add(k)
            out.append(d)
    return out


_ = (replace, Role, Verdict)
