from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from correlator.scan import HyperscanScanner, KeywordScanner, Pattern, hyperscan_available

PATTERNS = [
    Pattern(0, r"Input/output error", ("Input/output error",)),
    Pattern(1, r"SeqNum=(?P<seq>\d+)", ("SeqNum=",)),
    Pattern(2, r"(?i)cuda out of memory", ("CUDA out of memory", "cuda out of memory")),
]


def test_scanners_agree_on_lines():
    buf = b"abc SeqNum=5 x SeqNum=6\nOSError: [Errno 5] Input/output error\nok\nCUDA out of memory\nlast Input/output error"
    kw = KeywordScanner(PATTERNS).scan(buf, len(buf))
    assert sorted(kw) == [0, 24, 65, 84]
    assert kw[0] == {1} and kw[65] == {2}
    if hyperscan_available():
        hs = HyperscanScanner(PATTERNS).scan(buf, len(buf))
        assert hs == kw


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=4000))
def test_scanners_never_raise(data):
    for scanner in [KeywordScanner(PATTERNS)] + ([HyperscanScanner(PATTERNS)] if hyperscan_available() else []):
        lines = scanner.scan(data, len(data))
        for start in lines:
            assert start == 0 or data[start - 1:start] == b"\n"


@settings(max_examples=100, deadline=None)
@given(st.lists(st.sampled_from([b"SeqNum=12", b"Input/output error", b"noise", b"\n", b"\r", b"\x00", b"\xff"]),
                max_size=60))
def test_hyperscan_finds_every_keyword_line(parts):
    if not hyperscan_available():
        return
    data = b"".join(parts)
    kw = KeywordScanner(PATTERNS[:2]).scan(data, len(data))
    hs = HyperscanScanner(PATTERNS[:2]).scan(data, len(data))
    assert set(kw) == set(hs)
