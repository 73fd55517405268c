"""``correlate rules check``: lint every rule file and run every embedded example.

Owns the checks that need more than one rule or a real run: loading every file and collecting all
problems (not stopping at the first), ids and references, examples through the real extract path
on both scanners, patterns that the scanning engine refuses, patterns that can run away, two
rules claiming the same example line with the same role without naming each other as related, the
benign corpus (``rules/benign/*.log``: no line of it may be a failure), INFO-level lines taken as a
failure by a rule that does not say why (``info_level``), and the completeness of every entry
(``check_entries``: a report under ``rules check --entries``, a failure of plain ``rules check``
once ``ENTRIES_REQUIRED`` is switched on).
"""

from __future__ import annotations

import io
import time
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import regex

from correlator.errors import RuleError
from correlator.extract import Engine, ExtractOptions, extract
from correlator.extract.timestamps import resolve_tz
from correlator.model import Role, Rule, SourceInfo
from correlator.ruleset import (
    builtin_rules_dir,
    check_references,
    load_rule_file,
    rule_files,
    vocabulary_diagnostics,
)

#: strings a runaway pattern chokes on
_ADVERSARIAL = ("a" * 20000, " " * 20000, "0" * 20000, "aA0 :-_/." * 2500, "=" * 20000, "x\t" * 10000)
RUNAWAY_S = 0.25

#: The switch: while the entries are being written, an incomplete one is reported by
#: ``rules check --entries`` only; set to True to make plain ``rules check`` fail on it too.
ENTRIES_REQUIRED = True
#: the keys of an encyclopedia entry that every rule must write (``explains`` is apart: primary only)
ENTRY_KEYS = ("looks_like", "domain", "restart", "cheapest_check", "when", "fingerprint", "versions", "prevention")
#: path segments (and git refs) that name whatever is newest: the text behind them changes
MOVING = frozenset({"main", "master", "head", "develop", "nightly", "latest", "stable", "trunk"})
_SHA = regex.compile(r"[0-9a-f]{40}")
#: a release tag: v2.5.1, 2.4.0, v2.21.5-1, core_r0.8.0, slurm-23-11-10-1
_TAG = regex.compile(r"[A-Za-z_-]*v?\d+(?:[._-]\d+)+[-._+A-Za-z0-9]*")
_GIT_REF = regex.compile(r"https?://(?:www\.)?github\.com/[^/]+/[^/]+/(?:blob|tree)/([^/?#]+)"
                         r"|https?://raw\.githubusercontent\.com/[^/]+/[^/]+/([^/?#]+)")
#: a line written at INFO level: NCCL's ``NCCL INFO``, Python logging's `` INFO ``/``[INFO]``/
#: ``INFO:name:``, glog's and c10's ``I1201 12:00:00`` and the old ``[I socket.cpp:123]``.
#: ``NCCL_DEBUG=INFO`` inside an error message is a mention, not a level.
INFO_MARKER = regex.compile(r"\bNCCL INFO\b|(?:^|\s)INFO(?=\s)|\[INFO[\]|]|(?:^|[\s:\]])INFO:\w"
                            r"|(?:^|[\s\[:])I\d{3,4} \d\d:\d\d:\d\d|\[I [\w.]+:\d+\]")
#: the benign corpus of a rule folder: lines from healthy runs that no rule may take for a failure
BENIGN_DIR = "benign"
_DECIDING = (Role.PRIMARY, Role.COLLATERAL)


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
    problems += [Problem(str(d.path), d.message, "warning") for d in vocabulary_diagnostics(rules)]
    ids = set(by_id)
    for r in rules:
        for t in r.explains:
            if t not in ids:
                problems.append(Problem(r.path, f"explains: unknown rule id {t!r}"))
        for rel in r.related:
            if rel.id not in ids:
                problems.append(Problem(r.path, f"related: unknown rule id {rel.id!r}"))
    return rules, problems


def unpinned(url: str) -> str | None:
    """Why ``url`` is not a pinned reference (the text it points at can change), or None."""
    if not regex.match(r"https?://[^\s/]+", url):
        return "not a URL (http:// or https://)"
    m = _GIT_REF.match(url)
    if m:
        ref = m.group(1) or m.group(2)
        if _SHA.fullmatch(ref) or (_TAG.fullmatch(ref) and ref.lower() not in MOVING):
            return None  # the rest is a file path at a fixed commit
        return f"links the moving ref {ref!r}: name a 40-hex commit or a release tag"
    for seg in urlsplit(url).path.split("/"):
        if seg.lower() in MOVING:
            return f"carries the moving path segment '/{seg}/': link a versioned page"
    return None


def _blank(value: object) -> bool:
    if isinstance(value, str):
        return not value.strip()
    if isinstance(value, Mapping):
        return not value or any(_blank(v) for v in value.values())
    return value is None or value == [] or value == ()


def entry_keys_written(data: Mapping[str, object]) -> bool:
    """Every entry key is present and not blank (the entry may still have defects)."""
    if data.get("role") == "primary" and "explains" not in data:
        return False
    return not any(_blank(data.get(k)) for k in ENTRY_KEYS)


