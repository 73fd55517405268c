"""Parquet tables of a report (``--parquet DIR``): a dataset many jobs load as one table.

This module owns the table layout and the dataset folder. ``write_parquet`` writes three tables,
one row per item of the report, each into a Hive-partitioned dataset::

    DIR/events/job_id=<id>/part-0.parquet
    DIR/ranks/job_id=<id>/part-0.parquet
    DIR/incidents/job_id=<id>/part-0.parquet

Re-running the same job replaces its partition (written beside it under a hidden name, then
swapped in), so a job is never counted twice. ``job_id`` is not a column inside the files: it is
the partition key, read from the folder name (URL-encoded there). Read it back as a *string* —
``pyarrow.dataset`` would otherwise guess ``int32`` from numeric ids — with ``read_table`` below,
or in DuckDB ``read_parquet('DIR/events/*/*.parquet', hive_partitioning = true, hive_types =
{'job_id': VARCHAR})``, or in pandas ``pd.read_parquet('DIR/events', partitioning=...)``.

All times are ``timestamp[ms, tz=UTC]``; delays are seconds as ``float64``; null where unknown.

``events`` — one row per timeline event (``Report.timeline``):

    seq int32 (position in the report's timeline), time timestamp, after_root_s float64,
    host string, rank int32, local_rank int32, attempt int32, rule string, category string
    (the rule id's first part), role string, label string (root | collateral | teardown | job |
    context | independent), time_kind string (own | inherited | none), path string, line int64,
    text string, is_root bool

``ranks`` — one row per rank (``Report.ranks``):

    rank int32, host string, local_rank int32, state string (root | collateral | silent | healthy |
    unknown), first_time timestamp, last_time timestamp, lines int64, last_step int64, is_root bool

``incidents`` — one ``verdict`` row per job, then one ``group`` row per collateral/teardown/job
group (``Report.groups``):

    kind string (verdict | group), verdict string (root_cause | job_level | no_failure |
    undetermined; on every row), rule string, category string, title string, role string,
    label string, severity string, rank int32, host string, local_rank int32 (the root's, on the
    verdict row), ranks string (``0-36,38-511``), count int32, first_time timestamp, last_time
    timestamp, first_after_s float64, last_after_s float64, confidence float64, decided_by string,
    tie string (ranks tied with the root), evidence string (``path:line`` of the first evidence
    line), job_start timestamp, job_end timestamp, n_ranks int32, n_hosts int32, span_s float64,
    rank_hours float64 (ranks x span in hours: a GPU-hours proxy when one rank drives one GPU;
    verdict row only, so sums over a dataset count each job once), attempt int32, schema string

It reads a ``Report`` and never recomputes analysis. pyarrow is imported inside the functions.
"""

from __future__ import annotations

import os
import shutil
import uuid
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from correlator.errors import UsageError
from correlator.model import Report, Verdict
from correlator.report.markdown import job_counts, parse_iso, time_span

if TYPE_CHECKING:
    import pyarrow as pa

TABLES = ("events", "ranks", "incidents")
PART_FILE = "part-0.parquet"


def _ts(text: str | None) -> datetime | None:
    seconds = parse_iso(text)
    return None if seconds is None else datetime.fromtimestamp(seconds, tz=timezone.utc)


def _category(rule: str | None) -> str | None:
    return rule.split(".", 1)[0] if rule else None


def schemas() -> dict[str, pa.Schema]:
    """The three tables' Arrow schemas (the module docstring says what each column means)."""
    import pyarrow as pa

    ts = pa.timestamp("ms", tz="UTC")
    i32, i64, f64, s, b = pa.int32(), pa.int64(), pa.float64(), pa.string(), pa.bool_()
    return {
        "events": pa.schema([
            ("seq", i32), ("time", ts), ("after_root_s", f64), ("host", s), ("rank", i32),
            ("local_rank", i32), ("attempt", i32), ("rule", s), ("category", s), ("role", s),
            ("label", s), ("time_kind", s), ("path", s), ("line", i64), ("text", s), ("is_root", b),
        ]),
        "ranks": pa.schema([
            ("rank", i32), ("host", s), ("local_rank", i32), ("state", s), ("first_time", ts),
            ("last_time", ts), ("lines", i64), ("last_step", i64), ("is_root", b),
        ]),
        "incidents": pa.schema([
            ("kind", s), ("verdict", s), ("rule", s), ("category", s), ("title", s), ("role", s),
            ("label", s), ("severity", s), ("rank", i32), ("host", s), ("local_rank", i32), ("ranks", s),
            ("count", i32), ("first_time", ts), ("last_time", ts), ("first_after_s", f64),
            ("last_after_s", f64), ("confidence", f64), ("decided_by", s), ("tie", s), ("evidence", s),
            ("job_start", ts), ("job_end", ts), ("n_ranks", i32), ("n_hosts", i32), ("span_s", f64),
            ("rank_hours", f64), ("attempt", i32), ("schema", s),
        ]),
    }


