"""Metamorphic transformations of a job: rewrites of its log files that must not change what the
job's logs establish -- the verdict, the first failing rank, the family (category) of its failure.

A job is a folder read into memory: ``{relative posix path: bytes}``, its ``expected.toml``,
``README.md`` and ``source.md`` included (they are the case's truth and notes: transformations read
``expected.toml`` but never change these files, and the runner does not pass them to the analyzer).
Each transformation is a pure function ``(files, rng) -> files | None``: ``None`` means the job's
shape does not allow it (no per-rank files to merge, no host to shift), which a test counts as *not
applicable*, never as passed. A transformation that cannot tell whether a rewrite keeps the truth
(a file whose rank it cannot establish, a stamp format it does not know) declines.

The registry ``TRANSFORMS`` is written out by hand; ``st_transforms()`` composes 1-3 of them for
hypothesis. Nothing here imports the analyzer: the transformations know launcher prefixes, stamps,
tracebacks and file layouts only from what the software prints.
"""

from __future__ import annotations

import calendar
import gzip
import re
import tomllib
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from functools import lru_cache
from pathlib import Path
from random import Random

Files = dict[str, bytes]
Transform = Callable[[Files, Random], "Files | None"]

META_NAMES = frozenset({"expected.toml", "README.md", "source.md"})
COMPRESSED = (".gz", ".zst", ".bz2", ".xz")


# ---------------------------------------------------------------------------------------------
# reading a job

def read_job(folder: Path) -> Files:
    """Every file under ``folder`` by its relative posix path, in sorted order."""
    return {p.relative_to(folder).as_posix(): p.read_bytes()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def is_log(path: str) -> bool:
    """A file the analyzer is given (the case's truth and notes are not logs)."""
    name = path.rsplit("/", 1)[-1]
    return name not in META_NAMES and not name.endswith((".md", ".toml"))


def is_text(path: str) -> bool:
    return is_log(path) and not path.endswith(COMPRESSED)


def log_paths(files: Files) -> list[str]:
    return [p for p in files if is_log(p)]


def expected(files: Files) -> dict:
    raw = files.get("expected.toml")
    return tomllib.loads(raw.decode("utf-8")) if raw else {}


def write_job(files: Files, root: Path) -> list[str]:
    """Write the job under ``root``; the log paths in the dict's order (the order they are passed in)."""
    out = []
    for rel, data in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)
        if is_log(rel):
            out.append(str(p))
    return out


# ---------------------------------------------------------------------------------------------
# launcher prefixes, stamps, streams

ANSI = re.compile(rb"\x1b\[[0-9;]*[A-Za-z]")
# srun --label ("%*d: ", right-aligned to the widest task id), torchrun --tee ("[default3]:"), and
# PyTorch's "[rank19]:" in any of their stacked combinations
PREFIX = re.compile(rb"^(?P<srun> *(?P<task>\d+): )?(?P<tee>\[default(?P<lr>\d+)\]:)?(?P<rk>\[rank(?P<rank>\d+)\]:)?")

_MONTHS = [m.encode() for m in calendar.month_abbr[1:]]
_F = rb"(?P<f>\d{1,9})"
# the stamp formats a host's clock writes, each with its own fields (a rewrite keeps every field's
# width and every separator); a format with no year takes the job's year
STAMPS: list[tuple[str, re.Pattern[bytes]]] = [
    # ISO-8601, Python logging (comma), slash dates, torchelastic's "2026-03-02_14:07:31", with or without zone
    ("iso", re.compile(rb"(?<![\d.])(?P<Y>\d{4})(?P<s1>[-/])(?P<M>\d\d)(?P=s1)(?P<D>\d\d)[T _](?P<h>\d\d):(?P<m>\d\d):"
                       rb"(?P<s>\d\d)(?:[.,]" + _F + rb")?(?P<tz>Z|[+-]\d\d:?\d\d)?(?!\d)")),
    # the Hugging Face examples' "03/02/2026 14:07:31"
    ("mdy", re.compile(rb"(?<![\d/])(?P<M>\d\d)/(?P<D>\d\d)/(?P<Y>\d{4}) (?P<h>\d\d):(?P<m>\d\d):(?P<s>\d\d)(?!\d)")),
    # glog and c10 logging: "E0302 14:07:31.412345", "[W305 10:17:38.040221001 ...]"
    ("glog", re.compile(rb"(?<![\w])(?P<L>[IWEF])(?P<M>\d{1,2})(?P<D>\d\d) (?P<h>\d\d):(?P<m>\d\d):(?P<s>\d\d)\." + _F
                        + rb"(?!\d)")),
    # syslog / kernel: "Mar  2 14:07:31"
    ("syslog", re.compile(rb"(?<![\w])(?P<Mon>" + b"|".join(_MONTHS) + rb") (?P<D>[ \d]\d) (?P<h>\d\d):(?P<m>\d\d):"
                          rb"(?P<s>\d\d)(?!\d)")),
    # vLLM: "INFO 12-06 19:45:02"
    ("md", re.compile(rb"(?:(?<=INFO )|(?<=WARNING )|(?<=ERROR )|(?<=DEBUG ))(?P<M>\d\d)-(?P<D>\d\d) (?P<h>\d\d):(?P<m>\d\d):(?P<s>\d\d)"
                      rb"(?!\d)")),
]
_LEAD = re.compile(rb"^[\s\[]*")
# a number of seconds since the epoch (torchelastic's error.json "timestamp": "1712908871")
EPOCH_JSON = re.compile(rb'("timestamp":\s*"?)(\d{10})(?!\d)')


@dataclass(frozen=True, slots=True)
class Stamp:
    kind: str
    start: int
    end: int
    m: re.Match[bytes]


def find_stamps(raw: bytes) -> list[Stamp]:
    """Every stamp in a line, leftmost first, not overlapping."""
    found = sorted((m.start(), -m.end(), kind, m) for kind, rx in STAMPS for m in rx.finditer(raw))
    out: list[Stamp] = []
    for start, neg_end, kind, m in found:
        if out and start < out[-1].end:
            continue
        out.append(Stamp(kind, start, -neg_end, m))
    return out


