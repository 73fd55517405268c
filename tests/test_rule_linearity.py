"""Issue 17 item 8: every built-in rule pattern is linear in the length of the line it searches.

A backtracking search is quadratic when every start position rescans to the line's end (an
unbounded run whose class holds the pattern's own prefix: ``foo[^\\n]*bar`` on ``foofoofoo…``, a
repeated group ``(?:\\[PG …\\] )+`` on a line of such groups), and exponential with nested
quantifiers. Two checks, neither of which asserts on a duration:

- **structure** (deterministic): no unbounded quantifier inside another repeat, unless a literal
  that the inner run cannot take ends each iteration (``(?:[^\\n]*\\n)*``: one way to split).
  And no unbounded run at a match's start that takes its own head's characters, at a start no anchor or
  lookbehind confines, with something after it that may fail (``leading_runs``): on a line of that head
  repeated (``libcudnn.so.8`` over and over for ``lib[\\w.+-]+\\.so...``) a match starts at each
  repetition and reads the run to the line's end.
- **behaviour** (``benchmarks/pattern_linearity.py``, not a test: it times): each pattern searches lines of repeated partial matches, derived from its own
  examples (the matched text cut at every group boundary, with and without what precedes it on the
  line) and generic runs. The one slowest on a 16 KiB line is grown by four, from 16 KiB, until
  the longer run takes ``INFORMATIVE_S`` (long enough to time to a few per cent) or the line is
  1 MiB: linear work grows four times, quadratic sixteen; the test fails above ``MAX_GROWTH``.
  Times are CPU times of this thread (``time.thread_time``, not the wall clock: a loaded machine
  deschedules the process without charging it), the minimum of ``REPEATS`` interleaved runs. A
  1 MiB line searched in under ``INFORMATIVE_S`` is linear by itself: a quadratic search of 1 MiB
  of repeated units of at most 200 characters rescans at least (2**20)**2 / 400 = 2.7e9
  characters. So a loaded machine can slow the test, not fail it. (Runs bounded to a few KiB,
  ``[^)]{1,4096}``, are linear from there on: 16 KiB is past them.)

``test_the_structure_check_sees_nested_quantifiers`` proves the structure check fails on nested
quantifiers; the benchmark flags the forms the rules had before (the DeepSpeed launcher's command
list, the heartbeat's repeated group, a run to the end of the line).
"""

from __future__ import annotations

import re
import re._parser as sre  # the standard library's parser of the same syntax: the tree of a pattern
import string
import tomllib
from pathlib import Path

import pytest
import regex

ROOT = Path(__file__).resolve().parent.parent
#: units that are not cut from an example: runs of one class, and small pieces of typical lines
GENERIC = ("x", "a ", "0", " ", "a_", "/a", ".", "=", "a:", "-", "[a]", "(a)", "a.so ", "a=1, ", "\t")


def _patterns() -> list[tuple[str, str, str, list[str]]]:
    """(rule id, where, pattern, example lines) of every pattern of every built-in rule."""
    out = []
    for f in sorted((ROOT / "rules").rglob("*.toml")):
        data = tomllib.loads(f.read_text(encoding="utf-8"))
        logs = [ex["log"] for ex in data.get("examples", [])]
        lines = [x for log in logs for x in (log, *log.split("\n")) if x.strip()]
        for key in ("any", "all", "not"):
            for i, p in enumerate(data["match"].get(key, [])):
                out.append((data["id"], f"match.{key}[{i}]", p, lines))
    return out


PATTERNS = _patterns()


def units(p: regex.Pattern[str], lines: list[str]) -> list[str]:
    """What a line of repeated partial matches of ``p`` repeats: each example's match cut at every
    start and end of a group that took part (and one character short of its start and end), with
    and without the 40 characters before the match; and the generic units."""
    out = set(GENERIC)
    for line in lines:
        m = p.search(line)
        if m is None or m.end() <= m.start():
            continue
        s, e = m.start(), m.end()
        cuts = {s + 1, e - 1}
        for g in range(1, (p.groups or 0) + 1):
            gs, ge = m.span(g)
            cuts |= {gs, ge} if gs >= 0 else set()
        for c in cuts:
            if s < c <= e:
                out |= {line[s:c], line[max(0, s - 40):c]}
    return sorted(out)


# --- structure ---------------------------------------------------------------------------------

