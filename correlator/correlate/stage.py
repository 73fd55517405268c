"""The global stage over digests only: identities, clocks, attempts, attribution, the report.

``correlate(digests, rules, diagnostics) -> Report`` is a short sequence of calls into the modules
of this package; the job's facts (id, ranks, hosts, span, the launcher's own root-cause tables) and
each attempt's verdict are assembled here.
"""

from __future__ import annotations

import hashlib
import os
import re
import time
from collections.abc import Sequence
from dataclasses import replace

from correlator import __version__
from correlator.correlate import accounting, attempts, attribution, clocks, identity
from correlator.memory import gc_paused
from correlator.model import (
    UNDETERMINED_NOTE,
    AttemptVerdict,
    DiagCode,
    Diagnostic,
    Digest,
    FactSource,
    IdentityFact,
    JobFacts,
    LauncherTableRow,
    Report,
    Rule,
    Stats,
    SurvivedNote,
    TornDownNote,
    compress_ranks,
    expand_ranks,
    iso,
    rules_version,
)
from correlator.model.vocabulary import Capture, Tag


def correlate(digests: Sequence[Digest], rule_list: Sequence[Rule], diags: Sequence[Diagnostic] = (), *,
              started: float | None = None, job_id: str | None = None, engine_name: str = "local",
              scanner: str = "", zone: str = "UTC") -> Report:
    """Name the root cause of the job whose sources these digests are (``zone``: the name of the
    zone stamps without one were read in)."""
    with gc_paused():
        return _correlate(digests, rule_list, diags, started=started, job_id=job_id, engine_name=engine_name,
                          scanner=scanner, zone=zone)


