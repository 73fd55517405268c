"""Every log dialect proves itself: its examples parse, and every line its pattern matches is caught
by the fast path's hints (so no line of it is passed over by the window scan).

A new prefix or timestamp dialect is one record in ``correlator/extract/dialects.py``; these tests
cover it without a change here.
"""

from __future__ import annotations

import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from correlator.extract import dialects, prefixes, scan
from correlator.extract.timestamps import StampParser

PREFIX_DIALECTS = [*dialects.PREFIXES, *dialects.STANDALONE]
HINTS = re.compile(scan.MAYBE_PREFIX)
STAMP_HINTS = [re.compile(h, re.M if multi else 0) for h, multi in dialects.stamp_hints()]


def _caught_as_line_start(line: str) -> bool:
    return HINTS.match(b"\n" + line.encode("utf-8", "surrogatepass")) is not None


@pytest.mark.parametrize("d", PREFIX_DIALECTS, ids=[d.name for d in PREFIX_DIALECTS])
def test_each_prefix_dialect_splits_its_examples_and_its_hint_catches_them(d):
    own = re.compile(d.pattern)
    assert d.examples
    for line in d.examples:
        assert own.search(line), (d.name, line)
        prefix, msg = prefixes.split_prefix(line)
        assert prefix.length > 0 and msg and line.endswith(msg), (d.name, line)
        assert _caught_as_line_start(line), (d.name, line)
    assert d.hint or d.covered_by in {x.name for x in PREFIX_DIALECTS}


@pytest.mark.slow
@pytest.mark.parametrize("d", PREFIX_DIALECTS, ids=[d.name for d in PREFIX_DIALECTS])
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(data=st.data())
def test_every_line_a_prefix_dialect_matches_is_caught_by_the_hints(d, data):
    """Lines built from the dialect's own pattern (at the start of a line, then a message)."""
    head = data.draw(st.from_regex(re.compile(d.pattern), fullmatch=True).filter(lambda s: "\n" not in s))
    line = head + "message"
    if prefixes.split_prefix(line)[0].length == 0:  # another reading of the stack took none of it
        return
    assert _caught_as_line_start(line), (d.name, line)


def test_the_parsers_are_built_from_the_registry():
    assert prefixes._PREFIX.pattern == dialects.prefix_regex()
    assert scan.MAYBE_PREFIX == dialects.prefix_hints()
    assert list(scan.STAMP_HINTS) == [h for h, _ in dialects.stamp_hints()]
    names = [d.name for d in PREFIX_DIALECTS] + [d.name for d in dialects.STAMPS]
    assert len(names) == len(set(names))


@pytest.mark.parametrize("d", dialects.STAMPS, ids=[d.name for d in dialects.STAMPS])
def test_each_stamp_dialect_parses_its_examples_and_its_hint_catches_them(d):
    parser = StampParser(reference_ns=1_764_496_800 * 10**9)
    for line in d.examples:
        got = parser.parse(line)
        assert got is not None and got.format == d.name, (d.name, line, got)
        assert any(h.search(line.encode()) for h in STAMP_HINTS), (d.name, line)


@pytest.mark.slow
@pytest.mark.parametrize("d", dialects.STAMPS, ids=[d.name for d in dialects.STAMPS])
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_every_stamp_a_dialect_matches_is_caught_by_a_hint(d, data):
    """Texts holding a stamp of the dialect (anywhere, between any characters)."""
    text = data.draw(st.from_regex(re.compile(d.pattern)))
    assert re.search(d.pattern, text)
    assert any(h.search(text.encode("utf-8", "surrogatepass")) for h in STAMP_HINTS), (d.name, text)


@pytest.mark.parametrize("d", dialects.STAMPS, ids=[d.name for d in dialects.STAMPS])
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_every_stamp_a_dialect_matches_holds_what_it_needs(d, data):
    """The parser's pre-check (``StampDialect.needs``) finds every stamp the dialect's pattern
    matches, in the same characters: a text it rejects holds no stamp."""
    text = data.draw(st.from_regex(re.compile(d.pattern)))
    m = re.search(d.pattern, text)
    assert m
    needs = re.compile(dialects.stamp_needs())
    assert needs.search(text, 0, m.end()) is not None, (d.name, text)
    assert re.compile(d.needs).search(text, 0, m.end()) is not None, (d.name, text)


def test_a_determined_workers_lines_name_its_rank():
    """determined.launch.wrap_rank's "[rank=N] " names the rank (behind torchrun's own tag too), and
    a file of several workers' such lines is a combined stream, whatever its name says."""
    from correlator.extract.statements import line_start_captures

    prefix, msg = prefixes.split_prefix("[rank=3] RuntimeError: CUDA error: out of memory")
    assert (prefix.rank, msg) == (3, "RuntimeError: CUDA error: out of memory")
    prefix, msg = prefixes.split_prefix("[rank=12] [rank12]:[E1130 10:00:00.000000000 ProcessGroupNCCL.cpp:632] x")
    assert prefix.rank == 12 and msg.startswith("[E1130")
    text = b"[rank=0] step 1\n[rank=1] step 1\n[rank=1] OSError: [Errno 5] Input/output error\n"
    assert line_start_captures(text, False) == {b"0", b"1"} == line_start_captures(text, True)


def test_a_spark_log4j_stamp_is_read_with_its_century():
    from datetime import UTC, datetime

    parser = StampParser(UTC, reference_ns=1_709_388_000 * 10**9)
    got = parser.parse("24/03/02 14:00:05 ERROR Executor: Exception in task 0.0 in stage 1.0 (TID 1)")
    assert got is not None and got.format == "log4j-yymmdd"
    assert got.time_ns == int(datetime(2024, 3, 2, 14, 0, 5, tzinfo=UTC).timestamp()) * 10**9
    assert parser.parse("24/03/02 14:00:05 some text") is None  # no level after it: not this layout
