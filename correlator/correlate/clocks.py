"""Clock skew between hosts, estimated from instants that every host logs at the same true time.

Owns the estimate only: given anchors (a training step logged by every rank, the start of an NCCL
collective that timed out everywhere: stamp minus ``ran for X ms``), it returns a per-host offset
and a residual bound, with robust statistics (medians, so a few bad anchors do not move it).
Applying offsets to events is the caller's business.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from statistics import median

from correlator.correlate.identity import IdentityMap, resolve
from correlator.model import NS, Anchor, DiagCode, Diagnostic, Match, TimeKind
from correlator.model.vocabulary import Capture

#: an anchor key seen on fewer domains than this says nothing about skew
MIN_DOMAINS = 2


def domain_of(host: str | None, rank: int | None, path: str) -> str:
    """The clock domain of a line: its host, else its rank, else its file."""
    if host:
        return host
    if rank is not None:
        return f"rank {rank}"
    return path


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
            for d, at in row.items():
                deltas[d].append(at - ref)
        off = {d: median(v) for d, v in deltas.items()}
    centre = median(off.values())
    out = {}
    for d in domains:
        res = sorted(abs(x - off[d]) for x in deltas[d])
        p90 = res[min(len(res) - 1, int(0.9 * len(res)))] if res else 0.0
        out[d] = ClockEstimate(d, int(round(off[d] - centre)), int(round(p90)), len(deltas[d]))
    return out


def seq_anchors(matches: Sequence[Match]) -> list[tuple[str, str, int]]:
    pts = []
    for m in matches:
        seq, ran = m.capture(Capture.SEQ), m.capture(Capture.RAN_FOR_MS)
        if seq and ran and ran.isdecimal() and m.time_ns is not None and m.time_kind is TimeKind.OWN:
            dom = domain_of(m.who.host, m.who.rank, m.path)
            pts.append((dom, f"seq:{seq}", m.time_ns - int(ran) * 1_000_000))
    return pts


def anchor_points(anchors: Sequence[Anchor], imap: IdentityMap) -> list[tuple[str, str, int]]:
    pts = []
    domains: dict[tuple, str] = {}  # a writer's anchors share its identity: resolved once
    for a in anchors:
        k = (a.who, a.path)
        dom = domains.get(k)
        if dom is None:
            who, _ = resolve(a.who, a.path, imap)
            dom = domains[k] = domain_of(who.host, who.rank, a.path)
        pts.append((dom, f"{a.kind}:{a.key}", a.time_ns))
    return pts


@dataclass(frozen=True, slots=True)
class Alignment:
    """The clock estimate of a job, and what a reader must be told about it."""

    estimates: dict[str, ClockEstimate]
    #: one sentence for the verdict's why-list ("" when there is one host)
    note: str
    diagnostics: tuple[Diagnostic, ...]


def align(anchors: Sequence[Anchor], matches: Sequence[Match], imap: IdentityMap) -> Alignment:
    """Estimate every host's offset from the writers' anchors and the timed-out collectives' starts."""
    est = estimate(anchor_points(anchors, imap) + seq_anchors(matches))
    domains = {domain_of(m.who.host, m.who.rank, m.path) for m in matches if m.who.host}
    diags: list[Diagnostic] = []
    note = ""
    if len(est) >= 2:
        worst = max(abs(c.offset_ns) for c in est.values())
        resid = max(c.residual_ns for c in est.values())
        note = (f"clocks aligned on {len(est)} hosts from {sum(c.anchors for c in est.values())} anchors; "
                f"largest offset {worst / NS:.3f} s, residual skew <= {resid / NS:.3f} s")
        unanchored = sorted(domains - set(est))
        if unanchored:
            diags.append(Diagnostic("info", None, f"no clock anchors for {', '.join(unanchored[:8])}: "
                                                  f"their clocks are not corrected", DiagCode.CLOCKS_UNANCHORED))
    elif len(domains) >= 2:
        note = (f"{len(domains)} hosts, but no shared anchors (steps or collectives logged by all) to "
                f"align their clocks: cross-host order assumes synchronised clocks")
    return Alignment(est, note, tuple(diags))
