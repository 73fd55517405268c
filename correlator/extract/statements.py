"""What a source's lines state about who is who: the identity statements of one source.

Owns the built-in fact patterns (scanned with the rules: failure-table records, NCCL communicator
init lines, torchelastic's rendezvous, Ray's worker tables), turning their lines into
``IdentityFact``s, a failure table's owner of the lines inside it, and the census that tells a
node's or a job's combined file from one rank's (``Statements.check_writers``). It must not know
about rules or matches; the global stage joins the facts (``correlate.identity``).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import replace

from correlator.extract import dialects
from correlator.extract.lines import Buffer, Context, parse_line, same_writer
from correlator.extract.prefixes import Prefix, nccl_origin, ranks_in_text
from correlator.model import FactSource, IdentityFact, Who

#: the head bytes on which a source is judged one writer's or not
ONE_WRITER_PROBE = 256 << 10
#: how far into a file named like a rank's its workers' --tee tags are looked for (a node's workers
#: all start at once: their tags are in the first lines)
LOCAL_TAG_PROBE = 64 << 10
#: bytes of a rank-named file searched for lines stating two ranks in their text (a node's processes
#: all announce themselves at start-up; the whole 256 KiB probe cost 1.6 ms a file)
RANK_TEXT_PROBE = 16 << 10

#: the census of a file's writers (``line_start_captures``): the stacked prefixes of the dialect
#: registry, on bytes, and the groups that name a writer (a rank or an srun task); the lines looked
#: at are those the dialects' census hints find
_STACK = re.compile(dialects.prefix_regex().encode())
_WRITER_GROUPS = dialects.prefix_groups()["rank"] + dialects.prefix_groups()["task"]
_CENSUS_HINTS = re.compile(b"|".join(dialects.census_hints()))
#: torchrun's --tee tag of a node's worker at a line start ("[default3]:", behind an srun label)
_LOCAL_TAG_NL = re.compile(rb"\n(?:\s{0,6}\d{1,6}: )?\[(?!rank\d)[A-Za-z_]+(\d{1,5})\]:")
#: how every tag ends (``re`` finds it several times faster than ``bytes.find``: memchr on its first byte)
_TAG_END = re.compile(rb"\]:")

_TABLE_FIELD = re.compile(r"^\s*(time|host|rank|exitcode|error_file|traceback)\s*:\s*(.*)$")
_TABLE_RANK = re.compile(r"(-?\d+)\s*\(local_rank:\s*(\d+)\)")
_TABLE_EXIT = re.compile(r"(-?\d+)\s*\(pid:\s*(\d+)\)")
_TABLE_SEP = re.compile(r"^\s*(?:\[\d+\]:\s*$|={20,}|-{20,}|Root Cause|Failures:|Other Failures:)")
_NCCL_COMM = re.compile(r"NCCL INFO (?:ncclCommInitRank\w* )?comm 0x[0-9a-fA-F]+ rank (\d+) n[Rr]anks (\d+)")
_RDZV_GROUP = re.compile(r"group_rank=(\d+)")
_NCCL_BUS = re.compile(r"\bbusId ([0-9a-fA-F]{1,16})\b")
_RAY_PG = re.compile(r"Setting up process group for: \S+ \[rank=(\d+)\]")
_RAY_TRAIN = re.compile(r"(?:\bip=(?P<ip>[\d.]{7,15}), )?pid=(?P<pid>\d+)\) world_rank=(?P<rank>\d+), local_rank=(?P<local>\d+)")
_RDZV_GLOBAL = re.compile(r"global_ranks=\[([\d, ]*)\]")
_RDZV_LOCAL = re.compile(r"local_ranks=\[([\d, ]*)\]")

#: built-in fact patterns, scanned with the rules (ids after the rules' own): (name, regex, keywords)
FACTS: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("table", r"rank\s*:\s*-?\d+\s*\(local_rank:\s*\d+\)", ("(local_rank:",)),
    ("nccl-comm", r"NCCL INFO (?:ncclCommInitRank\w* )?comm 0x[0-9a-fA-F]+ rank \d+ n[Rr]anks \d+",
     ("NCCL INFO comm 0x", "NCCL INFO ncclCommInitRank")),
    ("rendezvous", r"global_ranks=\[", ("global_ranks=[",)),
    # Ray's torch runner (RaySGD, ray.train) names each worker's rank as it joins the process group
    ("ray-pg", r"Setting up process group for: \S+ \[rank=\d+\]", ("Setting up process group for:",)),
    # Ray Train's table of its workers: "- (node_id=..., ip=10.0.3.11, pid=5003) world_rank=3, local_rank=1, ..."
    ("ray-train", r"pid=\d+\) world_rank=\d+, local_rank=\d+", ("world_rank=",)),
)


#: distinct NCCL init lines remembered per source (a rank states a handful; a combined stream of
#: the whole job one handful per rank): beyond that, lines are parsed as they come
NCCL_LINES_KEPT = 4096
_NCCL_VOLATILE = re.compile(rb"( comm(?:Id)? 0x)([0-9a-fA-F]+)(?= )")
#: a hex digit of a communicator's pointer or id as the key has it: a byte no ASCII line holds
_HEX_AS_FF = bytes.maketrans(b"0123456789abcdefABCDEF", b"\xff" * 22)


def _nccl_keys(joined: bytes) -> list[bytes]:
    """``nccl_line_key`` of each line of ``joined`` (ASCII lines joined by newlines), at once: the
    substitutions never reach across a newline, so the key of the lines joined is their keys joined."""
    parts: list[bytes] = _NCCL_VOLATILE.split(joined)  # text, " comm 0x", digits, ...
    if len(parts) > 1:
        parts[2::3] = b"\n".join(parts[2::3]).translate(_HEX_AS_FF).split(b"\n")
    return b"".join(parts).split(b"\n")


def nccl_line_key(raw: bytes) -> bytes:
    """An ASCII NCCL init line (no ANSI codes, no ``\\r``) with each hex digit of its ``comm 0x...``
    and ``commId 0x...`` (followed by a space) made a ``\\xff`` byte: lines with the same key give the
    same fact. The digits' count keeps every position (NCCL's origin is looked for in the first 300
    characters), and no pattern of the fact or of the launcher prefixes tells one hex digit from
    another there (each follows ``0x`` or another digit, where no digit, word boundary or literal is
    tried). No ASCII line holds ``\\xff``: two keys are equal only where the lines' other bytes and
    their digits' places are. (A communicator's ``Init START`` and ``Init COMPLETE`` lines have two
    keys: each is parsed once, and the second states what the first did.)"""
    return _nccl_keys(raw)[0]


def line_start_captures(text: bytes, hyperscan: bool = False) -> set[bytes]:
    """The numbers the lines of ``text`` name their writers by in their prefixes (ranks, srun
    tasks). Only the first line and the lines a census hint finds are matched: by Hyperscan with
    ``hyperscan``, else by ``re``."""
    starts: list[int] | None = None
    if hyperscan:
        from correlator.extract.scan import window_finder

        finder = window_finder()
        if finder is not None:
            starts = finder.prefix_lines(text)
    if starts is None:
        rfind = text.rfind
        starts = sorted({rfind(b"\n", 0, m.end() - 1) + 1 for m in _CENSUS_HINTS.finditer(text)})
    out: set[bytes] = set()
    match = _STACK.match
    for ls in (0, *starts):
        m = match(text, ls)
        if m and m.end() > ls:
            for g in _WRITER_GROUPS:
                v = m.group(g)
                if v:
                    out.add(v)
    return out


def several_local_tags(text: bytes) -> bool:
    """Whether lines of ``text`` carry two different --tee tags ([default0]:, [default1]:)."""
    if _TAG_END.search(text) is None:  # (every tag ends so: a file without one is not looked at line by line)
        return False
    first = _LOCAL_TAG_NL.match(b"\n" + text[:200])
    seen = {first.group(1)} if first else set()
    for m in _LOCAL_TAG_NL.finditer(text):
        seen.add(m.group(1))
        if len(seen) >= 2:
            return True
    return False


def table_owner(buf: Buffer, start: int, pbytes: bytes, who: Who) -> Who:
    """A line inside a torchelastic failure table (the agent's copy of a worker's traceback) is about
    the rank the table record names, not about the agent that printed it."""
    data = buf.data
    lo = start
    for _ in range(80):  # no record line in reach (one find, not 80 parses): nothing to look for
        if lo <= 0:
            break
        lo = data.rfind(b"\n", 0, lo - 1) + 1
    if data.find(b"(local_rank:", lo, start) < 0:
        return who
    for s, e in buf.lines_before(start, 80):
        if not same_writer(buf.data, s, pbytes):
            continue
        _, line = parse_line(buf.data[s:e])
        m = _TABLE_FIELD.match(line)
        if m and m.group(1) == "rank":
            r = _TABLE_RANK.search(m.group(2))
            if r:
                rank = int(r.group(1))
                return Who(rank if rank >= 0 else None, int(r.group(2)), who.task, who.host, who.pid)
            return who
        if _TABLE_SEP.match(line):
            return who
    return who


class Statements:
    """The identity statements of one source, gathered as its fact lines are found."""

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.identities: list[IdentityFact] = []
        #: what the NCCL init lines stated so far, by the parts of a line its fact is made of: a
        #: rank's thousand init lines (one per communicator, START and COMPLETE) state one fact,
        #: built once (the global stage joins facts by first statement and by agreement, so a
        #: repeat says nothing more)
        self._nccl_said: set[tuple] = set()
        #: the init lines seen, each as ``nccl_line_key`` (at most NCCL_LINES_KEPT)
        self._nccl_lines: set[bytes] = set()

    def nccl_line_said(self, raw: bytes) -> bool:
        """Whether the NCCL init line ``raw`` states what a line seen before stated (then it needs no
        parsing: its fact is that line's); a line not seen before is remembered. Lines that differ
        only in their communicator's pointer and id state the same (``nccl_line_key``); a line with
        non-ASCII bytes, ANSI codes or ``\r`` frames is always parsed."""
        if not raw.isascii() or b"\x1b" in raw or b"\r" in raw:
            return False
        key = nccl_line_key(raw)
        if key in self._nccl_lines:
            return True
        if len(self._nccl_lines) < NCCL_LINES_KEPT:
            self._nccl_lines.add(key)
        return False

    def nccl_lines_said(self, raws: Sequence[bytes]) -> list[bool]:
        """``[self.nccl_line_said(raw) for raw in raws]`` (lines in order), their keys worked out at
        once over the lines joined (``_nccl_keys``): an ``NCCL_DEBUG=INFO`` log's init lines cost a
        set lookup each, not a parse. The lines not plain ASCII are said not to be, and not kept."""
        if not raws:
            return []
        joined = b"\n".join(raws)
        plain: list[bool] | None = None
        if not joined.isascii() or b"\x1b" in joined or b"\r" in joined:
            plain = [raw.isascii() and b"\x1b" not in raw and b"\r" not in raw for raw in raws]
            joined = b"\n".join(raw if ok else b"" for raw, ok in zip(raws, plain, strict=True))
        seen = self._nccl_lines
        out: list[bool] = []
        said = out.append
        for k, key in enumerate(_nccl_keys(joined)):
            if key in seen:
                said(plain is None or plain[k])
                continue
            if len(seen) < NCCL_LINES_KEPT and (plain is None or plain[k]):
                seen.add(key)
            said(False)
        return out

    def check_writers(self, region: bytes) -> None:
        """A file whose lines carry several ranks' prefixes is a combined stream, and one with
        several workers' --tee tags ([default0]:, [default1]:) a node's: a number in its name
        (``train-hgx-001.log``) names a node or a job, not a rank -- for the agent's untagged lines too."""
        if self.ctx.src.file_rank is None:
            return
        probe = region[:ONE_WRITER_PROBE]
        ranks = line_start_captures(probe, self.ctx.hyperscan)
        # (or lines that state two ranks in their own text, "[rank 5] ...", "[rank 13] ...": a node's
        # file of unprefixed processes, named after its host)
        if len(ranks) >= 2 or several_local_tags(probe[:LOCAL_TAG_PROBE]) or len(ranks_in_text(probe[:RANK_TEXT_PROBE])) >= 2:
            self.ctx.src = replace(self.ctx.src, file_rank=None)

    def fact(self, buf: Buffer, kind: int, start: int, prefix: Prefix, msg: str, pbytes: bytes) -> None:
        """The statement of a line that fact pattern ``kind`` (an index of ``FACTS``) found."""
        name = FACTS[kind][0]
        path = self.ctx.src.path
        if name == "table":
            self._table(buf, start, prefix, msg, pbytes)
        elif name == "nccl-comm":
            m = _NCCL_COMM.search(msg)
            if m:
                origin = nccl_origin(msg)
                bus = _NCCL_BUS.search(msg)
                said = (m.group(1), m.group(2), origin, prefix.local_rank, prefix.task, prefix.rank,
                        bus.group(1) if bus else None)
                if said in self._nccl_said:
                    return  # stated already: the same fact
                self._nccl_said.add(said)
                who = Who(rank=int(m.group(1)), local_rank=origin[2] if origin else prefix.local_rank,
                          task=prefix.task, host=origin[0] if origin else None, pid=origin[1] if origin else None)
                if prefix.rank is not None and prefix.rank != who.rank:
                    return  # a sub-communicator's rank, not the global one
                # (the communicator's size rides along: a sub-communicator's rank is not the global one;
                # and the GPU's PCI bus id, which a kernel's Xid line names)
                self.identities.append(IdentityFact(who, prefix.task, path, FactSource.NCCL_INIT,
                                                    comm_size=int(m.group(2)),
                                                    bus=int(bus.group(1), 16) if bus else None))
        elif name == "ray-pg":
            m = _RAY_PG.search(msg)
            if m and prefix.pid is not None:  # the worker's pid is in Ray's "(pid=N)" tag
                self.identities.append(IdentityFact(Who(rank=int(m.group(1)), host=prefix.host, pid=prefix.pid),
                                                    prefix.task, path, FactSource.RAY))
        elif name == "ray-train":
            m = _RAY_TRAIN.search(msg)
            if m:
                who = Who(rank=int(m.group("rank")), local_rank=int(m.group("local")), host=m.group("ip"),
                          pid=int(m.group("pid")))
                self.identities.append(IdentityFact(who, None, path, FactSource.RAY))
        elif name == "rendezvous":
            g = _RDZV_GLOBAL.search(msg)
            if not g:
                return
            group = None
            local_list = None
            for s, e in buf.lines_before(start, 12):
                _, line = parse_line(buf.data[s:e])
                mg = _RDZV_GROUP.search(line)
                if mg and group is None:
                    group = int(mg.group(1))
                ml = _RDZV_LOCAL.search(line)
                if ml and local_list is None:
                    local_list = [int(x) for x in ml.group(1).replace(" ", "").split(",") if x]
            globals_ = [int(x) for x in g.group(1).replace(" ", "").split(",") if x]
            locals_ = local_list if local_list and len(local_list) == len(globals_) else list(range(len(globals_)))
            for lr, gr in zip(locals_, globals_):
                self.identities.append(IdentityFact(Who(rank=gr, local_rank=lr, task=prefix.task), prefix.task,
                                                    path, FactSource.RENDEZVOUS))

    def _table(self, buf: Buffer, start: int, prefix: Prefix, msg: str, pbytes: bytes) -> None:
        """A torchelastic failure-table record around its ``rank : N (local_rank: M)`` line."""
        m = _TABLE_RANK.search(msg)
        if not m or not re.match(r"\s*rank\s*:", msg):
            return
        fields: dict[str, str] = {}
        before, after = buf.context(start, pbytes, 6, 6)
        section_root = False
        for line in before:
            f = _TABLE_FIELD.match(line)
            if f:
                fields.setdefault(f.group(1), f.group(2).strip())
            elif re.match(r"\s*\[\d+\]:\s*$", line):
                fields.clear()  # a new record starts
        for line in after:
            if re.match(r"\s*\[\d+\]:\s*$", line) or line.startswith("---") or line.startswith("==="):
                break
            f = _TABLE_FIELD.match(line)
            if f:
                fields.setdefault(f.group(1), f.group(2).strip())
        for s, e in buf.lines_before(start, 60):
            if not same_writer(buf.data, s, pbytes):
                continue
            _, line = parse_line(buf.data[s:e])
            if "Root Cause (first observed failure)" in line:
                section_root = True
                break
            if "Failures:" in line or "Other Failures:" in line:
                break
        exitcode = pid = None
        ex = _TABLE_EXIT.search(fields.get("exitcode", ""))
        if ex:
            exitcode, pid = int(ex.group(1)), int(ex.group(2))
        t = None
        if fields.get("time"):
            p = self.ctx.stamps.parser.parse(fields["time"])
            t = p.time_ns if p else None
        rank = int(m.group(1))
        who = Who(rank=rank if rank >= 0 else None, local_rank=int(m.group(2)), task=prefix.task,
                  host=fields.get("host") or None, pid=pid)
        self.identities.append(IdentityFact(who, prefix.task, self.ctx.src.path, FactSource.FAILURE_TABLE, t,
                                            exitcode, section_root))
