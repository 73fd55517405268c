from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from correlator.extract.scan import HyperscanScanner, KeywordScanner, Pattern, hyperscan_available

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


# --- trimmed prefilter tails -----------------------------------------------------------------------

def test_trim_tail_drops_what_may_match_nothing_and_keeps_a_repeat_minimum():
    from correlator.extract.scan import trim_tail

    assert trim_tail(r"Error(?:: (?P<m>[^\n]*)|:?\s*)") == "Error"
    assert trim_tail(r"rank (\d+) of \d+") == r"rank (\d+) of \d"
    assert trim_tail(r"OpType=(?P<op>\w+)(?:, x)?") == r"OpType=(?P<op>\w)"
    assert trim_tail(r"a{2,5}") == "a{2}"
    assert trim_tail(r"NCCL error\b") == "NCCL error"
    # left alone: a top-level alternation, something that would then match anywhere, bad syntax
    assert trim_tail(r"a|b.*") == r"a|b.*"
    assert trim_tail(r".*") == ".*"
    assert trim_tail(r"x(") == "x("


def test_trim_tail_reads_the_regex_modules_named_group_spelling():
    """``(?<name>...)`` is ``regex``'s spelling of ``(?P<name>...)``: ``re`` cannot compile it, and
    trim_tail used to leave 56 such rule patterns whole (DeepSpeed's ``OVERFLOW! Rank N Skipping
    step.`` was reported once per byte of its optional loss-scale tail)."""
    from correlator.extract.scan import trim_tail

    assert trim_tail(r"OVERFLOW! Rank (?<rank>\d+) Skipping step\.(?: Attempted loss scale: (?<s>[\d.]+))?") \
        == r"OVERFLOW! Rank (?<rank>\d+) Skipping step\."
    assert trim_tail(r"failure: (?<error>[^\n]+)") == r"failure: (?<error>[^\n])"
    assert trim_tail(r"to (?<x>[\d.e+-]+)") == trim_tail(r"to (?P<x>[\d.e+-]+)").replace("?P<", "?<")
    # lookbehinds are not names, and a class holding "(?<" is a class
    assert trim_tail(r"a(?<=a)b+") == r"a(?<=a)b"
    assert trim_tail(r"a[(?<x>]*(?<y>b+)") == r"a[(?<x>]*(?<y>b)"
    # a named group that may match nothing is dropped like any other
    assert trim_tail(r"Skipping step(?<tail> [^\n]*)?") == "Skipping step"


def test_trimmed_prefilters_match_every_line_their_rules_match(rules):
    """The trimmed pattern is a prefilter: wherever a rule's own pattern matches an example line of
    any rule, the trimmed one matches too (else Hyperscan would hide that line)."""
    import regex

    from correlator.extract.scan import _hs_regex

    lines = sorted({ln for r in rules for ex in r.examples for ln in ex.log.splitlines() if ln.strip()})
    trimmed = 0
    for r in rules:
        for p in r.match.any:
            full, cut = regex.compile(p), regex.compile(_hs_regex(p).decode())
            trimmed += cut.pattern != p
            for ln in lines:
                if full.search(ln):
                    assert cut.search(ln), (r.id, p, cut.pattern, ln)
    assert trimmed >= 50  # most rules end in a capture of the rest of the line


def test_a_rest_of_line_capture_is_reported_once_not_once_per_byte(rules):
    if not hyperscan_available():
        return
    from correlator.extract.extractor import Engine

    eng = Engine(rules, "hyperscan")
    line = b"OSError: [Errno 5] Input/output error: '/lustre/ckpt/step_1000/model.pt' " + b"x" * 400 + b"\n"
    hits: list[int] = []
    eng.scanner._db.scan(line, match_event_handler=lambda *a: hits.append(a[0]), scratch=eng.scanner._scratch)
    assert hits and len(hits) < 30  # was one report per byte of the message for the exception rule
    hits.clear()
    line = b"[2026-03-02 14:01:03,250] [INFO] [loss_scaler.py:183] OVERFLOW! Rank 5 Skipping step. " \
           b"Attempted loss scale: 65536.0, reducing to 32768.0\n"
    eng.scanner._db.scan(line, match_event_handler=lambda *a: hits.append(a[0]), scratch=eng.scanner._scratch)
    assert hits and len(hits) < 4  # a named group's optional tail: once per byte of it before


