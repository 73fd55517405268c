"""Renderers: each turns a finished ``Report`` into text for people or machines.

They read a Report and never recompute analysis. The registry is written out by hand; the CLI's
``--format`` choices are its keys. Modules are imported on use so ``correlate --help`` stays fast.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable

from correlator.model import Report

#: format name -> module that has ``render(report, **kw) -> str``
RENDERERS: dict[str, str] = {
    "terminal": "correlator.report.terminal",
    "json": "correlator.report.jsonout",
    "markdown": "correlator.report.markdown",
    "html": "correlator.report.html",
    "trace": "correlator.report.trace",
}


def renderer(name: str) -> Callable[..., str]:
    if name not in RENDERERS:
        raise KeyError(name)
    render: Callable[..., str] = importlib.import_module(RENDERERS[name]).render
    return render


def render(report: Report, fmt: str, **kw: object) -> str:
    return renderer(fmt)(report, **kw)
