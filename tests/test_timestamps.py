from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from correlator.extract import dialects, timestamps
from correlator.extract.timestamps import NS, SEARCH_CHARS, Parsed, StampParser, resolve_tz

UTC = UTC


def ns(*args, tz=UTC) -> int:
    return int(datetime(*args, tzinfo=tz).timestamp()) * NS


@pytest.mark.parametrize(("text", "expected", "fmt"), [
    ("2026-03-02 14:07:31,412 - root - INFO - x", ns(2026, 3, 2, 14, 7, 31) + 412_000_000, "iso8601"),
    ("[2026-03-02 14:07:31,412] [INFO] [engine.py:1:step] x", ns(2026, 3, 2, 14, 7, 31) + 412_000_000, "iso8601"),
    ("2026-03-02T14:07:31Z srun", ns(2026, 3, 2, 14, 7, 31), "iso8601"),
    ("2026-03-02T14:07:31.5+01:00 x", ns(2026, 3, 2, 13, 7, 31) + 500_000_000, "iso8601"),
    ("  time      : 2026-03-02_14:07:31", ns(2026, 3, 2, 14, 7, 31), "iso8601"),
    ("[E0302 14:07:31.412345678 ProcessGroupNCCL.cpp:616] x", ns(2026, 3, 2, 14, 7, 31) + 412_345_678, "glog"),
    ("W0302 14:07:31.412000 139 torch/distributed/elastic/multiprocessing/api.py:897] x", ns(2026, 3, 2, 14, 7, 31) + 412_000_000, "glog"),
    ("[rank0]:[W302 14:07:31.082579832 ProcessGroupNCCL.cpp:1553] Warning", ns(2026, 3, 2, 14, 7, 31) + 82_579_832, "glog"),
    ("[rank7]:[W1120 01:13:20.892421310 ProcessGroupNCCL.cpp:1662] x", ns(2025, 11, 20, 1, 13, 20) + 892_421_310, "glog"),  # >6 months after the reference: last year
    ("1772460451.25 hello", ns(2026, 3, 2, 14, 7, 31) + 250_000_000, "epoch"),
    ("Mar  2 14:07:31 gpu-a09 kernel: Out of memory", ns(2026, 3, 2, 14, 7, 31), "syslog"),
    ("2026/03/02 14:07:31.412 x", ns(2026, 3, 2, 14, 7, 31) + 412_000_000, "iso8601"),
    ("03/02/2026 14:07:31 - INFO - __main__ - Training", ns(2026, 3, 2, 14, 7, 31), "us-date"),  # HF examples
    ("25/03/2026 14:07:31 - WARNING - x", ns(2026, 3, 25, 14, 7, 31), "us-date"),  # day first: 25 is no month
])
def test_formats(text, expected, fmt):
    p = StampParser(UTC, ns(2026, 3, 1, 0, 0, 0)).parse(text)
    assert p is not None and p.format == fmt
    assert p.time_ns == expected


def test_zone_less_stamp_uses_analysis_zone():
    berlin = resolve_tz("Europe/Berlin")
    p = StampParser(berlin).parse("2026-03-02 14:07:31,000 x")
    assert p.tz_assumed and p.time_ns == ns(2026, 3, 2, 13, 7, 31)
    p = StampParser(berlin).parse("2026-03-02T14:07:31Z x")
    assert not p.tz_assumed and p.time_ns == ns(2026, 3, 2, 14, 7, 31)


def test_glog_year_across_new_year():
    # a file whose reference (last full stamp) is early January: a December glog stamp is last year
    parser = StampParser(UTC, ns(2027, 1, 1, 0, 3, 0))
    p = parser.parse("I1231 23:59:58.000000 1 x.cpp:1] x")
    assert p.year_inferred and p.time_ns == ns(2026, 12, 31, 23, 59, 58)
    parser = StampParser(UTC, ns(2026, 12, 31, 23, 0, 0))
    assert parser.parse("I0101 00:00:01.000000 1 x.cpp:1] x").time_ns == ns(2027, 1, 1, 0, 0, 1)


def test_resolution_of_whole_seconds():
    p = StampParser(UTC).parse("2026-03-02T14:07:31 x")
    assert p.resolution_ns == NS
    p = StampParser(UTC).parse("2026-03-02 14:07:31,412 x")
    assert p.resolution_ns == 1_000_000


@pytest.mark.parametrize("text", ["no stamp 12:00", "step 1200 loss 2.0", "2026-13-40 99:99:99", "E9999 99:99:99.1",
                                  "version 1.2/3/2026 14:00:00", "13/13/2026 14:00:00"])
