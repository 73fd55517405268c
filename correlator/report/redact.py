"""Masking secrets in log text before anything is written.

Owns the list of credential shapes (Hugging Face, AWS, GitHub, W&B, OpenAI-style keys, bearer and
Authorization headers, passwords in options and URLs, private key blocks) and applying it to every
string of a ``Report``. Applied once, in ``pipeline``, so that every renderer (terminal, JSON,
Markdown, HTML, Parquet, trace) only ever sees masked text.
"""

from __future__ import annotations

import dataclasses
import functools
import re
from enum import Enum
from typing import Any

from correlator.model import field_names

MASK = "***"

# (name, pattern, replacement). Order matters: specific shapes before generic key=value ones.
_KEY_BEGIN = r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----"
_KEY_END = r"-----END [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----"
_RULES: tuple[tuple[str, re.Pattern[str], str], ...] = tuple(
    (name, re.compile(p), repl) for name, p, repl in (
        # a whole block in one string, or its start when the rest follows in other lines
        ("private-key", rf"(?s){_KEY_BEGIN}.*?(?:{_KEY_END}|\Z)", "-----BEGIN PRIVATE KEY-----" + MASK),
        ("url-credentials", r"(?i)\b([a-z][a-z0-9+.-]{1,15}://)[^/\s:@]{0,256}:[^/\s@]{1,256}@", r"\1" + MASK + ":" + MASK + "@"),
        ("huggingface", r"\bhf_[A-Za-z0-9]{20,}", "hf_" + MASK),
        ("github", r"\b(?:ghp|gho|ghu|ghs|ghr)_[A-Za-z0-9]{30,}|\bgithub_pat_[A-Za-z0-9_]{22,}", "gh_" + MASK),
        ("wandb-v1", r"\bwandb_v1_[A-Za-z0-9_]{20,}", "wandb_v1_" + MASK),
        ("openai", r"\bsk-(?:proj-|ant-|live-|svcacct-|admin-)?[A-Za-z0-9_-]{20,}", "sk-" + MASK),
        ("aws-access-key", r"\b(?:AKIA|ASIA|AGPA|AIDA|AROA|ANPA)[0-9A-Z]{16}\b", "AKIA" + MASK),
        ("slack", r"\bxox[abposr]-[A-Za-z0-9-]{10,}", "xox-" + MASK),
        ("bearer", r"(?i)\b(bearer)\s+[A-Za-z0-9._~+/=-]{8,}", r"\1 " + MASK),
        # "token <value>" only when the value looks generated (long, with a digit): not "token classification"
        ("token-word", r"\b([Tt]oken)\s+(?=[A-Za-z0-9._~+/=-]*\d)[A-Za-z0-9._~+/=-]{20,}", r"\1 " + MASK),
        ("authorization", r"(?i)\b(authorization|proxy-authorization|x-api-key|api-key|private-token)"
                          r"([\"']?\s*[:=]\s*[\"']?)(?:(?:basic|bearer|token|digest)\s+)?(?!\*\*\*)[^\s\"',;]+",
         r"\1\2" + MASK),
        ("aws-secret", r"(?i)\b(aws_secret_access_key|aws_session_token|secret_?access_?key|session_?token)"
                       r"([\"']?\s*[:=]\s*[\"']?)[A-Za-z0-9/+=]{16,}", r"\1\2" + MASK),
        ("wandb", r"(?i)\b(wandb_api_key|wandb login(?: --relogin)?|wandb\.login\(\s*key\s*=)(\s*[=:]?\s*[\"']?)"
                  r"(?:local-)?[0-9a-f]{40}\b", r"\1\2" + MASK),
        # netrc lines (wandb and HF write them): machine api.wandb.ai login user password <key>
        ("netrc", r"\b(login\s+\S+\s+password\s+)\S+", r"\1" + MASK),
        # KEY=value, "key": "value", key='value' for secret-named keys; not special tokens (<pad>, [CLS])
        ("key-value", r"(?i)\b((?:[a-z0-9]+_)*(?:password|passwd|secret|token|api_?key|apikey|access_key|auth_key"
                      r"|client_secret)|(?:[a-z0-9]+_)+pwd)"
                      r"([\"']?\s*[:=]\s*[\"']?)(?!\*\*\*)(?![<\[])[^\s\"',;}{)]{3,}", r"\1\2" + MASK),
        # a credentials *path* (GOOGLE_APPLICATION_CREDENTIALS=/path/key.json) is not a secret
        ("credentials", r"(?i)\b((?:[a-z0-9]+_)*credentials?)([\"']?\s*[:=]\s*[\"']?)(?!\*\*\*)(?![/~.<\[])[^\s\"',;}{)]{3,}",
         r"\1\2" + MASK),
        ("cli-option", r"(?i)(--(?:[a-z0-9]+[-_])*(?:password|passwd|token|api[-_]?key|apikey|secret|access[-_]key)"
                       r"(?:=|\s+))(?!\*\*\*)(?![<\[])\S+", r"\1" + MASK),
    )
)
_BEGIN = re.compile(_KEY_BEGIN)
_END = re.compile(_KEY_END)
#: a line that is nothing but base64 of some length with mixed character classes: a key's body
_KEY_BODY = re.compile(r"^\s*(?=[A-Za-z0-9+/]*[0-9])(?=[A-Za-z0-9+/]*[a-z])(?=[A-Za-z0-9+/]*[A-Z])"
                       r"(?:[A-Za-z0-9+/]{40,}={0,2}|[A-Za-z0-9+/]{16,}={1,2})\s*$")