def test_a_pattern_the_combined_database_misses_is_found_by_its_keywords(monkeypatch, tmp_path):
    """Hyperscan (this build) missed one of two patterns of the same shape behind a launcher prefix;
    a database is checked against its patterns' own example lines, and what it misses goes to the
    keyword scanner (the main database) or is not checked again whole (the database of whole
    expressions that narrows the lines a trimmed head finds: ``HyperscanScanner.narrowed``)."""
    if not hyperscan_available():
        return
    monkeypatch.setenv("CORRELATE_CACHE", str(tmp_path))
    a = Pattern(0, r"\[(?P<j>\d+(?:, ?\d+)*)\] joined but didn't finish collective #(?P<s>\d+)",
                ("joined but didn't finish collective",))
    b = Pattern(1, r"\[(?P<rank>\d+)\] is setting up NCCL communicator and retrieving ncclUniqueId from",
                ("is setting up NCCL communicator",))
    line = b"0: [default0]:[rank0]:\t   - [5] joined but didn't finish collective #301 (count from 1)\n"
    plain_missed = 0 not in HyperscanScanner([a, b]).scan(line, len(line)).get(0, set())
    checked = HyperscanScanner([a, b], probes=lambda: {0: ["\t   - [5] joined but didn't finish collective #301"]})
    assert checked.scan(line, len(line)) == {0: {0}}
    assert (0 in checked.rejected or 0 not in checked.narrowed) == plain_missed
    again = HyperscanScanner([a, b], probes=lambda: {})  # from the disk cache: the same decision
    assert (again.rejected, again.narrowed) == (checked.rejected, checked.narrowed)


# --- the digest's cost counts (reports, candidate lines, confirmed matches) ------------------------

def _watchdog(rank: int) -> str:
    return (f"[rank{rank}]:[E0302 14:10:00.123456789 ProcessGroupNCCL.cpp:632] [Rank {rank}] Watchdog caught "
            f"collective operation timeout: WorkNCCL(SeqNum=9, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, "
            f"Timeout(ms)=600000) ran for 600001 milliseconds before timing out.\n")


NOISE = "2026-03-02 14:00:01,000 - train - INFO - step=5 loss=2.1\n" * 50
#: has the keywords of a network rule and of the uncaught-exception rule (where a message may start,
#: after a colon: both scanners report it), and is neither
BENIGN = ("2026-03-02 14:00:01,000 - data - WARNING - retrying shard 00001: ConnectionResetError: "
          "[Errno 104] Connection reset by peer (attempt 1/5)\n")


def test_digest_counts_what_the_fast_path_did(engine):
    from conftest import digest_of

    quiet = digest_of(engine, NOISE, name="job.out")
    assert (quiet.scan_reports, quiet.candidate_lines, quiet.confirmed_matches) == (0, 0, 0)
    fails = NOISE + "".join(_watchdog(r) for r in range(5))
    d = digest_of(engine, fails, name="job.out")
    assert d.candidate_lines == 5 and d.confirmed_matches == 5 and d.scan_reports >= 5
    # benign keyword lines are candidates that nothing confirms
    b = digest_of(engine, fails + BENIGN * 7, name="job.out")
    assert b.candidate_lines == 12 and b.confirmed_matches == 5 and b.scan_reports >= 12


def test_confirmed_counts_the_matches_past_the_caps(engine):
    from conftest import digest_of

    from correlator.extract.confirmer import KEEP_FIRST, KEEP_LAST

    n = 3 * (KEEP_FIRST + KEEP_LAST)
    d = digest_of(engine, NOISE + _watchdog(3) * n, name="rank-3.log")
    assert len(d.matches) == KEEP_FIRST + KEEP_LAST
    assert d.confirmed_matches == n == d.candidate_lines


