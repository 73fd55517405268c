"""The terminal summary (DESIGN §1): the verdict, its line, the impact, collateral, why, fix, confirm.

It lays out the view (``correlator.report.view``: the same verdict, rank, rule and time every
format states) in two columns with ``rich`` (a label column and wrapped text), at the width it is
given (the CLI passes the terminal's; 100 columns when the output is not a terminal). Plain text
unless ``color=True`` (the CLI asks for colour only when stdout is a TTY and ``NO_COLOR`` is not
set). ``brief=True`` is the three-line answer: the verdict, the root's line, the fix.

Every string is made safe (``correlator.report.safe.visible``) before it is laid out and goes to
``rich`` as a ``Text`` (never as markup: a log line holding ``[bold]`` stays that text), with
highlighting and emoji codes off; so no log line, file name or rule text can act on the terminal or
start a line of its own, and the only control codes written are the colours ``rich`` writes.
"""

from __future__ import annotations

import io
import re
from collections.abc import Iterable
from typing import TYPE_CHECKING

from correlator.model import DiagCode, Evidence, Report, Verdict, expand_ranks
from correlator.report import view as views
from correlator.report.markdown import survived_notes, zone_note
from correlator.report.safe import visible

if TYPE_CHECKING:  # rich is imported where it is used: the command line starts without it
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

#: width of the label column
_W = 14
#: width when the caller gives none (not a terminal)
WIDTH = 100
#: the narrowest layout (below it the label column would leave no room)
_MIN_WIDTH = 40

#: label styles: the verdict's colour by kind of answer
_STYLE = {"root cause": "bold red", "job ended": "bold yellow", "no failure": "bold green",
          "undetermined": "bold yellow", "fix": "bold green", "unread": "bold yellow"}


def _time(t: str | None) -> str:
    return f"{views.fmt_time(t)} UTC" if t else "(no time)"


def _delay(a: float | None, b: float | None) -> str:
    if a is None:
        return ""
    if b is None or abs(b - a) < 0.05:
        return f"{a:+.1f} s"
    return f"{a:+.1f} s .. {b:+.1f} s"


#: characters of a log line's text the summary shows (the whole line is at its ``path:line``)
LOG_TEXT_LIMIT = 160


class _Log(str):
    """A log line (``path:line  text``, the text capped at ``LOG_TEXT_LIMIT`` characters): wrapped at
    the width, a word longer than the width folded."""

    __slots__ = ()


def _log(ev: Evidence) -> _Log:
    return _Log(f"{ev.path}:{ev.line}  {ev.text[:LOG_TEXT_LIMIT]}")


def _items(lines: Iterable[str]) -> list[str]:
    """Bullets: the wrap keeps the hanging indent (rich wraps each row of the body column)."""
    return ["- " + " ".join(x.split()) for x in lines]


def _paras(text: str) -> list[str]:
    return [" ".join(p.split()) for p in text.strip().split("\n\n") if p.strip()]


def _console(width: int, color: bool) -> Console:
    from rich.console import Console

    return Console(file=io.StringIO(), width=width, color_system="standard" if color else None,
                   force_terminal=color, no_color=not color, highlight=False, emoji=False, markup=False,
                   soft_wrap=False, legacy_windows=False)