def test_no_false_stamps(text):
    assert StampParser(UTC).parse(text) is None


@settings(max_examples=300, deadline=None)
@given(st.datetimes(min_value=datetime(2000, 1, 1), max_value=datetime(2099, 12, 31)),
       st.sampled_from(["%Y-%m-%d %H:%M:%S,{ms}", "%Y-%m-%dT%H:%M:%S.{ms}Z", "[%Y-%m-%d %H:%M:%S,{ms}]",
                        "%Y-%m-%d_%H:%M:%S", "%Y/%m/%d %H:%M:%S.{ms}", "%m/%d/%Y %H:%M:%S"]))
def test_round_trip(dt, fmt):
    dt = dt.replace(tzinfo=UTC)
    text = dt.strftime(fmt).replace("{ms}", f"{dt.microsecond // 1000:03d}") + " message"
    p = StampParser(UTC).parse(text)
    assert p is not None
    want = int(dt.replace(microsecond=0).timestamp()) * NS
    if "{ms}" in fmt:
        want += dt.microsecond // 1000 * 1_000_000
    assert p.time_ns == want


@settings(max_examples=200, deadline=None)
@given(st.datetimes(min_value=datetime(2001, 1, 1), max_value=datetime(2098, 12, 31)),
       st.integers(min_value=-150, max_value=150))
def test_glog_round_trip_near_reference(dt, days):
    dt = dt.replace(tzinfo=UTC)
    ref = dt + timedelta(days=days)
    text = dt.strftime("E%m%d %H:%M:%S.") + f"{dt.microsecond:06d} 1 f.cpp:1] x"
    if dt.month < 10 and dt.microsecond % 2:  # c10's own logger does not pad the month
        text = "E" + text[2:]
    p = StampParser(UTC, int(ref.timestamp()) * NS).parse(text)
    if dt.month == 2 and dt.day == 29:
        return  # a leap day cannot be placed in a neighbouring year
    assert p.time_ns == int(dt.replace(microsecond=0).timestamp()) * NS + dt.microsecond * 1000


@given(st.text(max_size=300))
def test_parser_never_raises(text):
    StampParser(UTC).parse(text)


def test_year_from_a_modification_time_is_never_in_the_future():
    # a glog-only file last written on 2026-11-30: May 26 and Dec 23 stamps are from before it
    parser = StampParser(UTC, ns(2026, 11, 30, 12, 0, 0), reference_is_bound=True)
    assert parser.parse("E0526 16:36:24.000000 1 x.cpp:1] x").time_ns == ns(2026, 5, 26, 16, 36, 24)
    assert parser.parse("E1223 05:18:02.000000 1 x.cpp:1] x").time_ns == ns(2025, 12, 23, 5, 18, 2)
    # a stamp from inside the file is a reference both ways (a log that crossed New Year)
    parser.observe(parser.parse("2026-12-31T23:00:00Z x"))
    assert parser.parse("I0101 00:00:01.000000 1 x.cpp:1] x").time_ns == ns(2027, 1, 1, 0, 0, 1)


# --- the default zone: the machine's IANA zone with its rules, not today's offset (issue 15 item 3) ---

@pytest.mark.parametrize(("env", "key"), [
    ("Europe/Berlin", "Europe/Berlin"), (":America/New_York", "America/New_York"),
    ("/usr/share/zoneinfo/Australia/Sydney", "Australia/Sydney"),
])
def test_local_zone_is_the_iana_zone_of_tz(monkeypatch, env, key):
    from zoneinfo import ZoneInfo

    from correlator.extract.timestamps import local_zone, zone_name

    monkeypatch.setenv("TZ", env)
    zone = resolve_tz(None)
    assert isinstance(zone, ZoneInfo) and zone.key == key and zone_name(zone) == key == zone_name(local_zone())


@pytest.mark.parametrize("env", ["", "UTC", ":UTC"])
def test_local_zone_utc_spellings(monkeypatch, env):
    from correlator.extract.timestamps import zone_name

    monkeypatch.setenv("TZ", env)
    assert resolve_tz(None) is UTC and zone_name(resolve_tz(None)) == "UTC"


def test_a_posix_tz_rule_keeps_its_daylight_saving(monkeypatch):
    """A TZ that is a POSIX rule, not a name: the C library's local time, each season its offset."""
    import time

    monkeypatch.setenv("TZ", "CET-1CEST,M3.5.0,M10.5.0/3")
    time.tzset()
    try:
        zone = resolve_tz(None)
        assert StampParser(zone).parse("2026-01-15 12:00:00,000 x").time_ns == ns(2026, 1, 15, 11, 0, 0)
        assert StampParser(zone).parse("2026-07-15 12:00:00,000 x").time_ns == ns(2026, 7, 15, 10, 0, 0)
    finally:
        monkeypatch.delenv("TZ")
        time.tzset()