def test_report_stats_sum_the_digests_counts(tmp_path):
    from correlator.pipeline import Options, analyze

    for r in range(4):
        (tmp_path / f"rank-{r}.log").write_text(NOISE + _watchdog(r) + BENIGN * (r + 1))
    stats = analyze([str(tmp_path)], Options(tz="UTC")).stats
    assert stats.candidate_lines == 4 + (1 + 2 + 3 + 4)
    assert stats.confirmed_matches == 4
    assert stats.scan_reports >= stats.candidate_lines


def test_a_line_start_anchor_finds_the_message_behind_every_prefix_dialect(rules):
    """``^`` is kept for Hyperscan as "where a message may start" (``scan.MESSAGE_START``): every
    example line an anchored rule pattern matches is still reported behind the prefix of every
    launcher dialect, after ANSI colour codes and as a later ``\\r`` frame; and the same text in
    the middle of a sentence is not reported."""
    if not hyperscan_available():
        return
    import regex

    from correlator.extract import dialects, prefixes
    from correlator.extract.extractor import Engine

    eng = Engine(rules, "hyperscan")
    heads = {""}
    for d in (*dialects.PREFIXES, *dialects.STANDALONE):
        for ex in d.examples:
            heads.add(ex[: prefixes.split_prefix(ex)[0].length])
    heads |= {"\x1b[31m", "\x1b[1m\x1b[31m ", "tqdm 10%|#   |\r", "12: [default3]:\x1b[0m"}
    anchored = 0
    for ri, p in ((ri, p) for ri, r in enumerate(rules) for p in r.match.any):
        if "^" not in p.replace("[^", ""):
            continue
        rx = regex.compile(p)
        for ex in rules[ri].examples:
            for ln in ex.log.splitlines():
                msg = prefixes.split_prefix(ln)[1]
                if not rx.search(msg):
                    continue
                anchored += 1
                for head in heads:
                    seen = prefixes.split_prefix(prefixes.strip_ansi(head + msg))[1]
                    if not any(rx.search(f) for f in seen.split("\r")):
                        continue  # (what the rules see of this line does not match: nothing to find)
                    data = (head + msg + "\n").encode()
                    found = eng.scanner.scan(data, len(data))
                    ids = {x for v in found.values() for x in v if eng.pattern_rule[x] == ri}
                    assert ids, (rules[ri].id, p, head + msg)
    assert anchored >= 10
    # the generic exception rule's line-start class name, in the middle of a sentence
    ri = next(i for i, r in enumerate(rules) if r.id == "python.uncaught-exception")
    for text in ("    raise ValueError(f'corrupt sample {idx}')", "the loader raised ValueError and retried"):
        data = (text + "\n").encode()
        found = eng.scanner.scan(data, len(data))
        assert not {x for v in found.values() for x in v if eng.pattern_rule[x] == ri}, text


# --- trimmed prefilter heads -----------------------------------------------------------------------

def test_trim_head_drops_a_head_without_a_literal():
    from correlator.extract.scan import head_widens, trim_head

    exc = r"^ ?(?P<t>(?:[A-Za-z_]\w*\.){0,8}[A-Z]\w*(?:Error|Exception))(?:: (?P<m>.*)|\s*)$"
    assert trim_head(exc) == r"(?P<t>(?:Error|Exception))(?:: (?P<m>.*)|\s*)$"
    assert trim_head(r"(?:^|\d\s+)Segmentation fault") == "Segmentation fault"
    assert trim_head(r"(?i)\btraining done") == "(?i)training done"
    assert trim_head(r"(?P<n>\d+) Workers killed|x{2}yzw") == " Workers killed|yzw"
    # what it dropped could stand for something (an anchor, a token that must match) or not
    assert head_widens(exc) and head_widens(r"\bnfs: server") and head_widens(r"(?:\[PG \d+\] ){1,4}Terminating")
    assert not head_widens(r"(?:\[PG \d+\] )?Watchdog caught") and trim_head(r"(?:\[PG \d+\] )?Watch") == "Watch"
    # left alone: a literal start, no literal of HEAD_LITERAL_MIN to start from, a back-reference
    # into the head, a branch with no place to start
    for p in ("NCCL error", r"\d+ \w+", r"(\w+) said \1", r"Rank \d+|\d+ x", r"[ab]c"):
        assert trim_head(p) == p and not head_widens(p)