def _correlate(digests: Sequence[Digest], rule_list: Sequence[Rule], diags: Sequence[Diagnostic], *,
               started: float | None, job_id: str | None, engine_name: str, scanner: str, zone: str) -> Report:
    started = started if started is not None else time.perf_counter()
    rules = {r.id: r for r in rule_list}
    matches, streams, imap = identity.resolve_digests(digests, {r.id for r in rule_list if Tag.LAUNCHER in r.tags})
    all_diags = list(diags)
    for d in digests:
        all_diags.extend(d.diagnostics)
    all_diags.extend(Diagnostic("info", None, n, DiagCode.IDENTITY) for n in imap.notes)

    alignment = clocks.align([a for d in digests for a in d.anchors], matches, imap)
    all_diags.extend(alignment.diagnostics)
    est = alignment.estimates
    known = identity.known_ranks(matches, streams, imap)
    # the matches of a combined stream's writers past its first ones of a rule are only counted: their
    # ranks are in the job but in no event, so the verdict is over the others (a rank counted there
    # reported what the kept ones did, and is neither missing from it nor silent)
    counted = [g for d in digests for g in d.groups]
    counted_ranks = {r for g in counted for r in expand_ranks(g.ranks)}
    job_ranks = len(known | counted_ranks)
    known -= counted_ranks
    split = attempts.split(matches, streams, rules)
    matches, bounds = split.matches, split.bounds
    facts = [f for d in digests for f in d.identities]
    ranks_of_host: dict[str, set[int]] = {}
    for r, h in imap.host_of_rank.items():
        ranks_of_host.setdefault(h, set()).add(r)
    per_attempt = []
    if len(split.numbers) > 1:
        for a in reversed(split.numbers):
            ms = [m for m in matches if m.attempt in (a, None)]
            ss = [s for s in streams if s.attempt in (a, None)]
            o = attribution.attribute(ms, ss, rules, est, known, skew_note=alignment.note,
                                      single_node=imap.single_node, inferred=imap.inferred_how, facts=facts,
                                      ranks_of_host=ranks_of_host,
                                      until_ns=bounds[a] if bounds and a < len(bounds) else None)
            per_attempt.append((a, o))
        out = per_attempt[0][1]
    else:
        out = attribution.attribute(matches, streams, rules, est, known, skew_note=alignment.note,
                                    single_node=imap.single_node, inferred=imap.inferred_how, facts=facts,
                                    ranks_of_host=ranks_of_host)
    attribution.table_root(out, facts, rules)
    if out.root is None:  # what kept the verdict from naming a rank, said where every format shows it
        all_diags.extend(Diagnostic("info", None, f"{UNDETERMINED_NOTE}{w}", _verdict_code(w)) for w in out.why)
    if len(split.numbers) > 1:  # the verdict's attempt (an attempt by folder; by time they are all its)
        counted = [g for g in counted if g.attempt in (split.numbers[-1], None)]
    groups, chain, items = attribution.groups_and_chain(out, counted, rules)
    tl = attribution.timeline(out)
    rows = attribution.rank_rows(out, streams, known, est, counted)
    times = [t for s in streams for t in (s.first_ns, s.last_ns) if t is not None]
    times += [m.time_ns for m in matches if m.time_ns is not None]
    times += [t for g in counted for t in (g.first_ns, g.last_ns) if t is not None]
    hosts = sorted({r.host for r in rows if r.host} | {m.who.host for m in matches if m.who.host}
                   | {g.host for g in counted if g.host}
                   | {h for r in counted_ranks for h in [imap.host_of_rank.get(r)] if h})
    the_id, id_note = job_id_of(digests, job_id)
    if id_note is not None:
        all_diags.append(id_note)
    tables = [f for f in facts if f.source is FactSource.FAILURE_TABLE and f.is_root_entry]
    job = JobFacts(
        id=the_id, ranks=job_ranks, hosts=tuple(hosts), start=iso(min(times)) if times else None,
        end=iso(max(times)) if times else None, procs_per_node=imap.procs_per_node, attempts=tuple(split.numbers),
        launcher_root_cause_tables=tuple(LauncherTableRow(f.who.host, f.who.rank, f.who.local_rank, f.exitcode,
                                                          iso(f.time_ns)) for f in tables),
        time_zone=zone, time_zone_used=any(x.code is DiagCode.ZONE_ASSUMED for d in digests for x in d.diagnostics))
    if tables:
        note = _tables_disagree(tables, out.root.rank if out.root is not None else None)
        if note and out.root is not None:
            all_diags.append(Diagnostic("info", None, note, DiagCode.TABLES_DISAGREE))
            out.root = replace(out.root, why=(*out.root.why, note))
    attempt_rows = [AttemptVerdict(a, o.verdict, o.root.rank, o.root.rule, o.root.time) if o.root is not None
                    else AttemptVerdict(a, o.verdict) for a, o in per_attempt]
    unread = accounting.unread_sources(diags, digests)
    read_paths = {d.source.path for d in digests}
    stats = Stats(
        sources=len(digests), bytes=sum(d.bytes_read for d in digests), lines=sum(d.lines for d in digests),
        seconds=round(time.perf_counter() - started, 3), bytes_skipped=sum(d.bytes_skipped for d in digests),
        lines_capped=sum(d.lines_capped for d in digests),
        sources_unreadable=sum(1 for d in digests if any(x.level == "error" for x in d.diagnostics)),
        matches=len(matches), engine=engine_name, scanner=scanner,
        sources_skipped=accounting.sources_not_read(diags),
        skipped=accounting.skip_accounting(diags, digests),
        scan_reports=sum(d.scan_reports for d in digests), candidate_lines=sum(d.candidate_lines for d in digests),
        confirmed_matches=sum(d.confirmed_matches for d in digests),
        unread=unread, sources_total=len(digests) + sum(1 for u in unread if u.path not in read_paths),
        analyzed_at=iso(time.time_ns()), tool_version=__version__, rules_version=rules_version(rule_list))
    return Report(
        verdict=out.verdict, root_cause=out.root, collateral=tuple(items), groups=tuple(groups),
        timeline=tuple(tl), ranks=tuple(rows), clocks=tuple(attribution.clock_rows(est)),
        diagnostics=tuple(accounting.dedupe(all_diags)), stats=stats, chain=tuple(chain), job=job,
        attempts=tuple(attempt_rows))


