"""Timestamps parsed to UTC nanoseconds, in the formats of the dialect registry (``dialects.STAMPS``).

Pure functions. A parse says what it had to assume: the zone (stamps without one are local time
of the ``--tz`` zone), the year (glog and syslog stamps carry none: it is inferred from a reference
time of the same file, across New Year), and its resolution (a whole-second stamp is an interval of
one second, which the correlator treats as uncertainty).
"""

from __future__ import annotations

import functools
import os
import re
import zoneinfo
from bisect import bisect_right
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta, tzinfo
from itertools import accumulate, repeat
from operator import add
from typing import NamedTuple
from zoneinfo import ZoneInfo

from correlator.extract import dialects
from correlator.model import NS
from correlator.model.digest import pickled_by_fields

_HALF_YEAR_NS = 183 * 86_400 * NS


@pickled_by_fields
@dataclass(frozen=True, slots=True)
class Parsed:
    time_ns: int
    #: the stamp's resolution: the true instant lies in [time_ns, time_ns + resolution_ns)
    resolution_ns: int
    #: the stamp had no zone; local time of the analysis zone was assumed
    tz_assumed: bool
    #: the stamp had no year; it was inferred from the reference time
    year_inferred: bool
    #: which registry entry parsed it
    format: str
    #: where in the text the stamp starts and ends
    span: tuple[int, int]


# The formats are the dialect registry's (``dialects.STAMPS``): one alternation, each branch named
# after its dialect, tried in order; the earliest match in the text wins.
_ANY = re.compile(dialects.stamp_regex())
#: what every match of ``_ANY`` holds (most lines of a traceback have no such thing)
_NEEDS = re.compile(dialects.stamp_needs())
#: the same over lines joined by newlines (``^``: a line's start; no part of it matches a newline)
_NEEDS_LINES = re.compile(dialects.stamp_needs(), re.MULTILINE)
#: the needs these dialects have, as two searches that each start with a literal the regex engine
#: jumps to (``_NEEDS`` tries its alternation at every character: ~20 ns each): a clock found at its
#: first colon, an epoch stamp at the newline before it. Only for the needs they were written from
#: (``FAST_NEEDS``; another set of dialects takes ``_NEEDS``, and a test says the fast one is off)
_FAST_NEEDS_OF = r"(?:\d:[0-5]\d:[0-6])|(?:^\[?(?:1[5-9]|2[0-4])\d{8})"
FAST_NEEDS = dialects.stamp_needs() == _FAST_NEEDS_OF
_CLOCK_AT_COLON = re.compile(r":(?<=\d:)[0-5]\d:[0-6]")
_EPOCH_AT_START = re.compile(r"\[?(?:1[5-9]|2[0-4])\d{8}")
_EPOCH_AFTER_NL = re.compile(r"\n\[?(?:1[5-9]|2[0-4])\d{8}")
#: what every stamp holds wherever a line's message starts (a needs' leading ``^`` dropped), in bytes:
#: an ASCII line without it holds no stamp, whatever its launcher prefix (``Stamps.of_line``)
_NEEDS_ANYWHERE = re.compile("|".join(dict.fromkeys(f"(?:{d.needs.removeprefix('^')})"
                                                    for d in dialects.STAMPS)).encode())


class _Branch(NamedTuple):
    """A dialect's branch of ``_ANY``: what its reader is given, and how a stamp of it is cached."""

    dialect: dialects.StampDialect
    #: its groups' names in ``_ANY``, and as its reader asks for them (one ``Match.group`` call for
    #: all of them, not one per field)
    names: tuple[str, ...]
    fields: tuple[str, ...]
    #: the numbers in ``_ANY`` of its groups but the fraction: what the cache of read stamps is keyed by
    key: tuple[int, ...]
    #: the number in ``_ANY`` of its fraction group (``f``), 0 when it has none
    frac: int


def _branches() -> dict[str, _Branch]:
    out = {}
    for d in dialects.STAMPS:
        fields = tuple(re.compile(d.pattern).groupindex)
        names = tuple(d.letter + n for n in fields)
        out[d.branch] = _Branch(d, names, fields, tuple(_ANY.groupindex[n] for n in names if n != d.letter + "f"),
                                _ANY.groupindex.get(d.letter + "f", 0))
    return out


