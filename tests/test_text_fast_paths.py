"""The fast paths for text of progress bars (tqdm: ``\\r`` frames, non-ASCII bars, ANSI codes) give
what the plain paths they replace give:

- ``reader.valid_utf8`` through Arrow's validator == decoding with ``str(b, "utf-8")``;
- ``Hygiene.check`` with it == the decoding check it replaced, over pieces cut anywhere (mid-character too);
- ``windows.LastHints`` (each block's hints found once) == ``WindowFinder.last_hint`` at every end;
- the window facts of a tail of progress-bar lines through the window finder == line by line;
- a source's digest with Arrow's check == with decoding.
"""

from __future__ import annotations

import io
import random
from datetime import timedelta

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from jobs import T0, glog, py

import correlator.extract.reader as reader
import correlator.extract.windows as windows
from correlator.extract.extractor import Engine, ExtractOptions, extract
from correlator.extract.scan import window_finder
from correlator.extract.timestamps import resolve_tz
from correlator.model import SourceInfo

UTC = resolve_tz("UTC")
BARS = " ▏▎▍▌▋▊▉█"


@pytest.fixture
def arrow(monkeypatch):
    """``valid_utf8`` asks Arrow about any range (as after ARROW_AFTER_BYTES decoded)."""
    monkeypatch.setattr(reader, "_decoded", reader.ARROW_AFTER_BYTES)
    monkeypatch.setattr(reader, "ARROW_MIN_BYTES", 0)


def _decode_only(monkeypatch) -> None:
    monkeypatch.setattr(reader, "_decoded", -(1 << 60))


def _frame(rnd: random.Random, epoch: int, i: int) -> str:
    full = rnd.randint(0, 10)
    bar = "█" * full + (rnd.choice(BARS) if full < 10 else "") + " " * max(0, 9 - full)
    if rnd.random() < 0.2:
        bar = f"\x1b[3{rnd.randint(1, 7)}m{bar}\x1b[0m"
    return (f"Epoch {epoch}: {i * 100 // 2000:3d}%|{bar}| {i}/2000 [00:{rnd.randint(0, 59):02d}<01:"
            f"{rnd.randint(0, 59):02d}, {rnd.uniform(20, 30):.2f}it/s, loss={rnd.uniform(2, 3):.3f}"
            + ", v_num=0, lr=3.0e-04, grad_norm=1.25"[:rnd.choice([0, 9, 40])] + "]")