def _scanner_pair(rules, monkeypatch):
    """Two scanners of the rules whose heads are trimmed (and a few others): heads trimmed (and
    the lines narrowed), and every pattern whole."""
    from correlator.extract import scan
    from correlator.extract.extractor import Engine

    monkeypatch.setenv("CORRELATE_CACHE", "off")
    pats = [p for p in Engine(rules, "keywords").patterns if scan.trim_head(p.regex) != p.regex]
    pats += [p for p in Engine(rules, "keywords").patterns if scan.trim_head(p.regex) == p.regex][:40]
    trimmed = HyperscanScanner(pats)
    monkeypatch.setattr(scan, "TRIM_HEADS", False)
    whole = HyperscanScanner(pats)
    monkeypatch.setattr(scan, "TRIM_HEADS", True)
    return trimmed, whole, pats


def test_narrowed_candidates_are_the_whole_patterns_candidates(rules, monkeypatch):
    """A trimmed head finds more lines (a class name in the middle of a sentence); the lines are
    checked again with the whole expressions, so the candidates, with which patterns, are those
    of the database of whole expressions (examples of every trimmed rule, behind launcher prefixes,
    among lines only the trimmed heads find)."""
    if not hyperscan_available():
        return
    import random

    from correlator.extract import dialects, prefixes

    trimmed, whole, pats = _scanner_pair(rules, monkeypatch)
    assert trimmed.narrowed  # (the exception rule's head, at least)
    by_id = {r.id: r for r in rules}
    examples = sorted({ln for r in rules for ex in r.examples for ln in ex.log.splitlines() if ln.strip()
                       and r.id in by_id})
    heads = sorted({ex[: prefixes.split_prefix(ex)[0].length] for d in dialects.PREFIXES for ex in d.examples})
    decoys = ["    raise ValueError(f'corrupt sample {idx}')", "the loader raised ValueError and retried",
              "ret = 0 Segmentation fault handler installed", "see nfs: server docs", "x rank 3 died from signal"]
    rnd = random.Random(5)
    for _ in range(30):
        lines = [rnd.choice(heads + [""] * 4) + rnd.choice(examples + decoys * 20) for _ in range(60)]
        data = ("\n".join(lines) + "\n").encode()
        assert trimmed.scan(data, len(data)) == whole.scan(data, len(data))


def test_a_dense_range_gives_the_candidates_of_the_line_by_line_path(rules, monkeypatch):
    """Where a range has many reports, its lines come from numpy and the narrowed patterns from one
    scan of the whole range or of their lines joined (``DENSE_REPORTS``, ``NARROW_WHOLE``), or from
    each report back in C (``REPORT_LINES_IN_C``), or (after a dense range) from one scan by the whole
    database: the same candidates, with the same patterns, as line by line (random mixes of example lines, decoys and
    noise, behind prefixes, any cut)."""
    if not hyperscan_available():
        return
    import random

    from correlator.extract import dialects, prefixes, scan

    trimmed, _whole, _pats = _scanner_pair(rules, monkeypatch)
    examples = sorted({ln for r in rules for ex in r.examples for ln in ex.log.splitlines() if ln.strip()})
    heads = sorted({ex[: prefixes.split_prefix(ex)[0].length] for d in dialects.PREFIXES for ex in d.examples})
    noise = ["    raise ValueError(f'corrupt sample {idx}')", "step 5 loss 1.2", "", "a\rb Error", "\x1b[31mx\x1b[0m",
             "ret 5\nSegmentation fault", "\xff\xfe bad", "nfs: server x OK"]
    rnd = random.Random(7)
    for _ in range(40):
        lines = [rnd.choice(heads + [""] * 4) + rnd.choice(examples + noise * 30) for _ in range(rnd.randint(1, 120))]
        data = ("\n".join(lines) + rnd.choice(["\n", ""])).encode("utf-8", "surrogateescape")
        begin = data.find(b"\n", 0, rnd.randint(0, len(data))) + 1
        monkeypatch.setattr(scan, "DENSE_REPORTS", 1 << 30)
        monkeypatch.setattr(scan, "REPORT_LINES_IN_C", 1 << 30)
        trimmed._dense_next = False
        plain = trimmed.scan_range(data, begin, len(data))  # (every report's line one by one)
        monkeypatch.setattr(scan, "REPORT_LINES_IN_C", 0)
        trimmed._dense_next = False  # (the lines found back from each report in C, then narrowed)
        assert trimmed.scan_range(data, begin, len(data)) == plain, "reports' lines in C"
        monkeypatch.setattr(scan, "DENSE_REPORTS", 0)
        for whole in (0, 1 << 30):  # the narrowed lines checked by a scan of the whole range, or joined
            monkeypatch.setattr(scan, "NARROW_WHOLE", whole)
            trimmed._dense_next = False
            assert trimmed.scan_range(data, begin, len(data)) == plain, whole
        # the range after a dense one: scanned once by the whole database, its lines from numpy or
        # one by one
        for dense in (0, 1 << 30):
            monkeypatch.setattr(scan, "DENSE_REPORTS", dense)
            trimmed._dense_next = True
            assert trimmed.scan_range(data, begin, len(data)) == plain, ("whole database", dense)