_BRANCHES = _branches()
#: where a stamp that does not start its text is looked for (``dialects.stamp_anchors``): each starts at
#: most ``reach`` characters before an anchor it holds
_ANCHORS = tuple((re.compile(a), reach) for a, reach in dialects.stamp_anchors())
#: ``_ANY`` without its groups, at the first of ``_FINDER_SPAN`` places that holds a stamp (the
#: lookahead ends where the stamp starts); compiled on first use (~0.7 ms). As many places as the
#: stretch before one anchor has: most stretches are tried in one match
_FINDER: re.Pattern[str] | None = None
_FINDER_SPAN = max(reach for _, reach in _ANCHORS) + 1
# (``group`` of several names gives a tuple, of one a string: either is a key, the reader needs the tuple)
assert all(len(b.names) >= 2 for b in _BRANCHES.values())
#: 10 ** (9 - n): the resolution of a fraction of n digits, and what it is multiplied by to be nanoseconds
_SCALE = tuple(10 ** (9 - n) for n in range(10))
#: what a stamp's groups read as: its epoch second (None: no such instant), whether its zone was
#: assumed, whether its year was inferred, and the years its reader inferred ((month, day, year) each:
#: the same again for the parser at hand, or the stamp is read anew)
_Read = tuple[int | None, bool, bool, tuple[tuple[int, int, int], ...]]
#: per analysis zone, per branch: the stamps read so far (their groups but the fraction) -> what they
#: read as (``StampParser._learn``). A file has many stamps in the same second, and the ranks of a job
#: the same seconds: shared by the parsers of a process (each reads it with its own reference year).
#: Bounded: ``_READ_MAX`` stamps a branch, ``_READ_ZONES`` zones (a ``SystemLocal`` unpickled is a
#: zone of its own)
_READ: dict[tzinfo, dict[str, dict[object, _Read]]] = {}
_READ_MAX = 8192
_READ_ZONES = 8
_EPOCH_ORDINAL = date(1970, 1, 1).toordinal()


@functools.lru_cache(maxsize=4096)
def _day_ns(year: int, mo: int, d: int) -> float | None:
    """The start of a day in UTC nanoseconds as ``_infer_year`` compares it (a float, as
    ``datetime.timestamp`` gives it), None for a day that does not exist."""
    try:
        return datetime(year, mo, d, tzinfo=UTC).timestamp() * NS
    except ValueError:
        return None


@functools.lru_cache(maxsize=4096)
def _days(y: int, mo: int, d: int) -> int | None:
    """The UTC day number of a date (days since 1970-01-01), None for a date that does not exist."""
    try:
        return date(y, mo, d).toordinal() - _EPOCH_ORDINAL
    except ValueError:
        return None


class _YearLog:
    """The parser as a reader sees it (``dialects.YearGuess``): the years it inferred, written down."""

    __slots__ = ("asked", "parser")

    def __init__(self, parser: StampParser) -> None:
        self.parser = parser
        self.asked: list[tuple[int, int, int]] = []

    def _infer_year(self, mo: int, d: int) -> int:
        year = self.parser._infer_year(mo, d)
        self.asked.append((mo, d, year))
        return year


#: how far into a message a stamp is looked for
SEARCH_CHARS = 200


def resolve_tz(name: str | None) -> tzinfo:
    """The analysis zone: an IANA name, ``UTC``, or None (``local``) for the machine's zone (``local_zone``)."""
    if name is None or name == "local":
        return local_zone()
    if name.upper() in ("UTC", "Z", "GMT"):
        return UTC
    return ZoneInfo(name)


class SystemLocal(tzinfo):
    """The C library's local time (``TZ`` as a POSIX rule such as ``CET-1CEST,M3.5.0,M10.5.0/3``, or
    an ``/etc/localtime`` that names no zone): each instant gets the offset in force then, daylight
    saving included, as ``time.localtime`` computes it. Only when no IANA name can be found."""

    def utcoffset(self, dt: datetime | None) -> timedelta:
        if dt is None:
            return timedelta(0)
        import time

        # mktime reads the wall time as local (isdst -1: the library decides), localtime gives its offset
        t = time.mktime((dt.year, dt.month, dt.day, dt.hour, dt.minute, dt.second, 0, 0, -1))
        return timedelta(seconds=time.localtime(t).tm_gmtoff)

    def dst(self, dt: datetime | None) -> timedelta | None:
        return None

    def tzname(self, dt: datetime | None) -> str:
        return "local"

    def fromutc(self, dt: datetime) -> datetime:
        import calendar
        import time

        t = calendar.timegm(dt.replace(tzinfo=None).timetuple())
        return dt + timedelta(seconds=time.localtime(t).tm_gmtoff)

    def __reduce__(self) -> tuple[type, tuple[()]]:
        return (SystemLocal, ())