def _fields(st: Stamp, year: int) -> tuple[datetime, int] | None:
    """The stamp as a naive datetime (to the second) and nanoseconds, in its own zone."""
    g = st.m.groupdict()
    try:
        if st.kind == "syslog":
            month, day = _MONTHS.index(g["Mon"]) + 1, int(g["D"])
        else:
            month, day = int(g["M"]), int(g["D"])
        y = int(g["Y"]) if g.get("Y") else year
        if st.kind == "mdy" and month > 12:
            month, day = day, month
        dt = datetime(y, month, day, int(g["h"]), int(g["m"]), int(g["s"]))
    except ValueError:
        return None
    f = g.get("f")
    return dt, int(f.decode().ljust(9, "0")) if f else 0


def stamp_time(st: Stamp, year: int) -> float | None:
    """Seconds since the epoch (a stamp without zone counted as UTC, as the tests run with tz=UTC)."""
    got = _fields(st, year)
    if got is None:
        return None
    dt, ns = got
    t = calendar.timegm(dt.timetuple()) + ns / 1e9
    tz = st.m.groupdict().get("tz")
    if tz and tz != b"Z":
        sign = -1 if tz[:1] == b"-" else 1
        digits = tz[1:].replace(b":", b"")
        t -= sign * (int(digits[:2]) * 3600 + int(digits[2:]) * 60)
    return t


def shift_stamp(st: Stamp, d_ns: int, year: int) -> bytes | None:
    """The stamp as the same clock would have printed it ``d_ns`` later: each field in its own width,
    the fraction truncated to its printed digits (a clock prints the floor of its time)."""
    got = _fields(st, year)
    if got is None:
        return None
    dt, ns = got
    f = st.m.group("f") if "f" in st.m.re.groupindex else None
    total = ns + d_ns
    if f is None:
        # the printed second is the floor of a time somewhere in that second: shift its middle
        total += 500_000_000
    secs, rem = divmod(total, 1_000_000_000)
    new = dt + timedelta(seconds=secs)
    values = {"Y": new.year, "M": new.month, "D": new.day, "h": new.hour, "m": new.minute, "s": new.second}
    pieces: list[tuple[int, int, bytes]] = []
    for name in ("Y", "M", "D", "h", "m", "s", "Mon", "f"):
        if name not in st.m.re.groupindex or st.m.group(name) is None:
            continue
        a, b = st.m.span(name)
        old = st.m.group(name)
        if name == "Mon":
            text = _MONTHS[new.month - 1]
        elif name == "f":
            text = str(rem).zfill(9)[: len(old)].encode()
        elif name == "D" and old[:1] == b" ":
            text = f"{values['D']:2d}".encode()
        else:
            text = str(values[name]).zfill(len(old)).encode()
        pieces.append((a - st.start, b - st.start, text))
    body = st.m.group(0)
    out, pos = b"", 0
    for a, b, text in sorted(pieces):
        out += body[pos:a] + text
        pos = b
    return out + body[pos:]


@dataclass(slots=True)
class Line:
    path: str
    idx: int
    raw: bytes
    prefix: bytes        # the launcher prefixes (srun label, tee tag, [rankN]:) as printed
    task: int | None     # srun task
    lr: int | None       # torchrun --tee local rank
    prank: int | None    # PyTorch's [rankN]: tag
    body: bytes          # the line after its launcher prefixes
    kp: int | None = None  # the [rankN]: tag when it tells writers apart (several in one srun task/file)

    @property
    def key(self) -> tuple:
        """The writing process: srun task, then the tee'd worker, else the [rankN]: writer."""
        return (self.path, self.task, self.lr, self.kp)


def split_lines(data: bytes) -> tuple[list[bytes], bool]:
    parts = data.split(b"\n")
    if parts and parts[-1] == b"":
        return parts[:-1], True
    return parts, False


def join_lines(lines: list[bytes], trailing: bool = True) -> bytes:
    return b"\n".join(lines) + (b"\n" if trailing and lines else b"")


def parse_lines(path: str, data: bytes) -> list[Line]:
    out = []
    for i, raw in enumerate(split_lines(data)[0]):
        m = PREFIX.match(raw)
        assert m is not None
        out.append(Line(path, i, raw, raw[: m.end()],
                        int(m["task"]) if m["task"] else None, int(m["lr"]) if m["lr"] else None,
                        int(m["rank"]) if m["rank"] else None, raw[m.end():]))
    # a [rankN]: tag tells writers apart only where one srun task (or file) has several; in a rank's
    # own file its tagged stderr and untagged stdout are the same process
    tags: dict[int | None, set[int]] = defaultdict(set)
    for ln in out:
        if ln.lr is None and ln.prank is not None:
            tags[ln.task].add(ln.prank)
    for ln in out:
        if ln.lr is None and len(tags.get(ln.task, ())) > 1:
            ln.kp = ln.prank
    return out


def leading_stamp(body: bytes) -> Stamp | None:
    """The stamp a line starts with (after ANSI colours, blanks and an opening bracket)."""
    clean = ANSI.sub(b"", body)[:80]
    lead = _LEAD.match(clean)
    pos = lead.end() if lead else 0
    for st in find_stamps(clean):
        if st.start == pos or (st.start <= 1 and pos <= 1):
            return st
        break
    return None


@lru_cache(maxsize=256)
def _years(data: bytes) -> tuple[tuple[int, int], ...]:
    years: dict[int, int] = defaultdict(int)
    for m in STAMPS[0][1].finditer(data[:200_000]):
        years[int(m["Y"])] += 1
    return tuple(years.items())


def job_year(files: Files) -> int:
    """The year most ISO stamps of the job carry (for formats without one)."""
    years: dict[int, int] = defaultdict(int)
    for p, data in files.items():
        if is_text(p):
            for y, n in _years(data):
                years[y] += n
    return max(years, key=years.get) if years else 2026  # type: ignore[arg-type]


def line_times(lines: list[Line], year: int) -> list[float | None]:
    """Each line's time for ordering: its own leading stamp, else the last stamped line of its own
    process before it (the analyzer's inheritance), else the first one after it."""
    own = []
    for ln in lines:
        st = leading_stamp(ln.body)
        own.append(stamp_time(st, year) if st else None)
    out: list[float | None] = [None] * len(lines)
    last: dict[tuple, float] = {}
    for i, ln in enumerate(lines):
        if own[i] is not None:
            last[ln.key] = own[i]  # type: ignore[assignment]
        out[i] = last.get(ln.key)
    first: dict[tuple, float] = {}
    for i in range(len(lines) - 1, -1, -1):
        if own[i] is not None:
            first[lines[i].key] = own[i]  # type: ignore[assignment]
        if out[i] is None:
            out[i] = first.get(lines[i].key)
    return out