def _verdict_code(why: str) -> DiagCode:
    if isinstance(why, SurvivedNote):
        return DiagCode.VERDICT_SURVIVED
    if isinstance(why, TornDownNote):
        return DiagCode.VERDICT_TORN_DOWN
    return DiagCode.VERDICT_REASON


def _tables_disagree(tables: Sequence[IdentityFact], root_rank: int | None) -> str:
    """A note when torchrun's own root-cause tables name other ranks than the verdict ("" if not)."""
    named = sorted({f.who.rank for f in tables if f.who.rank is not None})
    if root_rank is None or not named or root_rank in named:
        return ""
    return (f"torchrun's 'Root Cause (first observed failure)' tables name rank(s) "
            f"{compress_ranks(named)}, not rank {root_rank}: each agent picks the earliest "
            f"whole-second failure of its own node and cannot see the others")


#: a job id read from a file name or a log line is used as it is only in this shape: it names the
#: job's Parquet partition (a folder), so it must be a short plain file name (not ``.`` or ``..``)
PLAIN_JOB_ID = re.compile(r"[A-Za-z0-9_.-]{1,64}")


def _stand_in(text: str) -> str:
    """A stable name for an id that cannot be used: the same text always gives the same name."""
    return f"job-{hashlib.sha1(text.encode('utf-8', 'surrogatepass')).hexdigest()[:12]}"


_SLURM_NAME = re.compile(r"slurm-(\d+)(?:_(\d+))?\.(?:out|err|log)", re.I)


def _slurm_name_ids(digests: Sequence[Digest]) -> list[str]:
    """Job ids from SLURM output file names, in the order of the sources. ``slurm-%A_%a.out`` (the
    default name of an array task: array job 88123, task 5) is the job ``88123_5`` -- each task of
    an array is a job of its own; several ``slurm-1234_<n>.out`` of one job read together are that
    job's per-task files (``--output=slurm-%j_%t.out``): the job ``1234``."""
    named = [(m.group(1), m.group(2)) for d in digests
             for m in [_SLURM_NAME.search(os.path.basename(d.source.path))] if m]
    tasks: dict[str, set[str]] = {}
    for job, task in named:
        if task is not None:
            tasks.setdefault(job, set()).add(task)
    return [f"{job}_{task}" if task is not None and len(tasks[job]) == 1 else job for job, task in named]


def job_id_of(digests: Sequence[Digest], given: str | None) -> tuple[str, Diagnostic | None]:
    """The job's id, and a diagnostic when the one the inputs state could not be used.

    Given (``--job-id``: the user's choice, used as it is), else from a SLURM output file's name
    (an array task's ``slurm-88123_5.out``: ``88123_5``),
    else from a line (``JOB 1234.0 ON ...``: the job of the step, ``1234+1``: of the component),
    else a hash of the paths. An id from a name or a line that is not ``PLAIN_JOB_ID`` (``JOB .5
    ON``, an id of thousands of characters) is not used: a later plain one is, else a stable hash
    of the first, and the diagnostic says so."""
    if given:
        return given, None
    rejected: str | None = None
    candidates = _slurm_name_ids(digests)
    candidates += [j for d in digests for m in d.matches for j in [m.capture(Capture.JOB_ID) or m.capture(Capture.JOBID)] if j]
    for raw in candidates:
        text = re.split(r"[.+]", raw, maxsplit=1)[0]
        if PLAIN_JOB_ID.fullmatch(text) and text not in (".", ".."):
            return text, None
        rejected = rejected if rejected is not None else raw
    if rejected is not None:
        name = _stand_in(rejected)
        shown = rejected if len(rejected) <= 80 else rejected[:80] + f"… ({len(rejected):,} characters)"
        return name, Diagnostic(
            "warning", None, f"the job id in the logs, {shown!r}, cannot name a Parquet partition (the job's part, "
            f"before any '.' or '+', must be 1 to 64 letters, digits, '_' or '-'): the job is called {name} "
            "(a hash of it); pass --job-id to name it", DiagCode.JOB_ID_REPLACED)
    h = hashlib.sha1("\n".join(sorted(d.source.path for d in digests)).encode()).hexdigest()[:12]
    return f"job-{h}", None
