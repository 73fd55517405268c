"""Clock skew between hosts, estimated from instants that every host logs at the same true time.

Owns the estimate only: given anchors (a training step logged by every rank, the start of an NCCL
collective that timed out everywhere: stamp minus ``ran for X ms``), it returns a per-host offset
and a residual bound, with robust statistics (medians, so a few bad anchors do not move it).
Applying offsets to events is the caller's business.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from statistics import median

#: an anchor key seen on fewer domains than this says nothing about skew
MIN_DOMAINS = 2


@dataclass(frozen=True, slots=True)
class ClockEstimate:
    domain: str
    offset_ns: int
    #: how far this host's anchors still scatter around the corrected time (90th percentile)
    residual_ns: int
    anchors: int


def estimate(points: Iterable[tuple[str, str, int]], rounds: int = 4) -> dict[str, ClockEstimate]:
    """``points`` are ``(domain, anchor_key, time_ns)``; returns an estimate per anchored domain.

    Offsets are centred so that the median domain reads 0: the report's times are then on the
    clock of a typical host, not of whichever host happened to be first.
    """
    per_key: dict[str, dict[str, list[int]]] = defaultdict(lambda: defaultdict(list))
    for domain, key, t in points:
        per_key[key][domain].append(t)
    table: dict[str, dict[str, float]] = {}
    for key, doms in per_key.items():
        if len(doms) >= MIN_DOMAINS:
            table[key] = {d: float(median(ts)) for d, ts in doms.items()}
    if not table:
        return {}
    domains = sorted({d for row in table.values() for d in row})
    off = dict.fromkeys(domains, 0.0)
    deltas: dict[str, list[float]] = {}
    for _ in range(rounds):
        deltas = defaultdict(list)
        for row in table.values():
            ref = median(t - off[d] for d, t in row.items())
            for d, t in row.items():
                deltas[d].append(t - ref)
        off = {d: median(v) for d, v in deltas.items()}
    centre = median(off.values())
    out = {}
    for d in domains:
        res = sorted(abs(x - off[d]) for x in deltas[d])
        p90 = res[min(len(res) - 1, int(0.9 * len(res)))] if res else 0.0
        out[d] = ClockEstimate(d, int(round(off[d] - centre)), int(round(p90)), len(deltas[d]))
    return out
