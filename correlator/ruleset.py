"""Rule files: the TOML schema, loading, validation, and the compiled matcher.

Owns turning ``rules/**/*.toml`` into ``Rule`` values and into a ``RuleSet`` that can confirm a
candidate line. A broken rule file raises ``RuleError`` naming the file and the key: configuration
problems stop the run. It does not scan bytes (``scan``) or read logs (``extract``).
"""

from __future__ import annotations

import os
import pickle
import tomllib
from bisect import bisect_right
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from itertools import accumulate, filterfalse, repeat
from operator import sub
from pathlib import Path
from typing import NamedTuple, TypeVar

import regex

from correlator.errors import RuleError
from correlator.model import (
    DiagCode,
    Diagnostic,
    Domain,
    Example,
    MatchSpec,
    Phase,
    Related,
    Restart,
    Role,
    Rule,
    Scope,
    Severity,
    VersionNote,
    When,
)
from correlator.model.vocabulary import near_misses

SCHEMA = 1
#: seconds (of CPU: ``regex`` times itself with ``clock()``) a pattern may run on one short line
#: before it is abandoned; a longer text gets PATTERN_TIMEOUT_PER_CHAR_S more per character (a
#: linear pattern's time grows with the text: a 1 MiB line gets about a second)
PATTERN_TIMEOUT_S = 0.05
PATTERN_TIMEOUT_PER_CHAR_S = 1e-6
#: a rule's budget for one run, across files: after RULE_MAX_TIMEOUTS lines abandoned on the time
#: limit, or RULE_EXCESS_BUDGET_S CPU seconds spent beyond what a linear pattern needs, the rule is
#: not tried again in that run. What a linear pattern needs on a text is LINE_ALLOWANCE_S plus
#: CHAR_ALLOWANCE_S per character: ordinary rules take a hundredth of it (a few microseconds a
#: line), so the budget only ever bites on a pathological pattern, however slow the machine
RULE_MAX_TIMEOUTS = 3
RULE_EXCESS_BUDGET_S = 1.0
LINE_ALLOWANCE_S = 0.002
CHAR_ALLOWANCE_S = 2e-7


def time_limit(text: str) -> float:
    """Seconds a pattern may run on ``text`` before it is abandoned."""
    return PATTERN_TIMEOUT_S + len(text) * PATTERN_TIMEOUT_PER_CHAR_S


def allowance(text: str) -> float:
    """Seconds a linear pattern may need on ``text``; a rule's time beyond it counts against its budget."""
    return LINE_ALLOWANCE_S + len(text) * CHAR_ALLOWANCE_S

#: key -> (type, required). The loader refuses anything not listed here.
RULE_KEYS: dict[str, tuple[type | tuple[type, ...], bool]] = {
    "schema": (int, True),
    "id": (str, True),
    "title": (str, True),
    "category": (str, True),
    "severity": (str, True),
    "role": (str, True),
    "priority": (int, False),
    "root_cause": (str, True),
    "fix": (str, True),
    "confirm": (list, True),
    "prevention": (str, False),
    "affects": (list, False),
    "references": (list, True),
    "tags": (list, False),
    "related": (list, False),
    "explains": (list, False),
    "window_s": ((int, float), False),
    "looks_like": (list, False),
    "domain": (str, False),
    "restart": (str, False),
    "cheapest_check": (str, False),
    "when": (dict, False),
    "fingerprint": (str, False),
    "versions": (list, False),
    "info_level": (str, False),
    "match": (dict, True),
    "examples": (list, True),
}
MATCH_KEYS: dict[str, tuple[type, bool]] = {
    "any": (list, True),
    "all": (list, False),
    "not": (list, False),
    "prefilter": (list, True),
    "scope": (str, False),
    "context_lines": (int, False),
    "context_after": (int, False),
    "context_requires": (list, False),
}
WHEN_KEYS: dict[str, tuple[type, bool]] = {"phase": (str, True), "trigger": (str, True)}
VERSION_KEYS: dict[str, tuple[type, bool]] = {
    "software": (str, True),
    "range": (str, True),
    "wording": (str, True),
    "source": (str, True),
}
EXAMPLE_KEYS: dict[str, tuple[type, bool]] = {
    "expect": (str, True),
    "log": (str, True),
    "captures": (dict, False),
    "note": (str, False),
}
RELATED_KINDS = ("sibling", "cause", "consequence", "variant", "see-also")


