"""Parquet tables of a report (``--parquet DIR``): a dataset many jobs load as one table.

This module owns the table layout and the dataset folder. ``write_parquet`` writes three tables,
one row per item of the report, each into a Hive-partitioned dataset::

    DIR/events/job_id=<id>/part-0.parquet
    DIR/ranks/job_id=<id>/part-0.parquet
    DIR/incidents/job_id=<id>/part-0.parquet

Re-running the same job replaces its partitions, so a job is never counted twice. The three
tables of a job change as one: a write holds the job's lock (``flock`` on
``DIR/.correlate/locks/<partition>.lock``), stages all three under hidden names beside their
partitions, commits by renaming one record into ``DIR/.correlate/commit/``, then swaps the
partitions and drops the record. A write killed before the commit leaves the old version; one
killed after it leaves a record that ``read_table`` follows (the new version) and that the next
write finishes; either way the next write removes the leftovers. Readers hold
``DIR/.correlate/dataset.lock`` shared while they read and a write holds it exclusively while it
swaps, so a reader sees each job whole, old or new (``read_tables`` reads several tables under one
hold). A file the readers cannot read (truncated, not Parquet, wrong columns) or one that is no
partition's is left out with a diagnostic in the list they are given, or raised as ``InputError``.
Other readers (DuckDB, pandas) take no lock: during a swap, or after a write killed in one until
the next write, they can see a job's tables from two versions.

``job_id`` is a string column in every file as well as the partition key (the folder name,
URL-encoded there): a SLURM array task is a job of its own (``88123_5``), and a numeric id keeps
its form (``00042``). Read the files without Hive partitioning and the column is there as a
string: ``pyarrow.dataset.dataset('DIR/events')``, ``pd.read_parquet('DIR/events',
partitioning=None)``, DuckDB ``read_parquet('DIR/events/*/*.parquet')``; or with ``read_table``
below. (Readers that also infer the partition's type from the folder names -- pyarrow's and
pandas' ``partitioning='hive'`` -- meet two ``job_id`` fields; pass the string type, e.g.
``partitioning=pyarrow.dataset.partitioning(pyarrow.schema([('job_id', pyarrow.string())]),
flavor='hive')``.)

Every row of every table also carries ``tool_version`` string (correlate's), ``rules_version``
string (``correlator.model.rules_version``: the rules' count and a digest of them), ``analyzed_at`` timestamp (when
the analysis ran) and ``job_id`` string; each ``events`` row an ``event_id`` string, a hash of the
job id, the event's file (relative to the folder the job's files share), line and rule, the same
each time the same input is analysed (``event_ids``). Files written before these columns existed
are read with nulls in them.

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
Locking uses ``fcntl`` (POSIX; on NFS, Linux maps ``flock`` to NFS byte-range locks).
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import re
import shutil
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, unquote

from correlator.errors import InputError, UsageError
from correlator.model import DiagCode, Diagnostic, Report, Verdict
from correlator.report.markdown import job_counts, parse_iso, time_span

if TYPE_CHECKING:
    import pyarrow as pa

TABLES = ("events", "ranks", "incidents")
PART_FILE = "part-0.parquet"
#: the dataset's own bookkeeping (locks, commit records); hidden, so no dataset reader lists it
META = ".correlate"
#: a partition folder name longer than this leaves no room (255 bytes a name) for the hidden names beside it
_MAX_PART = 230
#: hidden names of one write beside ``<partition>``: ``.<partition>.new-<tx>`` (staged),
#: ``.<partition>.old-<tx>`` (swapped out); ``tmp-<pid>-<hex>`` is what writes before locking left
_LEFTOVER = re.compile(r"(?:new|old)-[0-9a-f]{8,32}|tmp-\d+-[0-9a-f]{8}")

#: called with the name of every step of a write, in order (tests stop a writer at each step)
STEP_HOOK: Callable[[str], None] | None = None


def _step(name: str) -> None:
    if STEP_HOOK is not None:
        STEP_HOOK(name)


def _ts(text: str | None) -> datetime | None:
    seconds = parse_iso(text)
    return None if seconds is None else datetime.fromtimestamp(seconds, tz=UTC)


def _category(rule: str | None) -> str | None:
    return rule.split(".", 1)[0] if rule else None


def schemas() -> dict[str, pa.Schema]:
    """The three tables' Arrow schemas (the module docstring says what each column means)."""
    import pyarrow as pa

    ts = pa.timestamp("ms", tz="UTC")
    i32, i64, f64, s, b = pa.int32(), pa.int64(), pa.float64(), pa.string(), pa.bool_()
    stamp = [("tool_version", s), ("rules_version", s), ("analyzed_at", ts), ("job_id", s)]
    return {
        "events": pa.schema([
            ("seq", i32), ("time", ts), ("after_root_s", f64), ("host", s), ("rank", i32),
            ("local_rank", i32), ("attempt", i32), ("rule", s), ("category", s), ("role", s),
            ("label", s), ("time_kind", s), ("path", s), ("line", i64), ("text", s), ("is_root", b),
            ("event_id", s), *stamp,
        ]),
        "ranks": pa.schema([
            ("rank", i32), ("host", s), ("local_rank", i32), ("state", s), ("first_time", ts),
            ("last_time", ts), ("lines", i64), ("last_step", i64), ("is_root", b), *stamp,
        ]),
        "incidents": pa.schema([
            ("kind", s), ("verdict", s), ("rule", s), ("category", s), ("title", s), ("role", s),
            ("label", s), ("severity", s), ("rank", i32), ("host", s), ("local_rank", i32), ("ranks", s),
            ("count", i32), ("first_time", ts), ("last_time", ts), ("first_after_s", f64),
            ("last_after_s", f64), ("confidence", f64), ("decided_by", s), ("tie", s), ("evidence", s),
            ("job_start", ts), ("job_end", ts), ("n_ranks", i32), ("n_hosts", i32), ("span_s", f64),
            ("rank_hours", f64), ("attempt", i32), ("schema", s), *stamp,
        ]),
    }