_REPEATS = (sre.MAX_REPEAT, sre.MIN_REPEAT, getattr(sre, "POSSESSIVE_REPEAT", sre.MAX_REPEAT))
_ZERO_WIDTH = (sre.ASSERT, sre.ASSERT_NOT, sre.AT)


def _takes(item, ch: str) -> bool:
    """Whether the one-character ``item`` (the body of a run) can take ``ch``; True when unsure."""
    op, av = item
    if op is sre.LITERAL:
        return chr(av) == ch
    if op is sre.NOT_LITERAL:
        return chr(av) != ch
    if op is sre.ANY:
        return ch != "\n"
    if op is sre.IN:
        cats = {sre.CATEGORY_DIGIT: r"\d", sre.CATEGORY_NOT_DIGIT: r"\D", sre.CATEGORY_SPACE: r"\s",
                sre.CATEGORY_NOT_SPACE: r"\S", sre.CATEGORY_WORD: r"\w", sre.CATEGORY_NOT_WORD: r"\W"}
        parts, neg = [], ""
        for o, a in av:
            if o is sre.NEGATE:
                neg = "^"
            elif o is sre.LITERAL:
                parts.append(re.escape(chr(a)))
            elif o is sre.RANGE:
                parts.append(f"{re.escape(chr(a[0]))}-{re.escape(chr(a[1]))}")
            elif o is sre.CATEGORY and a in cats:
                parts.append(cats[a])
            else:
                return True
        return re.fullmatch(f"[{neg}{''.join(parts)}]", ch) is not None
    return True


def _delimited(seq, k: int, follows) -> bool:
    """Whether the unbounded run ``seq[k]`` is ended by the next literal after it, one that the run
    cannot take, whichever way the pattern goes on (in its sequence, else in each of the ``follows``
    of the group it is in: what comes after the group, or the next iteration of a repeat): then an
    iteration of the repeat around it splits one way only."""
    body = seq[k][1][2]
    if len(body) != 1:
        return False
    ways = [[*seq[k + 1:], *f] for f in follows] if follows else [seq[k + 1:]]
    for way in ways:
        nxt = next(((op, av) for op, av in way if op not in _ZERO_WIDTH), None)
        if nxt is None or nxt[0] is not sre.LITERAL or _takes(body[0], chr(nxt[1])):
            return False
    return True


def nested_unbounded(seq, in_repeat: bool = False, follows=()) -> list[str]:
    """The unbounded quantifiers of a parsed pattern that sit, undelimited, inside another repeat
    (one that can run more than once). ``follows``: the ways the pattern goes on after ``seq``."""
    found: list[str] = []
    seq = list(seq)
    for k, (op, av) in enumerate(seq):
        after = [[*seq[k + 1:], *f] for f in follows] if follows else [seq[k + 1:]]
        if op in _REPEATS:
            lo, hi, body = av
            if hi is sre.MAXREPEAT and in_repeat and not _delimited(seq, k, follows):
                found.append(f"{{{lo},}} of {list(body)!r:.60} inside a repeat")
            again = hi is sre.MAXREPEAT or hi > 1
            found += nested_unbounded(body, in_repeat or again, [*after, list(body)] if again else after)
        elif op is sre.SUBPATTERN:
            found += nested_unbounded(av[-1], in_repeat, after)
        elif op is sre.BRANCH:
            for alt in av[1]:
                found += nested_unbounded(alt, in_repeat, after)
        elif op in (sre.ASSERT, sre.ASSERT_NOT):
            found += nested_unbounded(av[1], in_repeat)
        elif op is getattr(sre, "ATOMIC_GROUP", None):
            found += nested_unbounded(av, in_repeat, after)
    return found


#: the characters a run is tried on (a quadratic line is made of them)
_PRINTABLE = frozenset(chr(c) for c in range(0x20, 0x7f)) | {"\t"}


def _chars(item) -> frozenset[str]:
    """The printable characters the one-character ``item`` can take (all of them when unsure)."""
    return frozenset(c for c in _PRINTABLE if _takes(item, c))


def _one_char(item) -> bool:
    return item[0] in (sre.LITERAL, sre.NOT_LITERAL, sre.ANY, sre.IN)