def builtin_rules_dir() -> Path:
    """The bundled rules: ``$CORRELATE_RULES`` if set, else ``rules/`` beside the package."""
    env = os.environ.get("CORRELATE_RULES")
    if env:
        return Path(env)
    return Path(__file__).resolve().parent.parent / "rules"


def _check_keys(where: str, table: dict, spec: Mapping[str, tuple[type | tuple[type, ...], bool]]) -> None:
    for key in table:
        if key not in spec:
            known = ", ".join(sorted(spec))
            raise RuleError(f"unknown key {key!r} (known keys: {known})", where)
    for key, (typ, required) in spec.items():
        if key not in table:
            if required:
                raise RuleError(f"missing required key {key!r}", where)
            continue
        value = table[key]
        if isinstance(value, bool) or not isinstance(value, typ):
            name = typ.__name__ if isinstance(typ, type) else " or ".join(t.__name__ for t in typ)
            raise RuleError(f"key {key!r} must be {name}, not {type(value).__name__}", where)


def _str_list(where: str, key: str, value: list) -> tuple[str, ...]:
    for i, item in enumerate(value):
        if not isinstance(item, str):
            raise RuleError(f"{key}[{i}] must be a string", where)
    return tuple(value)


def _compile(where: str, key: str, pattern: str) -> regex.Pattern[str]:
    try:
        return regex.compile(pattern, regex.V0)
    except regex.error as e:
        raise RuleError(f"{key}: invalid regex: {e}", where) from None


def parse_rule(data: dict, path: str, expected_id: str | None = None) -> Rule:
    """Validate one rule's TOML table and build the ``Rule``; raise ``RuleError`` on any problem."""
    _check_keys(path, data, RULE_KEYS)
    if data["schema"] != SCHEMA:
        raise RuleError(f"schema {data['schema']} is not supported (this version reads schema {SCHEMA})", path)
    rid = data["id"]
    if expected_id is not None and rid != expected_id:
        raise RuleError(f"id {rid!r} does not match its path (expected {expected_id!r})", path)
    if "." not in rid or rid.split(".", 1)[0] != data["category"]:
        raise RuleError(f"id {rid!r} must be '<category>.<name>' with category {data['category']!r}", path)
    try:
        severity = Severity(data["severity"])
    except ValueError:
        raise RuleError(f"severity {data['severity']!r} is not one of {[s.value for s in Severity]}", path) from None
    try:
        role = Role(data["role"])
    except ValueError:
        raise RuleError(f"role {data['role']!r} is not one of {[r.value for r in Role]}", path) from None
    priority = data.get("priority", 50)
    if not 0 <= priority <= 100:
        raise RuleError(f"priority {priority} is outside 0-100", path)

    m = data["match"]
    _check_keys(f"{path}: match", m, MATCH_KEYS)
    any_ = _str_list(path, "match.any", m["any"])
    if not any_:
        raise RuleError("match.any must list at least one pattern", path)
    all_ = _str_list(path, "match.all", m.get("all", []))
    not_ = _str_list(path, "match.not", m.get("not", []))
    prefilter = _str_list(path, "match.prefilter", m["prefilter"])
    if not prefilter or any(not k for k in prefilter):
        raise RuleError("match.prefilter must list non-empty literal keywords", path)
    for key, pats in (("any", any_), ("all", all_), ("not", not_)):
        for i, p in enumerate(pats):
            _compile(path, f"match.{key}[{i}]", p)
    try:
        scope = Scope(m.get("scope", "line"))
    except ValueError:
        raise RuleError(f"match.scope {m.get('scope')!r} must be 'line' or 'event'", path) from None

    examples = []
    for i, ex in enumerate(data["examples"]):
        if not isinstance(ex, dict):
            raise RuleError(f"examples[{i}] must be a table", path)
        _check_keys(f"{path}: examples[{i}]", ex, EXAMPLE_KEYS)
        if ex["expect"] not in ("match", "no-match"):
            raise RuleError(f"examples[{i}].expect must be 'match' or 'no-match'", path)
        caps = tuple((str(k), str(v)) for k, v in ex.get("captures", {}).items())
        examples.append(Example(ex["expect"], ex["log"], caps, ex.get("note", "")))

    related = []
    for i, rel in enumerate(data.get("related", [])):
        if isinstance(rel, str):
            related.append(Related(rel))
            continue
        if not isinstance(rel, dict) or "id" not in rel or set(rel) - {"id", "kind"}:
            raise RuleError(f"related[{i}] must be a table {{ id = '...', kind = '...' }}", path)
        kind = rel.get("kind", "see-also")
        if kind not in RELATED_KINDS:
            raise RuleError(f"related[{i}].kind {kind!r} is not one of {list(RELATED_KINDS)}", path)
        related.append(Related(rel["id"], kind))

    domain = _enum(path, "domain", Domain, data.get("domain"))
    restart = _enum(path, "restart", Restart, data.get("restart"))
    when = None
    if "when" in data:
        w = data["when"]
        _check_keys(f"{path}: when", w, WHEN_KEYS)
        phase = _enum(path, "when.phase", Phase, w["phase"])
        assert phase is not None  # required by WHEN_KEYS
        when = When(phase, w["trigger"].strip())
    versions = []
    for i, v in enumerate(data.get("versions", [])):
        if not isinstance(v, dict):
            raise RuleError(f"versions[{i}] must be a table {{ software, range, wording, source }}", path)
        _check_keys(f"{path}: versions[{i}]", v, VERSION_KEYS)
        versions.append(VersionNote(v["software"], v["range"], v["wording"], v["source"]))

    info_level = data.get("info_level", "").strip()
    if "info_level" in data and not info_level:
        raise RuleError("info_level must say why an INFO-level line is a failure (or be left out)", path)

    return Rule(
        id=rid,
        title=data["title"],
        category=data["category"],
        severity=severity,
        role=role,
        root_cause=data["root_cause"].strip(),
        fix=data["fix"].strip(),
        match=MatchSpec(any_, all_, not_, prefilter, scope, m.get("context_lines", 40), m.get("context_after", 0),
                        _str_list(path, "match.context_requires", m.get("context_requires", []))),
        priority=priority,
        confirm=_str_list(path, "confirm", data["confirm"]),
        prevention=data.get("prevention", "").strip(),
        affects=_str_list(path, "affects", data.get("affects", [])),
        references=_str_list(path, "references", data["references"]),
        tags=_str_list(path, "tags", data.get("tags", [])),
        related=tuple(related),
        explains=_str_list(path, "explains", data.get("explains", [])),
        window_s=float(data.get("window_s", 3600.0)),
        examples=tuple(examples),
        path=path,
        looks_like=_str_list(path, "looks_like", data.get("looks_like", [])),
        domain=domain,
        restart=restart,
        cheapest_check=data.get("cheapest_check", "").strip(),
        when=when,
        fingerprint=data.get("fingerprint", "").strip(),
        versions=tuple(versions),
        info_level=info_level,
    )


