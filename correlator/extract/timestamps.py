"""The timestamp registry: every time format these logs carry, parsed to UTC nanoseconds.

Pure functions. A parse says what it had to assume: the zone (stamps without one are local time
of the ``--tz`` zone), the year (glog and syslog stamps carry none: it is inferred from a reference
time of the same file, across New Year), and its resolution (a whole-second stamp is an interval of
one second, which the correlator treats as uncertainty).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone, tzinfo
from zoneinfo import ZoneInfo

from correlator.model import NS
_HALF_YEAR_NS = 183 * 86_400 * NS

_MONTHS = {m: i for i, m in enumerate(
    ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"), start=1)}


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


# Registry, written out by hand: (name, pattern). Tried in this order; the earliest match in the
# text wins (a stamp at the start of a line beats a date quoted later in the message).
# (also with slashes: "2026/03/02 14:00:00", as glog's and some C++ loggers' datefmt)
_ISO = (
    r"(?P<Y>(?:19|20)\d\d)[-/](?P<m>[01]\d)[-/](?P<d>[0-3]\d)[T _](?P<H>[0-2]\d):(?P<M>[0-5]\d):(?P<S>[0-6]\d)"
    r"(?:[.,](?P<f>\d{1,9}))?(?P<z>Z|[+-][01]\d:?[0-5]\d(?![\d:]))?"
)
# c10's own logger does not pad the month: "W407 10:13:23.08" is April 7, "E1120 ..." November 20
_GLOG = r"(?<![\w])[IWEF](?P<md>1[0-2][0-3]\d|0[1-9][0-3]\d|[1-9][0-3]\d) (?P<H>[0-2]\d):(?P<M>[0-5]\d):(?P<S>[0-6]\d)\.(?P<f>\d{3,9})(?!\d)"
_SYSLOG = (
    r"(?<![\w])(?P<b>Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) {1,2}(?P<d>[0-3]?\d) "
    r"(?P<H>[0-2]\d):(?P<M>[0-5]\d):(?P<S>[0-6]\d)(?:\.(?P<f>\d{1,9}))?(?: (?P<Y>(?:19|20)\d\d))?"
)
_EPOCH = r"^\[?(?P<e>1[5-9]\d{8}|2[0-4]\d{8})(?:\.(?P<f>\d{1,9}))?\]?(?=[\s:\]])"
# month first, as the Hugging Face example scripts log ("03/02/2026 14:00:00 - INFO - __main__");
# read day first when the first number cannot be a month ("25/03/2026")
_US = (
    r"(?<![\d/.])(?P<m>[0-3]?\d)/(?P<d>[0-3]?\d)/(?P<Y>(?:19|20)\d\d)[ T]+(?P<H>[0-2]?\d):(?P<M>[0-5]\d):(?P<S>[0-6]\d)"
    r"(?:[.,](?P<f>\d{1,9}))?"
)

FORMATS: dict[str, re.Pattern[str]] = {
    "iso8601": re.compile(_ISO),
    "glog": re.compile(_GLOG),
    "syslog": re.compile(_SYSLOG),
    "epoch": re.compile(_EPOCH),
    "us-date": re.compile(_US),
}
# One alternation for the common case; names tell which branch hit.
_ANY = re.compile(
    "(?P<iso>" + _ISO.replace("?P<", "?P<i") + ")"
    "|(?P<glog>" + _GLOG.replace("?P<", "?P<g") + ")"
    "|(?P<syslog>" + _SYSLOG.replace("?P<", "?P<s") + ")"
    "|(?P<epoch>" + _EPOCH.replace("?P<", "?P<e") + ")"
    "|(?P<us>" + _US.replace("?P<", "?P<u") + ")"
)

#: how far into a message a stamp is looked for
SEARCH_CHARS = 200


def resolve_tz(name: str | None) -> tzinfo:
    """The analysis zone: an IANA name, ``UTC``, or None for the machine's local zone."""
    if name is None or name == "local":
        local = datetime.now().astimezone().tzinfo
        return local if local is not None else timezone.utc
    if name.upper() in ("UTC", "Z", "GMT"):
        return timezone.utc
    return ZoneInfo(name)


class StampParser:
    """Parses stamps with one analysis zone and a per-file reference time for missing years.

    Holds a small cache of second -> epoch conversions: a log has many stamps in the same second.
    """

    def __init__(self, tz: tzinfo | None = None, reference_ns: int | None = None, *,
                 reference_is_bound: bool = False) -> None:
        self.tz = tz if tz is not None else timezone.utc
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
                dt = datetime(y, mo, d, h, mi, s, tzinfo=timezone.utc)
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
            return datetime.now(timezone.utc).year
        ref_dt = datetime.fromtimestamp(ref / NS, tz=timezone.utc)
        year = ref_dt.year
        try:
            guess = datetime(year, mo, d, tzinfo=timezone.utc).timestamp() * NS
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
        """The first stamp in the first ``SEARCH_CHARS`` characters of ``text``, or None."""
        m = _ANY.search(text, 0, SEARCH_CHARS)
        if m is None:
            return None
        g = m.group
        kind = m.lastgroup
        frac = None
        year_inferred = False
        zone: str | None = None
        if kind == "iso":
            y, mo, d = int(g("iY")), int(g("im")), int(g("id"))
            h, mi, s = int(g("iH")), int(g("iM")), int(g("iS"))
            frac, zone = g("if"), g("iz")
        elif kind == "glog":
            md = g("gmd")
            mo, d = int(md[:-2]), int(md[-2:])
            h, mi, s = int(g("gH")), int(g("gM")), int(g("gS"))
            frac = g("gf")
            y = self._infer_year(mo, d)
            year_inferred = True
        elif kind == "syslog":
            mo, d = _MONTHS[g("sb")], int(g("sd"))
            h, mi, s = int(g("sH")), int(g("sM")), int(g("sS"))
            frac = g("sf")
            if g("sY"):
                y = int(g("sY"))
            else:
                y = self._infer_year(mo, d)
                year_inferred = True
        elif kind == "us":
            mo, d, y = int(g("um")), int(g("ud")), int(g("uY"))
            if mo > 12 >= d:
                mo, d = d, mo
            h, mi, s = int(g("uH")), int(g("uM")), int(g("uS"))
            frac = g("uf")
        else:
            frac = g("ef")
            res = 10 ** (9 - len(frac)) if frac else NS
            t = int(g("ee")) * NS + (int(frac) * 10 ** (9 - len(frac)) if frac else 0)
            return Parsed(t, res, False, False, "epoch", m.span())
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
        fmt = {"iso": "iso8601", "glog": "glog", "syslog": "syslog", "us": "us-date"}[kind]
        return Parsed(epoch * NS + sub, res, zone is None, year_inferred, fmt, m.span())

    def observe(self, parsed: Parsed) -> None:
        """Use a stamp that carried its year as the reference for year-less ones that follow."""
        if not parsed.year_inferred:
            self.reference_ns = parsed.time_ns
            self.reference_is_bound = False