def _blocks(report: Report, v: views.View) -> list[tuple[str, list[str], str]]:
    """(label, lines, style of the lines) of the summary, in order; plain text, not yet safe."""
    out: list[tuple[str, list[str], str]] = []
    root = v.root
    label = {Verdict.ROOT_CAUSE: "root cause", Verdict.JOB_LEVEL: "job ended", Verdict.NO_FAILURE: "no failure"}.get(
        report.verdict, "undetermined")
    body = [v.headline]
    if root is not None:
        body.append(v.time_line())
        body.append(f"rule {root.rule}" + ("" if root.kind is views.Kind.FAILURE else f" — {root.title}"))
        if root.decided_by not in ("primary", "job"):
            body.append(f"decided by: {root.decided_text}")
        if root.line is not None:
            body.append(_log(root.line))
        elif root.kind in (views.Kind.HANG, views.Kind.ODD_COLLECTIVE):
            body.append("it printed nothing of the hang; the other ranks report:")
        for ev in root.peer_lines[:2]:
            body.append(_log(ev))
        if root.line is not None and report.root_cause is not None:
            for ev in report.root_cause.evidence[1:3]:
                body.append(_log(ev))
        if root.tie:
            body.append(f"tie: could not be ordered against rank(s) {', '.join(map(str, root.tie))}")
    elif report.verdict is Verdict.NO_FAILURE:
        said = report.verdict_notes()
        if said:
            body.append(" ".join(said[0].split()))
        body += _items(survived_notes(report)[:3])  # failures the ranks went on from
    elif report.verdict is Verdict.UNDETERMINED:
        body += _items(report.verdict_notes(DiagCode.VERDICT_REASON, DiagCode.VERDICT_SURVIVED)[:8])
    out.append((label, body, ""))
    impact = v.impact_lines() if root is not None else []
    if impact:
        out.append(("impact", impact, ""))

    partial = report.stats.coverage_note()
    if partial:  # the verdict is over part of the job: said beside it, not only among the diagnostics
        out.append(("partial", [partial], ""))

    if len(report.attempts) > 1:  # torchelastic restarted the workers: each attempt's own verdict
        body = []
        for a in sorted(report.attempts, key=lambda x: x.attempt):
            what = f"rank {a.rank} {a.rule}" if a.rank is not None else (a.rule or "")
            body.append(f"attempt {a.attempt}: {a.verdict.value.replace('_', ' ')}"
                        + (f" — {what}" if what else "") + (f" at {_time(a.time)}" if a.time else ""))
        out.append(("attempts", body, ""))

    if v.collateral:
        body = []
        for g in v.collateral[:6]:
            n = len(expand_ranks(g.ranks)) if g.ranks else 0
            subject = f"{n} rank{'s' if n != 1 else ''}" if n else f"{g.count} line{'s' if g.count != 1 else ''}"
            extra = f" [{g.label}]" if g.label == "independent" else ""
            ranks = f" ranks {g.ranks}" if g.ranks and n <= 64 else ""
            d = _delay(g.first_after_s, g.last_after_s)
            body.append(f"{subject}: {g.rule}{extra}{ranks}" + (f" ({d})" if d else ""))
        if len(v.collateral) > 6:
            body.append(f"... and {len(v.collateral) - 6} more groups (see --format json)")
        out.append(("collateral", body, ""))
    if v.root_groups:
        parts = [f"{g.rule} x{g.count}" + (f" ({_delay(g.first_after_s, None)})" if g.first_after_s is not None else "")
                 for g in v.root_groups[:5]]
        out.append(("root's own", ["; ".join(parts)], ""))
    if v.teardown:
        parts = [f"{g.rule} x{g.count}" + (f" ({_delay(g.first_after_s, None)})" if g.first_after_s is not None else "")
                 for g in v.teardown[:5]]
        out.append(("teardown", ["; ".join(parts)], ""))
    if report.chain and len(report.chain) > 1:
        out.append(("chain", [" -> ".join(v.link_summary(link) if link.stage == "root" else link.summary
                                          for link in report.chain)], ""))
    if root is not None:
        out.append(("why", _items(root.why), ""))
        out.append(("mechanism", _paras(root.mechanism), ""))
        out.append(("fix", _paras(root.fix), ""))
        if v.actions:
            out.append(("confirm", _items(v.actions), ""))
        out.append(("details", [f"correlate rules explain {root.rule}"], ""))
    if report.clocks:
        worst = max(report.clocks, key=lambda c: abs(c.offset_s))
        resid = max(c.residual_s for c in report.clocks)
        out.append(("clocks", [f"aligned {len(report.clocks)} hosts; largest offset {worst.offset_s:+.3f} s "
                               f"({worst.host}); residual <= {resid:.3f} s"], ""))
    warn = [d for d in report.diagnostics if d.level in ("warning", "error")]
    if warn:
        body = [f"{d.path + ': ' if d.path else ''}{d.message}" for d in warn[:8]]
        if len(warn) > 8:
            body.append(f"... and {len(warn) - 8} more (see --format json)")
        out.append(("unread", body, ""))
    if zone_note(report):
        out.append(("zone", [zone_note(report)], ""))
    s = report.stats
    out.append(("read", [f"{s.sources} sources, {s.bytes / 1e6:.1f} MB, {s.lines} lines in {s.seconds:.2f} s"], "dim"))
    return out