E = TypeVar("E", bound=StrEnum)


def _enum(path: str, key: str, kind: type[E], value: str | None) -> E | None:
    if value is None:
        return None
    try:
        return kind(value)
    except ValueError:
        raise RuleError(f"{key} {value!r} is not one of {[k.value for k in kind]}", path) from None


def load_rule_file(path: Path, root: Path | None = None) -> Rule:
    expected = None
    if root is not None:
        rel = path.relative_to(root)
        if len(rel.parts) == 2:
            expected = f"{rel.parts[0]}.{path.stem}"
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as e:
        raise RuleError(f"not valid TOML: {e}", str(path)) from None
    except RecursionError:  # tomllib recurses once per nesting level
        raise RuleError("not valid TOML: arrays or tables nested too deeply", str(path)) from None
    except (OSError, UnicodeDecodeError) as e:
        raise RuleError(f"cannot read rule file: {e}", str(path)) from None
    return parse_rule(data, str(path), expected)


def rule_files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*.toml") if p.is_file())


def _rules_cache_path(roots: Sequence[Path]) -> Path | None:
    """Where a validated rule set is kept, keyed by every file's path, size and modification time
    (and this module's own), so a changed or added file is always read again."""
    import hashlib

    from correlator.cache import cache_dir

    d = cache_dir()
    if d is None:
        return None
    h = hashlib.sha256(f"schema={SCHEMA};".encode())
    model = Path(__file__).with_name("model") / "rules.py"  # the pickled Rule's shape
    try:
        for f in (Path(__file__), model):
            st = f.stat()
            h.update(f"{f}|{st.st_size}|{st.st_mtime_ns};".encode())
        for root in roots:
            h.update(f"root={root.resolve()};".encode())
            for name, size, mtime in _tree_stats(str(root)):
                h.update(f"{name}|{size}|{mtime};".encode())
    except OSError:
        return None
    return Path(d) / f"rules-{h.hexdigest()[:32]}.pickle"