#: columns added after the first datasets were written: a file without them is read with nulls
#: (``job_id`` from its partition), not left out
ADDED_COLUMNS = frozenset({"event_id", "tool_version", "rules_version", "analyzed_at", "job_id"})


def event_ids(report: Report, job_id: str) -> list[str]:
    """A stable id per timeline event: a hash of the job id, the event's file (relative to the
    folder all the events' files share, so the same logs named from another folder or by absolute
    path give the same ids), its line and its rule, and which repeat of these it is. Analysing the
    same input again gives the same ids; any other event, another."""
    import hashlib

    paths = [e.path for e in report.timeline]
    try:
        base = os.path.commonpath([os.path.dirname(p) for p in paths]) if paths else ""
    except ValueError:  # absolute beside relative, or <stdin>: the paths as they are
        base = ""
    seen: dict[tuple[str, int, str], int] = {}
    out = []
    for e in report.timeline:
        rel = os.path.relpath(e.path, base) if base and os.path.isabs(e.path) == os.path.isabs(base) else e.path
        key = (rel, e.line, e.rule)
        n = seen[key] = seen.get(key, -1) + 1
        text = "\0".join((job_id, rel, str(e.line), e.rule, str(n)))
        out.append(hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:20])
    return out


def rows(report: Report, job_id: str | None = None) -> dict[str, list[dict[str, Any]]]:
    """The tables as lists of row dicts (plain Python values; times as aware datetimes); ``job_id``
    is the partition's (default: the report's job id)."""
    root = report.root_cause
    root_rank = root.rank if root is not None else None
    the_id = str(job_id if job_id is not None else (report.job.id or "job")).strip()
    stamp = {"tool_version": report.stats.tool_version or None, "rules_version": report.stats.rules_version or None,
             "analyzed_at": _ts(report.stats.analyzed_at), "job_id": the_id}
    ids = event_ids(report, the_id)
    events = [{
        "seq": index, "time": _ts(e.time), "after_root_s": e.after_root_s, "host": e.host, "rank": e.rank,
        "local_rank": e.local_rank, "attempt": e.attempt, "rule": e.rule, "category": _category(e.rule),
        "role": e.role, "label": e.label or None, "time_kind": e.time_kind, "path": e.path, "line": e.line,
        "text": e.text, "is_root": e.label == "root", "event_id": ids[index], **stamp,
    } for index, e in enumerate(report.timeline)]
    ranks = [{
        "rank": r.rank, "host": r.host, "local_rank": r.local_rank, "state": str(r.state),
        "first_time": _ts(r.first_time), "last_time": _ts(r.last_time), "lines": r.lines,
        "last_step": r.last_step, "is_root": str(r.state) == "root" or (root_rank is not None and r.rank == root_rank),
        **stamp,
    } for r in report.ranks]

    first, last = time_span(report)
    start, end = _ts(first), _ts(last)
    span_s = (end - start).total_seconds() if start and end else None
    n_ranks, n_hosts = job_counts(report)
    rank_hours = n_ranks * span_s / 3600 if n_ranks and span_s is not None else None
    verdict = str(report.verdict)
    job_cols = {"job_start": start, "job_end": end, "n_ranks": n_ranks, "n_hosts": n_hosts, "span_s": span_s,
                "schema": report.schema, **stamp}
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
    name = "job_id=" + quote(text, safe="-_.~")
    if len(name) > _MAX_PART:
        raise UsageError(f"job id {text[:40]!r}... is too long to name a partition ({len(name)} characters "
                         f"URL-encoded, at most {_MAX_PART})", hint="pass a shorter --job-id")
    return name


