"""Every rule proves itself: each embedded example runs through the real extract path, on the
Hyperscan scanner and on the pure-Python fallback, with the whole built-in rule set loaded."""

from __future__ import annotations

import pytest
from conftest import SCANNERS

from correlator.extract.extractor import Engine
from correlator.rulecheck import check_examples, check_patterns, load_all, run_example
from correlator.ruleset import load_rules

RULES = load_rules()
ENGINES: dict[str, Engine] = {}


def _engine(scanner: str) -> Engine:
    if scanner not in ENGINES:
        ENGINES[scanner] = Engine(RULES, scanner)
    return ENGINES[scanner]


@pytest.mark.parametrize("scanner", SCANNERS)
@pytest.mark.parametrize("rule", RULES, ids=[r.id for r in RULES])
def test_rule_examples(rule, scanner):
    engine = _engine(scanner)
    for i, ex in enumerate(rule.examples):
        mine = [m for m in run_example(engine, ex.log, f"{rule.id}#{i}") if m.rule_id == rule.id]
        if ex.expect == "no-match":
            assert not mine, f"examples[{i}] should not match: {ex.log!r}"
        else:
            assert mine, f"examples[{i}] should match: {ex.log!r}"
            want = dict(ex.captures)
            assert any(all(m.capture(k) == v for k, v in want.items()) for m in mine), (
                f"examples[{i}]: captures {[dict(m.captures) for m in mine]} lack {want}")


@pytest.mark.slow
def test_rules_check_is_clean():
    rules, problems = load_all([])
    problems += check_patterns(rules)
    for sc in SCANNERS:
        problems += check_examples(rules, sc)
    errors = [str(p) for p in problems if p.level == "error"]
    assert not errors, "\n".join(errors)


def test_library_size_and_completeness():
    cats = {r.category for r in RULES}
    assert len(RULES) >= 120 and len(cats) >= 10, (len(RULES), sorted(cats))
    for r in RULES:
        assert r.root_cause and r.fix and r.confirm and r.references, r.id
        kinds = {e.expect for e in r.examples}
        assert kinds == {"match", "no-match"}, r.id


NOT_RULES = [r for r in RULES if len(r.match.not_) > 1]


@pytest.mark.parametrize("rule", NOT_RULES, ids=[r.id for r in NOT_RULES])
def test_joined_not_patterns_decide_as_each_one_does(rule):
    """A rule's ``not`` patterns are searched as one alternation (``ruleset._one_search``): on
    every example line of every rule, and on each ``not`` pattern's own literal text, the joined
    search finds something exactly where one of the patterns does."""
    import regex

    from correlator.ruleset import _one_search

    each = [regex.compile(p) for p in rule.match.not_]
    joined = _one_search(rule.match.not_)
    assert len(joined) < len(each)
    texts = [ln for r in RULES for ex in r.examples for ln in ex.log.splitlines()]
    texts += [regex.sub(r"\\(.)|[()?:*+|^$]", r"\1", p) for p in rule.match.not_]
    hits = 0
    for text in texts:
        want = any(p.search(text) for p in each)
        hits += want
        assert want == any(p.search(text) for p in joined), (rule.id, text)
    assert hits  # (the texts reach both outcomes)