def _tree_stats(root: str) -> list[tuple[str, int, int]]:
    """(path, size, mtime) of every folder and ``*.toml`` file under ``root``, by ``os.scandir``
    (a tenth of the cost of ``rglob`` + ``stat`` + ``resolve`` per file, paid on every run)."""
    out: list[tuple[str, int, int]] = []
    seen: set[tuple[int, int]] = set()
    todo = [root]
    while todo:
        folder = todo.pop()
        st = os.stat(folder)
        if (st.st_dev, st.st_ino) in seen:  # a link loop
            continue
        seen.add((st.st_dev, st.st_ino))
        out.append((folder, st.st_size, st.st_mtime_ns))
        with os.scandir(folder) as it:
            for e in it:
                if e.is_dir():
                    todo.append(e.path)
                elif e.name.endswith(".toml") and e.is_file():
                    est = e.stat()
                    out.append((e.path, est.st_size, est.st_mtime_ns))
    out.sort()
    return out


def load_rules(dirs: Sequence[Path] | None = None, *, include_builtin: bool = True) -> list[Rule]:
    """Load the built-in rules, then each user folder; a later rule with the same id replaces it.

    A validated set is cached (``$CORRELATE_CACHE``, ``off`` to disable): reading and checking ~170
    TOML files costs a fifth of a second that a repeated run need not pay."""
    roots: list[Path] = []
    if include_builtin:
        roots.append(builtin_rules_dir())
    roots.extend(dirs or [])
    for root in roots:
        if not root.is_dir():
            raise RuleError("rule folder does not exist", str(root), "pass a folder of <category>/<name>.toml files")
    cache = _rules_cache_path(roots)
    if cache is not None:
        try:
            with open(cache, "rb") as f:
                cached = pickle.load(f)
            if isinstance(cached, list) and all(isinstance(r, Rule) for r in cached):
                return cached
        except (OSError, pickle.PickleError, EOFError, AttributeError, ImportError, TypeError, ValueError):
            pass
    rules = _load_rules(roots)
    if cache is not None:
        try:
            cache.parent.mkdir(parents=True, exist_ok=True)
            tmp = cache.with_suffix(f".{os.getpid()}.tmp")
            with open(tmp, "wb") as f:
                pickle.dump(rules, f, protocol=pickle.HIGHEST_PROTOCOL)
            os.replace(tmp, cache)
            for old in sorted(cache.parent.glob("rules-*.pickle"), key=lambda p: p.stat().st_mtime)[:-8]:
                old.unlink(missing_ok=True)
        except OSError:
            pass  # a cache that cannot be written only costs the reading
    return rules


def _load_rules(roots: Sequence[Path]) -> list[Rule]:
    by_id: dict[str, Rule] = {}
    for root in roots:
        if not root.is_dir():
            raise RuleError("rule folder does not exist", str(root), "pass a folder of <category>/<name>.toml files")
        seen: dict[str, str] = {}
        for path in rule_files(root):
            rule = load_rule_file(path, root)
            if rule.id in seen:
                raise RuleError(f"duplicate rule id {rule.id!r} (also in {seen[rule.id]})", str(path))
            seen[rule.id] = str(path)
            by_id[rule.id] = rule
    rules = list(by_id.values())
    check_references(rules)
    return sorted(rules, key=lambda r: r.id)


#: a named group of a pattern (``(?P<name>...)`` or ``(?<name>...)``; not a lookbehind)
_NAMED_GROUP = regex.compile(r"\(\?P?<([A-Za-z_][A-Za-z0-9_]*)>")


def capture_names(rule: Rule) -> list[str]:
    """The capture names of a rule's patterns, in order of first appearance."""
    names = [n for p in (*rule.match.any, *rule.match.all) for n in _NAMED_GROUP.findall(p)]
    return list(dict.fromkeys(names))


def vocabulary_diagnostics(rules: Iterable[Rule]) -> list[Diagnostic]:
    """A warning naming the rule file for each capture name or tag one slip away from a word the
    correlator reads (``vocabulary.near_misses``): the rule loads and runs, the name is only shown."""
    return [Diagnostic("warning", r.path, f"{r.id}: {msg}", DiagCode.RULE_VOCABULARY)
            for r in rules for msg in near_misses(capture_names(r), r.tags)]


def check_references(rules: Iterable[Rule]) -> None:
    ids = {r.id for r in rules}
    for r in rules:
        for target in r.explains:
            if target not in ids:
                raise RuleError(f"explains: unknown rule id {target!r}", r.path)
        for rel in r.related:
            if rel.id not in ids:
                raise RuleError(f"related: unknown rule id {rel.id!r}", r.path)