#: a literal that every shape above needs: most log text has none, and skips the 17 substitutions
_TRIGGER = re.compile(
    r"(?i)-----BEGIN|://|hf_|gh[pousr]_|github_pat_|wandb|sk-|AKIA|ASIA|AGPA|AIDA|AROA|ANPA|xox|bearer|token"
    r"|authoriz|api-key|api_key|apikey|secret|session|login|passw|pwd|access.key|auth_key|credential")


#: the same literals, lower-cased, as plain substrings (a superset: ``access`` for ``access.key``):
#: ``in`` over a lower-cased copy is ten times faster than the case-insensitive regex above, which
#: then only sees the strings that hold one
_TRIGGER_WORDS = ("-----begin", "://", "hf_", "ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_", "wandb", "sk-",
                  "akia", "asia", "agpa", "aida", "aroa", "anpa", "xox", "bearer", "token", "authoriz", "api-key",
                  "api_key", "apikey", "secret", "session", "login", "passw", "pwd", "access", "auth_key",
                  "credential")


@functools.lru_cache(maxsize=1 << 16)
def redact(text: str) -> str:
    """``text`` with every credential-shaped piece replaced by ``***``."""
    if not text:
        return text
    low = text.lower()
    if not any(w in low for w in _TRIGGER_WORDS) or _TRIGGER.search(text) is None:
        return text
    for _name, pattern, repl in _RULES:
        text = pattern.sub(repl, text)
    return text


class _Lines:
    """State along a sequence of log lines: inside a private key block whose lines come one by one."""

    __slots__ = ("in_key",)

    def __init__(self) -> None:
        self.in_key = False

    def line(self, text: str) -> str:
        if self.in_key:
            end = _END.search(text)
            if end is None:
                return MASK if text.strip() else text
            self.in_key = False
            head = text[:end.start()]
            text = (MASK if head.strip() else head) + text[end.start():]
        begin = None
        for begin in _BEGIN.finditer(text):
            pass
        if begin is not None and _END.search(text, begin.end()) is None:
            self.in_key = True  # the block goes on in the next lines
        if _KEY_BODY.match(text):
            return MASK
        return redact(text)


#: dataclass fields that hold a log line (and so may continue a key block begun in the line before)
_LINE_FIELDS = frozenset({"text", "context"})


#: scalars no secret hides in (checked by type first: a 4096-rank report has ~200,000 values)
_PLAIN = (int, float, bool, type(None))


def _walk(value: Any, lines: _Lines | None = None) -> Any:
    """``value`` with every string masked; containers and dataclasses in which nothing changed are
    returned as they are (no copy)."""
    cls = type(value)
    if cls is str or isinstance(value, str):  # a subclass too (a typed note): masked like any text
        return lines.line(value) if lines is not None else redact(value)
    if cls in _PLAIN or isinstance(value, Enum):
        return value
    if cls is tuple or cls is list:
        seq = _Lines()  # one state along the sequence: evidence lines, timeline events, context lines
        out = [_walk(v, seq) for v in value]
        if all(a is b for a, b in zip(out, value)):
            return value
        return tuple(out) if cls is tuple else out
    if cls is dict:
        new = {k: _walk(v) for k, v in value.items()}
        return value if all(new[k] is v for k, v in value.items()) else new
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        changes = {}
        for name in field_names(cls):
            v = getattr(value, name)
            w = _walk(v, lines if name in _LINE_FIELDS else None)
            if w is not v:
                changes[name] = w
        return dataclasses.replace(value, **changes) if changes else value
    if isinstance(value, (tuple, list)):  # a subclass (a named tuple): rebuilt as before
        seq = _Lines()
        out = [_walk(v, seq) for v in value]
        return type(value)(out) if isinstance(value, list) else tuple(out)
    if isinstance(value, dict):
        return {k: _walk(v) for k, v in value.items()}
    return value


def redact_report(report: Any) -> Any:
    """A copy of the report with secrets masked in every string (log text, paths, diagnostics)."""
    return _walk(report)