def _run_chars(body) -> frozenset[str] | None:
    """The characters a repeat of ``body`` takes, when each repetition is one character (lookarounds
    aside: ``(?:(?!lib)[\\w.])``); else None."""
    chars: frozenset[str] = frozenset()
    one = 0
    for op, av in body:
        if op in (sre.ASSERT, sre.ASSERT_NOT):
            continue
        if op is sre.SUBPATTERN:
            inner = _run_chars(av[-1])
            if inner is None:
                return None
            chars |= inner
        elif _one_char((op, av)):
            chars |= _chars((op, av))
        else:
            return None
        one += 1
    return chars if one == 1 else None


def _may_fail(rest, run: frozenset[str]) -> bool:
    """Whether what follows a run may fail where the run ends: not when it can match nothing there
    (optional items; a line end, when the run takes every character but the newline)."""
    for op, av in rest:
        if op in _REPEATS and av[0] == 0:
            continue
        if op is sre.SUBPATTERN and not _may_fail(av[-1], run):
            continue
        if op is sre.AT and av in (sre.AT_END, sre.AT_END_STRING) and run >= _PRINTABLE:
            continue
        return True
    return False


def leading_runs(seq, guard: frozenset[str] | None = None, head: tuple = ()) -> list[str]:
    """The unbounded runs a match may begin with -- after zero-width items and a head of single
    characters -- that take some of each head character, at a start no anchor or lookbehind
    confines, with something after them that may fail. ``lib[\\w.+-]+\\.so...`` on a line of
    ``libcudnn.so.8`` repeated starts a match at each ``lib`` and runs each to the line's end
    (quadratic; with the backtracking into the run, worse); ``[A-Za-z_][\\w.]*: Caught`` starts at
    every letter of a long word. A start after ``^``, or after a lookbehind or ``\\b`` that no
    character of the run can stand before, is confined: each run of such characters is entered once
    (its first characters that cannot begin a match skipped by a possessive run). ``guard``: the
    characters the start may follow (None: any)."""
    seq = list(seq)
    for k, (op, av) in enumerate(seq):
        rest = seq[k + 1:]
        if op is sre.AT:
            if av in (sre.AT_BEGINNING, sre.AT_BEGINNING_STRING):
                return []
            if av is sre.AT_BOUNDARY and not head:  # (a word start: it follows no word character)
                guard = frozenset(c for c in _PRINTABLE if not (c.isalnum() or c == "_"))
            continue
        if op in (sre.ASSERT, sre.ASSERT_NOT) and av[0] == -1 and len(av[1]) == 1 and _one_char(av[1][0]) \
                and not head:  # a lookbehind of one character: what the start may follow
            guard = _chars(av[1][0]) if op is sre.ASSERT else _PRINTABLE - _chars(av[1][0])
            continue
        if op in (sre.ASSERT, sre.ASSERT_NOT):
            continue
        if op is sre.SUBPATTERN:
            return leading_runs([*av[-1], *rest], guard, head)
        if op is getattr(sre, "ATOMIC_GROUP", None):
            return leading_runs([*av, *rest], guard, head)
        if op is sre.BRANCH:
            return [f for alt in av[1] for f in leading_runs([*alt, *rest], guard, head)]
        if _one_char((op, av)):
            head = (*head, (op, av))
            continue
        if op in _REPEATS:
            lo, hi, body = av
            if hi is sre.MAXREPEAT:
                run = _run_chars(body)
                if run is None:
                    return []  # (a repeated group of more than one character: the nested-quantifier check's)
                if guard is not None and not (guard & run):
                    return []  # a confined start: at the beginning of a run of these characters only
                if all(_chars(h) & run for h in head) and _may_fail(rest, run):
                    return [f"a run of {body[0]!r:.50} after a head of {len(head)} character(s) it takes, unconfined"]
                return []
            if lo == 0:  # an optional group first: the match may begin in it, or after it
                return leading_runs([*body, *rest], guard, head) + leading_runs(rest, guard, head)
            return leading_runs([*body, *rest], guard, head)
        return []
    return []


def parse(pattern: str):
    """The standard library's parse tree of a rule pattern (``regex``'s ``(?<name>`` spelt ``(?P<name>``)."""
    return sre.parse(re.sub(r"\(\?<(?=[A-Za-z_])", "(?P<", pattern))


# --- the tests ---------------------------------------------------------------------------------

def test_every_pattern_is_read_by_the_structure_check():
    assert len(PATTERNS) > 500
    for _rule_id, _where, p, _ in PATTERNS:
        parse(p)  # raises on a construct the check cannot read


@pytest.mark.parametrize("rule_id, where, pattern", [(r, w, p) for r, w, p, _ in PATTERNS],
                         ids=[f"{r}:{w}" for r, w, _, _ in PATTERNS])