# --- the compiled matcher ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Compiled:
    rule: Rule
    any: tuple[regex.Pattern[str], ...]
    all: tuple[regex.Pattern[str], ...]
    not_: tuple[regex.Pattern[str], ...]


class PatternTimeout(Exception):
    """A rule's pattern ran longer than ``PATTERN_TIMEOUT_S`` on one line."""

    def __init__(self, rule_id: str) -> None:
        super().__init__(rule_id)
        self.rule_id = rule_id
        #: whether this line spent the rule's budget for the run (``RuleSet.confirm``)
        self.spent = False


#: ``regex`` releases the GIL while it matches a ``str`` with a timeout unless told not to; a search of
#: one line takes microseconds, and getting the GIL back can take far longer when another thread
#: holds it (a thread unpickling beside it: 81 us for a 1.3 us search). Matching keeps the GIL.
_CONCURRENT = False


def _search(p: regex.Pattern[str], text: str, rule_id: str) -> regex.Match[str] | None:
    try:
        return p.search(text, timeout=time_limit(text), concurrent=_CONCURRENT)
    except TimeoutError:
        raise PatternTimeout(rule_id) from None


class RuleBudget:
    """What each rule's patterns spent in one run: lines abandoned on the time limit and CPU time
    beyond the allowance, and which rules spent their budget (``RULE_MAX_TIMEOUTS``,
    ``RULE_EXCESS_BUDGET_S``).

    The counters live in shared memory created with the engine, before the local pool forks: every
    forked worker of a run charges the same budget, so a rule is switched off once per run. A
    spawned or Dask worker builds its own engine and so has its own budget: there the bound is one
    budget per worker process. ``run`` names the run the counters belong to (``ExtractOptions.run``);
    a process that starts another run starts from zero. Charging takes a lock; ordinary rules never
    charge, so the lock is never contended on ordinary input."""

    def __init__(self, n_rules: int) -> None:
        import multiprocessing
        from multiprocessing.sharedctypes import RawArray

        self.timeouts = RawArray("i", max(1, n_rules))
        self.excess = RawArray("d", max(1, n_rules))
        self.off = RawArray("b", max(1, n_rules))
        self._run = RawArray("c", 32)
        self._lock = multiprocessing.Lock()

    def begin(self, run: str) -> None:
        """Count for ``run``: reset the counters when they belong to another run."""
        token = run.encode()[:32].ljust(32, b"\0")
        if self._run.raw == token:
            return
        with self._lock:
            if self._run.raw != token:
                for i in range(len(self.off)):
                    self.timeouts[i], self.excess[i], self.off[i] = 0, 0.0, 0
                self._run.raw = token

    def disabled(self, index: int) -> bool:
        return bool(self.off[index])

    def charge(self, index: int, seconds: float, timed_out: bool) -> bool:
        """Count ``seconds`` beyond the allowance (and a line abandoned when ``timed_out``) against
        rule ``index``; True when this call spent its budget (the caller says so, once)."""
        with self._lock:
            if self.off[index]:
                return False
            self.excess[index] += seconds
            if timed_out:
                self.timeouts[index] += 1
            if self.timeouts[index] >= RULE_MAX_TIMEOUTS or self.excess[index] >= RULE_EXCESS_BUDGET_S:
                self.off[index] = 1
                return True
            return False

    def spent(self, index: int) -> tuple[int, float]:
        """(lines abandoned on the time limit, seconds beyond the allowance) of rule ``index`` in this run."""
        return self.timeouts[index], self.excess[index]


#: what keeps a pattern out of a joined alternation: a back-reference (group numbers shift), and an
#: inline flag anywhere but at its start (it would apply to the other patterns too)
_NOT_JOINABLE = regex.compile(r"\\[1-9]|\(\?P=|\\g<|(?<!^)\(\?[aiLmsuxV0-9-]+\)")
_LEADING_FLAGS = regex.compile(r"^\(\?([aiLmsux]+)\)")


def _one_search(patterns: Sequence[str]) -> tuple[regex.Pattern[str], ...]:
    """The ``not`` patterns of a rule as few searches as possible: whether any matches is what
    counts, so the joinable ones are one alternation (one search of the text instead of fifteen);
    a leading inline flag becomes a scoped one."""
    joinable: list[str] = []
    alone: list[regex.Pattern[str]] = []
    for p in patterns:
        if _NOT_JOINABLE.search(p):
            alone.append(regex.compile(p))
            continue
        m = _LEADING_FLAGS.match(p)
        joinable.append(f"(?{m.group(1)}:{p[m.end():]})" if m else f"(?:{p})")
    if len(joinable) > 1:
        try:
            return (regex.compile("|".join(joinable)), *alone)
        except regex.error:
            pass
    return (*(regex.compile(p) for p in patterns if not _NOT_JOINABLE.search(p)), *alone)


