"""The registry of log dialects: the prefixes launchers put in front of a line, and the timestamp formats.

Each dialect is one record: its pattern (what ``prefixes.split_prefix`` and ``timestamps.StampParser``
parse with) and its fast-path hint (what the Hyperscan window databases of ``scan`` look for so that
a line of the dialect is never passed over). Both sides are built from here: adding a dialect is one
record in this module and a line in its test (``tests/test_dialects.py`` proves, per dialect, that
every line its pattern matches is caught by the hints).

Prefixes stack in the order of ``PREFIXES`` (an srun label, then torchrun's ``--tee`` tag, then
PyTorch's rank tag: ``12: [default3]:[rank25]: msg``); ``STANDALONE`` prefixes (mpirun's tags) are
tried when none of the stack matched. The hints form one alternation, in ``hint_order``.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True, slots=True)
class PrefixDialect:
    name: str
    #: a regex fragment (``re`` syntax, named groups) for one optional element of the stack
    pattern: str
    #: a bytes regex that a line start (after ``\n``) holding this prefix matches; ``b""`` when
    #: ``covered_by`` names the dialect whose hint catches it too
    hint: bytes
    #: the place of the hint in the alternation (``re`` tries alternatives in order: the text a
    #: line start's match takes is how the fast path tells one writer's prefix kind from another's)
    hint_order: int
    #: real lines of the dialect (the test splits them and checks the hints catch them)
    examples: tuple[str, ...]
    covered_by: str = ""
    #: what its named groups fill in a ``prefixes.Prefix`` (group -> field: task, local_rank, rank,
    #: host, pid) where the group's name is not the field's own; other groups are read by no one
    fields: tuple[tuple[str, str], ...] = ()
    #: for a dialect that names a writer (a rank or a task): a bytes regex that every line holding
    #: it matches within that line, or from the newline before it (``scan.RANK_PREFIX_HINTS``: the census of a file's writers,
    #: ``statements.line_start_captures``, looks only at such lines)
    census_hint: bytes = b""


#: the stacked prefixes, outermost first. A hint is a superset of its pattern read with ``re``'s
#: Unicode classes: ``\d``, ``\w`` and ``\s`` also match non-ASCII characters, which the hints take as
#: any byte of ``\x80-\xff`` (with room for their UTF-8 length)
PREFIXES: tuple[PrefixDialect, ...] = (
    PrefixDialect(
        "runner-stream",  # a runner that tags each process's stream (milabench: "<bench>.<host>.nolog [stderr] ")
        r"[^\s\[]{1,200} \[std(?:out|err)\] ?",
        rb"[^ \t\n\[]{1,800} \[std(?:out|err)\]", 8,
        ("llama.gpu-a01.nolog [stderr] RuntimeError: CUDA error: out of memory",)),
    PrefixDialect(
        "ray-actor",  # Ray prints an actor tag first: "(WorkerDict pid=26110, ip=10.0.0.7) " (older Ray: "(pid=34272) ")
        r"\((?:(?P<actor>[A-Za-z_][\w.]{0,60}) )?pid=(?P<pid>\d{1,9})(?:, ip=(?P<ip>[\d.]{7,15}))?\) ",
        rb"\((?:[A-Za-z_][\w.\x80-\xff]{0,240} )?pid=", 7,
        ("(WorkerDict pid=26110, ip=10.0.0.7) torch.OutOfMemoryError: CUDA out of memory.",
         "(pid=34272) Traceback (most recent call last):"),
        fields=(("ip", "host"),)),
    PrefixDialect(
        # pdsh (DeepSpeed multi-node, clush) prints the host: "worker-1: ", "gpu-a09: " (or an IP address, as a
        # hostfile may name the workers: "10.0.0.6: "); a name must hold a digit and not be a word that ends
        # many plain messages ("rank0: ")
        "pdsh-host",
        r"(?P<host>(?!slurmstepd|(?:rank|local_rank|step|epoch|iter|iteration|cuda|device|batch|layer|loss|gpu\d|GPU)\d*[:\s])"
        r"[A-Za-z][A-Za-z0-9_-]{0,40}\d[A-Za-z0-9_.-]{0,40}"
        r"|(?:25[0-5]|2[0-4]\d|1?\d?\d)(?:\.(?:25[0-5]|2[0-4]\d|1?\d?\d)){3}): ",
        rb"[A-Za-z][A-Za-z0-9_.-]{0,40}[0-9\x80-\xff][A-Za-z0-9_.\x80-\xff-]{0,160}: ", 6,
        ("worker-1: [rank9]: RuntimeError: CUDA error: an illegal memory access was encountered",
         "10.0.0.6: OSError: [Errno 5] Input/output error")),
    PrefixDialect(
        "srun-label",  # srun --label: "12: "
        r"\s{0,6}(?P<task>\d{1,6}): ",
        rb"[ \t\r\f\v\x1c-\x1f\x80-\xff]{0,18}[0-9.\x80-\xff]{1,52}: ", 1,
        ("12: [default3]:[rank25]: torch.OutOfMemoryError: CUDA out of memory.", " 3: step 100 loss 2.1"),
        # (behind a pdsh host, a runner's stream tag or a Ray actor tag too: "gpu-a01: 5: "; after the
        # line's start or one of those, then the label's own spaces, which may hold a newline: "\n" is
        # the last of them. A plain "[0-9]: " hit every "step 12: " and cost a 4096-file job 0.2 ms a file.)
        census_hint=rb"(?:\n|[\]):] ?)[ \t\r\f\v]{0,6}[0-9]{1,6}: "),
    PrefixDialect(
        "torchrun-host-local",  # torchrun with a log-line prefix template naming the host: "[gpu187:2]:"
        r"\[(?P<host>[A-Za-z][\w.-]{0,60}):(?P<local>\d{1,5})\]:",
        rb"\[[A-Za-z][A-Za-z0-9_.\x80-\xff-]{0,240}:[0-9\x80-\xff]{1,20}\]:", 4,
        ("[gpu187:2]:RuntimeError: NCCL error",)),
    PrefixDialect(
        "torchrun-tee",  # torchrun --tee 3: "[default3]:"
        r"\[(?!rank\d)(?P<role>[A-Za-z_][A-Za-z_]*?)(?P<local>\d{1,5})\]:",
        rb"\[[A-Za-z_]+[0-9\x80-\xff]", 2,
        ("[default3]:Traceback (most recent call last):", "[trainer0]:[rank0]: step 5")),
    PrefixDialect(
        # Determined's launcher runs each worker under determined.launch.wrap_rank, which writes
        # "[rank=N] " before every line of the worker's stdout and stderr (its forward_stream)
        "determined-rank",
        r"\[rank=(?P<rank>\d{1,6})\] ",
        rb"\[rank=[0-9\x80-\xff]", 9,
        ("[rank=3] RuntimeError: CUDA error: an illegal memory access was encountered",
         "[rank=12] [rank12]:[E1130 10:00:00.000000000 ProcessGroupNCCL.cpp:632] [Rank 12] Watchdog caught"),
        census_hint=rb"\[rank=[0-9]"),
    PrefixDialect(
        "pytorch-rank",  # PyTorch's own tag: "[rank25]:"
        r"\[rank(?P<rank>\d{1,6})\]:",
        b"", 2,
        ("[rank25]:[E1130 10:00:00.000000000 ProcessGroupNCCL.cpp:632] [Rank 25] Watchdog caught collective operation timeout",),
        covered_by="torchrun-tee", census_hint=rb"\[rank\d"),
)

#: prefixes that stand alone (tried when the stack matched nothing, and behind a pdsh host)
STANDALONE: tuple[PrefixDialect, ...] = (
    PrefixDialect(
        "mpirun-tag",  # mpirun --tag-output: "[1,12]<stdout>:" (SageMaker: "[1,mpirank:7,algo-1]<stdout>:")
        r"\[(?P<job>\d+),(?:mpirank:)?(?P<rank>\d{1,6})(?:,[^\]\s]{1,80})?\]<std(?:out|err)>:",
        rb"\[[0-9\x80-\xff]+,", 5,
        ("[1,12]<stdout>:RuntimeError: CUDA error: out of memory", "[1,mpirank:7,algo-1]<stderr>:Traceback")),
    PrefixDialect(
        "mpirun-timestamp",  # mpirun --timestamp-output: "2019-06-02T16:13:44.884Z: [1,12]<stdout>:"
        r"(?P<stamp>\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?Z?): \[(?P<job>\d+),(?:mpirank:)?(?P<rank>\d{1,6})(?:,[^\]\s]{1,80})?\]<std(?:out|err)>:",
        rb"[0-9\x80-\xff]{4,16}-[0-9\x80-\xff]{2,8}-[0-9\x80-\xff]{2,8}T[0-9:.\x80-\xff]{8,}Z?: \[[0-9\x80-\xff]+,", 3,
        ("2019-06-02T16:13:44.884Z: [1,12]<stdout>:NCCL WARN Cuda failure 'out of memory'",)),
)


#: the fields of ``prefixes.Prefix`` a prefix group may fill
PREFIX_FIELDS = ("task", "local_rank", "rank", "host", "pid")
_GROUP = re.compile(r"\(\?P<(\w+)>")


def _field(d: PrefixDialect, group: str) -> str | None:
    name = dict(d.fields).get(group, group)
    name = "local_rank" if name == "local" else name
    return name if name in PREFIX_FIELDS else None


def prefix_regex() -> str:
    """The stacked prefix pattern: each dialect of ``PREFIXES`` optional, in order; each group named
    ``p<i>_<its name>`` (``i``: the dialect's place), so that dialects may use the same names."""
    def named(i: int, pattern: str) -> str:
        return _GROUP.sub(lambda g: f"(?P<p{i}_{g.group(1)}>", pattern)

    return "".join(f"(?:{named(i, d.pattern)})?" for i, d in enumerate(PREFIXES))


def prefix_groups() -> dict[str, tuple[str, ...]]:
    """Per field of ``prefixes.Prefix``, the groups of ``prefix_regex`` that fill it, outermost
    first (the first that matched gives the field)."""
    out: dict[str, list[str]] = {f: [] for f in PREFIX_FIELDS}
    for i, d in enumerate(PREFIXES):
        for g in _GROUP.findall(d.pattern):
            field = _field(d, g)
            if field is not None:
                out[field].append(f"p{i}_{g}")
    return {f: tuple(gs) for f, gs in out.items()}


def census_hints() -> tuple[bytes, ...]:
    """The hints of the lines that may name a writer (``PrefixDialect.census_hint``)."""
    return tuple(d.census_hint for d in PREFIXES if d.census_hint)


def prefix_hints() -> bytes:
    """One bytes alternation: a line start (after its ``\\n``) that may hold a launcher prefix."""
    hints = sorted((d for d in (*PREFIXES, *STANDALONE) if d.hint), key=lambda d: d.hint_order)
    return rb"\n(?:" + b"|".join(d.hint for d in hints) + b")"


# --- timestamps -----------------------------------------------------------------------------------

#: ``read(group, parser) -> (year, month, day, hour, minute, second, fraction, zone, year_inferred)``,
#: or for an epoch stamp ``(seconds, fraction)``; ``group(name)`` is the dialect's own named group
Reader = Callable[[Callable[[str], "str | None"], "YearGuess"], tuple]


class YearGuess(Protocol):
    """What a reader asks of the parser: the year of a stamp that shows none (from the reference)."""

    def _infer_year(self, mo: int, d: int) -> int: ...

_MONTHS = {m: i for i, m in enumerate(
    ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"), start=1)}


#: what the text of every stamp with a clock holds: its hour's last digit, a colon, its minute, a
#: colon and its seconds' first digit (an NCCL line's ``host:pid:tid`` origin, ``gpu-a000:40000:40071``,
#: holds a digit, a colon and a digit below 6 but not this: its lines are not searched for a stamp)
_CLOCK_NEEDS = r"\d:[0-5]\d:[0-6]"
#: the same clock, found at its first colon (one character: every colon of a text is looked at)
_CLOCK_ANCHOR = r":(?=[0-5]\d:[0-6])(?<=\d:)"


@dataclass(frozen=True, slots=True)
class StampDialect:
    name: str
    #: the branch's name in the parser's alternation, and the prefix of its groups there
    branch: str
    letter: str
    #: a regex (``re`` syntax) with the named groups its reader uses
    pattern: str
    read: Reader
    #: a bytes regex every line holding such a stamp matches (``scan``'s stamp hint database), and
    #: whether it is compiled multi-line (``^`` at each line start)
    hint: bytes
    multiline: bool
    examples: tuple[str, ...]
    #: an epoch stamp carries no calendar: its reader returns seconds and a fraction
    epoch: bool = False
    #: what every text the pattern matches holds, within the match (a ``str`` regex):
    #: ``StampParser.parse`` looks for it before trying the whole alternation
    needs: str = _CLOCK_NEEDS
    #: where ``StampParser.parse`` looks for a stamp that does not start its text: a regex of one
    #: character (and lookarounds) every stamp holds within it, ``reach`` characters after its start at
    #: most (the clock's first colon, or another landmark of a dialect whose text before its clock has
    #: no bound); ``^`` for a dialect whose pattern starts with it
    anchor: str = _CLOCK_ANCHOR
    reach: int = 0


def _iso(g: Callable[[str], str | None], _p: object) -> tuple:
    return (int(g("Y") or 0), int(g("m") or 0), int(g("d") or 0), int(g("H") or 0), int(g("M") or 0),
            int(g("S") or 0), g("f"), g("z"), False)


def _glog(g: Callable[[str], str | None], p: YearGuess) -> tuple:
    md = g("md") or ""
    mo, d = int(md[:-2]), int(md[-2:])
    return (p._infer_year(mo, d), mo, d, int(g("H") or 0), int(g("M") or 0), int(g("S") or 0),
            g("f"), None, True)


def _syslog(g: Callable[[str], str | None], p: YearGuess) -> tuple:
    mo, d = _MONTHS[g("b") or ""], int(g("d") or 0)
    y = g("Y")
    year = int(y) if y else p._infer_year(mo, d)
    return (year, mo, d, int(g("H") or 0), int(g("M") or 0), int(g("S") or 0), g("f"), None, not y)


def _us(g: Callable[[str], str | None], _p: object) -> tuple:
    mo, d, y = int(g("m") or 0), int(g("d") or 0), int(g("Y") or 0)
    if mo > 12 >= d:  # read day first when the first number cannot be a month ("25/03/2026")
        mo, d = d, mo
    return (y, mo, d, int(g("H") or 0), int(g("M") or 0), int(g("S") or 0), g("f"), None, False)


def _yymmdd(g: Callable[[str], str | None], _p: object) -> tuple:
    return (2000 + int(g("y") or 0), int(g("m") or 0), int(g("d") or 0), int(g("H") or 0), int(g("M") or 0),
            int(g("S") or 0), None, None, False)


def _epoch(g: Callable[[str], str | None], _p: object) -> tuple:
    return (int(g("e") or 0), g("f"))


_CLOCK_HINT = rb"[0-9\x80-\xbf]:[0-5]"  # every stamp with a clock has a digit-colon pair

#: tried as one alternation, in this order: the earliest match in the text wins (a stamp at the
#: start of a line beats a date quoted later in the message)
STAMPS: tuple[StampDialect, ...] = (
    StampDialect(
        # (also with slashes: "2026/03/02 14:00:00", as glog's and some C++ loggers' datefmt)
        "iso8601", "iso", "i",
        r"(?P<Y>(?:19|20)\d\d)[-/](?P<m>[01]\d)[-/](?P<d>[0-3]\d)[T _](?P<H>[0-2]\d):(?P<M>[0-5]\d):(?P<S>[0-6]\d)"
        r"(?:[.,](?P<f>\d{1,9}))?(?P<z>Z|[+-][01]\d:?[0-5]\d(?![\d:]))?",
        _iso, _CLOCK_HINT, False,
        ("2026-11-30T10:00:00.123456+01:00 rank 3 step 5", "[2026-11-30 10:00:00,123] INFO - step 5",
         "2026/03/02 14:00:00 I1130 something"), reach=13),
    StampDialect(
        # c10's own logger does not pad the month: "W407 10:13:23.08" is April 7, "E1120 ..." November 20
        "glog", "glog", "g",
        r"(?<![\w])[IWEF](?P<md>1[0-2][0-3]\d|0[1-9][0-3]\d|[1-9][0-3]\d) (?P<H>[0-2]\d):(?P<M>[0-5]\d):(?P<S>[0-6]\d)\.(?P<f>\d{3,9})(?!\d)",
        _glog, _CLOCK_HINT, False,
        ("[E1130 10:00:00.123456789 ProcessGroupNCCL.cpp:632] [Rank 3] Watchdog caught", "W407 10:13:23.084 x"),
        reach=8),
    StampDialect(
        "syslog", "syslog", "s",
        r"(?<![\w])(?P<b>Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) {1,2}(?P<d>[0-3]?\d) "
        r"(?P<H>[0-2]\d):(?P<M>[0-5]\d):(?P<S>[0-6]\d)(?:\.(?P<f>\d{1,9}))?(?: (?P<Y>(?:19|20)\d\d))?",
        _syslog, _CLOCK_HINT, False,
        ("Nov 30 10:00:00 gpu-a01 kernel: NVRM: Xid (PCI:0000:3b:00): 79", "Dec  1 09:00:00.5 2026 x"),
        reach=10),
    StampDialect(
        "epoch", "epoch", "e",
        r"^\[?(?P<e>1[5-9]\d{8}|2[0-4]\d{8})(?:\.(?P<f>\d{1,9}))?\]?(?=[\s:\]])",
        _epoch, rb"^\[?(?:1[5-9]|2[0-4])", True,
        ("1764496800.123 step 5", "[1764496800] rank 0"), epoch=True, needs=r"^\[?(?:1[5-9]|2[0-4])\d{8}",
        anchor="^"),
    StampDialect(
        # month first, as the Hugging Face example scripts log ("03/02/2026 14:00:00 - INFO - __main__")
        "us-date", "us", "u",
        r"(?<![\d/.])(?P<m>[0-3]?\d)/(?P<d>[0-3]?\d)/(?P<Y>(?:19|20)\d\d)[ T]+(?P<H>[0-2]?\d):(?P<M>[0-5]\d):(?P<S>[0-6]\d)"
        r"(?:[.,](?P<f>\d{1,9}))?",
        _us, _CLOCK_HINT, False,
        ("03/02/2026 14:00:00 - INFO - __main__ - step 5", "25/03/2026 14:00:00 x"),
        # (any number of blanks before its clock: its year's slash is the landmark, with what follows
        # it up to the clock's seconds, as a progress bar's "1056/2000 [" is not)
        anchor=r"/(?=(?:19|20)\d\d[ T]+[0-2]?\d:[0-5]\d:[0-6])", reach=5),
    StampDialect(
        # Spark's default log4j layout, "%d{yy/MM/dd HH:mm:ss} %p %c{1}: %m%n" (a driver's or an
        # executor's log: TorchDistributor, Horovod on Spark); the level after it tells it from a
        # day-first date with a two-digit year
        "log4j-yymmdd", "yymmdd", "y",
        r"(?<![\d/.])(?P<y>\d\d)/(?P<m>[01]\d)/(?P<d>[0-3]\d) (?P<H>[0-2]\d):(?P<M>[0-5]\d):(?P<S>[0-6]\d)"
        r"(?= (?:TRACE|DEBUG|INFO|WARN|ERROR|FATAL) )",
        _yymmdd, _CLOCK_HINT, False,
        ("24/03/02 14:00:05 ERROR Executor: Exception in task 0.0 in stage 1.0 (TID 1)",
         "24/03/02 14:00:00 INFO SparkContext: Running Spark version 3.5.1"), reach=11),
)


def stamp_regex() -> str:
    """The one alternation the parser searches with; each branch named, its groups lettered."""
    return "|".join(f"(?P<{d.branch}>" + d.pattern.replace("?P<", f"?P<{d.letter}") + ")" for d in STAMPS)


def stamp_plain() -> str:
    """``stamp_regex`` without its groups: where a stamp starts, at a third of its cost a character."""
    assert not any("(?P=" in d.pattern or "(?(" in d.pattern for d in STAMPS)  # (no group is referred to)
    return "|".join("(?:" + re.sub(r"\(\?P<\w+>", "(?:", d.pattern) + ")" for d in STAMPS)


def stamp_anchors() -> tuple[tuple[str, int], ...]:
    """Where ``StampParser.parse`` looks for a stamp that does not start its text: the distinct anchors
    of the dialects (``StampDialect.anchor``), each with the most characters a stamp of its dialects
    starts before it. A dialect anchored at the text's start (``^``) adds none: the parse tries there.
    (Searched one by one: an alternation of them costs the search its literal first character.)"""
    assert all(d.pattern.startswith("^") for d in STAMPS if d.anchor == "^")
    out: dict[str, int] = {}
    for d in STAMPS:
        if d.anchor != "^":
            out[d.anchor] = max(out.get(d.anchor, 0), d.reach)
    return tuple(out.items())


def stamp_needs() -> str:
    """One alternation of what every stamp of some dialect holds (``StampDialect.needs``): a text
    without a match has no stamp, and one search of it costs a tenth of the whole alternation's."""
    return "|".join(dict.fromkeys(f"(?:{d.needs})" for d in STAMPS))


def stamp_hints() -> tuple[tuple[bytes, bool], ...]:
    """The distinct hints of the stamp dialects, in order, with their multi-line flag."""
    out: dict[tuple[bytes, bool], None] = {}
    for d in STAMPS:
        out[(d.hint, d.multiline)] = None
    return tuple(out)