def rows(report: Report) -> dict[str, list[dict[str, Any]]]:
    """The tables as lists of row dicts (plain Python values; times as aware datetimes)."""
    root = report.root_cause
    root_rank = root.rank if root is not None else None
    events = [{
        "seq": index, "time": _ts(e.time), "after_root_s": e.after_root_s, "host": e.host, "rank": e.rank,
        "local_rank": e.local_rank, "attempt": e.attempt, "rule": e.rule, "category": _category(e.rule),
        "role": e.role, "label": e.label or None, "time_kind": e.time_kind, "path": e.path, "line": e.line,
        "text": e.text, "is_root": e.label == "root",
    } for index, e in enumerate(report.timeline)]
    ranks = [{
        "rank": r.rank, "host": r.host, "local_rank": r.local_rank, "state": str(r.state),
        "first_time": _ts(r.first_time), "last_time": _ts(r.last_time), "lines": r.lines,
        "last_step": r.last_step, "is_root": str(r.state) == "root" or (root_rank is not None and r.rank == root_rank),
    } for r in report.ranks]

    first, last = time_span(report)
    start, end = _ts(first), _ts(last)
    span_s = (end - start).total_seconds() if start and end else None
    n_ranks, n_hosts = job_counts(report)
    rank_hours = n_ranks * span_s / 3600 if n_ranks and span_s is not None else None
    verdict = str(report.verdict)
    job_cols = {"job_start": start, "job_end": end, "n_ranks": n_ranks, "n_hosts": n_hosts, "span_s": span_s,
                "schema": report.schema}
    blank = {name: None for name in schemas()["incidents"].names}
    head: dict[str, Any] = {**blank, **job_cols, "kind": "verdict", "verdict": verdict, "rank_hours": rank_hours}
    if root is not None:
        head.update({
            "rule": root.rule, "category": root.category or _category(root.rule), "title": root.title,
            "role": "job" if report.verdict == Verdict.JOB_LEVEL else "primary", "label": "root",
            "severity": root.severity, "rank": root.rank, "host": root.host, "local_rank": root.local_rank,
            "ranks": str(root.rank) if root.rank is not None else None, "count": 1,
            "first_time": _ts(root.time), "last_time": _ts(root.time), "first_after_s": 0.0 if root.time else None,
            "last_after_s": 0.0 if root.time else None, "confidence": root.confidence,
            "decided_by": root.decided_by, "tie": ",".join(str(t) for t in root.tie) or None,
            "evidence": f"{root.evidence[0].path}:{root.evidence[0].line}" if root.evidence else None,
            "attempt": root.attempt,
        })
    elif report.verdict == Verdict.JOB_LEVEL:
        # a job-level end with no RootCause object: name the job group's rule as the report states it
        group = next((g for g in report.groups if g.role == "job"), None)
        if group is not None:
            head.update({"rule": group.rule, "category": _category(group.rule), "title": group.title or None,
                         "role": "job", "label": "job", "first_time": _ts(group.first), "last_time": _ts(group.last),
                         "count": group.count})
    incidents = [head]
    for g in report.groups:
        incidents.append({
            **blank, **job_cols, "kind": "group", "verdict": verdict, "rule": g.rule, "category": _category(g.rule),
            "title": g.title or None, "role": g.role, "label": g.label or None, "ranks": g.ranks or None,
            "count": g.count, "first_time": _ts(g.first), "last_time": _ts(g.last),
            "first_after_s": g.first_after_s, "last_after_s": g.last_after_s,
        })
    return {"events": events, "ranks": ranks, "incidents": incidents}


def partition_name(job_id: str) -> str:
    """The partition folder of a job: ``job_id=<URL-encoded id>`` (Hive style)."""
    text = str(job_id).strip()
    if not text or text in (".", ".."):
        raise UsageError(f"job id {job_id!r} cannot name a partition", hint="pass a non-empty --job-id")
    return "job_id=" + quote(text, safe="-_.~")


def write_parquet(report: Report, out_dir: Path, job_id: str) -> list[Path]:
    """Write (or replace) this job's partition of the three tables; returns the files written."""
    import pyarrow.parquet as pq

    out_dir = Path(out_dir)
    part = partition_name(job_id)
    built = tables(report)
    written: list[Path] = []
    for name in TABLES:
        table_dir = out_dir / name
        table_dir.mkdir(parents=True, exist_ok=True)
        final = table_dir / part
        # hidden names ('.'-prefixed) are skipped by every dataset reader while we write and swap
        tmp = table_dir / f".{part}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        tmp.mkdir()
        try:
            pq.write_table(built[name], tmp / PART_FILE)
            old = None
            if final.exists():
                old = table_dir / f".{part}.old-{uuid.uuid4().hex[:8]}"
                final.rename(old)
            tmp.rename(final)
            if old is not None:
                shutil.rmtree(old, ignore_errors=True)
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)
        written.append(final / PART_FILE)
    return written


def tables(report: Report) -> dict[str, pa.Table]:
    """The three tables as Arrow tables with the documented schemas."""
    import pyarrow as pa

    data = rows(report)
    return {name: pa.Table.from_pylist(data[name], schema=schema) for name, schema in schemas().items()}


def read_table(out_dir: Path, table: str) -> pa.Table:
    """One table of the dataset across all jobs, with ``job_id`` as a string column."""
    import pyarrow as pa
    import pyarrow.dataset as ds

    if table not in TABLES:
        raise UsageError(f"unknown table {table!r}", hint=f"one of {', '.join(TABLES)}")
    folder = Path(out_dir) / table
    partitioning = ds.partitioning(pa.schema([("job_id", pa.string())]), flavor="hive")
    schema = schemas()[table].append(pa.field("job_id", pa.string()))
    if not folder.is_dir():
        return schema.empty_table()
    dataset = ds.dataset(folder, format="parquet", partitioning=partitioning, schema=schema)
    return dataset.to_table()