def entry_problems(data: Mapping[str, object]) -> list[str]:
    """What a rule's raw TOML table lacks or gets wrong as an encyclopedia entry, one message each."""
    out = []
    missing = [k for k in ENTRY_KEYS if _blank(data.get(k))]
    if missing:
        out.append(f"entry incomplete: missing {', '.join(missing)}")
    role, restart = data.get("role"), data.get("restart")
    if role == "primary" and "explains" not in data:
        out.append("a primary rule must write 'explains' (explains = [] when it has no typical cascade)")
    if restart == "follow-root" and role not in ("collateral", "teardown"):
        out.append(f"restart 'follow-root' is for collateral and teardown rules, not {role}")
    if restart == "none" and role != "context":
        out.append(f"restart 'none' is for context rules, not {role}")
    if role == "context" and restart not in (None, "none"):
        out.append(f"a context rule decides nothing: restart must be 'none', not {restart!r}")
    refs = data.get("references")
    for i, ref in enumerate(refs if isinstance(refs, list) else []):
        why = unpinned(ref) if isinstance(ref, str) else "not a string"
        if why:
            out.append(f"references[{i}] is not pinned: {why}: {ref}")
    versions = data.get("versions")
    for i, v in enumerate(versions if isinstance(versions, list) else []):
        src = v.get("source") if isinstance(v, dict) else None
        why = unpinned(src) if isinstance(src, str) else "no source"
        if why:
            out.append(f"versions[{i}].source is not pinned: {why}: {src}")
    return out


def _raw_table(path: str) -> dict | None:
    try:
        return tomllib.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError, RecursionError):
        return None  # load_all has reported it


def check_entries(rules: Sequence[Rule]) -> list[Problem]:
    """The entry defects of every rule file (``entry_problems``), read from the file as written:
    a key left out and a key written empty look alike once loaded."""
    problems = []
    for rule in rules:
        data = _raw_table(rule.path)
        if data is not None:
            problems += [Problem(rule.path, msg) for msg in entry_problems(data)]
    return problems


def info_marked(text: str) -> bool:
    """The line carries an INFO level marker (``INFO_MARKER``)."""
    return INFO_MARKER.search(text) is not None


def _info_problem(rule: Rule, where: str, text: str) -> Problem:
    return Problem(rule.path, f"{where}: takes the INFO-level line {text[:160]!r} as {rule.role} without saying why: "
                              f"an INFO line is no failure unless the rule sets info_level = \"<reason>\"")


def _raw_line(log: str, line: int) -> str:
    lines = log.splitlines()
    return lines[line - 1] if 0 < line <= len(lines) else ""


def corpus_files(roots: Sequence[Path]) -> list[Path]:
    """The benign corpus files of these rule folders (``<root>/benign/*.log``)."""
    return [p for root in roots for p in sorted((root / BENIGN_DIR).glob("*.log")) if p.is_file()]


def check_corpus(rules: Sequence[Rule], files: Sequence[Path], scanner: str | None) -> list[Problem]:
    """Every primary or collateral match on a line of the benign corpus, naming the line and the rule."""
    engine = Engine(list(rules), scanner)
    label = engine.scanner.name
    by_id = {r.id: r for r in rules}
    problems: list[Problem] = []
    for path in files:
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as e:
            problems.append(Problem(str(path), f"cannot read the benign corpus: {e}"))
            continue
        for m in run_example(engine, text, str(path)):
            rule = by_id[m.rule_id]
            if rule.role not in _DECIDING:
                continue
            raw = _raw_line(text, m.line)
            why = ""
            if not rule.info_level and (info_marked(m.text) or info_marked(raw)):
                why = " (an INFO-level line, and the rule has no info_level)"
            problems.append(Problem(f"{path}:{m.line}", f"{rule.id} ({rule.role}, {label}) takes this benign line for "
                                                        f"a failure{why}: {raw[:200]!r}; narrow the [match] of "
                                                        f"{rule.path} and add the line as a no-match example"))
    return problems


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
    info_seen: set[tuple[str, str]] = set()
    for rule in rules:
        kinds = {e.expect for e in rule.examples}
        if "match" not in kinds or "no-match" not in kinds:
            problems.append(Problem(rule.path, "needs at least one 'match' and one 'no-match' example"))
        for i, ex in enumerate(rule.examples):
            matches = run_example(engine, ex.log, f"{rule.id}#{i}")
            mine = [m for m in matches if m.rule_id == rule.id]
            for m in matches:
                other = by_id.get(m.rule_id)
                if (other is not None and other.role in _DECIDING and not other.info_level
                        and (info_marked(m.text) or info_marked(_raw_line(ex.log, m.line)))
                        and (other.id, m.text) not in info_seen):
                    info_seen.add((other.id, m.text))
                    problems.append(_info_problem(other, f"a line of {rule.id} examples[{i}] ({label})", m.text))
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
              scanners: Sequence[str] = ("auto", "regex"),
              entries: bool | None = None) -> tuple[list[Rule], list[Problem]]:
    """Every problem of the rule folders. ``entries`` (default ``ENTRIES_REQUIRED``) adds the
    entry defects of ``check_entries`` as errors."""
    rules, problems = load_all(dirs, include_builtin)
    if not rules:
        return rules, problems
    problems += check_patterns(rules)
    roots = ([builtin_rules_dir()] if include_builtin else []) + list(dirs)
    corpus = corpus_files([r for r in roots if r.is_dir()])
    for sc in scanners:
        problems += check_examples(rules, None if sc == "auto" else sc)
        problems += check_corpus(rules, corpus, None if sc == "auto" else sc)
    if ENTRIES_REQUIRED if entries is None else entries:
        problems += check_entries(rules)
    problems += check_combined_database(rules)
    try:
        check_references(rules)
    except RuleError:
        pass  # already reported per file by load_all
    return rules, problems
