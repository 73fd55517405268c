"""The terminal summary (DESIGN §1): the verdict, the evidence line, collateral, why, fix, confirm.

Plain text unless ``color=True`` (the CLI asks for colour only when stdout is a TTY). Every line
of a block is made safe (``correlator.report.safe.visible``) as it is laid out, so no log line,
file name or rule text can act on the terminal or start a line of its own; the only control codes
written are this module's colours.
"""

from __future__ import annotations

import textwrap

from correlator.model import DiagCode, Report, Verdict, expand_ranks
from correlator.model.evidence import (
    HANG_KINDS,
    ODD_COLLECTIVE_KINDS,
    EvidenceKind,
    describe,
)
from correlator.report.markdown import survived_notes
from correlator.report.safe import visible

_W = 14  # width of the left label column
_WIDTH = 100


#: hang verdicts (no rank printed a failure), and those whose culprit timed out in another collective
_HANG = {str(k) for k in HANG_KINDS}
_ODD_COLLECTIVE = {str(k) for k in ODD_COLLECTIVE_KINDS}


def _c(text: str, code: str, color: bool) -> str:
    return f"\x1b[{code}m{text}\x1b[0m" if color else text


def _block(label: str, lines: list[str], color: bool, code: str = "1") -> list[str]:
    out = []
    for i, line in enumerate(lines):
        head = _c(label.ljust(_W), code, color) if i == 0 else " " * _W
        out.append(head + visible(line))
    return out


def _wrap(text: str, indent: int = 0) -> list[str]:
    out = []
    for para in text.strip().split("\n\n"):
        para = " ".join(para.split())
        out.extend(textwrap.wrap(para, _WIDTH - _W - indent) or [""])
    return out


def _time(t: str | None) -> str:
    return t.replace("T", " ").replace("Z", " UTC") if t else "(no time)"


def _delay(a: float | None, b: float | None) -> str:
    if a is None:
        return ""
    if b is None or abs(b - a) < 0.05:
        return f"{a:+.1f} s"
    return f"{a:+.1f} s .. {b:+.1f} s"


