"""``correlate rules check``: lint every rule file and run every embedded example.

Owns the checks that need more than one rule or a real run: loading every file and collecting all
problems (not stopping at the first), ids and references, examples through the real extract path
on both scanners, patterns that the scanning engine refuses, patterns that can run away, and two
rules claiming the same example line with the same role without naming each other as related.
"""

from __future__ import annotations

import io
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import regex

from correlator.errors import RuleError
from correlator.extract.extractor import Engine, ExtractOptions, extract
from correlator.model import Rule, SourceInfo
from correlator.ruleset import builtin_rules_dir, check_references, load_rule_file, rule_files
from correlator.extract.timestamps import resolve_tz

#: strings a runaway pattern chokes on
_ADVERSARIAL = ("a" * 20000, " " * 20000, "0" * 20000, "aA0 :-_/." * 2500, "=" * 20000, "x\t" * 10000)
RUNAWAY_S = 0.25


@dataclass(frozen=True, slots=True)
class Problem:
    path: str
    message: str
    level: str = "error"

    def __str__(self) -> str:
        return f"{self.path}: {self.message}"


def load_all(dirs: Sequence[Path], include_builtin: bool = True) -> tuple[list[Rule], list[Problem]]:
    """Every rule that loads, and a problem for every one that does not."""
    roots = ([builtin_rules_dir()] if include_builtin else []) + list(dirs)
    by_id: dict[str, Rule] = {}
    problems: list[Problem] = []
    for root in roots:
        if not root.is_dir():
            problems.append(Problem(str(root), "rule folder does not exist"))
            continue
        seen: dict[str, str] = {}
        for path in rule_files(root):
            try:
                rule = load_rule_file(path, root)
            except RuleError as e:
                problems.append(Problem(e.location or str(path), e.message))
                continue
            if rule.id in seen:
                problems.append(Problem(str(path), f"duplicate rule id {rule.id!r} (also in {seen[rule.id]})"))
                continue
            seen[rule.id] = str(path)
            by_id[rule.id] = rule
    rules = sorted(by_id.values(), key=lambda r: r.id)
    ids = set(by_id)
    for r in rules:
        for t in r.explains:
            if t not in ids:
                problems.append(Problem(r.path, f"explains: unknown rule id {t!r}"))
        for rel in r.related:
            if rel.id not in ids:
                problems.append(Problem(r.path, f"related: unknown rule id {rel.id!r}"))
    return rules, problems


def run_example(engine: Engine, log: str, name: str = "<example>") -> list:
    """Matches of the real extract path over an example's log text."""
    data = log.encode("utf-8")
    if not data.endswith(b"\n"):
        data += b"\n"
    src = SourceInfo(path=name, kind="memory", size=len(data))
    d = extract(src, engine, ExtractOptions(tz=resolve_tz("UTC")), stream=io.BytesIO(data))
    return list(d.matches)


def check_examples(rules: Sequence[Rule], scanner: str | None) -> list[Problem]:
    engine = Engine(list(rules), scanner)
    label = engine.scanner.name
    problems: list[Problem] = []
    by_id = {r.id: r for r in rules}
    for rule in rules:
        kinds = {e.expect for e in rule.examples}
        if "match" not in kinds or "no-match" not in kinds:
            problems.append(Problem(rule.path, "needs at least one 'match' and one 'no-match' example"))
        for i, ex in enumerate(rule.examples):
            matches = run_example(engine, ex.log, f"{rule.id}#{i}")
            mine = [m for m in matches if m.rule_id == rule.id]
            if ex.expect == "no-match":
                if mine:
                    problems.append(Problem(rule.path, f"examples[{i}] ({label}): expected no match, but line "
                                                       f"{mine[0].line} matched: {mine[0].text[:120]!r}"))
                continue
            if not mine:
                others = sorted({m.rule_id for m in matches})
                extra = f" (the line went to {', '.join(others)})" if others else ""
                problems.append(Problem(rule.path, f"examples[{i}] ({label}): expected a match, found none{extra}"))
                continue
            want = dict(ex.captures)
            if want and not any(all(m.capture(k) == v for k, v in want.items()) for m in mine):
                got = dict(mine[0].captures)
                problems.append(Problem(rule.path, f"examples[{i}] ({label}): captures {got} do not include {want}"))
            # two rules claiming the same line with the same role must know of each other
            lines = {m.line for m in mine}
            for m in matches:
                if m.rule_id == rule.id or m.line not in lines:
                    continue
                other = by_id.get(m.rule_id)
                if other is None or other.role is not rule.role:
                    continue
                related = {x.id for x in rule.related} | {x.id for x in other.related}
                if other.id not in related and rule.id not in related:
                    problems.append(Problem(rule.path, f"examples[{i}]: {other.id} claims the same line with the same "
                                                       f"role ({rule.role}); give one a higher priority or relate them"))
    return problems