def write_parquet(report: Report, out_dir: Path, job_id: str) -> list[Path]:
    """Write (or replace) this job's partitions of the three tables, as one change; returns the files.

    The steps (each named to ``STEP_HOOK``): take the job's lock; finish or clean what an
    interrupted write of the job left; stage the three tables under hidden names; commit (a record
    renamed into ``DIR/.correlate/commit/``); swap the partitions; drop the record; remove the
    swapped-out versions; then finish other jobs' interrupted writes whose lock is free. A failure
    before the commit changes nothing: it raises ``UsageError`` saying the job keeps its previous
    rows; one after it says the new rows are in and the next write finishes the swap."""
    import pyarrow.parquet as pq

    out_dir = Path(out_dir)
    part = partition_name(job_id)
    built = tables(report, job_id)
    committed = False
    try:
        with _flock(_meta(out_dir, "locks") / f"{part}.lock", fcntl.LOCK_EX):
            _step("locked")
            _recover(out_dir, part)
            _step("recovered")
            tx = uuid.uuid4().hex[:12]
            staged: list[Path] = []
            try:
                for name in TABLES:
                    table_dir = out_dir / name
                    table_dir.mkdir(parents=True, exist_ok=True)
                    stage = table_dir / f".{part}.new-{tx}"
                    stage.mkdir()
                    staged.append(stage)
                    _step(f"staging {name}")
                    pq.write_table(built[name], stage / PART_FILE)
                    _fsync(stage / PART_FILE)
                    _fsync(stage)
                    _fsync(table_dir)
                    _step(f"staged {name}")
                record_dir = _meta(out_dir, "commit")
                record, pending = record_dir / f"{part}.json", record_dir / f".{part}.json.tmp-{tx}"
                with _flock(_meta(out_dir) / "dataset.lock", fcntl.LOCK_EX):
                    try:
                        with open(pending, "w", encoding="utf-8") as f:
                            json.dump({"tx": tx, "tables": list(TABLES)}, f)
                            f.flush()
                            os.fsync(f.fileno())
                        _step("record written")
                        os.replace(pending, record)
                    finally:
                        pending.unlink(missing_ok=True)
                    committed = True
                    _fsync(record_dir)
                    _step("committed")
                    _swap(out_dir, part, tx)
                    _drop_record(out_dir, part)
            except BaseException:
                if not committed:  # nothing was swapped: the staged copies are all there is to undo
                    for stage in staged:
                        shutil.rmtree(stage, ignore_errors=True)
                raise
            _remove_old(out_dir, part, tx)
    except OSError as e:
        what = f"cannot write the Parquet dataset: {e.strerror or e}"
        if e.filename:
            what += f" ({e.filename})"
        hint = ("the new rows are committed and read as this job's; the next write to the dataset finishes the swap"
                if committed else
                f"nothing was changed: job {str(job_id).strip()!r} keeps its previous rows, if it had any; "
                "free space or fix permissions and run again")
        raise UsageError(what, location=str(out_dir), hint=hint) from e
    try:
        _tidy(out_dir, part)
    except OSError:
        pass  # our job is written; another job's leftovers wait for the next write
    return [out_dir / name / part / PART_FILE for name in TABLES]


