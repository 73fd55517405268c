"""Output-time safety of text that came from logs or rule files: control characters made visible.

Owns the one set of characters no renderer may write raw (C0 controls but tab, DEL, C1 controls,
the bidirectional overrides and isolates, the line and paragraph separators) and their visible
form, the same ``\\x1b`` / ``\\u202e`` escapes ``correlate rules explain`` prints. A terminal acts
on these (a window title, a hyperlink, a cleared screen, a reset, a line-drawing charset, a fake
line after a newline in a file name); a Markdown or HTML viewer may act on them or hide them. Each
is shown, not deleted, so the reader sees that the log held it.

Renderers call these on every log- and rule-derived string they write (``visible``), or on a
whole document whose own line breaks are its structure (``visible_lines``); the JSON outputs keep
the exact value and only write the characters ``json.dumps`` leaves raw as ``\\uXXXX``
(``json_safe``). A renderer may still add control codes of its own (the terminal's colours) after
this. Nothing here touches what was analysed: the Report keeps the text as read.
"""

from __future__ import annotations

#: code points that are never written raw: C0 but tab, DEL, C1, bidi controls, LS/PS, LRM/RLM/ALM
UNSAFE: frozenset[int] = frozenset([
    *(c for c in range(0x20) if c != 0x09), 0x7F, *range(0x80, 0xA0),
    *range(0x202A, 0x202F), *range(0x2066, 0x206A), 0x2028, 0x2029, 0x200E, 0x200F, 0x061C,
])

_VISIBLE = {c: (f"\\x{c:02x}" if c < 0x100 else f"\\u{c:04x}") for c in UNSAFE}
_VISIBLE_LINES = {c: v for c, v in _VISIBLE.items() if c != 0x0A}
#: what ``json.dumps(..., ensure_ascii=False)`` leaves raw (it escapes C0 itself)
_JSON = {c: f"\\u{c:04x}" for c in UNSAFE if c >= 0x20}


def visible(text: str) -> str:
    """``text`` with every unsafe character, newlines included, shown as an escape (``\\x1b``)."""
    if text.isascii() and text.isprintable():  # the common case: nothing to do
        return text
    return text.translate(_VISIBLE)


def visible_lines(text: str) -> str:
    """``visible`` for a document or block whose newlines are its own line breaks."""
    return text.translate(_VISIBLE_LINES)


def json_safe(dumped: str) -> str:
    """Serialised JSON (from ``json.dumps(..., ensure_ascii=False)``) with DEL, C1, bidi controls and
    LS/PS written as ``\\uXXXX`` escapes: the same value for a parser, nothing raw for a terminal."""
    if dumped.isascii() and "\x7f" not in dumped:
        return dumped
    return dumped.translate(_JSON)
