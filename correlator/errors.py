"""The project's exceptions: every one carries where the problem is and what to do next.

The library raises these; only ``correlator.cli`` turns them into ``error: ...`` lines and exit
codes. Data problems in logs are never raised: they become diagnostics in the report.
"""

from __future__ import annotations


class CorrelateError(Exception):
    """Base class: ``location`` names the file (and key or line) the problem is in."""

    def __init__(self, message: str, location: str | None = None, hint: str | None = None) -> None:
        self.message = message
        self.location = location
        self.hint = hint
        super().__init__(str(self))

    def __str__(self) -> str:
        text = f"{self.location}: {self.message}" if self.location else self.message
        return f"{text} ({self.hint})" if self.hint else text


class RuleError(CorrelateError):
    """A rule file is broken: stops the run (configuration problems are not collected)."""


class InputError(CorrelateError):
    """No usable input at all (every path missing or unreadable)."""


class UsageError(CorrelateError):
    """Options that do not fit together."""