# ---------------------------------------------------------------------------------------------
# what a stream says about itself

NCCL_ORIGIN = re.compile(rb"^(?P<host>[A-Za-z][\w.-]*):(?P<pid>\d+):(?P<tid>\d+) \[(?P<lr>\d+)\] NCCL")
NCCL_INIT = re.compile(rb"NCCL INFO (?:ncclCommInitRank\w* )?comm (?P<comm>0x[0-9a-f]+) rank (?P<rank>\d+) "
                       rb"nranks (?P<n>\d+) cudaDev (?P<dev>\d+)(?: nvmlDev \d+)? busId (?P<bus>[0-9a-f]+)")
RANK_SAYS = re.compile(rb"\[[Rr]ank[ =:]?(\d+)\]|\brank=(\d+)\b")


@dataclass(slots=True)
class StreamInfo:
    key: tuple
    lines: list[int] = field(default_factory=list)   # indices into the file's lines
    hosts: set[str] = field(default_factory=set)
    pid: bytes | None = None
    nccl_lr: int | None = None
    init: dict[int, tuple[int, bytes, bytes]] = field(default_factory=dict)  # nranks -> (rank, comm, bus)
    said: set[int] = field(default_factory=set)       # ranks the process names itself by


def stream_infos(lines: list[Line]) -> dict[tuple, StreamInfo]:
    out: dict[tuple, StreamInfo] = {}
    for i, ln in enumerate(lines):
        s = out.setdefault(ln.key, StreamInfo(ln.key))
        s.lines.append(i)
        body = ANSI.sub(b"", ln.body)
        m = NCCL_ORIGIN.match(body)
        if m:
            s.hosts.add(m["host"].decode())
            s.pid = s.pid or m["pid"]
            s.nccl_lr = int(m["lr"]) if s.nccl_lr is None else s.nccl_lr
            mi = NCCL_INIT.search(body)
            if mi:
                s.init.setdefault(int(mi["n"]), (int(mi["rank"]), mi["comm"], mi["bus"]))
        if ln.prank is not None:
            s.said.add(ln.prank)
        if b"ank" in body:
            for a, b in RANK_SAYS.findall(body[:400]):
                s.said.add(int(a or b))
    return out


def _job_nranks(infos: list[StreamInfo]) -> int | None:
    ns = [n for s in infos for n in s.init]
    return max(ns) if ns else None


def stated_rank(s: StreamInfo, nranks: int | None) -> int | None:
    """The global rank a process states (its job-wide NCCL init line, its [rankN]: tag, "[Rank N]"),
    when it states exactly one."""
    ranks = set(s.said)
    if nranks and nranks in s.init:
        ranks.add(s.init[nranks][0])
    return next(iter(ranks)) if len(ranks) == 1 else None


# ---------------------------------------------------------------------------------------------
# per-rank file families

_DIGITS = re.compile(rb"\d+")


def rank_family(files: Files) -> dict[int, str] | None:
    """Log files that are one rank each, by rank: two or more files of one folder whose names differ
    in one number only (``rank-3.out``, ``slurm-1234_17.out``, ``out.17.log``), each written by one
    process (no srun label, no tee tag), whose number is the rank: every statement of a rank inside
    the file agrees with it, and the numbers start at 0 unless every file states its rank."""
    groups: dict[tuple[str, bytes, int], dict[int, str]] = defaultdict(dict)
    for p in files:
        if not is_text(p):
            continue
        folder, _, name = p.rpartition("/")
        bname = name.encode()
        for k, m in enumerate(_DIGITS.finditer(bname)):
            template = bname[: m.start()] + b"{}" + bname[m.end():]
            groups[(folder, template, k)][int(m.group())] = p
    best = None
    for (_, _, _), members in groups.items():
        if len(members) >= 2 and (best is None or len(members) > len(best)):
            best = members
    if best is None:
        return None
    stated_all = True
    for r, p in best.items():
        lines, by_key = _parsed(p, files[p])
        if any(ln.task is not None or ln.lr is not None for ln in lines):
            return None
        infos = list(by_key.values())
        said = set().union(*(s.said for s in infos)) if infos else set()
        n = _job_nranks(infos)
        for s in infos:
            if n and n in s.init:
                said.add(s.init[n][0])
        if said and said != {r}:
            return None
        stated_all &= said == {r}
    if min(best) != 0 and not stated_all:
        return None
    return dict(sorted(best.items()))


def _merge(chunks: list[tuple[int, list[bytes], list[float | None]]]) -> list[bytes]:
    """Interleave several writers' lines by time (a line without a time keeps its place after the
    line before it); ties in writer order."""
    keyed = []
    for order, raws, times in chunks:
        last = float("-inf")
        for i, (raw, t) in enumerate(zip(raws, times)):
            last = t if t is not None else last
            keyed.append((last, order, i, raw))
    keyed.sort(key=lambda x: x[:3])
    return [x[3] for x in keyed]


def _replace(files: Files, drop: set[str], add: Files) -> Files:
    out = {p: b for p, b in files.items() if p not in drop}
    out.update(add)
    return out


def _fresh(files: Files, path: str) -> str:
    base, n = path, 1
    while path in files:
        stem, dot, ext = base.rpartition(".")
        path = f"{stem}-{n}.{ext}" if dot else f"{base}-{n}"
        n += 1
    return path


# ---------------------------------------------------------------------------------------------
# layout

def per_rank_to_srun(files: Files, rng: Random) -> Files | None:
    """One file per rank -> one ``srun --label`` stream (task id = rank, ``%*d: `` right-aligned to the
    widest id, as srun prints it), the ranks' lines interleaved by time. Who wrote each line is kept
    (the label is the rank the file name gave), and so is every line's stamp or, for an unstamped line,
    the stamped line of its own rank it follows: the same events by the same ranks at the same times."""
    fam = rank_family(files)
    if fam is None:
        return None
    year = job_year(files)
    width = len(str(max(fam)))
    chunks = []
    for r, p in fam.items():
        lines = parse_lines(p, files[p])
        times = line_times(lines, year)
        chunks.append((r, [f"{r:>{width}}: ".encode() + ln.raw for ln in lines], times))
    folder = next(iter(fam.values())).rpartition("/")[0]
    name = _fresh(files, (folder + "/" if folder else "") + "srun-combined.out")
    return _replace(files, set(fam.values()), {name: join_lines(_merge(chunks))})