#: escapes a line-bounded pattern may hold as they are: classes and boundaries that never match a
#: newline (``\s``, ``\D``, ``\W`` can: they are bounded like a class), and escaped punctuation
_KEPT_ESCAPES = frozenset("dwSbBtrfv") | frozenset(r"""\.^$*+?()[]{}|-/:'"#<>=!,;@%&~`_ """)


def _bounded_atom(atom: str) -> str:
    """``atom`` (one character's worth of pattern) made unable to match a newline."""
    try:
        hits_nl = regex.compile(atom).match("\n") is not None
    except regex.error:
        return atom  # (the whole pattern's compile says so)
    return f"(?:(?!\n){atom})" if hits_nl else atom


class Atom(NamedTuple):
    """One piece of a pattern as the line rewriters read it (``pattern_atoms``)."""

    #: "flags" (a leading ``(?i)``), "escape" (``\d``; ``\xHH`` whole), "class" (``[...]``),
    #: "group" (``(``, ``(?:``), "named" (``(?P<name>``, ``(?<name>``), "other" (any other ``(?``
    #: construct: a lookaround, an inline flag, an atomic group) or "char" (one character)
    kind: str
    text: str


def pattern_atoms(pattern: str, class_escape_ok: Callable[[str], bool]) -> list[Atom] | None:
    """``pattern`` read atom by atom, for the rewriters that keep a pattern's matches within a line
    (``line_bounded`` here, ``lanes.exact_expression`` for Hyperscan); None where it cannot be read
    so: an escape or a class left open, a named group without its ``>``, a class that nests a set
    (``[[:alpha:]]``) or holds an escape ``class_escape_ok`` refuses (given the escaped character)."""
    out: list[Atom] = []
    i, n = 0, len(pattern)
    if pattern.startswith("(?i)"):
        out.append(Atom("flags", "(?i)"))
        i = 4
    while i < n:
        c = pattern[i]
        if c == "\\":
            if i + 1 >= n:
                return None
            width = 4 if pattern[i + 1] == "x" and regex.fullmatch(r"[0-9A-Fa-f]{2}", pattern[i + 2:i + 4]) else 2
            out.append(Atom("escape", pattern[i:i + width]))
            i += width
        elif c == "[":
            j = i + 1
            if j < n and pattern[j] == "^":
                j += 1
            if j < n and pattern[j] == "]":
                j += 1
            while j < n and pattern[j] != "]":
                if pattern[j] == "[":
                    return None  # (a nested set or a POSIX class: not read here)
                if pattern[j] == "\\":
                    if not class_escape_ok(pattern[j + 1:j + 2]):
                        return None
                    j += 1
                j += 1
            if j >= n:
                return None
            out.append(Atom("class", pattern[i:j + 1]))
            i = j + 1
        elif c == "(" and (pattern.startswith("(?P<", i)
                           or (pattern.startswith("(?<", i) and pattern[i + 3:i + 4].isidentifier())):
            # a named group, ``(?P<name>`` or the regex module's ``(?<name>`` (``(?<=``/``(?<!`` look behind)
            close = pattern.find(">", i)
            if close < 0:
                return None
            out.append(Atom("named", pattern[i:close + 1]))
            i = close + 1
        elif c == "(":
            width = 3 if pattern.startswith("(?:", i) else 2 if pattern.startswith("(?", i) else 1
            out.append(Atom("group" if width != 2 else "other", pattern[i:i + width]))
            i += width
        else:
            out.append(Atom("char", c))
            i += 1
    return out


