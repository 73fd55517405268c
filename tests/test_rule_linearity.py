"""Issue 17 item 8: every built-in rule pattern is linear in the length of the line it searches.

A backtracking search is quadratic when every start position rescans to the line's end (an
unbounded run whose class holds the pattern's own prefix: ``foo[^\\n]*bar`` on ``foofoofoo…``, a
repeated group ``(?:\\[PG …\\] )+`` on a line of such groups), and exponential with nested
quantifiers. Two checks, neither of which asserts on a duration:

- **structure** (deterministic): no unbounded quantifier inside another repeat, unless a literal
  that the inner run cannot take ends each iteration (``(?:[^\\n]*\\n)*``: one way to split).
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


def test_units_come_from_the_examples():
    p = regex.compile(r"Unable to find latest file at (?P<path>\S+?), if trying")
    us = units(p, ["[WARNING] Unable to find latest file at /ckpt/latest, if trying to load"])
    assert "Unable to find latest file at " in us  # cut at the start of the path
    assert any(u.startswith("[WARNING] Unable") for u in us)  # with what precedes the match
    assert set(GENERIC) <= set(us) and all(set(u) - set(string.printable) == set() for u in us)
