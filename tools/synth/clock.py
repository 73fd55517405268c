"""Printed time stamps: true seconds since the job's start, already shifted to a host's clock -> text.

Stamps are UTC; the date parts of each second are cached (a large job prints millions of lines).
"""

from __future__ import annotations

import math
from datetime import UTC, datetime


class Clock:
    """A host's time (seconds since the job's start, already shifted to its clock) as each program prints it."""

    def __init__(self, base_epoch: int) -> None:
        self.base = base_epoch
        self._cache: dict[int, tuple[str, str, str]] = {}

    def _date_parts(self, s: int) -> tuple[str, str, str]:
        v = self._cache.get(s)
        if v is None:
            d = datetime.fromtimestamp(self.base + s, tz=UTC)
            v = (d.strftime("%Y-%m-%d"), d.strftime("%H:%M:%S"), d.strftime("%m%d"))
            self._cache[s] = v
        return v

    @staticmethod
    def _whole_and_fraction(t: float) -> tuple[int, float]:
        s = math.floor(t)
        return s, t - s

    def log(self, t: float) -> str:          # 2026-03-02 14:07:31,412
        s, f = self._whole_and_fraction(t)
        d, hms, _ = self._date_parts(s)
        return f"{d} {hms},{min(int(f * 1000), 999):03d}"

    def glog(self, t: float, level: str = "E") -> str:   # E0302 14:07:31.123456789
        s, f = self._whole_and_fraction(t)
        _, hms, md = self._date_parts(s)
        return f"{level}{md} {hms}.{min(int(f * 1e9), 999999999):09d}"

    def agent(self, t: float, level: str = "W") -> str:  # W0302 14:07:31.412000
        s, f = self._whole_and_fraction(t)
        _, hms, md = self._date_parts(s)
        return f"{level}{md} {hms}.{min(int(f * 1000), 999):03d}000"

    def slurm(self, t: float) -> str:        # 2026-03-02T14:07:31
        d, hms, _ = self._date_parts(math.floor(t))
        return f"{d}T{hms}"

    def table(self, s: int) -> str:          # 2026-03-02_14:07:31
        d, hms, _ = self._date_parts(s)
        return f"{d}_{hms}"

    def iso(self, t: float) -> str:
        s, f = self._whole_and_fraction(t)
        d, hms, _ = self._date_parts(s)
        return f"{d}T{hms}.{min(int(f * 1000), 999):03d}Z"

    def epoch(self, t: float) -> int:
        return self.base + math.floor(t)
