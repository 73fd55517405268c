"""``analyze(inputs, options) -> Report``: the only module that knows the order of the stages.

discover sources -> extract each (an engine: local pool or Dask) -> correlate the digests (identities,
clocks, attempts, attribution, the report) -> mask secrets.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from correlator.correlate import accounting
from correlator.correlate.stage import correlate
from correlator.errors import InputError, UsageError
from correlator.extract import Engine, ExtractOptions
from correlator.extract.timestamps import resolve_tz, zone_name
from correlator.model import Report, Rule

__all__ = ["Options", "analyze", "correlate", "load_engine_rules"]


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


#: inputs named in the one-line error when none could be read (the rest counted): a folder of 4,096
#: symbolic links that all leave it gave one line of 40 KB
UNREAD_NAMED = 5


def load_engine_rules(opts: Options) -> list[Rule]:
    from correlator.ruleset import load_rules

    return load_rules([Path(d) for d in opts.rule_dirs], include_builtin=opts.include_builtin_rules)


def analyze(inputs: Sequence[str], opts: Options | None = None, *,
            progress: Callable[[int, int, int, int], None] | None = None,
            rules: Sequence[Rule] | None = None) -> Report:
    """Analyse the logs at ``inputs``; raises ``RuleError``/``InputError``/``UsageError`` only."""
    from correlator.extract import engines, sources
    from correlator.report.redact import redact_report
    from correlator.ruleset import builtin_rules_dir, vocabulary_diagnostics

    opts = opts or Options()
    started = time.perf_counter()
    if opts.engine not in engines.ENGINES:
        raise UsageError(f"unknown engine {opts.engine!r}: use one of {', '.join(engines.ENGINES)}")
    rule_list = list(rules) if rules is not None else load_engine_rules(opts)
    srcs, diags = sources.discover(list(inputs), all_files=opts.all_files)
    # (the built-in rules are checked by the test suite, which finds no slip in them: only the rules of
    # --rules folders are read for one on every run, ~0.07 s saved)
    builtin = os.path.join(builtin_rules_dir(), "")
    diags = [*vocabulary_diagnostics(r for r in rule_list if not str(r.path).startswith(builtin)), *diags]
    if not srcs:
        said = [f"{d.path}: {d.message}" for d in diags if d.level != "info"]
        more = f"; and {len(said) - UNREAD_NAMED} more" if len(said) > UNREAD_NAMED else ""
        problems = "; ".join(said[:UNREAD_NAMED]) + more or "nothing to read"
        raise InputError(f"no log could be read ({problems})", hint="pass files, folders, globs or - for stdin")
    try:
        tz = resolve_tz(opts.tz)
    except Exception as e:  # zoneinfo raises several types for a bad name
        raise UsageError(f"unknown time zone {opts.tz!r} ({e})", hint="use an IANA name like Europe/Berlin, or UTC") from None
    xopts = ExtractOptions(tz=tz, scanner=opts.scanner)
    if opts.chunk_bytes:
        xopts = replace(xopts, chunk_bytes=opts.chunk_bytes)
    spec = engines.EngineSpec(opts.rule_dirs, opts.include_builtin_rules, opts.scanner, xopts)
    engine = None
    if opts.engine == "dask":
        digests = engines.run_dask(srcs, spec, opts.scheduler, progress)
    else:
        engine = Engine(rule_list, opts.scanner)
        digests = engines.run_local(srcs, spec, engine, opts.workers, progress, engine_is_spec=rules is None)
    if accounting.nothing_read(digests):  # not a healthy job: a job of which nothing was read
        unread = accounting.unread_sources(diags, digests)
        said = [f"{u.path}: {u.why}" for u in unread] or [f"{d.source.path}: empty" for d in digests]
        more = f"; and {len(said) - UNREAD_NAMED} more" if len(said) > UNREAD_NAMED else ""
        raise InputError(f"no log could be read ({'; '.join(said[:UNREAD_NAMED])}{more})",
                         hint="pass the job's text logs (compressed ones are read too), or - for stdin")
    report = correlate(digests, rule_list, diags, started=started, job_id=opts.job_id,
                       engine_name=opts.engine, scanner=engine.scanner.name if engine else "", zone=zone_name(tz))
    return redact_report(report) if opts.redact else report


