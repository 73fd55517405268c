"""A rule's whole encyclopedia entry as text (``correlate rules explain ID``)."""

from __future__ import annotations

import textwrap

from correlator.model import Rule


def _para(text: str, indent: str = "  ") -> str:
    out = []
    for p in text.strip().split("\n\n"):
        out.append(textwrap.fill(" ".join(p.split()), 96, initial_indent=indent, subsequent_indent=indent))
    return "\n\n".join(out)


def explain(r: Rule) -> str:
    lines = [f"{r.id} — {r.title}", f"  category {r.category} · role {r.role} · severity {r.severity}"
             f" · priority {r.priority}"]
    if r.affects:
        lines.append(f"  affects: {', '.join(r.affects)}")
    lines += ["", "What you see", *[f"  {ex.log.strip().splitlines()[-1][:200]}" for ex in r.examples if ex.expect == "match"][:4]]
    lines += ["", "Mechanism", _para(r.root_cause), "", "Fix", _para(r.fix)]
    if r.confirm:
        lines += ["", "Confirm", *[textwrap.fill(c, 96, initial_indent="  - ", subsequent_indent="    ") for c in r.confirm]]
    if r.prevention:
        lines += ["", "Prevention", _para(r.prevention)]
    if r.explains:
        lines += ["", "Typically causes on other ranks", *[f"  {x}" for x in r.explains]]
    if r.related:
        lines += ["", "Related", *[f"  {x.id} ({x.kind})" for x in r.related]]
    if r.references:
        lines += ["", "References", *[f"  {x}" for x in r.references]]
    lines += ["", f"Defined in {r.path}"]
    return "\n".join(lines) + "\n"