def srun_to_per_rank(files: Files, rng: Random) -> Files | None:
    """One ``srun --label`` stream whose tasks are ranks -> one file per task (``srun --output
    <stem>_%t.out``); srun's and slurmstepd's own unlabelled lines stay in the original file. Only a
    stream whose tasks each are one rank (no tee tags; every task that names a rank names its own
    label, and at least half of them do): then the file's number is the rank, as the label was."""
    for p in log_paths(files):
        if not is_text(p):
            continue
        lines = parse_lines(p, files[p])
        labelled = [ln for ln in lines if ln.task is not None]
        if len(labelled) < len(lines) / 2 or any(ln.lr is not None for ln in labelled):
            continue
        infos = stream_infos(labelled)
        n = _job_nranks(list(infos.values()))
        by_task: dict[int, set[int]] = defaultdict(set)
        for s in infos.values():
            by_task[s.key[1]] |= s.said | ({s.init[n][0]} if n and n in s.init else set())
        if len(by_task) < 2 or any(said and said != {t} for t, said in by_task.items()):
            continue
        if sum(1 for said in by_task.values() if said) * 2 < len(by_task):
            continue
        folder, _, name = p.rpartition("/")
        stem = name.rsplit(".", 1)[0]
        add: Files = {}
        per: dict[int, list[bytes]] = defaultdict(list)
        rest = []
        for ln in lines:
            if ln.task is None:
                rest.append(ln.raw)
            else:
                per[ln.task].append(ln.raw[len(PREFIX.match(ln.raw)["srun"]):])  # type: ignore[index]
        for t, raws in sorted(per.items()):
            add[(folder + "/" if folder else "") + f"{stem}_{t}.out"] = join_lines(raws)
        if rest:
            add[p] = join_lines(rest)
        return _replace(files, {p}, add)
    return None


def per_rank_to_tee_nodes(files: Files, rng: Random) -> Files | None:
    """One file per rank -> one file per node as ``torchrun --tee 3`` writes it: every worker line
    tagged ``[default<L>]:`` by its local rank, the node's workers interleaved by time. Only where the
    files tell each rank's node and local rank (its NCCL lines ``host:pid:tid [L] NCCL``) and the rank
    states its global rank itself (job-wide NCCL init line or ``[rankN]:`` tag): a tee'd worker's
    global rank comes from what it says, not from a file name, so it must say it."""
    fam = rank_family(files)
    if fam is None:
        return None
    year = job_year(files)
    nodes: dict[str, list[tuple[int, int, str]]] = defaultdict(list)
    for r, p in fam.items():
        lines = parse_lines(p, files[p])
        infos = list(stream_infos(lines).values())
        if len(infos) != 1:
            return None
        s = infos[0]
        n = _job_nranks(infos)
        if len(s.hosts) != 1 or s.nccl_lr is None or stated_rank(s, n) != r:
            return None
        nodes[next(iter(s.hosts))].append((s.nccl_lr, r, p))
    for members in nodes.values():
        if len({lr for lr, _, _ in members}) != len(members):
            return None
    folder = next(iter(fam.values())).rpartition("/")[0]
    add: Files = {}
    for host, members in sorted(nodes.items()):
        chunks = []
        for lr, _r, p in sorted(members):
            lines = parse_lines(p, files[p])
            chunks.append((lr, [f"[default{lr}]:".encode() + ln.raw for ln in lines], line_times(lines, year)))
        add[_fresh(files, (folder + "/" if folder else "") + f"node-{host}.out")] = join_lines(_merge(chunks))
    return _replace(files, set(fam.values()), add)


# ---------------------------------------------------------------------------------------------
# tracebacks and progress

PROGRESS = re.compile(rb"(?i)\b(?:step|iter(?:ation)?|global_step|epoch|batch)\b\s*[=:#]?\s*\[?\d+|\bloss\s*[=:]\s*\d|"
                      rb"\d+/\d+ \[\d\d:\d\d")
_TB_START = b"Traceback (most recent call last):"
_TB_CHAIN = (b"During handling of the above exception", b"The above exception was the direct cause")


def _destamped(body: bytes) -> bytes:
    """A line's text with a leading stamp (and the separator after it) removed: what it would say
    if the stamp were not printed."""
    clean = ANSI.sub(b"", body)
    st = leading_stamp(body)
    if st is None:
        return clean
    return clean[st.end:].lstrip(b"] ").removeprefix(b"- ").removeprefix(b"| ").removeprefix(b": ")


def traceback_blocks(lines: list[Line]) -> list[list[int]]:
    """Python tracebacks, each as the indices of its lines (one process's lines only): from
    ``Traceback (most recent call last):`` through chained ones to the exception line."""
    blocks: list[list[int]] = []
    open_: dict[tuple, list[int]] = {}
    for i, ln in enumerate(lines):
        text = _destamped(ln.body)
        cur = open_.get(ln.key)
        if _TB_START in text:
            if cur is None:
                cur = open_[ln.key] = []
                blocks.append(cur)
            cur.append(i)
            continue
        if cur is None:
            continue
        stripped = text.strip()
        if (text[:1] in (b" ", b"\t") or not stripped or any(stripped.startswith(c) for c in _TB_CHAIN)
                or set(stripped) <= set(b"^~ ")):
            cur.append(i)
            continue
        cur.append(i)  # the exception line ends the block
        del open_[ln.key]
    return [b for b in blocks if len(b) >= 2]


@lru_cache(maxsize=256)
def _parsed(path: str, data: bytes) -> tuple[list[Line], dict[tuple, StreamInfo]]:
    """A file's lines and streams (cached by content: the transformations only read them)."""
    lines = parse_lines(path, data)
    return lines, stream_infos(lines)


def _streams(files: Files) -> dict[str, tuple[list[Line], dict[tuple, StreamInfo]]]:
    return {p: _parsed(p, files[p]) for p in log_paths(files) if is_text(p)}