def line_bounded(pattern: str) -> str | None:
    """``pattern`` rewritten so that a search of lines joined by ``\\n`` finds a match within a line
    exactly where ``pattern`` searched in that line alone finds one; None when its constructs are
    not all understood here (then the lines are confirmed one by one).

    Every atom that can match a newline (``\\s``, ``[^x]``, ``\\W``, ``\\D``, ``\\n``) is preceded by
    ``(?!\\n)``, so no match reaches across a line; ``^``/``\\A`` become "at a line start" and
    ``$``/``\\Z`` "at a line end" (a line holds no newline: its end is the text's end). Atoms match
    the same characters as before, so within a line nothing else changes. Lookarounds, inline flags
    other than a leading ``(?i)``, back-references and Unicode escapes are not rewritten: a
    lookaround could look across the line's end."""
    atoms = pattern_atoms(pattern, lambda d: not (d.isalnum() and d not in "dwsDWStrfvnx"))
    if atoms is None:
        return None
    out: list[str] = []
    for kind, text in atoms:
        if kind == "escape":
            d = text[1]
            if d in "sDWn" or d == "x":
                if d == "x" and len(text) != 4:
                    return None
                out.append(_bounded_atom(text))
            elif d == "A":
                out.append("(?<![^\n])")
            elif d == "Z":
                out.append("(?![^\n])")
            elif d in _KEPT_ESCAPES:
                out.append(text)
            else:
                return None
        elif kind == "class":
            out.append(_bounded_atom(text))
        elif kind == "other":
            return None
        elif text == "^":
            out.append("(?<![^\n])")
        elif text == "$":
            out.append("(?![^\n])")
        elif text == "\n":
            out.append(_bounded_atom(text))
        else:
            out.append(text)
    bounded = "".join(out)
    try:
        regex.compile(bounded)
    except regex.error:
        return None
    return bounded


#: a character that makes a pattern more than the text it spells (a pattern without one is a literal)
_NOT_LITERAL = regex.compile(r"[\\.^$*+?{}\[\]|()\n]")


@dataclass(frozen=True, slots=True)
class Bulk:
    """A line-scope rule's patterns, line-bounded (``line_bounded``): many lines confirmed in one
    search each of the lines joined (``RuleSet.bulk``)."""

    any: tuple[regex.Pattern[str], ...]
    not_: tuple[regex.Pattern[str], ...]
    #: ``not`` patterns that are plain text (no character means more than itself): found with
    #: ``str.find``, faster than one alternation the regex engine tries at every position
    not_literals: tuple[str, ...] = ()

    def confirms(self, texts: Sequence[str]) -> list[bool] | None:
        """Whether the rule confirms each of ``texts`` (lines without a newline), as ``RuleSet.confirm``
        would one by one; None when a search ran past the time limit (then confirm them one by one)."""
        starts = list(accumulate((len(t) + 1 for t in texts[:-1]), initial=0)) if texts else []
        got = self.confirmed("\n".join(texts), starts)
        if got is None:
            return None
        yes = set(got)
        return [k in yes for k in range(len(texts))]

    def confirmed(self, joined: str, starts: Sequence[int]) -> list[int] | None:
        """The lines the rule confirms, as ``RuleSet.confirm`` would one by one, of ``joined`` (lines
        without a newline joined by ``\n``, line ``k`` at ``starts[k]``): their indexes, in order. None
        when a search ran past the time limit (then confirm them one by one). One search of the text
        per pattern; a match's line is found by bisection (a C call per match, no Python step)."""
        limit = time_limit(joined)

        def hit(p: regex.Pattern[str]) -> Iterable[int]:
            # (1 + the index of the line of each match: match starts come in order, and so do their lines)
            at = [m.start() for m in p.finditer(joined, timeout=limit, concurrent=_CONCURRENT)]
            return dict.fromkeys(map(bisect_right, repeat(starts, len(at)), at))

        try:
            yes = [*hit(self.any[0])] if len(self.any) == 1 else sorted(set().union(*map(hit, self.any)))
            no = set().union(*map(hit, self.not_)) if yes else set()
        except TimeoutError:
            return None
        for lit in self.not_literals if yes else ():
            i = joined.find(lit)
            while i >= 0:
                no.add(bisect_right(starts, i))
                i = joined.find(lit, i + 1)
        return list(map(sub, filterfalse(no.__contains__, yes) if no else yes, repeat(1)))


