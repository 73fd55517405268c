"""Rules for people and for programs: a rule's whole encyclopedia entry as terminal text
(``correlate rules explain ID``) and the rule listing (``correlate rules list``, as a table or as
JSON whose fields are documented in ``rules/README.md``).

Owns the layout of those texts and the escaping of rule text (which may quote raw log lines) for
a terminal. It reads ``Rule`` values only: no loading, no checking.
"""

from __future__ import annotations

import json
import textwrap
from collections.abc import Sequence

from correlator.model import Rule

#: the ``schema`` of ``rules list --format json``; a change to a field's meaning or a removed field
#: changes it, an added field does not
LIST_SCHEMA = "correlate.rules/1"
#: keys of an entry, as ``explain`` names the ones a rule has not written yet
ENTRY_FIELDS = ("looks_like", "domain", "restart", "cheapest_check", "when", "fingerprint", "versions", "prevention")

# control characters (C0, DEL, C1), bidi overrides and isolates, and line/paragraph separators:
# shown as escapes, so a quoted log line cannot move the cursor, recolour or reorder the terminal
_UNSAFE = {c: f"\\x{c:02x}" for c in [*range(0x20), 0x7F, *range(0x80, 0xA0)]}
_UNSAFE.update({c: f"\\u{c:04x}" for c in [*range(0x202A, 0x202F), *range(0x2066, 0x206A), 0x2028, 0x2029,
                                           0x200E, 0x200F, 0x061C]})


def safe(text: str) -> str:
    """``text`` with every character that a terminal would act on shown as an escape."""
    return text.translate(_UNSAFE)


def _para(text: str, indent: str = "  ") -> list[str]:
    out: list[str] = []
    for p in text.strip().split("\n\n"):
        if out:
            out.append("")
        out += textwrap.wrap(" ".join(p.split()), 96, initial_indent=indent, subsequent_indent=indent) or [indent]
    return out


def _bullets(items: Sequence[str]) -> list[str]:
    out: list[str] = []
    for item in items:
        out += textwrap.wrap(" ".join(item.split()), 96, initial_indent="  - ", subsequent_indent="    ") or ["  -"]
    return out


def missing_entry_fields(r: Rule) -> list[str]:
    """The entry keys this rule has not written (as loaded: an empty key reads as not written;
    ``explains = []`` cannot be told from no ``explains`` here, ``rules check --entries`` can)."""
    return [k for k in ENTRY_FIELDS if not getattr(r, k)]


def explain(r: Rule) -> str:
    """Every key of the rule, laid out for a terminal; rule and log text escaped (``safe``)."""
    lines = [f"{r.id} — {r.title}",
             f"  category {r.category} · role {r.role} · severity {r.severity} · priority {r.priority}"
             f" · window {r.window_s:g} s"]
    facts = [f"domain {r.domain or '-'}", f"restart {r.restart or '-'}"]
    if r.when is not None:
        facts.append(f"when {r.when.phase}: {' '.join(r.when.trigger.split())}")
    lines.append("  " + " · ".join(facts))
    if r.affects:
        lines.append(f"  affects: {', '.join(r.affects)}")
    if r.tags:
        lines.append(f"  tags: {', '.join(r.tags)}")
    seen = [ex.log.strip().splitlines()[-1][:200] for ex in r.examples if ex.expect == "match" and ex.log.strip()]
    lines += ["", "What you see", *[f"  {x}" for x in seen[:4]]]
    lines += ["", "Mechanism", *_para(r.root_cause), "", "Fix", *_para(r.fix)]
    if r.confirm:
        lines += ["", "Confirm", *_bullets(r.confirm)]
    if r.cheapest_check:
        lines += ["", "Cheapest check", *_para(r.cheapest_check)]
    if r.fingerprint:
        lines += ["", "Fingerprint (metric or alert)", *_para(r.fingerprint)]
    if r.looks_like:
        lines += ["", "Looks like", *_bullets(r.looks_like)]
    if r.prevention:
        lines += ["", "Prevention", *_para(r.prevention)]
    if r.info_level:
        lines += ["", "Why an INFO line is a failure here", *_para(r.info_level)]
    if r.versions:
        lines += ["", "Versions"]
        for v in r.versions:
            lines += _bullets([f"{v.software} {v.range}: {v.wording}"]) + [f"    source: {v.source}"]
    if r.explains:
        lines += ["", "Typically causes on other ranks", *[f"  {x}" for x in r.explains]]
    if r.related:
        lines += ["", "Related", *[f"  {x.id} ({x.kind})" for x in r.related]]
    if r.references:
        lines += ["", "References", *[f"  {x}" for x in r.references]]
    n_match = sum(1 for ex in r.examples if ex.expect == "match")
    m = r.match
    lines += ["", "Match",
              f"  scope {m.scope}" + (f", {m.context_lines} lines before" if m.scope == "event" else "")
              + f"; {len(m.any)} pattern(s); keywords: {', '.join(repr(k) for k in m.prefilter)}",
              f"  examples: {len(r.examples)} ({n_match} match, {len(r.examples) - n_match} no-match)"]
    missing = missing_entry_fields(r)
    if missing:
        lines += ["", f"Not written yet: {', '.join(missing)}"]
    lines += ["", f"Defined in {r.path}"]
    return "\n".join(safe(line) for line in lines) + "\n"


def summary(r: Rule) -> dict[str, object]:
    """One rule's record in ``rules list --format json`` (fields documented in ``rules/README.md``)."""
    return {
        "id": r.id,
        "title": r.title,
        "category": r.category,
        "role": str(r.role),
        "severity": str(r.severity),
        "priority": r.priority,
        "tags": list(r.tags),
        "affects": list(r.affects),
        "domain": None if r.domain is None else str(r.domain),
        "restart": None if r.restart is None else str(r.restart),
        "when": None if r.when is None else {"phase": str(r.when.phase), "trigger": r.when.trigger},
        "explains": list(r.explains),
        "related": [{"id": x.id, "kind": x.kind} for x in r.related],
        "references": list(r.references),
        "versions": len(r.versions),
        "examples": len(r.examples),
        "info_level": r.info_level or None,
        "entry_missing": missing_entry_fields(r),
        "path": r.path,
    }


def list_json(rules: Sequence[Rule], total: int) -> str:
    """``rules list --format json``: the shown rules, how many were loaded, one object."""
    doc = {"schema": LIST_SCHEMA, "total": total, "rules": [summary(r) for r in rules]}
    return json.dumps(doc, indent=2, ensure_ascii=False) + "\n"


def list_table(rules: Sequence[Rule]) -> str:
    """``rules list``: id, role, severity and title, one rule a line."""
    return "".join(safe(f"{r.id:<52} {r.role:<10} {r.severity:<8} {r.title}") + "\n" for r in rules)