def _tqdm_line(rnd: random.Random, t, step: int, frames_share: float = 0.45) -> bytes:
    """One line of a tqdm-heavy log: ``\\r`` frames with a logger line written after the last one (no
    stamp at its start), a stamped line, a glog line, a line of frames alone, a blank or odd one;
    sometimes invalid UTF-8 or a character cut in two."""
    kind = rnd.random()
    if kind < frames_share:
        frames = "\r".join(_frame(rnd, step // 10, step * 7 + k) for k in range(rnd.randint(1, 12)))
        tail = f"{py(t)} - train - INFO - step={step} loss=2.8" if rnd.random() < 0.8 else ""
        line = ("\r" if rnd.random() < 0.7 else "") + frames + tail
    elif (kind := (kind - frames_share) / (1 - frames_share) * 0.55 + 0.45) < 0.65:
        line = f"{py(t)} - train - INFO - step={step} loss={rnd.uniform(2, 3):.4f}"
    elif kind < 0.75:
        line = f"{glog(t, 'I')} 4242 train.py:88] iteration {step} — ok"
    elif kind < 0.8:
        line = f"\x1b[32m{py(t)}\x1b[0m | INFO | step {step}"
    elif kind < 0.9:
        line = rnd.choice(["", "   ", "noise ▌▌ no stamp", "Validation: 100%|██████████| 40/40"])
    else:
        line = f"[rank{rnd.randrange(4)}]: {py(t)} a prefixed line, step {step}"
    raw = line.encode()
    if rnd.random() < 0.05:
        at = rnd.randint(0, len(raw))
        raw = raw[:at] + rnd.choice([b"\xff", b"\xe2\x96", b"\xc0\x80", b"\xed\xa0\x80", b"\x80"]) + raw[at:]
    return raw


def _frames_only(rnd: random.Random, k: int) -> bytes:
    """``k`` lines of frames and nothing else: hints (``00:23<01:05``) in every line, no stamp."""
    return b"".join(("\r".join(_frame(rnd, 9, i * 5 + j) for j in range(rnd.randint(1, 20))) + "\n").encode()
                    for i in range(k))


def _tqdm_text(rnd: random.Random, n: int, prefixed: bool = True, frames_share: float = 0.45) -> bytes:
    """``n`` lines of ``_tqdm_line``, ``frames_share`` of them frames (most tqdm logs: nearly all)."""
    out, step = [], rnd.randint(0, 50)
    for _ in range(n):
        step += rnd.choice([0, 1, 1, 2])
        t = T0 + timedelta(seconds=step, milliseconds=rnd.randint(0, 999))
        line = _tqdm_line(rnd, t, step, frames_share)
        while not prefixed and line.startswith(b"[rank"):
            line = _tqdm_line(rnd, t, step, frames_share)
        out.append(line)
    return b"\n".join(out) + (b"\n" if rnd.random() < 0.8 else b"")


# --- UTF-8 -----------------------------------------------------------------------------------------

_PIECES = [b"a", b"\n", b"\r", b"\x1b[0m", "█".encode(), "▏".encode(), "é".encode(), "😀".encode(),
           b"\xe2", b"\x96", b"\xe2\x96", b"\xf0\x9f\x98", b"\xc0\x80", b"\xc1\xbf", b"\xe0\x80\x80",
           b"\xed\xa0\x80", b"\xed\xbf\xbf", b"\xf4\x90\x80\x80", b"\xf5\x80\x80\x80", b"\xff", b"\x80",
           b"\xef\xbf\xbf", b"\xf4\x8f\xbf\xbf", b"\x00"]


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.one_of(st.binary(max_size=64), st.lists(st.sampled_from(_PIECES), max_size=40).map(b"".join),
                 st.text(max_size=40).map(str.encode)))
def test_arrow_utf8_check_is_decoding(arrow, data):
    """Arrow's validator accepts exactly what ``str(b, "utf-8")`` decodes: truncated and overlong
    sequences, surrogates, code points past U+10FFFF, stray continuation bytes (and over a view)."""
    try:
        str(data, "utf-8")
        decodes = True
    except UnicodeDecodeError:
        decodes = False
    assert reader.valid_utf8(data) == decodes
    assert reader.valid_utf8(memoryview(b"x" + data + b"y")[1:-1]) == decodes
    assert reader._arrow_valid  # (Arrow's check was the one asked)


def _plain_check(h: reader.Hygiene, data: bytes, offset: int, begin: int, end: int) -> None:
    """``Hygiene.check`` as it was before Arrow's check: every non-ASCII range decoded."""
    first = data.find(b"\x00", begin, end)
    if first >= 0:
        if h.first_nul is None:
            h.first_nul = offset + first - begin
        h.nul_bytes += data.count(b"\x00", begin, end)
    if h.bad_utf8_at is None and not data.isascii():
        region = data[begin:end]
        if region.isascii():
            return
        try:
            region.decode("utf-8")
        except UnicodeDecodeError as e:
            if e.reason != "unexpected end of data":
                h.bad_utf8_at = offset + e.start


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.integers(0, 1 << 32).map(random.Random), st.integers(1, 200),
       st.lists(st.integers(0, 1 << 20), max_size=12), st.booleans())
def test_hygiene_check_with_arrow_is_the_decoding_check(arrow, rnd, n, cuts, nul):
    """Over a tqdm-heavy text cut anywhere (a piece may end or start mid-character, as the pieces of an
    over-long line do), the NUL counts and the first invalid byte said are the plain check's."""
    data = _tqdm_text(rnd, n)
    if nul:
        at = rnd.randint(0, len(data))
        data = data[:at] + b"\x00" * rnd.randint(1, 3) + data[at:]
    bounds = sorted({0, len(data), *(c % (len(data) + 1) for c in cuts)})
    fast, plain = reader.Hygiene(), reader.Hygiene()
    for a, b in zip(bounds, bounds[1:], strict=False):
        fast.check(data, 1000 + a, a, b)
        _plain_check(plain, data, 1000 + a, a, b)
        assert (fast.nul_bytes, fast.first_nul, fast.bad_utf8_at) == \
               (plain.nul_bytes, plain.first_nul, plain.bad_utf8_at)


