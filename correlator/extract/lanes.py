"""The bulk lane's exact search: which of many plain lines a line-scope rule confirms, by Hyperscan.

``confirmer.Confirmer.bulk_lane`` joins a block's plain candidate lines (printable ASCII and tabs,
each after a newline) and asks which of them each rule confirms. ``regex`` answers with one
``finditer`` per pattern (``ruleset.Bulk``), about a microsecond a line; a Hyperscan database of
the same patterns, *exact* (not in prefilter mode) and made unable to match across a newline
(``exact_expression``), answers with one scan and a callback per match. Owns that conversion and
the databases (one per rule, disk-cached, checked against the rule's own example lines when built:
a pattern whose lines differ from ``regex``'s is not used); it knows nothing of sources or matches.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from collections.abc import Iterable, Sequence
from itertools import accumulate, filterfalse, repeat
from operator import add, lt, sub
from typing import TYPE_CHECKING

import regex

from correlator.ruleset import pattern_atoms

if TYPE_CHECKING:
    from correlator.model import Rule

#: escapes kept as they are: classes that never meet a newline and, on printable ASCII, mean what
#: ``regex`` means (``\s`` and the negated classes are rewritten), and escaped punctuation
_KEPT = frozenset("dwSbBtrfv") | frozenset(r"""\.^$*+?()[]{}|-/:'"#<>=!,;@%&~`_ """)
#: what ``\s``, ``\D`` and ``\W`` take on a lane line, without the newline
_REWRITTEN = {"s": r"[\t\x0b\x0c\r ]", "D": r"[^0-9\n]", "W": r"[^0-9A-Za-z_\n]", "A": "^", "Z": "$"}


def exact_expression(pattern: str) -> str | None:
    """``pattern`` as a Hyperscan expression (multi-line mode, no prefilter) that finds a match in a
    line of printable ASCII and tabs, among such lines joined by newlines, exactly where ``regex``
    searching that line alone finds one; None when a construct is not read here (then ``regex``
    decides). No atom of it can match a newline; ``^``/``$`` are a line's start and end; named
    groups are plain groups; lookarounds, back-references, possessive and atomic repeats, inline
    flags but a leading ``(?i)`` and any non-ASCII character are not read."""
    if not pattern.isascii():
        return None
    atoms = pattern_atoms(pattern, lambda d: d in _KEPT or (d != "" and d in "sDWn"))
    if atoms is None:
        return None
    out: list[str] = []
    for k, (kind, text) in enumerate(atoms):
        if kind == "escape":
            d = text[1]
            if d in _REWRITTEN:
                out.append(_REWRITTEN[d])
            elif d == "x" and len(text) == 4 and re.fullmatch(r"[0-7][0-9A-Fa-f]", text[2:]) and text[2:].lower() != "0a":
                out.append(text)
            elif d in _KEPT:
                out.append(text)
            else:
                return None
        elif kind == "class":
            try:
                takes_newline = regex.compile(text).match("\n") is not None
            except regex.error:
                return None
            if takes_newline:
                if not text.startswith("[^"):
                    return None  # (a class of listed characters that holds the newline: rare, not rewritten)
                text = "[^\\n" + text[2:]
            out.append(text)
        elif kind in ("group", "named"):
            out.append("(?:")
        elif kind == "other" or text == "\n":
            return None
        elif text in "*+?}" and atoms[k + 1:k + 2] == [("char", "+")]:
            return None  # a possessive repeat
        else:
            out.append(text)
    return "".join(out)


def joined_lines(raws: Sequence[bytes]) -> tuple[bytes, list[int]]:
    """``raws`` joined, each after a newline (what ``ExactLines.confirmed`` reads), and the place of
    the newline before each."""
    return b"\n".join([b"", *raws]), list(accumulate(map(add, map(len, raws[:-1]), repeat(1)), initial=0))


def _literal(text: str) -> str:
    return "".join(ch if ch.isalnum() else f"\\x{ord(ch):02x}" for ch in text)