def _zone_key(path: str) -> str | None:
    """``Europe/Berlin`` from a path into a zone database (``/usr/share/zoneinfo/Europe/Berlin``)."""
    real = os.path.realpath(path)
    for base in (*zoneinfo.TZPATH, "/usr/share/zoneinfo"):
        base = os.path.realpath(base)
        if real.startswith(base + os.sep):
            return real[len(base) + 1:].removeprefix("posix/").removeprefix("right/")
    marker = "/zoneinfo/"
    return real.split(marker, 1)[1] if marker in real else None


def _zone(key: str | None) -> ZoneInfo | None:
    if not key:
        return None
    try:
        return ZoneInfo(key)
    except (ValueError, OSError, zoneinfo.ZoneInfoNotFoundError):  # not a name the database has
        return None


def local_zone() -> tzinfo:
    """This machine's zone with its rules (daylight saving included), not today's offset: the IANA
    zone of ``TZ`` (a name, ``:Name``, or a path into the zone database; empty is UTC, as for the C
    library), else the one ``/etc/localtime`` links to, else the name in ``/etc/timezone``, else the
    C library's local time (``SystemLocal``: a POSIX ``TZ`` rule or a copied ``/etc/localtime``)."""
    env = os.environ.get("TZ")
    if env is not None:
        name = env.removeprefix(":")
        if not name or name.upper() in ("UTC", "UTC0", "GMT", "GMT0", "Z"):
            return UTC
        found = _zone(_zone_key(name)) if name.startswith("/") else _zone(name)
        return found if found is not None else SystemLocal()
    found = _zone(_zone_key("/etc/localtime")) if os.path.islink("/etc/localtime") else None
    if found is None:
        try:
            with open("/etc/timezone", encoding="utf-8") as f:
                found = _zone(f.read().strip())
        except (OSError, UnicodeDecodeError):
            found = None
    if found is None:
        return SystemLocal() if os.path.exists("/etc/localtime") else UTC
    return UTC if found.key in ("UTC", "Etc/UTC", "Etc/UCT", "UCT", "Universal", "Zulu", "Etc/Zulu") else found


def zone_name(tz: tzinfo | None) -> str:
    """The name a report gives the analysis zone: the IANA key, ``UTC``, or the offset of a fixed one."""
    if tz is None or tz is UTC:
        return "UTC"
    if isinstance(tz, ZoneInfo):
        return tz.key or "UTC"
    if isinstance(tz, SystemLocal):
        return "local time of this machine (TZ " + (repr(os.environ["TZ"]) if "TZ" in os.environ else "from /etc/localtime") + ")"
    return tz.tzname(None) or "UTC"


def may_hold_stamp(text: str) -> bool:
    """Whether ``StampParser.parse`` may find a stamp in ``text``: False means it returns None
    without looking further (and without touching its state)."""
    if FAST_NEEDS:
        return (_CLOCK_AT_COLON.search(text, 0, SEARCH_CHARS) is not None
                or _EPOCH_AT_START.match(text, 0, SEARCH_CHARS) is not None)
    return _NEEDS.search(text, 0, SEARCH_CHARS) is not None


def lines_may_hold_stamp(texts: list[str]) -> list[bool]:
    """``[may_hold_stamp(t) for t in texts]`` (texts without a newline) in one search of the texts
    joined: what every stamp holds is of fixed length or at a line's start, so a line's first match
    is the one that ends first, and it must end within SEARCH_CHARS of the line's start."""
    out = [False] * len(texts)
    if not texts:
        return out
    at = list(accumulate(map(add, map(len, texts[:-1]), repeat(1)), initial=0))  # each text's start in the joined text
    joined = "\n".join(texts)
    k = -1
    for m in (_CLOCK_AT_COLON if FAST_NEEDS else _NEEDS_LINES).finditer(joined):
        if k >= 0 and m.start() < at[k] + len(texts[k]):
            continue  # (a later match in a line already judged)
        k = bisect_right(at, m.start()) - 1
        out[k] = m.end() - at[k] <= SEARCH_CHARS
    if FAST_NEEDS:
        for m in _EPOCH_AFTER_NL.finditer("\n" + joined):  # (at the newline before its line: its start)
            out[bisect_right(at, m.start()) - 1] = True
    return out


def may_hold_stamp_bytes(raw: bytes) -> bool:
    """Whether a line's stamp may be anywhere in ``raw`` (its launcher prefix's, its message's): False
    only for an ASCII line without ANSI codes in which nothing every stamp holds is found."""
    return not raw.isascii() or b"\x1b" in raw or _NEEDS_ANYWHERE.search(raw) is not None