def test_no_nested_unbounded_quantifiers(rule_id, where, pattern):
    assert not nested_unbounded(parse(pattern)), (rule_id, where, nested_unbounded(parse(pattern)))


@pytest.mark.parametrize("pattern", [r"(a+)+b", r"(?:\w+\s?)*x", r"(?:a|b*)+c", r"(?:(?:ab)*c)+"])
def test_the_structure_check_sees_nested_quantifiers(pattern):
    assert nested_unbounded(parse(pattern))


@pytest.mark.parametrize("pattern", [r"(?:(?!Traceback)[^\n]*\n)*[^\n]*\Z", r"(?:\[PG [^\]\n]{0,160}?\] ){1,4}x",
                                     r"a+b*c", r"(?:x{1,3}y)+", r"(?:[^\]]*\]){2,}z", r"(?:\[(?P<r>\d+)\] )+x"])
def test_the_structure_check_leaves_delimited_and_bounded_forms(pattern):
    assert not nested_unbounded(parse(pattern))


@pytest.mark.parametrize("rule_id, where, pattern", [(r, w, p) for r, w, p, _ in PATTERNS],
                         ids=[f"{r}:{w}" for r, w, _, _ in PATTERNS])
def test_no_unconfined_leading_runs(rule_id, where, pattern):
    assert not leading_runs(parse(pattern)), (rule_id, where, leading_runs(parse(pattern)))


#: forms the rules had before, each quadratic (or worse) on a line like the benchmark's, and measured
#: so: 'libcudnn.so.8' repeated (68.6 times the work on a 4 times longer line), a long word before
#: ': Caught x in DataLoade', 'slurmstepd-' repeated before ': error: Detected x', digits before
#: 'x Workers (tasks / actors) killed ...', a list '1, 1, 1, ...' before '] joined ... #x'
LEADING_RUN_FORMS = (
    r"(?<library>lib[\w.+-]+\.so[\w.]*): cannot open shared object file: No such file or directory",
    r"(?<wrapped>[A-Za-z_][\w.]*): Caught (?<exc_type>[A-Za-z_][\w.]*) in DataLoader worker process (?<worker>\d+)",
    r"(?:slurmstepd-(?P<host>[\w.-]+): error: )?Detected (?P<count>\d+) oom[_-]kill events? in ",
    r"(?P<killed>\d+) Workers \(tasks / actors\) killed due to memory pressure \(OOM\)",
    r"(?P<joined_ranks>\d+(?:, ?\d+)*)\] joined but didn't finish collective #(?P<desync_seq>\d+)",
    r"(?<library>[^\s:'\"]+\.so(?:\.[\d.]+)?): undefined symbol: (?<symbol>\S+)",
    r"lib\w+ foo",
)


@pytest.mark.parametrize("pattern", LEADING_RUN_FORMS)
def test_the_structure_check_sees_unconfined_leading_runs(pattern):
    assert leading_runs(parse(pattern))


@pytest.mark.parametrize("pattern", [
    r"(?<![\w.+-])(?:(?!lib)[\w.+-])*+(?<library>lib[\w.+-]*\.so[\w.]*): cannot",  # confined, past non-head characters
    r"(?<![^\s:'\"])(?<library>[^\s:'\"]+\.so): undefined symbol",  # a lookbehind the run cannot stand before
    r"(?<!\d)(?P<killed>\d+) Workers", r"(?<=\[)\d+(?:, ?\d+)*\] joined", r"\bfoo\w+bar", r"^lib\w+ foo",
    r"ImportError: (?<detail>\S[^\n]*)",  # nothing after the run can fail: the first start matches
    r"Error while deserializing header: (?<reason>[^\n]+?)\s*$",
    r"x\d+y",  # the run takes no character of the head
])
def test_the_structure_check_leaves_confined_and_final_runs(pattern):
    assert not leading_runs(parse(pattern))


def test_units_come_from_the_examples():
    p = regex.compile(r"Unable to find latest file at (?P<path>\S+?), if trying")
    us = units(p, ["[WARNING] Unable to find latest file at /ckpt/latest, if trying to load"])
    assert "Unable to find latest file at " in us  # cut at the start of the path
    assert any(u.startswith("[WARNING] Unable") for u in us)  # with what precedes the match
    assert set(GENERIC) <= set(us) and all(set(u) - set(string.printable) == set() for u in us)