def _meta(out_dir: Path, sub: str = "") -> Path:
    folder = out_dir / META / sub if sub else out_dir / META
    folder.mkdir(parents=True, exist_ok=True)
    return folder


@contextmanager
def _flock(path: Path, mode: int, create: bool = True) -> Iterator[bool]:
    """Hold ``flock(mode)`` on ``path`` while the block runs; yields False when ``LOCK_NB`` found
    it taken, or when ``create`` is False and the file cannot be opened (a read-only dataset, or
    one no locking writer has written: then there is no writer to keep out)."""
    fd = -1
    for flags in ((os.O_RDWR | os.O_CREAT) if create else os.O_RDWR, os.O_RDONLY):
        try:
            fd = os.open(path, flags | os.O_CLOEXEC, 0o666)
            break
        except PermissionError:
            continue  # someone else's lock file: a read-only descriptor locks it just as well
        except FileNotFoundError:
            if create:
                raise
            break
        except OSError:
            if create:
                raise
            break
    if fd < 0:
        if create:
            raise PermissionError(errno.EACCES, "cannot open the lock file", str(path))
        yield False
        return
    try:
        try:
            fcntl.flock(fd, mode)
            held = True
        except BlockingIOError:
            held = False
        yield held
    finally:
        os.close(fd)  # closing releases the lock; a killed process's locks go with its descriptors


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    except OSError as e:
        if e.errno not in (errno.EINVAL, errno.ENOTSUP, errno.EBADF):  # some filesystems cannot sync a folder
            raise
    finally:
        os.close(fd)


def _pending(out_dir: Path) -> dict[str, str]:
    """Committed writes not yet finished: partition name -> transaction id, from the records."""
    folder = out_dir / META / "commit"
    found: dict[str, str] = {}
    try:
        entries = list(os.scandir(folder))
    except (FileNotFoundError, NotADirectoryError):
        return found
    for entry in entries:
        if entry.name.startswith(".") or not entry.name.endswith(".json"):
            continue
        try:
            with open(entry.path, encoding="utf-8") as f:
                tx = json.load(f).get("tx")
        except (OSError, ValueError, AttributeError):
            continue  # records are renamed in whole, so this is not one of ours
        if isinstance(tx, str) and re.fullmatch(r"[0-9a-f]{12}", tx):
            found[entry.name[:-len(".json")]] = tx
    return found


def _swap(out_dir: Path, part: str, tx: str, label: str = "") -> None:
    """Put the staged copies of transaction ``tx`` in place of the partitions. Idempotent: a table
    whose staged copy is gone was swapped already, so a killed swap is finished by running it again."""
    for name in TABLES:
        table_dir = out_dir / name
        stage, final = table_dir / f".{part}.new-{tx}", table_dir / part
        if not stage.is_dir():
            continue
        if final.exists():
            os.rename(final, table_dir / f".{part}.old-{tx}")
            _step(f"{label}moved old {name}")
        os.rename(stage, final)
        _step(f"{label}moved new {name}")
        _fsync(table_dir)


def _drop_record(out_dir: Path, part: str, label: str = "") -> None:
    folder = out_dir / META / "commit"
    (folder / f"{part}.json").unlink(missing_ok=True)
    _fsync(folder)
    _step(f"{label}record removed")


