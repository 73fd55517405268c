"""The JSON report (schema ``correlate.report/1``, DESIGN §6): the stable contract for machines.

Fields are added in later versions, never renamed or removed without a new schema id. Strings keep
the exact text read; no control character is written raw (json escapes C0,
``correlator.report.safe.json_safe`` DEL, C1 and the bidi controls), so the file is safe to print.
"""

from __future__ import annotations

import dataclasses
import json
from enum import Enum
from typing import Any

from correlator.model import Report, field_names
from correlator.report.safe import json_safe

SCHEMA = "correlate.report/1"


_SCALARS = (str, int, float, bool, type(None))


def _plain(value: Any) -> Any:
    cls = type(value)
    if cls in _SCALARS:
        return value
    if isinstance(value, Enum):
        return value.value
    if cls is list or cls is tuple:
        return [_plain(v) for v in value]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {name: _plain(getattr(value, name)) for name in field_names(cls)}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    return value


def to_dict(report: Report) -> dict[str, Any]:
    """The report as plain JSON-able data, keys in the contract's order."""
    d = _plain(report)
    out: dict[str, Any] = {"schema": SCHEMA}
    for key in ("verdict", "root_cause", "collateral", "groups", "timeline", "ranks", "clocks", "diagnostics",
                "stats", "chain", "job", "attempts"):
        out[key] = d[key]
    return out


def render(report: Report) -> str:
    return json_safe(json.dumps(to_dict(report), indent=2, ensure_ascii=False)) + "\n"