def test_default_zone_converts_winter_and_summer_stamps_and_every_report_names_it(tmp_path):
    """Under TZ=Europe/Berlin, a January stamp is UTC+1 and a July one UTC+2 (the fixed offset of
    the day of the analysis once made one of them an hour off), without --tz; every format names the
    zone it read them in."""
    import json
    import os
    import subprocess
    import sys

    err = "RuntimeError: CUDA error: an illegal memory access was encountered"
    for month, utc_hour in (("01", "11"), ("07", "10")):
        log = tmp_path / f"rank-3-{month}.log"
        log.write_text(f"2026-{month}-15 12:00:00,000 [rank3]: {err}\n")
        env = {**os.environ, "TZ": "Europe/Berlin", "CORRELATE_EARLY_POOL": "0"}
        out = {}
        for fmt in ("json", "terminal", "markdown", "html"):
            r = subprocess.run([sys.executable, "-m", "correlator", str(log), "-f", fmt], capture_output=True,
                               env=env, timeout=120)
            assert r.returncode == 0, r.stderr.decode()
            out[fmt] = r.stdout.decode()
        doc = json.loads(out["json"])
        assert doc["root_cause"]["time"] == f"2026-{month}-15T{utc_hour}:00:00.000Z"
        assert doc["job"]["time_zone"] == "Europe/Berlin" and doc["job"]["time_zone_used"] is True
        zone_lines = [line for line in out["terminal"].splitlines() if line.startswith("zone")]
        assert len(zone_lines) == 1 and "Europe/Berlin" in zone_lines[0]
        assert "| time zone | stamps without a zone read in Europe/Berlin" in out["markdown"]
        assert "stamps without a zone read in Europe/Berlin" in out["html"]


# --- the parser against the plain parse it replaces (issue 18) ------------------------------------

class PlainParser:
    """The parse as it was before the fast one, kept as its definition: one search of the registry's
    alternation over the text, each field through the dialect's reader, each second through
    ``datetime``. ``StampParser`` must say exactly what this says, for every text and state."""

    ANY = re.compile(dialects.stamp_regex())
    BY_BRANCH = {d.branch: d for d in dialects.STAMPS}
    GROUPS = {d.branch: (tuple(d.letter + n for n in re.compile(d.pattern).groupindex),
                         tuple(re.compile(d.pattern).groupindex)) for d in dialects.STAMPS}

    def __init__(self, tz=None, reference_ns=None, *, reference_is_bound=False):
        self.tz = tz if tz is not None else UTC
        self.reference_ns = reference_ns
        self.reference_is_bound = reference_is_bound

    def _epoch_s(self, y, mo, d, h, mi, s, zone):
        leap = 0
        if s == 60:
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
        return int(dt.timestamp()) + leap

    def _infer_year(self, mo, d):
        ref = self.reference_ns
        if ref is None:
            return datetime.now(UTC).year
        year = datetime.fromtimestamp(ref / NS, tz=UTC).year
        try:
            guess = datetime(year, mo, d, tzinfo=UTC).timestamp() * NS
        except ValueError:
            return year - 1 if mo == 2 else year
        if self.reference_is_bound:
            return year - 1 if guess - ref > 86_400 * NS else year
        if guess - ref > 183 * 86_400 * NS:
            return year - 1
        if ref - guess > 183 * 86_400 * NS:
            return year + 1
        return year

    def parse(self, text):
        m = self.ANY.search(text, 0, SEARCH_CHARS)
        if m is None:
            return None
        kind = m.lastgroup
        dialect = self.BY_BRANCH[kind]
        names, fields = self.GROUPS[kind]
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
            sub, res = int(frac) * 10 ** (9 - len(frac)), 10 ** (9 - len(frac))
        else:
            sub, res = 0, NS
        return Parsed(epoch * NS + sub, res, zone is None, year_inferred, dialect.name, m.span())

    def observe(self, parsed):
        if not parsed.year_inferred:
            self.reference_ns = parsed.time_ns
            self.reference_is_bound = False


ZONES = [UTC, resolve_tz("Europe/Berlin"), resolve_tz("America/New_York"), resolve_tz("Australia/Lord_Howe"),
         timezone(timedelta(hours=5, minutes=30))]
#: what is put around a stamp: what a stamp's edges look at (word characters, digits, slashes, dots,
#: brackets, blanks, colons), other clocks, non-ASCII digits and letters
NOISE = st.lists(st.sampled_from(list("aZ_09[]():/.,- T\t|x\u0663\u00e9\x1b") + ["12:34:56", "03/02/2026 ",
                                                                                  "2026-", "I0302 ", "Mar "]),
                 max_size=12).map("".join)