class RuleSet:
    """Rules compiled once; confirms candidate lines. Matching is pure: no state changes."""

    def __init__(self, rules: Sequence[Rule]) -> None:
        self.rules = tuple(rules)
        self.by_id = {r.id: r for r in self.rules}
        # compiled on first use: a job touches a handful of the rules, and compiling all of them
        # is a tenth of a second of start-up
        self._compiled: list[Compiled | None] = [None] * len(self.rules)
        self._bulk: dict[int, Bulk | None] = {}

    def compiled(self, index: int) -> Compiled:
        c = self._compiled[index]
        if c is None:
            r = self.rules[index]
            c = self._compiled[index] = Compiled(
                r,
                tuple(regex.compile(p) for p in r.match.any),
                tuple(regex.compile(p) for p in r.match.all),
                _one_search(r.match.not_),
            )
        return c

    def bulk(self, index: int) -> Bulk | None:
        """Rule ``index``'s patterns for confirming many lines at once, or None when it is not a
        line-scope rule of ``any``/``not`` patterns that are all line-bounded (``line_bounded``)."""
        if index in self._bulk:
            return self._bulk[index]
        r = self.rules[index]
        b: Bulk | None = None
        if r.match.scope is Scope.LINE and not r.match.all:
            anys = [line_bounded(p) for p in r.match.any]
            literals = tuple(p for p in r.match.not_ if p and not _NOT_LITERAL.search(p))
            nots = [line_bounded(p) for p in r.match.not_ if p not in literals]
            if all(x is not None for x in (*anys, *nots)):
                b = Bulk(tuple(regex.compile(x) for x in anys if x is not None),
                         _one_search([x for x in nots if x is not None]) if nots else (), literals)
        self._bulk[index] = b
        return b

    def confirm(self, index: int, text: str, context: Sequence[str] | Callable[[], Sequence[str]],
                budget: RuleBudget | None = None,
                may_match_all: Callable[[tuple[str, ...], str | bytes | memoryview], bool] | None = None,
                raw_window: Callable[[Rule], bytes | memoryview | None] | None = None
                ) -> tuple[dict[str, str] | None, bool]:
        """Captures if rule ``index`` matches ``text`` (with ``context`` for event scope), else None;
        and whether this call spent the rule's ``budget`` (then it is not to be tried again).
        ``context`` may be a function giving it: it is called only when the line itself matched
        and the rule has ``all``/``not`` patterns to try over it (most candidates are not confirmed,
        and building an event's context costs more than confirming its line).

        The call is timed by the wall clock (cheap); only one that took longer than a linear pattern
        may need is timed again in CPU time (``time.thread_time``), so that a process the machine
        descheduled is not charged for it. Raises ``PatternTimeout`` when a pattern was abandoned.
        ``may_match_all(patterns, window)``: False when one of an event rule's ``all`` patterns surely
        has no match in its window (a faster prefilter's answer; then the patterns are not searched).
        ``raw_window(rule)``: the UTF-8 of an event rule's window as it lies in the source, when it does
        (else None): then the prefilter is asked before the context is built, and only once."""
        got: list[Sequence[str]] = []

        def ctx() -> Sequence[str]:
            if not got:
                got.append(context() if callable(context) else context)
            return got[0]

        if budget is None:
            return self._confirm(index, text, ctx, may_match_all, raw_window), False
        import time

        t0 = time.perf_counter()
        try:
            caps = self._confirm(index, text, ctx, may_match_all, raw_window)
        except PatternTimeout as e:
            e.spent = budget.charge(index, time_limit(text), True)
            raise
        wall = time.perf_counter() - t0
        limit = allowance(text)
        if wall <= limit:
            return caps, False
        if got and got[0]:
            limit += allowance("\n".join(got[0]))
            if wall <= limit:
                return caps, False
        c0 = time.thread_time()
        try:
            self._confirm(index, text, ctx, may_match_all, raw_window)
        except PatternTimeout:
            pass
        cpu = time.thread_time() - c0
        return caps, cpu > limit and budget.charge(index, cpu - limit, False)

    def _confirm(self, index: int, text: str, context: Callable[[], Sequence[str]],
                 may_match_all: Callable[[tuple[str, ...], str | bytes | memoryview], bool] | None = None,
                 raw_window: Callable[[Rule], bytes | memoryview | None] | None = None) -> dict[str, str] | None:
        c = self.compiled(index)
        rid = c.rule.id
        hit = None
        for p in c.any:
            hit = _search(p, text, rid)
            if hit is not None:
                break
        if hit is None:
            return None
        caps = {k: v for k, v in hit.groupdict().items() if v is not None}
        if not c.all and not c.not_:
            return caps
        event = c.rule.match.scope is Scope.EVENT
        raw = raw_window(c.rule) if event and c.all and may_match_all is not None and raw_window is not None else None
        if raw is not None and not may_match_all(c.rule.match.all, raw):  # type: ignore[misc]
            return None  # (before a line of the context is decoded)
        window = "\n".join([*context(), text]) if event else text
        if c.all and may_match_all is not None and raw is None and not may_match_all(c.rule.match.all, window):
            return None
        for p in c.all:
            m = _search(p, window, rid)
            if m is None:
                return None
            caps.update({k: v for k, v in m.groupdict().items() if v is not None and k not in caps})
        for p in c.not_:
            if _search(p, window, rid) is not None:
                return None
        return caps