def _insert(files: Files, path: str, at: dict[int, list[bytes]], append_after: dict[int, list[bytes]] | None = None,
            drop: set[int] | None = None, replace: dict[int, bytes] | None = None) -> Files:
    """Rewrite one file's lines: new lines before line i (``at``) or after it (``append_after``),
    lines dropped, lines replaced."""
    raws, trailing = split_lines(files[path])
    out: list[bytes] = []
    for i, raw in enumerate(raws):
        out.extend(at.get(i, ()))
        if not drop or i not in drop:
            out.append(replace.get(i, raw) if replace else raw)
        if append_after:
            out.extend(append_after.get(i, ()))
    new = dict(files)
    new[path] = join_lines(out, trailing or bool(append_after))
    return new


def _in_blocks(lines: list[Line]) -> set[int]:
    return {i for b in traceback_blocks(lines) for i in b}


def _warning_line(pre: bytes, st: Stamp, logger: str, msg: str) -> bytes:
    """A stamped WARNING line in the stamp format of the line it precedes."""
    stamp = st.m.group(0)
    if st.kind == "glog":
        return pre + b"W" + stamp[1:] + b" 1947 " + logger.encode() + b".py:112] " + msg.encode()
    if st.kind == "iso" and (b"," in stamp or b" " in stamp):
        return pre + stamp + b" - " + logger.encode() + b" - WARNING - " + msg.encode()
    return pre + stamp + b" WARNING " + logger.encode() + b": " + msg.encode()


# caught errors a run logs and goes on from: the warning, then the traceback the handler printed
CAUGHT = [
    ("urllib3.connectionpool",
     "Retrying (Retry(total=4, connect=None, read=None, redirect=None, status=None)) after connection broken by "
     "'ProtocolError('Connection aborted.', ConnectionResetError(104, 'Connection reset by peer'))': /api/upload",
     ["Traceback (most recent call last):",
      '  File "/opt/conda/lib/python3.11/site-packages/urllib3/connectionpool.py", line 793, in urlopen',
      "    response = self._make_request(",
      '  File "/opt/conda/lib/python3.11/site-packages/urllib3/connectionpool.py", line 537, in _make_request',
      "    response = conn.getresponse()",
      "ConnectionResetError: [Errno 104] Connection reset by peer"]),
    ("train.metrics",
     "Retrying metrics push (attempt 1/5) after error: timed out",
     ["Traceback (most recent call last):",
      '  File "/workspace/train/metrics.py", line 58, in push',
      "    sock.sendall(payload)",
      "TimeoutError: timed out"]),
    ("train.ckpt_upload",
     "Retrying upload of shard 3 (attempt 2/5) after error: [Errno 32] Broken pipe",
     ["Traceback (most recent call last):",
      '  File "/workspace/train/upload.py", line 141, in _put',
      "    conn.send(chunk)",
      '  File "/opt/conda/lib/python3.11/http/client.py", line 1055, in send',
      "    self.sock.sendall(data)",
      '  File "/opt/conda/lib/python3.11/ssl.py", line 1274, in sendall',
      "    v = self.send(byte_view[count:count + amount])",
      "BrokenPipeError: [Errno 32] Broken pipe"]),
]


def _progress_points(lines: list[Line], s: StreamInfo, year: int) -> list[tuple[int, Stamp, float]]:
    out = []
    for i in s.lines:
        ln = lines[i]
        st = leading_stamp(ln.body)
        if st is not None and PROGRESS.search(ANSI.sub(b"", ln.body)):
            t = stamp_time(st, year)
            if t is not None:
                out.append((i, st, t))
    return out