def _search(text: str, at: int) -> re.Match[str] | None:
    """``_ANY.search(text, at, SEARCH_CHARS)``, trying only the places an anchor allows: each stamp
    starts at most ``reach`` characters before an anchor it holds. (``_ANY`` costs ~0.45 us a place
    it is tried at; 200 of them are 90 us.) The stretches before the anchors found are joined where
    they touch, and tried in order."""
    places: list[tuple[int, int]] = []  # the stretches a stamp may start in: (first, last)
    for anchor, reach in _ANCHORS:
        a = anchor.search(text, at, SEARCH_CHARS)
        while a is not None:  # (a search a time: ``finditer`` costs 0.4 us more when it finds nothing)
            pos = a.start()
            places.append((pos - reach if pos - reach > at else at, pos))
            a = anchor.search(text, pos + 1, SEARCH_CHARS)  # (an anchor is one character: this moves on)
    if not places:
        return None
    places.sort()
    lo, hi = places[0]
    for first, last in places[1:]:
        if first <= hi + 1:
            if last > hi:
                hi = last
            continue
        m = _find(text, lo, hi)
        if m is not None:
            return m
        lo, hi = first, last
    return _find(text, lo, hi)


def _find(text: str, first: int, last: int) -> re.Match[str] | None:
    """The stamp that starts first from ``first`` on (as ``_ANY`` reads it), looked for at least up
    to ``last``; or None. Any stamp it finds past ``last`` is the first too: every stamp starts in a
    stretch ``_search`` tries, and those before this one hold none. (Places are tried
    ``_FINDER_SPAN`` at a time, by one regex: a regex per length cost a compile each.)"""
    global _FINDER
    finder = _FINDER
    if finder is None:
        finder = _FINDER = re.compile(f"(?s:.{{0,{_FINDER_SPAN - 1}}}?)(?=(?:{dialects.stamp_plain()}))")
    while first <= last:
        f = finder.match(text, first, SEARCH_CHARS)
        if f is not None:
            return _ANY.match(text, f.end(), SEARCH_CHARS)
        first += _FINDER_SPAN
    return None


