"""Masking secrets in log text before anything is written.

Owns the list of credential shapes (Hugging Face, AWS, GitHub, W&B, OpenAI-style keys, bearer and
Authorization headers, passwords in options and URLs, private key blocks) and applying it to every
string of a ``Report``. Applied once, in ``pipeline``, so that every renderer (terminal, JSON,
Markdown, HTML, Parquet, trace) only ever sees masked text.
"""

from __future__ import annotations

import dataclasses
import re
from enum import Enum
from typing import Any

MASK = "***"

# (name, pattern, replacement). Order matters: specific shapes before generic key=value ones.
_RULES: tuple[tuple[str, re.Pattern[str], str], ...] = tuple(
    (name, re.compile(p), repl) for name, p, repl in (
        ("private-key", r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----.*?(?:-----END [A-Z0-9 ]*PRIVATE KEY-----|$)",
         "-----BEGIN PRIVATE KEY-----" + MASK),
        ("url-credentials", r"(?i)\b([a-z][a-z0-9+.-]{1,15}://)[^/\s:@]{1,256}:[^/\s@]{1,256}@", r"\1" + MASK + ":" + MASK + "@"),
        ("huggingface", r"\bhf_[A-Za-z0-9]{20,}", "hf_" + MASK),
        ("github", r"\b(?:ghp|gho|ghu|ghs|ghr)_[A-Za-z0-9]{30,}|\bgithub_pat_[A-Za-z0-9_]{22,}", "gh_" + MASK),
        ("openai", r"\bsk-(?:proj-|ant-|live-)?[A-Za-z0-9_-]{20,}", "sk-" + MASK),
        ("aws-access-key", r"\b(?:AKIA|ASIA|AGPA|AIDA|AROA|ANPA)[0-9A-Z]{16}\b", "AKIA" + MASK),
        ("slack", r"\bxox[abposr]-[A-Za-z0-9-]{10,}", "xox-" + MASK),
        ("bearer", r"(?i)\b(bearer|token)\s+[A-Za-z0-9._~+/=-]{12,}", r"\1 " + MASK),
        ("authorization", r"(?i)\b(authorization|x-api-key|api-key|private-token)(\"?\s*[:=]\s*\"?)(?:basic\s+|bearer\s+)?[^\s\"',;]+",
         r"\1\2" + MASK),
        ("aws-secret", r"(?i)\b(aws_secret_access_key|aws_session_token|secret_access_key)(\"?\s*[:=]\s*\"?)[A-Za-z0-9/+=]{16,}",
         r"\1\2" + MASK),
        ("wandb", r"(?i)\b(wandb_api_key|wandb login(?: --relogin)?)(\s*[=:]?\s*)[0-9a-f]{40}\b", r"\1\2" + MASK),
        ("key-value", r"(?i)\b((?:[a-z0-9]+_)*(?:password|passwd|pwd|secret|token|api_?key|apikey|access_key|credentials?))"
                      r"(\"?'?\s*[:=]\s*\"?'?)(?!\*\*\*)[^\s\"',;}{)]{3,}", r"\1\2" + MASK),
        ("cli-option", r"(?i)(--(?:password|passwd|token|api-key|apikey|secret)(?:=|\s+))(?!\*\*\*)\S+", r"\1" + MASK),
    )
)


def redact(text: str) -> str:
    """``text`` with every credential-shaped piece replaced by ``***``."""
    if not text:
        return text
    for _name, pattern, repl in _RULES:
        text = pattern.sub(repl, text)
    return text


def _walk(value: Any) -> Any:
    if isinstance(value, Enum):
        return value
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, tuple):
        return tuple(_walk(v) for v in value)
    if isinstance(value, list):
        return [_walk(v) for v in value]
    if isinstance(value, dict):
        return {k: _walk(v) for k, v in value.items()}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        changes = {f.name: _walk(getattr(value, f.name)) for f in dataclasses.fields(value)}
        return dataclasses.replace(value, **changes)
    return value


def redact_report(report: Any) -> Any:
    """A copy of the report with secrets masked in every string (log text, paths, diagnostics)."""
    return _walk(report)