def render(report: Report, color: bool = False) -> str:
    lines: list[str] = []
    rc = report.root_cause
    v = report.verdict
    if v is Verdict.ROOT_CAUSE and rc is not None:
        wave = rc.decided_by == EvidenceKind.NODE_WAVE
        who = f"rank {rc.rank}" if rc.rank is not None else ("every rank" if wave else "unknown rank")
        bits = [x for x in (f"node {rc.host}" if rc.host else "", f"local rank {rc.local_rank}" if rc.local_rank is not None else "") if x]
        if bits:
            who += f" ({', '.join(bits)})"
        head = f"{who} at {_time(rc.time)}   confidence {rc.confidence:.2f}"
        if rc.decided_by in _HANG:
            what = ("it timed out too, but not in the collective its peers were in" if rc.decided_by in _ODD_COLLECTIVE
                    else "it logged no error")
            body = [head, f"hang culprit: {what}; the other ranks report {rc.rule}",
                    f"decided by: {describe(rc.decided_by)}"]
        else:
            body = [head, f"{rc.rule} — {rc.title}"]
            if rc.decided_by != EvidenceKind.PRIMARY:
                body.append(f"decided by: {describe(rc.decided_by)}")
        for ev in rc.evidence[:3]:
            body.append(f"{ev.path}:{ev.line}  {ev.text[:160]}")
        if rc.tie:
            body.append(f"tie: could not be ordered against rank(s) {', '.join(map(str, rc.tie))}")
        lines += _block("root cause", body, color, "1;31")
    elif v is Verdict.JOB_LEVEL and rc is not None:
        body = [f"{rc.rule} — {rc.title}", f"at {_time(rc.time)}   confidence {rc.confidence:.2f}"]
        body += [f"{ev.path}:{ev.line}  {ev.text[:160]}" for ev in rc.evidence[:2]]
        lines += _block("job ended", body, color, "1;33")
    elif v is Verdict.NO_FAILURE:
        said = report.verdict_notes()
        body = _wrap(said[0], 0) if said else ["no failure, timeout or teardown was found in the logs"]
        for note in survived_notes(report)[:3]:  # failures the ranks went on from
            wrapped = _wrap(note, 2)
            body += ["- " + wrapped[0]] + ["  " + x for x in wrapped[1:]]
        lines += _block("no failure", body, color, "1;32")
    else:
        seen = any(g.label in ("collateral", "independent", "root") for g in report.groups)
        body = ["failures were seen, but no rank can be named as the first" if seen else
                "the job was torn down, but no failure was found in the logs"]
        for note in report.verdict_notes(DiagCode.VERDICT_REASON, DiagCode.VERDICT_SURVIVED):
            if len(body) >= 16:
                break
            wrapped = _wrap(note, 2)
            body += ["- " + wrapped[0]] + ["  " + x for x in wrapped[1:]]
        lines += _block("undetermined", body, color, "1;33")

    if len(report.attempts) > 1:  # torchelastic restarted the workers: each attempt's own verdict
        body = []
        for a in sorted(report.attempts, key=lambda x: x.attempt):
            what = f"rank {a.rank} {a.rule}" if a.rank is not None else (a.rule or "")
            body.append(f"attempt {a.attempt}: {a.verdict.value.replace('_', ' ')}"
                        + (f" — {what}" if what else "") + (f" at {_time(a.time)}" if a.time else ""))
        lines += _block("attempts", body, color)

    coll = [g for g in report.groups if g.label in ("collateral", "independent")]
    if coll:
        body = []
        for g in coll[:6]:
            n = len(expand_ranks(g.ranks)) if g.ranks else 0
            who = f"{n} rank{'s' if n != 1 else ''}" if n else f"{g.count} line{'s' if g.count != 1 else ''}"
            extra = f" [{g.label}]" if g.label == "independent" else ""
            ranks = f" ranks {g.ranks}" if g.ranks and n <= 64 else ""
            d = _delay(g.first_after_s, g.last_after_s)
            body.append(f"{who}: {g.rule}{extra}{ranks}" + (f" ({d})" if d else ""))
        if len(coll) > 6:
            body.append(f"... and {len(coll) - 6} more groups (see --format json)")
        lines += _block("collateral", body, color)
    tear = [g for g in report.groups if g.label in ("teardown", "job")]
    if tear:
        parts = []
        for g in tear[:5]:
            d = _delay(g.first_after_s, None)
            parts.append(f"{g.rule} x{g.count}" + (f" ({d})" if d else ""))
        lines += _block("teardown", _wrap("; ".join(parts)), color)
    if report.chain and len(report.chain) > 1:
        lines += _block("chain", _wrap(" -> ".join(link.summary for link in report.chain)), color)
    if rc is not None:
        why = []
        for w in rc.why:
            wrapped = _wrap(w, 2)
            why += ["- " + wrapped[0]] + ["  " + x for x in wrapped[1:]]
        lines += _block("why", why, color)
        lines += _block("mechanism", _wrap(rc.mechanism), color)
        lines += _block("fix", _wrap(rc.fix), color, "1;32")
        if rc.confirm:
            conf = []
            for c in rc.confirm:
                wrapped = _wrap(c, 2)
                conf += ["- " + wrapped[0]] + ["  " + x for x in wrapped[1:]]
            lines += _block("confirm", conf, color)
        lines += _block("details", [f"correlate rules explain {rc.rule}"], color)
    if report.clocks:
        worst = max(report.clocks, key=lambda c: abs(c.offset_s))
        resid = max(c.residual_s for c in report.clocks)
        lines += _block("clocks", [f"aligned {len(report.clocks)} hosts; largest offset {worst.offset_s:+.3f} s "
                                   f"({worst.host}); residual <= {resid:.3f} s"], color)
    warn = [d for d in report.diagnostics if d.level in ("warning", "error")]
    if warn:
        body = [f"{d.path + ': ' if d.path else ''}{d.message}" for d in warn[:8]]
        if len(warn) > 8:
            body.append(f"... and {len(warn) - 8} more (see --format json)")
        lines += _block("unread", body, color, "1;33")
    s = report.stats
    mb = s.bytes / 1e6
    lines.append(_c(f"{'read'.ljust(_W)}{s.sources} sources, {mb:.1f} MB, {s.lines} lines in {s.seconds:.2f} s", "2", color))
    return "\n".join(lines) + "\n"