@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(st.integers(0, 1 << 32).map(random.Random), st.integers(1, 400), st.sampled_from([None, 700, 4096]))
def test_digest_with_arrow_is_the_digest_with_decoding(monkeypatch, engine, rnd, n, chunk):
    """A tqdm-heavy source's digest (its invalid-UTF-8 diagnostic included) is the same whichever
    check a process uses."""
    data = _tqdm_text(rnd, n)
    opts = ExtractOptions(tz=UTC, **({"chunk_bytes": chunk} if chunk else {}))
    src = SourceInfo(path="tqdm.log", kind="memory", size=len(data))
    with monkeypatch.context() as m:
        _decode_only(m)
        plain = extract(src, engine, opts, stream=io.BytesIO(data))
    with monkeypatch.context() as m:
        m.setattr(reader, "_decoded", reader.ARROW_AFTER_BYTES)
        m.setattr(reader, "ARROW_MIN_BYTES", 0)
        fast = extract(src, engine, opts, stream=io.BytesIO(data))
    assert fast == plain


def _window_run(engine: Engine, head: bytes, tail: bytes) -> tuple:
    from correlator.extract.lines import Context, Stamps

    w = windows.Windows(Context(SourceInfo(path="x.log", kind="memory"), Stamps(UTC, None), engine.scanner))
    w.facts(head, 0, head=True)
    w.facts(tail, 5000, head=False)
    return ({k: (w.lines, w.first_ns, w.last_ns, w.last_offset, w.last_step, w.last_step_ns, w.who)
             for k, w in w.writers.items()}, list(w.anchors.items()))


# --- the tail's backward hint search ---------------------------------------------------------------

@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 1 << 32).map(random.Random), st.integers(0, 300), st.booleans())
def test_last_hints_are_last_hint_at_every_end(rnd, n, falling):
    """``LastHints.last`` == ``WindowFinder.last_hint`` for ends falling line by line (as the tail's
    search asks) or in any order, over windows of progress-bar lines larger than a block (64 KiB)."""
    finder = window_finder()
    data = _tqdm_text(rnd, n, frames_share=rnd.choice([0.45, 0.97, 1.0]))
    if rnd.random() < 0.3:
        data = data * rnd.randint(2, 6)
    if rnd.random() < 0.5:  # (blocks of 64 KiB and more without a stamp, every line with hints)
        data += _frames_only(rnd, rnd.randint(1, 400))
    hints = windows.LastHints(finder, data)
    if falling:
        ends, end = [], len(data)
        while end > 0 and len(ends) < 60:
            ends.append(end)
            end = data.rfind(b"\n", 0, end) if rnd.random() < 0.8 else rnd.randint(0, end - 1)
        ends.append(max(end, 0))
    else:
        ends = [rnd.randint(0, len(data)) for _ in range(20)]
    for end in ends:
        assert hints.last(end) == finder.last_hint(data, end), end


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 1 << 32).map(random.Random), st.integers(1, 80), st.integers(1, 400))
def test_tail_of_progress_bars_through_the_window_finder_is_line_by_line(rules, rnd, a, b):
    """Window facts of a head and a tail of tqdm lines (the last stamp at a line's start may lie
    blocks back, behind lines whose stamp follows their frames) == the line-by-line loop's."""
    head = _tqdm_text(rnd, a, prefixed=False)
    tail = _tqdm_text(rnd, b, prefixed=rnd.random() < 0.3, frames_share=rnd.choice([0.45, 0.97, 0.995, 1.0]))
    head += b"" if head.endswith(b"\n") else b"\n"
    if rnd.random() < 0.3:
        tail = tail * rnd.randint(2, 5)
    if rnd.random() < 0.5:  # (the last stamp at a line's start blocks back)
        tail += _frames_only(rnd, rnd.randint(1, 400))
    fast, slow = Engine(rules, "hyperscan"), Engine(rules, "regex")
    assert _window_run(fast, head, tail) == _window_run(slow, head, tail)
