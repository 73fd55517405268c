"""Small rule files written in a test: a complete entry to break one key at a time, and TOML text."""

from __future__ import annotations

from pathlib import Path

SHA = "0123456789abcdef0123456789abcdef01234567"


def complete_table(role: str = "primary") -> dict:
    """A rule table whose entry has every key and no defect (for ``role``)."""
    restart = {"primary": "fix-code", "collateral": "follow-root", "teardown": "follow-root", "job": "retry",
               "context": "none"}[role]
    table = {
        "schema": 1, "id": "custom.widget-failed", "title": "Widget failed", "category": "custom",
        "severity": "high", "role": role, "root_cause": "The widget broke.", "fix": "Mend the widget.",
        "confirm": ["look at the widget"], "prevention": "Keep the widget oiled.",
        "references": [f"https://github.com/example/widget/blob/{SHA}/src/widget.c",
                       "https://github.com/example/widget/issues/12"],
        "looks_like": ["a gadget failure: the gadget says 'gadget'"], "domain": "software", "restart": restart,
        "cheapest_check": "widget --selftest", "when": {"phase": "training", "trigger": "the widget turns"},
        "fingerprint": "widget_errors_total rises",
        "versions": [{"software": "widget", "range": ">= 1.2", "wording": "Widget failed",
                      "source": "https://github.com/example/widget/blob/v1.2.0/src/widget.c"}],
        "match": {"any": ["Widget failed"], "prefilter": ["Widget failed"]},
        "examples": [{"expect": "match", "log": "Widget failed"}, {"expect": "no-match", "log": "Widget fine"}],
    }
    if role == "primary":
        table["explains"] = []
    return table


def _value(v: object) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, str):
        return "'''" + v + "'''" if "\n" not in v and "'''" not in v else '"""' + v.replace("\\", "\\\\") + '"""'
    if isinstance(v, list):
        return "[" + ", ".join(_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{ " + ", ".join(f"{k} = {_value(x)}" for k, x in v.items()) + " }"
    raise TypeError(type(v))


def to_toml(table: dict) -> str:
    """TOML text of a rule table (literal strings: patterns need no escaping)."""
    out = [f"{k} = {_value(v)}" for k, v in table.items() if k not in ("match", "examples")]
    out += ["", "[match]", *(f"{k} = {_value(v)}" for k, v in table["match"].items())]
    for ex in table["examples"]:
        out += ["", "[[examples]]", *(f"{k} = {_value(v)}" for k, v in ex.items())]
    return "\n".join(out) + "\n"


def write_rule(root: Path, table: dict) -> Path:
    category, name = table["id"].split(".", 1)
    path = root / category / f"{name}.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(to_toml(table), encoding="utf-8")
    return path