def _remove_old(out_dir: Path, part: str, tx: str) -> None:
    for name in TABLES:
        old = out_dir / name / f".{part}.old-{tx}"
        if old.exists():
            shutil.rmtree(old, ignore_errors=True)
            _step(f"removed old {name}")


def _leftover_of(name: str) -> str | None:
    """The partition a hidden name beside the partitions belongs to, if a write of ours left it."""
    if not name.startswith("."):
        return None
    part, dot, rest = name[1:].rpartition(".")  # the part after the last dot holds no dot
    return part if dot and part.startswith("job_id=") and _LEFTOVER.fullmatch(rest) else None


def _recover(out_dir: Path, part: str) -> None:
    """Finish a committed write of this job, or undo an uncommitted one, and remove what either
    left beside the partitions. The caller holds the job's lock, so no live writer owns them."""
    tx = _pending(out_dir).get(part)
    if tx is not None:
        with _flock(_meta(out_dir) / "dataset.lock", fcntl.LOCK_EX):
            _swap(out_dir, part, tx, "recover ")
            _drop_record(out_dir, part, "recover ")
    record_dir = out_dir / META / "commit"
    if record_dir.is_dir():
        for entry in os.scandir(record_dir):
            if entry.name == f"{part}.json" or entry.name.startswith(f".{part}.json.tmp-"):
                os.unlink(entry.path)  # a record left is not a valid one (_pending read it above)
    for name in TABLES:
        table_dir = out_dir / name
        if not table_dir.is_dir():
            continue
        final = table_dir / part
        left = sorted((Path(e.path) for e in os.scandir(table_dir) if _leftover_of(e.name) == part),
                      key=lambda p: p.lstat().st_mtime_ns)
        olds = [p for p in left if p.name.rpartition(".")[2].startswith("old-")]
        if not final.exists() and olds:
            # a write from before the lock was killed between its two renames: put the job back
            os.rename(olds[-1], final)
            left.remove(olds[-1])
        for path in left:
            shutil.rmtree(path, ignore_errors=True)


def _tidy(out_dir: Path, done: str) -> None:
    """Recover the other jobs that interrupted writes left, when no writer holds their lock."""
    parts = set(_pending(out_dir))
    for name in TABLES:
        table_dir = out_dir / name
        if table_dir.is_dir():
            parts.update(p for p in (_leftover_of(e.name) for e in os.scandir(table_dir)) if p)
    parts.discard(done)
    for part in sorted(parts):
        with _flock(_meta(out_dir, "locks") / f"{part}.lock", fcntl.LOCK_EX | fcntl.LOCK_NB) as held:
            if held:
                _recover(out_dir, part)



def tables(report: Report, job_id: str | None = None) -> dict[str, pa.Table]:
    """The three tables as Arrow tables with the documented schemas."""
    import pyarrow as pa

    data = rows(report, job_id)
    return {name: pa.Table.from_pylist(data[name], schema=schema) for name, schema in schemas().items()}


def read_table(out_dir: Path, table: str, diagnostics: list[Diagnostic] | None = None) -> pa.Table:
    """One table of the dataset across all jobs, with ``job_id`` as a string column.

    Each job is read as its last committed write left it. A file or folder that cannot be read is
    left out: with ``diagnostics`` it is appended there as a warning (and the rest is read);
    without, it raises ``InputError`` naming it. To join tables, read them with ``read_tables``:
    two calls of this one may see a job before and after a write."""
    return read_tables(out_dir, (table,), diagnostics)[table]


def read_tables(out_dir: Path, names: tuple[str, ...] = TABLES,
                diagnostics: list[Diagnostic] | None = None) -> dict[str, pa.Table]:
    """Several tables as ``read_table`` reads one, all under one hold of the dataset's shared lock:
    every job is the same version in each of them."""
    for table in names:
        if table not in TABLES:
            raise UsageError(f"unknown table {table!r}", hint=f"one of {', '.join(TABLES)}")
    out_dir = Path(out_dir)
    lock = out_dir / META / "dataset.lock"
    if any((out_dir / table).is_dir() for table in names) and not lock.exists():
        try:  # a dataset no locking writer has written yet: so that the first one waits for this read
            os.close(os.open(_meta(out_dir) / "dataset.lock", os.O_RDONLY | os.O_CREAT | os.O_CLOEXEC, 0o666))
        except OSError:
            pass  # a read-only dataset: no writer to keep out
    with _flock(lock, fcntl.LOCK_SH, create=False):
        pending = _pending(out_dir)
        return {table: _read_one(out_dir, table, pending, diagnostics) for table in names}