#: stamps of every dialect, as its pattern allows them (any digits, any widths) and as loggers write
#: them (near the edges of the calendar: leap days and seconds, New Year, daylight saving changes)
def _drawn(d: dialects.StampDialect) -> st.SearchStrategy[str]:
    """Texts that match the dialect's pattern, what a lookahead of it looks at included (hypothesis
    filters what does not match a lookahead: made a group, it is drawn)."""
    return st.from_regex(re.compile(d.pattern.replace("(?=", "(?:")), fullmatch=True)


WRITTEN = st.one_of(
    *[_drawn(d) for d in dialects.STAMPS],
    st.builds(lambda dt, f, fmt: dt.strftime(fmt).replace("{f}", f),
              st.datetimes(min_value=datetime(1999, 12, 1), max_value=datetime(2031, 1, 31)),
              st.sampled_from(["", "0", "25", "250", "250123", "250123456", "2501234567"]),
              st.sampled_from(["%Y-%m-%d %H:%M:%S,{f}", "[%Y-%m-%d %H:%M:%S,{f}]", "%Y-%m-%dT%H:%M:%S.{f}Z",
                               "%Y-%m-%dT%H:%M:%S.{f}+05:30", "%Y-%m-%d %H:%M:%S.{f} | INFO", "I%m%d %H:%M:%S.{f}",
                               "[W%m%d %H:%M:%S.{f} x.cpp:1]", "%b %d %H:%M:%S", "%b %d %H:%M:%S.{f} %Y",
                               "%m/%d/%Y %H:%M:%S", "%d/%m/%Y  %H:%M:%S,{f}", "%y/%m/%d %H:%M:%S INFO x",
                               "%s.{f} x", "[%s] x"])),
    st.sampled_from(["2026-02-29 10:00:00", "2028-02-29 10:00:00", "2026-12-31T23:59:60Z", "2026-03-02 23:59:61",
                     "2026-03-29 02:30:00", "2026-10-25 02:30:00,5", "2026-03-02T14:00:00+19:59",
                     "2026-03-02T14:00:00-00:00", "E0229 10:00:00.000", "Feb 29 10:00:00", "13/13/2026 14:00:00",
                     "12/31/2026 24:00:00", "Dec 31 23:59:59.999 2026", "I1231 23:59:59.999999",
                     "I0101 00:00:00.000001", "1764496800.1234567890 x"]),
)


def _texts(stamped: st.SearchStrategy) -> st.SearchStrategy:
    return st.lists(st.one_of(st.tuples(NOISE, stamped, NOISE).map("".join), NOISE, st.text(max_size=60)),
                    min_size=1, max_size=8)


@settings(max_examples=600, deadline=None)
@given(texts=_texts(WRITTEN), zone=st.sampled_from(ZONES),
       reference=st.one_of(st.none(), st.integers(946_684_800, 1_924_991_999).map(lambda s: s * NS)),
       bound=st.booleans(), observe=st.lists(st.booleans(), min_size=8, max_size=8))
def test_the_parser_says_what_the_plain_parse_says(texts, zone, reference, bound, observe):
    """On stamps of every dialect with anything around them, on texts without one, one after the
    other as a file's lines are (a full date becomes the reference for year-less stamps after it):
    the same ``Parsed`` (time, resolution, zone assumed, year inferred, dialect, span) or None.
    What a stamp reads as is kept across texts and across parsers of other references."""
    fast = StampParser(zone, reference, reference_is_bound=bound)
    plain = PlainParser(zone, reference, reference_is_bound=bound)
    for text, look in zip(texts, observe, strict=False):
        got, want = fast.parse(text), plain.parse(text)
        assert got == want, (text, got, want)
        if want is not None and look:
            fast.observe(got)
            plain.observe(want)


@pytest.mark.parametrize("d", dialects.STAMPS, ids=[d.name for d in dialects.STAMPS])
def test_every_example_of_a_dialect_reads_as_the_plain_parse_reads_it(d):
    for zone in ZONES:
        for line in d.examples:
            for text in (line, "[" + line, "x " + line, "\x1b[32m" + line, line * 2):
                fast, plain = StampParser(zone, ns(2026, 3, 1, 0, 0, 0)), PlainParser(zone, ns(2026, 3, 1, 0, 0, 0))
                assert fast.parse(text) == plain.parse(text) == fast.parse(text), (d.name, text)