@pytest.mark.slow  # (two compiles of the built-in rules' databases: ~10 s)
def test_the_whole_database_is_cached_beside_the_main_one_or_built_when_asked(rules, monkeypatch, tmp_path):
    """The database a dense range is scanned with after another (``_whole_pair``: the main
    database's patterns with the narrowed ones whole): where the main one is compiled (a cold
    cache), a detached child compiles and caches it meanwhile, and the scanner loads it when first
    asked; where it is not cached, a detached child caches it for the next scanner and this one
    goes on without it."""
    if not hyperscan_available():
        return
    import time

    from correlator.extract import scan
    from correlator.extract.extractor import Engine

    trimmed, _whole, _pats = _scanner_pair(rules, monkeypatch)  # (no cache)
    assert trimmed._whole == scan._UNBUILT
    got = trimmed._whole_pair(compile_here=True)
    assert got is not None and trimmed._whole is got
    monkeypatch.setenv("CORRELATE_CACHE", str(tmp_path))
    sc = Engine(rules).scanner  # cold: the main database compiled here, the whole one by a child
    assert isinstance(sc, HyperscanScanner) and sc._whole == scan._UNBUILT
    _patterns, _first, _probes, sources, ids, _flags, _rejected = sc._whole_from

    def cached_soon() -> bool:  # (the child is waited for by nobody: its file appears when it is done)
        for _ in range(600):
            if scan._cache_load(sources, ids, sc._whole_key()) is not None:
                return True
            time.sleep(0.1)
        return False

    assert cached_soon()
    assert sc._whole_pair() is not None
    # evicted (the main one kept): the next scanner goes without, and a child caches it again
    (tmp_path / f"hs-{scan._cache_key(sources, ids, sc._whole_key())}.db").unlink()
    again = Engine(rules).scanner
    assert isinstance(again, HyperscanScanner) and again._whole_pair() is None
    assert cached_soon()


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from([b"Q", b"a", b"aa", b"\n", b"x", b" ", b"\xff", b"\x00", b"b"]), max_size=900).map(b"".join),
       st.sampled_from([b"Exception ignored in", b"aa", b"a\nb", b"\x00\xff", b"x"]),
       st.integers(0, 3000), st.integers(0, 3000), st.booleans())
def test_literal_places_are_the_places_find_finds(noise, lit, a, b, by_hyperscan):
    """``literal_places`` (a context rule's required literal in a block's bytes) gives every place
    ``bytes.find`` finds one by one from ``pos``, overlapping ones too, whether it asks Hyperscan
    (a long span) or ``bytes.find``."""
    import pytest

    from correlator.extract import scan

    data = noise.replace(b"Q", lit)  # (the literal where the noise had a Q: some places, some overlaps)
    pos, end = sorted((min(a, len(data)), min(b, len(data))))
    want, i = [], data.find(lit, pos, end)
    while i >= 0:
        want.append(i)
        i = data.find(lit, i + 1, end)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(scan, "LITERAL_SCAN_BYTES", 0 if by_hyperscan else 1 << 30)
        assert scan.literal_places(data, lit, pos, end) == want