def check_patterns(rules: Sequence[Rule]) -> list[Problem]:
    problems: list[Problem] = []
    from correlator.extract.scan import HyperscanScanner, Pattern, hyperscan_available

    for rule in rules:
        pats = [("any", i, p) for i, p in enumerate(rule.match.any)] + \
               [("all", i, p) for i, p in enumerate(rule.match.all)] + \
               [("not", i, p) for i, p in enumerate(rule.match.not_)]
        for key, i, p in pats:
            rx = regex.compile(p)
            samples = list(_ADVERSARIAL) + [(ex.log.replace("\n", " ") * 40)[:20000] for ex in rule.examples[:2]]
            for s in samples:
                t0 = time.perf_counter()
                try:
                    rx.search(s, timeout=RUNAWAY_S)
                except TimeoutError:
                    problems.append(Problem(rule.path, f"match.{key}[{i}]: pattern runs away on a long line "
                                                       f"(over {RUNAWAY_S} s): remove nested or overlapping quantifiers"))
                    break
                if time.perf_counter() - t0 > RUNAWAY_S:
                    break
        if hyperscan_available():
            hs = HyperscanScanner([Pattern(i, p, rule.match.prefilter) for i, p in enumerate(rule.match.any)])
            for i in hs.rejected:
                problems.append(Problem(rule.path, f"match.any[{i}]: the hyperscan engine refuses this pattern; "
                                                   f"it is found by its prefilter keywords instead", "warning"))
    return problems


def check_combined_database(rules: Sequence[Rule]) -> list[Problem]:
    """Patterns that the one Hyperscan database of all rules misses on their own example lines
    (``scan._without_missed`` moves them to the keyword scanner, which costs a pass per keyword):
    a warning, to rewrite the pattern."""
    from correlator.extract.extractor import Engine
    from correlator.extract.scan import hyperscan_available

    if not hyperscan_available():
        return []

    engine = Engine(list(rules), "hyperscan")
    problems = []
    per_rule: dict[int, int] = {}
    for pid, ri in enumerate(engine.pattern_rule):
        if ri >= 0:
            n = per_rule[ri] = per_rule.get(ri, -1) + 1
            if pid in engine.scanner.rejected:
                rule = engine.ruleset.rules[ri]
                problems.append(Problem(rule.path, f"match.any[{n}]: with all the rules in one Hyperscan database this "
                                                   f"pattern is refused or missed on its examples; it runs on its "
                                                   f"prefilter keywords instead (slower): rewrite it", "warning"))
    return problems


def check_all(dirs: Sequence[Path] = (), include_builtin: bool = True,
              scanners: Sequence[str] = ("auto", "regex")) -> tuple[list[Rule], list[Problem]]:
    rules, problems = load_all(dirs, include_builtin)
    if not rules:
        return rules, problems
    problems += check_patterns(rules)
    for sc in scanners:
        problems += check_examples(rules, None if sc == "auto" else sc)
    problems += check_combined_database(rules)
    try:
        check_references(rules)
    except RuleError:
        pass  # already reported per file by load_all
    return rules, problems