class ExactLines:
    """One rule's ``any`` and ``not`` patterns (``not`` ones that are plain text as literals) as
    one exact Hyperscan database: ``confirmed`` says which lines the rule confirms."""

    def __init__(self, any_: Sequence[str], not_: Sequence[str], literals: Sequence[str]) -> None:
        import hyperscan

        from correlator.extract.scan import _small_db

        exprs = [exact_expression(p) for p in (*any_, *not_)]
        if any(e is None for e in exprs) or not all(t.isascii() for t in literals):
            raise ValueError("a pattern is not read here")
        exprs += [_literal(t) for t in literals]
        self.n_any = len(any_)
        self.db = _small_db([e.encode() for e in exprs if e is not None], [hyperscan.HS_FLAG_MULTILINE] * len(exprs))
        self.scratch = hyperscan.Scratch(self.db)

    def confirmed(self, joined: bytes, places: Sequence[int]) -> list[int]:
        """The indexes, in order, of the lines of ``joined`` (lines each after a newline, the newline
        before line ``k`` at ``places[k]``) that a pattern of ``any`` and no pattern of ``not`` matches."""
        yes: list[int] = []
        no: list[int] = []
        n_any = self.n_any
        yes_add, no_add = yes.append, no.append

        def on_match(pid: int, _from: int, to: int, _flags: int, _ctx: object) -> None:
            # (a match is in the line its last byte is in: no atom takes a newline)
            (yes_add if pid < n_any else no_add)(to - 1)

        self.db.scan(joined, match_event_handler=on_match, scratch=self.scratch)
        n = len(places)
        if not no and len(yes) == n and all(map(lt, places, yes)) and all(map(lt, yes, places[1:])):
            return list(range(n))  # (one match in each line, in order: a dense block's most common answer)
        lines = dict.fromkeys(map(bisect_right, repeat(places, len(yes)), yes))
        if no:
            out: Iterable[int] = filterfalse(set(map(bisect_right, repeat(places, len(no)), no)).__contains__, lines)
        else:
            out = lines
        return sorted(map(sub, out, repeat(1)))


#: rule -> its exact database, or None when a pattern is not read here or differs from ``regex``
_EXACT: dict[tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]], ExactLines | None] = {}


def exact_lines(rule: Rule, literals: tuple[str, ...]) -> ExactLines | None:
    """The exact database of a line-scope rule of ``any``/``not`` patterns (``literals``: its ``not``
    patterns that are plain text), built once per process, or None. When built it is checked: over
    the rule's example lines joined, each also cut in two at every seventh character, it must confirm
    exactly the lines ``regex`` confirms one by one, else it is not used."""
    not_ = tuple(p for p in rule.match.not_ if p not in literals)
    key = (rule.match.any, not_, literals)
    if key in _EXACT:
        return _EXACT[key]
    got: ExactLines | None
    try:
        got = ExactLines(rule.match.any, not_, literals)
    except Exception:  # noqa: BLE001 - not read here, or refused by Hyperscan: regex decides
        got = None
    if got is not None and not _agrees(got, rule):
        got = None
    _EXACT[key] = got
    return got


def _agrees(exact: ExactLines, rule: Rule) -> bool:
    lines: list[str] = []
    for ex in rule.examples:
        for ln in ex.log.splitlines():
            if ln and all(ch == "\t" or " " <= ch <= "~" for ch in ln):
                lines.append(ln)
                for k in range(3, len(ln), 7):  # (cut in two: a match must not reach across the newline)
                    lines += [ln[:k], ln[k:]]
    if not lines:
        return True
    anys = [regex.compile(p) for p in rule.match.any]
    nots = [regex.compile(p) for p in rule.match.not_]
    want = [k for k, ln in enumerate(lines)
            if any(p.search(ln) for p in anys) and not any(p.search(ln) for p in nots)]
    joined = ("\n" + "\n".join(lines)).encode()
    places, at = [], 0
    for ln in lines:
        places.append(at)
        at += len(ln) + 1
    return exact.confirmed(joined, places) == want
