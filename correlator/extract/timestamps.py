"""Timestamps parsed to UTC nanoseconds, in the formats of the dialect registry (``dialects.STAMPS``).

Pure functions. A parse says what it had to assume: the zone (stamps without one are local time
of the ``--tz`` zone), the year (glog and syslog stamps carry none: it is inferred from a reference
time of the same file, across New Year), and its resolution (a whole-second stamp is an interval of
one second, which the correlator treats as uncertainty).
"""

from __future__ import annotations

import os
import re
import zoneinfo
from bisect import bisect_right
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, timezone, tzinfo
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
_BY_BRANCH = {d.branch: d for d in dialects.STAMPS}
#: each branch's groups in ``_ANY``: their names there and as its reader asks for them (one
#: ``Match.group`` call for all of them, not one per field)
_BRANCH_GROUPS = {d.branch: (tuple(d.letter + n for n in re.compile(d.pattern).groupindex), tuple(re.compile(d.pattern).groupindex))
                  for d in dialects.STAMPS}
assert all(len(names) >= 2 for names, _ in _BRANCH_GROUPS.values())  # (``group`` of several names gives a tuple)

#: where a stamp that does not start its text is looked for (``dialects.stamp_anchors``): each starts at
#: most ``reach`` characters before an anchor it holds
_ANCHORS = tuple((re.compile(a), reach) for a, reach in dialects.stamp_anchors())
#: per number of characters n: ``_ANY`` without its groups, at the first of n + 1 places that holds a
#: stamp (the lookahead ends where the stamp starts)
_FINDERS: dict[int, re.Pattern[str]] = {}
_PLAIN = dialects.stamp_plain()

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
    at = [0] * len(texts)  # each text's start in the joined text
    pos = 0
    for k, t in enumerate(texts):
        at[k] = pos
        pos += len(t) + 1
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
    """The stamp that starts first in ``[first, last]`` (as ``_ANY`` reads it), or None."""
    if last < first:
        return None
    n = last - first
    finder = _FINDERS.get(n)
    if finder is None:
        finder = _FINDERS[n] = re.compile(f"(?s:.{{0,{n}}}?)(?=(?:{_PLAIN}))")
    f = finder.match(text, first, SEARCH_CHARS)
    if f is None:
        return None
    return _ANY.match(text, f.end(), SEARCH_CHARS)


class StampParser:
    """Parses stamps with one analysis zone and a per-file reference time for missing years.

    Holds a small cache of second -> epoch conversions: a log has many stamps in the same second.
    """

    def __init__(self, tz: tzinfo | None = None, reference_ns: int | None = None, *,
                 reference_is_bound: bool = False) -> None:
        self.tz = tz if tz is not None else UTC
        self.reference_ns = reference_ns
        #: the reference is an upper bound (the file's modification time), not a stamp from the file
        self.reference_is_bound = reference_is_bound
        self._cache: dict[tuple[int, ...], int] = {}

    def _epoch_s(self, y: int, mo: int, d: int, h: int, mi: int, s: int, zone: str | None) -> int | None:
        key = (y, mo, d, h, mi, s, hash(zone))
        hit = self._cache.get(key)
        if hit is not None:
            return hit
        leap = 0
        if s == 60:  # a leap second: 23:59:60 is the same instant as the next second's start
            s, leap = 59, 1
        try:
            if zone is None:
                dt = datetime(y, mo, d, h, mi, s, tzinfo=self.tz)
            elif zone == "Z":
                dt = datetime(y, mo, d, h, mi, s, tzinfo=UTC)
            else:
                sign = -1 if zone[0] == "-" else 1
                digits = zone[1:].replace(":", "")
                off = timedelta(hours=int(digits[:2]), minutes=int(digits[2:4]))
                dt = datetime(y, mo, d, h, mi, s, tzinfo=timezone(sign * off))
        except ValueError:
            return None
        value = int(dt.timestamp()) + leap
        if len(self._cache) > 4096:
            self._cache.clear()
        self._cache[key] = value
        return value

    def _infer_year(self, mo: int, d: int) -> int:
        ref = self.reference_ns
        if ref is None:
            return datetime.now(UTC).year
        ref_dt = datetime.fromtimestamp(ref / NS, tz=UTC)
        year = ref_dt.year
        try:
            guess = datetime(year, mo, d, tzinfo=UTC).timestamp() * NS
        except ValueError:  # Feb 29 in a year without it: try the neighbours
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
        dialect = _BY_BRANCH[kind]
        names, fields = _BRANCH_GROUPS[kind]
        g = dict(zip(fields, m.group(*names), strict=True)).get
        if dialect.epoch:
            secs, frac = dialect.read(g, self)
            res = 10 ** (9 - len(frac)) if frac else NS
            t = secs * NS + (int(frac) * 10 ** (9 - len(frac)) if frac else 0)
            return Parsed(t, res, False, False, dialect.name, m.span())
        y, mo, d, h, mi, s, frac, zone, year_inferred = dialect.read(g, self)
        if not (1 <= mo <= 12 and 1 <= d <= 31 and h <= 23):
            return None
        epoch = self._epoch_s(y, mo, d, h, mi, s, zone)
        if epoch is None:
            return None
        if frac:
            frac = frac[:9]
            sub = int(frac) * 10 ** (9 - len(frac))
            res = 10 ** (9 - len(frac))
        else:
            sub, res = 0, NS
        return Parsed(epoch * NS + sub, res, zone is None, year_inferred, dialect.name, m.span())

    def observe(self, parsed: Parsed) -> None:
        """Use a stamp that carried its year as the reference for year-less ones that follow."""
        if not parsed.year_inferred:
            self.reference_ns = parsed.time_ns
            self.reference_is_bound = False