def render(report: Report, color: bool = False, *, width: int | None = None, brief: bool = False) -> str:
    """The summary as text ``width`` columns wide (``WIDTH`` when not given)."""
    from rich.table import Table
    from rich.text import Text

    v = views.build(report)
    width = max(_MIN_WIDTH, width or WIDTH)
    console = _console(width, color)
    if brief:
        # three lines whatever the width: the log line is cut to it, our two sentences are not cut
        # (a pipe gets them whole; a terminal wraps them)
        verdict, line, fix = brief_lines(report, v)
        cut = v.root is not None and v.root.line is not None  # a log line is cut; our own sentences are not
        for said, style in ((verdict, "bold"), (_cut(line, width) if cut else line, ""), (fix, "green")):
            console.print(Text(visible(said), style=style if color else ""), overflow="ignore", crop=False,
                          no_wrap=True)
        return _trim(_written(console))
    def new_grid() -> Table:
        grid = Table.grid(padding=0, pad_edge=False, expand=True)
        grid.add_column(width=_W, no_wrap=True)
        grid.add_column(min_width=width - _W, max_width=width - _W, overflow="fold")
        return grid

    grid = new_grid()
    for label, lines, style in _blocks(report, v):
        label_style = _STYLE.get(label, "dim" if label == "read" else "bold")
        for i, line in enumerate(lines):
            head = Text((label if i == 0 else "").ljust(_W), style=label_style)
            if isinstance(line, _Log):
                # a log line is one row, never wrapped or cut (a token in it stays whole for a search or
                # a copy; its text is capped): printed between the grids, in the same columns
                if grid.row_count:
                    console.print(grid)
                    grid = new_grid()
                console.print(Text.assemble(head, Text(visible(line), style=style)), no_wrap=True, overflow="ignore",
                              crop=False)
                continue
            text = Text(visible(line), style=style)
            if line.startswith("- "):  # a bullet's wrapped lines hang under its text
                grid.add_row(head, _hanging(Text(visible(line[2:]), style=style)))
                continue
            grid.add_row(head, text)
    if grid.row_count:
        console.print(grid)
    return _trim(_written(console))


#: the padding rich writes to fill a row's columns, with the colour codes around it
_TRAILING = re.compile(r"[ ]+((?:\x1b\[[0-9;]*m)*)$", re.M)


def _written(console: Console) -> str:
    out = console.file
    assert isinstance(out, io.StringIO)
    return out.getvalue()


def _trim(text: str) -> str:
    return _TRAILING.sub(r"\1", text)


def _hanging(text: Text) -> Table:
    """A bullet item: ``- `` then the text, its wrapped lines indented under the text."""
    from rich.table import Table

    row = Table.grid(padding=0, pad_edge=False)
    row.add_column(width=2, no_wrap=True)
    row.add_column(overflow="fold")
    row.add_row("- ", text)
    return row


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def brief_lines(report: Report, v: views.View | None = None) -> tuple[str, str, str]:
    """The three-line answer (plain text): the verdict, the root's line, what to do."""
    v = v or views.build(report)
    root = v.root
    first = v.headline if report.verdict is not Verdict.ROOT_CAUSE else f"{v.words}: {v.headline}"
    if root is None:
        s = report.stats
        notes = report.verdict_notes()
        second = " ".join(notes[0].split()) if notes else (
            f"read {s.sources} sources, {s.lines} lines: nothing failed" if report.verdict is Verdict.NO_FAILURE
            else f"read {s.sources} sources, {s.lines} lines")
        return first, second, "fix: nothing to fix" if report.verdict is Verdict.NO_FAILURE else \
            "fix: see the full summary (correlate without --brief)"
    if root.line is not None:
        second = f"{root.line.path}:{root.line.line}  {' '.join(root.line.text.split())}"
    else:
        second = f"{root.who} logged nothing of it; {root.time_means}: {_time(root.time)}"
    fix = _paras(root.fix)
    third = "fix: " + (_first_sentence(fix[0]) if fix else f"correlate rules explain {root.rule}")
    return first, second, third


def _first_sentence(text: str) -> str:
    """Up to the first full stop followed by a space (a rule's fix starts with what to do first)."""
    m = re.search(r"(?<![.])[.](?=\s)", text)  # not an ellipsis's dots
    return text[: m.end()] if m else text