def caught_traceback(files: Files, rng: Random) -> Files | None:
    """Into one process's stream -- at its start, its middle, or two minutes before its end -- a
    stamped ``WARNING ... Retrying ... after error`` line and the 4-8 line traceback its handler
    printed (no stamps), right before one of its progress lines that has another after it, so that
    its progress goes on after it (at least two progress lines). An error that is caught, logged and followed by more progress of the same process is no
    failure of that process, whatever the exception says; nothing else in the job changes."""
    year = job_year(files)
    options = []
    for p, (lines, infos) in _streams(files).items():
        for s in infos.values():
            pts = _progress_points(lines, s, year)
            if len(pts) < 2:
                continue
            # each place is a progress line with another one after it: the process's progress goes on
            end = max(t for _, _, t in pts)
            places = {}
            if len(pts) >= 3:
                places = {"start": pts[1], "middle": pts[len(pts) // 2]}
            late = [k for k, x in enumerate(pts) if x[2] >= end - 120 and k > 0]
            if late and late[0] < len(pts) - 1:
                places["end-2min"] = pts[late[0]]
            for where, pt in places.items():
                options.append((p, where, pt))
    if not options:
        return None
    p, where, (i, st, _) = rng.choice(options)
    lines = _streams(files)[p][0]
    logger, msg, tb = rng.choice(CAUGHT)
    pre = lines[i].prefix
    new = [_warning_line(pre, st, logger, msg)] + [pre + x.encode() for x in tb]
    return _insert(files, p, {i: new})


RETRIES = [
    ("urllib3.connectionpool",
     "Retrying (Retry(total=4, connect=None, read=None, redirect=None, status=None)) after connection broken by "
     "'ReadTimeoutError(\"HTTPSConnectionPool(host='huggingface.co', port=443): Read timed out. (read timeout=10)\")': "
     "/api/datasets/allenai/c4/revision/main"),
    ("huggingface_hub.utils._http",
     "'(ReadTimeoutError(\"HTTPSConnectionPool(host='huggingface.co', port=443): Read timed out. (read timeout=10)\"), "
     "'(Request ID: 4f1c2b0e-7d3a-4c55-9b1e-2a6f0c9d8e11)')' thrown while requesting HEAD "
     "https://huggingface.co/meta-llama/Llama-3.1-8B/resolve/main/config.json. Retrying in 1s [Retry 1/5]."),
    ("wandb", "Network error (ConnectionError), entering retry loop."),
]


def retry_warnings(files: Files, rng: Random) -> Files | None:
    """2-5 stamped retry warnings (urllib3's ``Retrying (Retry(total=4, ...))``, huggingface_hub's
    ``Retrying in 1s [Retry 1/5]``, wandb's ``entering retry loop``) in random processes' streams,
    each before one of that process's stamped lines and with its stamp. A retried request is a
    warning, not a failure, and the lines around it are unchanged."""
    year = job_year(files)
    spots = []
    for p, (lines, infos) in _streams(files).items():
        inside = _in_blocks(lines)
        for s in infos.values():
            for i in s.lines[1:]:
                st = leading_stamp(lines[i].body)
                if st is not None and i not in inside and stamp_time(st, year) is not None:
                    spots.append((p, i, st))
    if not spots:
        return None
    new = dict(files)
    chosen = rng.sample(spots, min(len(spots), rng.randint(2, 5)))
    by_file: dict[str, dict[int, list[bytes]]] = defaultdict(dict)
    for p, i, st in chosen:
        logger, msg = rng.choice(RETRIES)
        by_file[p][i] = [_warning_line(parse_lines(p, files[p])[i].prefix, st, logger, msg)]
    for p, at in by_file.items():
        new = _insert(new, p, at)
    return new


def nccl_shutdown_chatter(files: Files, rng: Random) -> Files | None:
    """After the last line of a rank that outlived the job, NCCL's teardown lines as its proxy
    thread and ``ncclCommDestroy`` print them (no stamps): ``[Service thread] Connection closed by
    localRank L`` and ``comm 0x... rank R nranks N cudaDev L busId B - Destroy COMPLETE`` (``Abort
    COMPLETE`` in a failed job, whose ranks abort their communicators), with the
    rank's own host, pid, local rank, job-wide rank and bus id (from its NCCL init line). Which ranks:
    in a healthy job every rank (they all finished); in a failed one, the non-root ranks whose own
    output goes on more than 5 s past the root's last line (they saw the failure and tore down).
    Not a rank whose output ends before the failure: "Destroy COMPLETE" there would say it left the
    job early, which is how a rank that makes the others hang looks -- another truth. Nor the root, nor
    any rank of a job-level end or an undetermined case (who outlived what is not known)."""
    exp = expected(files)
    streams = _streams(files)
    times = _file_times(files, streams)
    ending = "Destroy" if exp.get("verdict") == "no_failure" else "Abort"
    if exp.get("verdict") == "no_failure":
        root, t_min = None, float("-inf")
    else:
        got = root_time(files, streams, times)
        if got is None:
            return None
        root, t_root = got
        t_min = t_root + 5
    new = dict(files)
    changed = False
    for p, (lines, infos) in streams.items():
        n = _job_nranks(list(infos.values()))
        after: dict[int, list[bytes]] = {}
        for s in infos.values():
            r = stated_rank(s, n)
            if r is None or r == root or len(s.hosts) != 1 or n is None or n not in s.init or s.pid is None:
                continue
            last = s.lines[-1]
            t_last = times[p][last]
            if t_last is None or t_last <= t_min:
                continue
            _, comm, bus = s.init[n]
            pre = lines[last].prefix
            host, lr, pid = next(iter(s.hosts)), s.nccl_lr, s.pid.decode()
            tid = int(pid) + 61
            after[last] = [
                pre + f"{host}:{pid}:{tid} [{lr}] NCCL INFO [Service thread] Connection closed by localRank {lr}".encode(),
                pre + f"{host}:{pid}:{pid} [{lr}] NCCL INFO comm {comm.decode()} rank {r} nranks {n} cudaDev {lr} "
                      f"busId {bus.decode()} - {ending} COMPLETE".encode()]
        if after:
            new = _insert(new, p, {}, append_after=after)
            changed = True
    return new if changed else None


WARNINGS = [
    ["/opt/conda/lib/python3.11/site-packages/torch/_utils.py:831: UserWarning: TypedStorage is deprecated. It will "
     "be removed in the future and UntypedStorage will be the only storage class. This should only matter to you if "
     "you are using storages directly.  To access UntypedStorage directly, use tensor.untyped_storage() instead of "
     "tensor.storage()",
     "  return self.fget.__get__(instance, owner)()"],
    ["/opt/conda/lib/python3.11/site-packages/torch/utils/checkpoint.py:464: UserWarning: torch.utils.checkpoint: the "
     "use_reentrant parameter should be passed explicitly. In version 2.4 we will raise an exception if use_reentrant "
     "is not passed. use_reentrant=False is recommended, but if you need to preserve the current default behavior, you "
     "can pass use_reentrant=True. Refer to docs for more details on the differences between the two variants.",
     "  warnings.warn("],
    ["/opt/conda/lib/python3.11/site-packages/transformers/training_args.py:1525: FutureWarning: `evaluation_strategy` "
     "is deprecated and will be removed in version 4.46 of 🤗 Transformers. Use `eval_strategy` instead",
     "  warnings.warn("],
    ["/workspace/train/main.py:212: FutureWarning: `torch.cuda.amp.GradScaler(args...)` is deprecated. Please use "
     "`torch.amp.GradScaler('cuda', args...)` instead.",
     "  scaler = torch.cuda.amp.GradScaler()"],
]


def deprecation_warnings(files: Files, rng: Random) -> Files | None:
    """2-6 Python ``UserWarning``/``FutureWarning`` pairs (``file.py:N: UserWarning: ...`` and the
    source line ``warnings`` prints under it, no stamps) in random processes' streams, after a line
    that is neither inside a traceback nor the stream's last. A deprecation notice changes nothing a
    process does, and it is placed where it moves no stream's end."""
    spots = []
    for p, (lines, infos) in _streams(files).items():
        inside = _in_blocks(lines)
        for s in infos.values():
            for i in s.lines[:-1]:
                if i not in inside:
                    spots.append((p, i))
    if not spots:
        return None
    new = dict(files)
    by_file: dict[str, dict[int, list[bytes]]] = defaultdict(dict)
    for p, i in rng.sample(spots, min(len(spots), rng.randint(2, 6))):
        pre = parse_lines(p, files[p])[i].prefix
        by_file[p][i] = [pre + x.encode() for x in rng.choice(WARNINGS)]
    for p, after in by_file.items():
        new = _insert(new, p, {}, append_after=after)
    return new


def drop_traceback_stamps(files: Files, rng: Random) -> Files | None:
    """The leading stamps of a traceback's lines removed, all but the first stamped line of each
    traceback (as stderr prints a traceback, with the logging call or the collector's first stamp
    before it). The first stamp is kept because it is the time of the failure to within the printing
    of a few lines; dropping it too can leave an unstamped traceback at the end of its stream, whose
    time -- and so its order against another rank's failure -- no log shows (that is a different
    truth, not a different writing of the same one)."""
    new = dict(files)
    changed = False
    for p, (lines, _) in _streams(files).items():
        repl: dict[int, bytes] = {}
        for block in traceback_blocks(lines):
            stamped = [i for i in block if leading_stamp(lines[i].body) is not None]
            for i in stamped[1:]:
                ln = lines[i]
                body = ln.body
                # the stamp of the de-coloured text, found again in the raw body
                st = leading_stamp(body)
                assert st is not None
                text = st.m.group(0)
                k = body.find(text)
                if k < 0:
                    continue
                rest = body[k + len(text):]
                rest = rest.removeprefix(b"]").lstrip(b" ")
                for sep in (b"- ", b"| ", b": "):
                    rest = rest.removeprefix(sep)
                head = body[:k].rstrip(b"[ ")
                repl[i] = ln.prefix + head + rest
        if repl:
            new = _insert(new, p, {}, replace=repl)
            changed = True
    return new if changed else None


# ---------------------------------------------------------------------------------------------
# clocks

def _units(files: Files) -> dict[tuple[str, int | None], set[str]]:
    """Lines one host's clock stamped: a whole file, or one srun task's lines of a combined file;
    each with the hosts its NCCL lines name."""
    out: dict[tuple[str, int | None], set[str]] = {}
    for p, (_lines, infos) in _streams(files).items():
        for s in infos.values():
            out.setdefault((p, s.key[1]), set()).update(s.hosts)
    return out


def host_clock_shift(files: Files, rng: Random) -> Files | None:
    """Every stamp written on one host (its files, or its srun task's lines in a combined stream;
    leading stamps and the ones inside lines, such as a failure table's ``time :``) moved by ``d``
    seconds, 0.05 <= |d| <= 1, each rewritten in its own format and precision (ISO, Python logging
    ``2026-03-02 14:07:31,412``, glog ``E0302 14:07:31.412345``, torchelastic, syslog, the Hugging Face
    examples' month-first form, error.json's epoch seconds). Hosts' clocks differ by this much in
    real clusters, and the events are the same events: only one clock's reading changed. Only a host
    whose lines are whole units (no unit mixes it with another host) is shifted."""
    units = _units(files)
    fam = rank_family(files) or {}
    if any(not units.get((p, None)) for p in fam.values()):
        return None  # a rank file whose host is unknown may be on the shifted host
    hosts = sorted({h for hs in units.values() if len(hs) == 1 for h in hs})
    clean = [h for h in hosts if not any(h in hs and len(hs) > 1 for hs in units.values())]
    if not clean:
        return None
    host = rng.choice(clean)
    d = rng.uniform(0.05, 1.0) * rng.choice((-1, 1))
    d_ns = int(d * 1e9)
    year = job_year(files)
    new = dict(files)
    for p, task in [u for u, hs in units.items() if hs == {host}]:
        raws, trailing = split_lines(new[p])
        for i, raw in enumerate(raws):
            m = PREFIX.match(raw)
            t = int(m["task"]) if m and m["task"] else None
            if t != task:
                continue
            out, pos = b"", 0
            for st in find_stamps(raw):
                text = shift_stamp(st, d_ns, year)
                if text is None:
                    continue
                out += raw[pos:st.start] + text
                pos = st.end
            raws[i] = out + raw[pos:]
        new[p] = join_lines(raws, trailing)
    # torchelastic's error.json of that host's workers
    for p in list(new):
        if p.endswith("error.json") and any(p.rpartition("/")[0] == q.rpartition("/")[0] for (q, _), hs in units.items()
                                            if hs == {host}):
            new[p] = EPOCH_JSON.sub(lambda m: m[1] + str(int(m[2]) + round(d)).encode(), new[p])
    return new if new != files else None


# ---------------------------------------------------------------------------------------------
# files

def rename_files(files: Files, rng: Random) -> Files | None:
    """Top-level log files renamed. Rank files whose every file states its rank inside become
    ``worker_NN.out`` (the rank is in the text, so the name carries nothing); other rank files keep
    their rank token and get a new prefix and extension (``rank-3.out`` -> ``trainjob.rank-3.log``);
    any other file keeps its name's words and changes its extension only (a host or job id in a name
    stays). Where a log is written is not what happened in it; files in folders (a ``--log-dir``
    tree, whose path is the structure) are left alone."""
    fam = rank_family(files) or {}
    renames: dict[str, str] = {}
    if fam:
        stated = True
        for r, p in fam.items():
            lines = parse_lines(p, files[p])
            infos = list(stream_infos(lines).values())
            n = _job_nranks(infos)
            stated &= len(infos) == 1 and stated_rank(infos[0], n) == r
        for r, p in fam.items():
            folder, _, name = p.rpartition("/")
            comp = next((c for c in COMPRESSED if name.endswith(c)), "")
            if stated and not name.startswith("worker_"):
                new = f"worker_{r:02d}.out{comp}"
            else:
                base = name[: len(name) - len(comp)] if comp else name
                stem = base.rsplit(".", 1)[0] if "." in base else base
                new = f"trainjob.{stem}.log{comp}"
            renames[p] = (folder + "/" if folder else "") + new
    for p in log_paths(files):
        if p in renames or "/" in p:
            continue
        comp = next((c for c in COMPRESSED if p.endswith(c)), "")
        base = p[: len(p) - len(comp)] if comp else p
        stem, dot, ext = base.rpartition(".")
        if not dot:
            stem, ext = base, ""
        renames[p] = f"{stem}.{'out' if ext == 'log' else 'log'}{comp}"
    if not renames or len(set(renames.values())) != len(renames):
        return None
    taken = set(files) - set(renames)
    if taken & set(renames.values()):
        return None
    return {renames.get(p, p): b for p, b in files.items()}


def shuffle_order(files: Files, rng: Random) -> Files | None:
    """The same files passed in another order. Which file is read first is no fact of the job."""
    logs = log_paths(files)
    if len(logs) < 2:
        return None
    order = logs[:]
    while order == logs:
        rng.shuffle(order)
    out = {p: files[p] for p in files if not is_log(p)}
    out.update((p, files[p]) for p in order)
    return out


def gzip_some(files: Files, rng: Random) -> Files | None:
    """Some log files (at least one, not always all) gzip-compressed as ``name.gz``, as sites
    compress old logs. The bytes inside are the same."""
    logs = [p for p in log_paths(files) if is_text(p) and not p.endswith(".json")]
    if not logs:
        return None
    chosen = set(rng.sample(logs, rng.randint(1, max(1, (len(logs) + 1) // 2))))
    if any(p + ".gz" in files for p in chosen):
        return None
    return {(p + ".gz" if p in chosen else p): (gzip.compress(b, mtime=0) if p in chosen else b)
            for p, b in files.items()}


def _ranked_streams(files: Files, streams) -> list[tuple[str, StreamInfo, int]]:
    """The streams whose global rank is known: a rank file's, or a process that states it."""
    fam = {p: r for r, p in (rank_family(files) or {}).items()}
    out = []
    for p, (_lines, infos) in streams.items():
        n = _job_nranks(list(infos.values()))
        for s in infos.values():
            r = fam[p] if p in fam and len(infos) == 1 else stated_rank(s, n)
            if r is not None:
                out.append((p, s, r))
    return out


_RESTART = re.compile(rb"will restart worker group|Restarting worker group|restart_count=[1-9]|attempt_[1-9]")


def restarted(files: Files) -> bool:
    """Whether the job was restarted (torchelastic attempts): after a restart, lines later than the
    root's failure are a new attempt's, not the failure's cascade."""
    return any(_RESTART.search(p.encode()) for p in files) or any(
        _RESTART.search(b) for p, b in files.items() if is_text(p))


def root_time(files: Files, streams, times: dict[str, list[float | None]]) -> tuple[int, float] | None:
    """The case's root rank (``expected.toml``) and the latest of its own lines' times and the
    generator's ``root_time``: no failure of the root is later than that. None for a job that was
    restarted (what comes after a failure is then another attempt)."""
    exp = expected(files)
    root = exp.get("root_rank")
    if exp.get("verdict") != "root_cause" or root is None or restarted(files):
        return None
    cands = []
    synth_t = exp.get("synth", {}).get("root_time")
    if synth_t:
        cands.append(datetime.fromisoformat(synth_t.replace("Z", "+00:00")).timestamp())
    for p, s, r in _ranked_streams(files, streams):
        if r == root:
            cands += [times[p][i] for i in s.lines if times[p][i] is not None]  # type: ignore[misc]
    return (root, max(cands)) if cands else None


@lru_cache(maxsize=256)
def _times(path: str, data: bytes, year: int) -> list[float | None]:
    return line_times(_parsed(path, data)[0], year)


def _file_times(files: Files, streams) -> dict[str, list[float | None]]:
    year = job_year(files)
    return {p: _times(p, files[p], year) for p in streams}


def cut_collateral_tail(files: Files, rng: Random) -> Files | None:
    """The last 1-20 lines of one non-root rank dropped -- only lines stamped (or inheriting a stamp)
    more than 5 s after the root's last line, and the rank keeps at least one such line: it still
    shows it outlived the root's failure, and only the end of its own dying output is lost (a process
    killed mid-print, a buffer not flushed).

    The literal reading -- cut a healthy rank's last progress lines from before the root's failure --
    changes the truth: a rank whose output ends before the root's failure, with nothing after, is
    what a silent culprit looks like (``nccl-hang-silent-culprit``); the logs would then no longer
    single the root out. The 5 s margin is over any host clock skew the cases have. Needs the case's
    root rank (``expected.toml``) and its time (the root's own stream, or the generator's
    ``root_time``); not for a restarted job, whose later lines are a new attempt (with failures of
    its own), not the root's cascade."""
    streams = _streams(files)
    times = _file_times(files, streams)
    got = root_time(files, streams, times)
    if got is None:
        return None
    root, t_root = got
    options = []
    for p, s, r in _ranked_streams(files, streams):
        if r == root:
            continue
        idx = s.lines
        late = [times[p][i] is not None and times[p][i] > t_root + 5 for i in idx]  # type: ignore[operator]
        c = len(idx)
        while c > 0 and late[c - 1]:
            c -= 1
        room = len(idx) - c - 1  # keep idx[c], the first late line
        if room >= 1:
            options.append((p, idx, room))
    if not options:
        return None
    p, idx, room = rng.choice(options)
    k = rng.randint(1, min(20, room))
    return _insert(files, p, {}, drop=set(idx[-k:]))


# ---------------------------------------------------------------------------------------------

TRANSFORMS: dict[str, Transform] = {
    "per_rank_to_srun": per_rank_to_srun,
    "srun_to_per_rank": srun_to_per_rank,
    "per_rank_to_tee_nodes": per_rank_to_tee_nodes,
    "caught_traceback": caught_traceback,
    "retry_warnings": retry_warnings,
    "nccl_shutdown_chatter": nccl_shutdown_chatter,
    "deprecation_warnings": deprecation_warnings,
    "drop_traceback_stamps": drop_traceback_stamps,
    "host_clock_shift": host_clock_shift,
    "rename_files": rename_files,
    "shuffle_order": shuffle_order,
    "gzip_some": gzip_some,
    "cut_collateral_tail": cut_collateral_tail,
}
#: transformations that change only the order the files are passed in, not their bytes
ORDER_ONLY = frozenset({"shuffle_order"})


@dataclass(frozen=True)
class Composition:
    names: tuple[str, ...]
    seed: int

    def apply(self, files: Files) -> tuple[Files, tuple[str, ...]] | None:
        """The steps applied in turn (a step not applicable to the job as it then is, is skipped);
        None when none applied."""
        rng = Random(self.seed)
        done = []
        for name in self.names:
            out = TRANSFORMS[name](files, rng)
            if out is not None:
                files = out
                done.append(name)
        return (files, tuple(done)) if done else None


def st_transforms():
    """A hypothesis strategy: 1-3 transformations (by name) and a seed, as a ``Composition``."""
    from hypothesis import strategies as st

    return st.builds(Composition, st.lists(st.sampled_from(sorted(TRANSFORMS)), min_size=1, max_size=3).map(tuple),
                     st.integers(0, 2**32 - 1))