def _read_one(out_dir: Path, table: str, pending: dict[str, str], diagnostics: list[Diagnostic] | None) -> pa.Table:
    import pyarrow as pa
    import pyarrow.parquet as pq

    folder = out_dir / table
    schema = schemas()[table]
    if not folder.is_dir():
        return schema.empty_table()

    def left_out(path: str, message: str, code: DiagCode) -> None:
        hint = "left out; write the job again with 'correlate --parquet DIR LOGS...', or remove what is not a job's"
        if diagnostics is None:
            raise InputError(message, location=path, hint=hint)
        diagnostics.append(Diagnostic("warning", path, f"{message}; {hint}", code))

    pieces: list[pa.Table] = []
    sources: dict[str, str] = {}
    for entry in sorted(os.scandir(folder), key=lambda e: e.name):
        if entry.name.startswith((".", "_")):
            continue  # staged copies, and what other tools hide (_SUCCESS, .DS_Store)
        if not entry.name.startswith("job_id=") or not entry.is_dir():
            left_out(entry.path, f"not a job partition (a 'job_id=<id>' folder) in the {table} table",
                     DiagCode.STRAY_FILE)
            continue
        sources[entry.name] = entry.path
    for part, tx in sorted(pending.items()):
        stage = folder / f".{part}.new-{tx}"
        if stage.is_dir():
            sources[part] = str(stage)
            if diagnostics is not None:
                diagnostics.append(Diagnostic(
                    "info", str(folder / part), "a write of this job was interrupted after it committed: its new "
                    "rows are read; the next write to the dataset finishes the swap", DiagCode.NOTE))
    for part in sorted(sources):
        job_id = unquote(part[len("job_id="):])
        try:
            files = sorted((e for e in os.scandir(sources[part]) if not e.name.startswith((".", "_"))),
                           key=lambda e: e.name)
        except OSError as e:
            left_out(sources[part], f"cannot list the partition: {e.strerror or e}", DiagCode.UNREADABLE)
            continue
        for entry in files:
            if not entry.is_file() or not entry.name.endswith(".parquet"):
                left_out(entry.path, "not a Parquet file (a partition holds '*.parquet' files)", DiagCode.STRAY_FILE)
                continue
            try:
                data = pq.ParquetFile(entry.path).read()
                missing = [n for n in schema.names if n not in data.schema.names and n not in ADDED_COLUMNS]
                if missing:
                    shown = ", ".join(missing[:4]) + (", ..." if len(missing) > 4 else "")
                    left_out(entry.path, f"not a file of the {table} table (no column {shown})",
                             DiagCode.UNREADABLE)
                    continue
                for name in schema.names:  # a file written before a column was added: nulls there
                    if name not in data.schema.names:
                        data = data.append_column(schema.field(name), pa.nulls(data.num_rows, schema.field(name).type))
                # the partition names the job: its folder is what a reader selects on
                data = data.select(schema.names).cast(schema).drop_columns(["job_id"])
            except OSError as e:
                left_out(entry.path, f"cannot read: {e.strerror or e}", DiagCode.READ_ERROR)
                continue
            except (pa.ArrowException, ValueError, TypeError) as e:
                left_out(entry.path, f"not a readable Parquet file (truncated or damaged: {e})",
                         DiagCode.UNREADABLE)
                continue
            pieces.append(data.append_column(pa.field("job_id", pa.string()),
                                             pa.array([job_id] * data.num_rows, pa.string())))
    return pa.concat_tables(pieces) if pieces else schema.empty_table()
