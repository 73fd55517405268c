"""Line hygiene and the prefixes launchers put in front of a line.

Owns: removing ANSI colour codes, choosing the ``\\r`` progress frame that holds a hit, and
splitting ``12: [default3]:[rank25]: message`` into who wrote it and the message. Pure functions
over ``str``; knows nothing of rules or files.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from correlator.extract import dialects
from correlator.model.digest import pickled_by_fields

_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b[@-Z\\-_]")
# One or more stacked prefixes at the start of a line, and mpirun's stand-alone tags: built from the
# dialect registry (``dialects.PREFIXES``, ``dialects.STANDALONE``)
_PREFIX = re.compile(dialects.prefix_regex())
#: the groups of ``_PREFIX`` that fill each field of a ``Prefix``, outermost dialect first
_TASK, _LOCAL, _RANK, _HOST, _PID = (dialects.prefix_groups()[f] for f in dialects.PREFIX_FIELDS)
_MPI = re.compile(dialects.STANDALONE[0].pattern)
#: mpirun --timestamp-output: "2019-06-02T16:13:44.884Z: [1,12]<stdout>:message"
_MPI_STAMPED = re.compile(dialects.STANDALONE[1].pattern)
#: a plain line naming its rank inside the message (no prefix): ``[Rank 5] ...``, ``[RANK 5]``, or
#: a logger's bracket that ends with it (OLMo: ``CRITICAL [olmo.util:158, rank=6] ...``)
_RANK_IN_TEXT = re.compile(r"\[(?:Rank|RANK|rank) ?(\d{1,6})\]|\[[^\[\]\n]{0,80}?,\s*rank=(\d{1,6})\]")
_RANK_IN_TEXT_B = re.compile(_RANK_IN_TEXT.pattern.encode())
#: the same without its ``, rank=N]`` branch, for bytes without ``rank=`` (where that branch cannot
#: match, so the matches are the same): ``re`` tries it at every ``[`` (ANSI codes, log levels), 80
#: characters each, a fifth of the census of a rank's file
_RANK_BRACKET = r"\[(?:Rank|RANK|rank) ?(\d{1,6})\]"
assert _RANK_IN_TEXT.pattern.startswith(_RANK_BRACKET + "|")
_RANK_IN_TEXT_B_BRACKET = re.compile(_RANK_BRACKET.encode())
_RANK_EQ = re.compile(rb"rank=")
# WARN lines name NCCL's source location between the device and "NCCL": ``[0] ib_plugin.c:1105 NCCL WARN``
_NCCL_HOST = re.compile(
    r"(?:^|\s)(?P<host>[A-Za-z0-9][\w.-]*):(?P<pid>\d+):(?P<tid>\d+) \[(?P<dev>\d+)\] (?:[\w/.-]+:\d+ )?NCCL ")

MAX_TEXT = 4000  # characters of one message kept for display and matching


@pickled_by_fields
@dataclass(frozen=True, slots=True)
class Prefix:
    task: int | None
    local_rank: int | None
    rank: int | None
    #: characters of the raw line the prefixes took
    length: int
    #: the host a pdsh prefix (or Ray's ``ip=``) names
    host: str | None = None
    #: the process a Ray actor tag names
    pid: int | None = None
    #: a time stamp the launcher put in the tag (mpirun --timestamp-output), read as the line's
    stamp: str = ""

    @property
    def key(self) -> tuple:
        return (self.task, self.local_rank, self.rank, self.host, self.pid)


NO_PREFIX = Prefix(None, None, None, 0)


def strip_ansi(text: str) -> str:
    if "\x1b" not in text:
        return text
    return _ANSI.sub("", text)


def split_prefix(line: str) -> tuple[Prefix, str]:
    """Who wrote the line (as far as its prefixes say) and the message after them."""
    m = _PREFIX.match(line)
    end = m.end() if m else 0
    if end == 0:
        mp = _MPI.match(line)
        if mp:
            return Prefix(None, None, int(mp.group("rank")), mp.end()), line[mp.end():].lstrip(" ")
        ms = _MPI_STAMPED.match(line) if line[:1].isdigit() else None
        if ms:
            return (Prefix(None, None, int(ms.group("rank")), ms.end(), stamp=ms.group("stamp")),
                    line[ms.end():].lstrip(" "))
        return NO_PREFIX, line
    assert m is not None
    got = m.group
    task = local = rank = pid = None
    for g in _TASK:
        if got(g):
            task = int(got(g))
            break
    for g in _LOCAL:
        if got(g):
            local = int(got(g))
            break
    for g in _RANK:
        if got(g):
            rank = int(got(g))
            break
    host = next((got(g) for g in _HOST if got(g)), None)
    for g in _PID:
        if got(g):
            pid = int(got(g))
            break
    msg = line[end:]
    if rank is None and local is None and task is None and (host or pid):
        mp = _MPI.match(msg)  # pdsh in front of mpirun's tag
        if mp:
            rank = int(mp.group("rank"))
            end += mp.end()
            msg = msg[mp.end():].lstrip(" ")
    # PyTorch adds a space after its tag in some versions ("[rank3]: Traceback")
    if rank is not None and msg.startswith(" "):
        msg = msg[1:]
    return Prefix(task, local, rank, end, host, pid), msg


def frame_at(line: str, pos: int) -> str:
    """The ``\\r``-separated frame of ``line`` containing ``pos``: an error glued after tqdm frames."""
    if "\r" not in line:
        return line
    start = line.rfind("\r", 0, pos) + 1
    end = line.find("\r", pos)
    return line[start:] if end < 0 else line[start:end]


def clean(raw: str) -> str:
    """A printable message: no ANSI codes, no trailing CR/space, no NULs, capped."""
    text = strip_ansi(raw).replace("\x00", "").rstrip("\r\n ")
    if len(text) > MAX_TEXT:
        text = text[:MAX_TEXT] + " …[cut]"
    return text


def rank_in_text(message: str) -> int | None:
    m = _RANK_IN_TEXT.search(message, 0, 300)
    return int(m.group(1) or m.group(2)) if m else None


def ranks_in_text(data: bytes, limit: int = 3) -> set[int]:
    """The distinct ranks that lines of ``data`` state in their own text (``[rank 13] ...``), up to
    ``limit`` of them: two or more say the bytes hold several processes' lines."""
    found: set[int] = set()
    pattern = _RANK_IN_TEXT_B if _RANK_EQ.search(data) is not None else _RANK_IN_TEXT_B_BRACKET
    for m in pattern.finditer(data):
        found.add(int(m.group(1) or m.group(2)))
        if len(found) >= limit:
            break
    return found


def nccl_origin(message: str) -> tuple[str, int, int] | None:
    """``(host, pid, device)`` from an NCCL ``host:pid:tid [dev] NCCL ...`` line."""
    m = _NCCL_HOST.search(message, 0, 300)
    if not m:
        return None
    return m.group("host"), int(m.group("pid")), int(m.group("dev"))