class StampParser:
    """Parses stamps with one analysis zone and a per-file reference time for missing years.

    What a stamp reads as is kept (``_READ``): a log has many stamps in the same second, which differ
    in their fraction only. The parse is that of ``_ANY`` (the earliest stamp in the text, the first
    dialect in registry order there) and the dialect's reader; ``tests/test_timestamps.py`` holds the
    plain parse this one is compared with.
    """

    def __init__(self, tz: tzinfo | None = None, reference_ns: int | None = None, *,
                 reference_is_bound: bool = False) -> None:
        self.tz = tz if tz is not None else UTC
        self.reference_ns = reference_ns
        #: the reference is an upper bound (the file's modification time), not a stamp from the file
        self.reference_is_bound = reference_is_bound
        read = _READ.get(self.tz)
        if read is None:
            if len(_READ) >= _READ_ZONES:
                _READ.clear()
            read = _READ[self.tz] = {k: {} for k in _BRANCHES}
        self._read = read
        #: the last reference whose year was asked, and its year (UTC)
        self._ref_year: tuple[int | None, int] = (None, 0)

    def _epoch_s(self, y: int, mo: int, d: int, h: int, mi: int, s: int, zone: str | None) -> int | None:
        """The instant of a calendar second (local time of the analysis zone when ``zone`` is None,
        else ``Z`` or an offset ``+01:00``), as ``datetime(...).timestamp()`` says; None when there is
        no such second. Arithmetic where the offset is fixed: UTC or the stamp's own."""
        leap = 0
        if s == 60:  # a leap second: 23:59:60 is the same instant as the next second's start
            s, leap = 59, 1
        if zone is None and self.tz is not UTC:
            try:
                return int(datetime(y, mo, d, h, mi, s, tzinfo=self.tz).timestamp()) + leap
            except ValueError:
                return None
        days = _days(y, mo, d)
        if days is None or not (0 <= h <= 23 and 0 <= mi <= 59 and 0 <= s <= 59):
            return None  # (what ``datetime`` refuses)
        off = 0
        if zone is not None and zone != "Z":
            digits = zone[1:].replace(":", "")
            off = int(digits[:2]) * 3600 + int(digits[2:4]) * 60
            if off >= 86_400:
                return None  # (``timezone`` takes less than a day)
            if zone[0] == "-":
                off = -off
        return days * 86_400 + h * 3600 + mi * 60 + s - off + leap

    def _infer_year(self, mo: int, d: int) -> int:
        ref = self.reference_ns
        if ref is None:
            return datetime.now(UTC).year
        seen, year = self._ref_year
        if seen != ref:
            year = datetime.fromtimestamp(ref / NS, tz=UTC).year
            self._ref_year = (ref, year)
        guess = _day_ns(year, mo, d)
        if guess is None:  # Feb 29 in a year without it: try the neighbours
            return year - 1 if mo == 2 else year
        if self.reference_is_bound:
            # nothing in a file was written after the file was: the latest year that keeps the stamp
            # at or before its modification time (a day of slack for the zone)
            return year - 1 if guess - ref > 86_400 * NS else year
        # A stamp far after the reference belongs to the previous year (a file that crossed New
        # Year, referenced by its end); far before, to the next one.
        if guess - ref > _HALF_YEAR_NS:
            return year - 1
        if ref - guess > _HALF_YEAR_NS:
            return year + 1
        return year

    def parse(self, text: str) -> Parsed | None:
        """The first stamp in the first ``SEARCH_CHARS`` characters of ``text``, or None: what
        ``_ANY.search(text, 0, SEARCH_CHARS)`` finds, read by its dialect's reader
        (``tests/test_timestamps.py`` holds that plain parse, and compares this one with it)."""
        # ``_ANY.search`` from 0 is ``_ANY.match`` at the first place it matches (its lookbehinds see
        # the text before where they start): most stamps begin a message, or follow its "["
        m = _ANY.match(text, 0, SEARCH_CHARS)
        if m is None:
            at = 1
            if text[:1] == "[":
                m = _ANY.match(text, 1, SEARCH_CHARS)
                at = 2
            if m is None:
                m = _search(text, at)
                if m is None:
                    return None
        kind = m.lastgroup or ""
        branch = _BRANCHES[kind]
        known = self._read[kind]
        key = m.group(*branch.key)
        got = known.get(key)
        if got is None or (got[3] and not self._same_years(got[3])):
            learnt = self._learn(branch, m, known, key)
            if learnt is None or isinstance(learnt, Parsed):
                return learnt
            got = learnt
        epoch = got[0]
        if epoch is None:
            return None
        frac = m.group(branch.frac) if branch.frac else None
        if frac:
            n = len(frac)
            if n > 9:
                return self._learn(branch, m, None, key)  # type: ignore[return-value]
            res = _SCALE[n]
            return Parsed(epoch * NS + int(frac) * res, res, got[1], got[2], branch.dialect.name, m.span())
        return Parsed(epoch * NS, NS, got[1], got[2], branch.dialect.name, m.span())

    def _same_years(self, asked: tuple[tuple[int, int, int], ...]) -> bool:
        for mo, d, year in asked:
            if self._infer_year(mo, d) != year:
                return False
        return True

    def _learn(self, branch: _Branch, m: re.Match[str], known: dict[object, _Read] | None,
               key: object) -> _Read | Parsed | None:
        """Read a stamp with its dialect's reader (the definition); keep what its groups read as in
        ``known`` (unless None), and return that, or the stamp itself when its fraction is not the
        reader's (a reader that makes something else of it: not kept, each is read)."""
        dialect = branch.dialect
        g = dict(zip(branch.fields, m.group(*branch.names), strict=True)).get
        log = _YearLog(self)
        frac_group = m.group(branch.frac) if branch.frac else None
        got: _Read
        if dialect.epoch:
            secs, frac = dialect.read(g, log)
            got = (secs, False, False, ())
        else:
            y, mo, d, h, mi, s, frac, zone, year_inferred = dialect.read(g, log)
            epoch = None
            if 1 <= mo <= 12 and 1 <= d <= 31 and h <= 23:
                epoch = self._epoch_s(y, mo, d, h, mi, s, zone)
            got = (epoch, zone is None, year_inferred, tuple(log.asked))
        if frac == frac_group and (not frac or len(frac) <= 9) and known is not None:
            if len(known) >= _READ_MAX:
                known.clear()
            known[key] = got
            return got
        epoch = got[0]
        if epoch is None:
            return None
        if dialect.epoch:
            res = 10 ** (9 - len(frac)) if frac else NS
            t = epoch * NS + (int(frac) * 10 ** (9 - len(frac)) if frac else 0)
            return Parsed(t, res, False, False, dialect.name, m.span())
        if frac:
            frac = frac[:9]
            sub = int(frac) * 10 ** (9 - len(frac))
            res = 10 ** (9 - len(frac))
        else:
            sub, res = 0, NS
        return Parsed(epoch * NS + sub, res, got[1], got[2], dialect.name, m.span())

    def observe(self, parsed: Parsed) -> None:
        """Use a stamp that carried its year as the reference for year-less ones that follow."""
        if not parsed.year_inferred:
            self.reference_ns = parsed.time_ns
            self.reference_is_bound = False