@pytest.mark.parametrize("d", dialects.STAMPS, ids=[d.name for d in dialects.STAMPS])
@settings(max_examples=200, deadline=None)
@given(data=st.data())
def test_every_stamp_holds_its_anchor_within_reach(d, data):
    """What the parser's search leans on (``StampDialect.anchor``, ``reach``): a stamp of the dialect
    holds its anchor, one character, at most ``reach`` characters after its start, within the stamp;
    or the dialect's stamps start their text, and its anchor is ``^``."""
    text = data.draw(st.tuples(NOISE, _drawn(d), NOISE).map("".join))
    anchor = re.compile(d.anchor)
    assert d.anchor == "^" or dict(dialects.stamp_anchors())[d.anchor] >= d.reach
    for m in re.finditer(d.pattern, text):
        if d.anchor == "^":
            assert m.start() == 0 and d.pattern.startswith("^")
            continue
        a = anchor.search(text, m.start(), m.end())
        assert a is not None and a.start() <= m.start() + d.reach and a.end() - a.start() == 1, (d.name, text, m.span(), a)


#: year-less stamps (glog, syslog) and full dates of other years, as a file that crossed New Year
#: or was written over years has them: each full date is the reference for the year-less after it
YEAR_LESS_AND_FULL = st.builds(
    lambda dt, fmt: dt.strftime(fmt),
    st.datetimes(min_value=datetime(1999, 1, 1), max_value=datetime(2031, 12, 31)),
    st.sampled_from(["I%m%d %H:%M:%S.123456 x.cpp:1] x", "%b %d %H:%M:%S host kernel: x", "%b %d %H:%M:%S.5 %Y x",
                     "%Y-%m-%d %H:%M:%S,250 x", "[%Y-%m-%dT%H:%M:%SZ] x"]))


@settings(max_examples=300, deadline=None)
@given(texts=st.lists(YEAR_LESS_AND_FULL, min_size=2, max_size=10), zone=st.sampled_from(ZONES),
       reference=st.one_of(st.none(), st.integers(946_684_800, 1_924_991_999).map(lambda s: s * NS)),
       bound=st.booleans())
def test_year_less_stamps_take_the_year_the_plain_parse_gives(texts, zone, reference, bound):
    """Every full date observed, the year of each year-less stamp after it is inferred anew from it:
    a kept reading is the parse's only while the years its reader inferred are the same again."""
    fast = StampParser(zone, reference, reference_is_bound=bound)
    plain = PlainParser(zone, reference, reference_is_bound=bound)
    for text in texts:
        got, want = fast.parse(text), plain.parse(text)
        assert got == want, (text, got, want)
        if want is not None:
            fast.observe(got)
            plain.observe(want)


#: what puts many anchors close together before a stamp (clocks that are no stamp, slashes before a
#: year): the places the parse tries then form one long stretch, tried a span at a time
CLUTTER = st.lists(st.sampled_from(["12:34:56", "9:59:59", "41:12:13", "1:0", ":", "/2026 ", "03/02/2026 ", "x", " ",
                                    "I0302 ", "Mar 3 ", "0", "[", "/"]), max_size=40).map("".join)


@settings(max_examples=400, deadline=None)
@given(clutter=CLUTTER, stamp=WRITTEN, after=NOISE, zone=st.sampled_from(ZONES))
def test_a_stamp_after_clocks_that_are_none_is_the_one_the_plain_parse_finds(clutter, stamp, after, zone):
    text = clutter + stamp + after
    reference = ns(2026, 3, 1, 0, 0, 0)
    assert StampParser(zone, reference).parse(text) == PlainParser(zone, reference).parse(text), text


@settings(max_examples=100, deadline=None)
@given(before=st.lists(st.one_of(NOISE, st.text(max_size=20)), min_size=1, max_size=12).map("".join), stamp=WRITTEN,
       after=NOISE)
def test_the_stretch_finder_gives_the_first_stamp_from_each_place(before, stamp, after):
    """``_find`` (a regex tries a span of places at a time) from every place before a stamp: the
    first place on that the alternation matches at, as one match per place finds it."""
    text = (before + stamp + after)[:SEARCH_CHARS]
    starts = [p for p in range(len(text) + 1) if timestamps._ANY.match(text, p, SEARCH_CHARS) is not None]
    for first in range(len(text) + 1):
        want = next((p for p in starts if p >= first), None)
        for last in (first, first + 20, len(text)):
            got = timestamps._find(text, first, last)
            if want is not None and want <= last:
                assert got is not None and got.start() == want, (text, first, last, got)
            if got is not None:
                assert got.start() == want and got.span() == timestamps._ANY.match(text, want, SEARCH_CHARS).span()
