"""The post-mortem as one self-contained HTML page (``--format html``), with an SVG timeline picture.

This module owns the HTML document and its timeline picture: one swimlane block per host (ranks
within), the root event marked (the element with ``id="root-event"``), collateral waves shaded, a
UTC time axis that says what clock-skew correction was applied. Large jobs stay legible because
lanes fold: first healthy and collateral ranks into one lane per host, then hosts with nothing
notable into one block (see ``_plan_lanes``).

The page loads nothing: CSS and SVG are inline, there is no script at all, no font or image from
anywhere, and a Content-Security-Policy forbids scripts and fetches in case anything slipped in.
Every piece of text from a ``Report`` goes through ``html.escape`` after its control characters
are made visible (``correlator.report.safe``: no raw C0/C1 control reaches the page, and a line
break in a file name cannot start a line of a ``<pre>``); log text is never evaluated.
It reads a ``Report`` and never recomputes analysis (positions on the time axis are the report's
already corrected times). Shared wording comes from ``correlator.report.markdown``.
"""

from __future__ import annotations

import html
import math
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

from correlator.model import AttemptVerdict, DiagCode, Group, Report, TimelineEvent, Verdict, field_names
from correlator.report import view as views
from correlator.report.markdown import (
    LIST_LIMIT,
    clip,
    clock_note,
    fmt_delta,
    fmt_time,
    group_part,
    job_facts,
    parse_iso,
    rank_ranges,
    root_facts,
    select_timeline,
    survived_notes,
    verdict_line,
    who,
)
from correlator.report.safe import visible, visible_lines

#: timeline table rows before the page says how many were left out (the picture shows all)
TIMELINE_LIMIT = 500
#: lanes the picture may hold before it folds ranks and then hosts
LANE_BUDGET = 96

_CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:; base-uri 'none'; form-action 'none'"

_CSS = """
:root { color-scheme: light; }
body { font-family: system-ui, -apple-system, "Segoe UI", Roboto, "DejaVu Sans", "Liberation Sans", sans-serif;
       margin: 0 auto; max-width: 1280px; padding: 16px 24px 48px; color: #1d232b; background: #fff; }
h1 { font-size: 22px; margin: 8px 0 4px; } h2 { font-size: 18px; margin: 28px 0 8px; border-bottom: 1px solid #dde3ea; }
h3 { font-size: 15px; margin: 18px 0 6px; }
code, pre, .mono { font-family: ui-monospace, "DejaVu Sans Mono", "Liberation Mono", Menlo, Consolas, monospace; font-size: 12.5px; }
pre { background: #f5f7fa; border: 1px solid #e3e8ee; padding: 6px 8px; white-space: pre-wrap; word-break: break-all; margin: 4px 0; }
.banner { padding: 10px 14px; border-radius: 6px; font-size: 16px; font-weight: 600; margin: 8px 0; }
.v-root_cause { background: #fdecec; border-left: 6px solid #c62828; }
.v-job_level { background: #f1ecfb; border-left: 6px solid #6a3fb5; }
.v-no_failure { background: #e9f6ec; border-left: 6px solid #2e7d32; }
.v-undetermined { background: #fff6e0; border-left: 6px solid #b7791f; }
.sub { color: #57606a; font-size: 13px; }
table.t { border-collapse: collapse; font-size: 13px; margin: 6px 0; }
table.t th, table.t td { border: 1px solid #e3e8ee; padding: 3px 7px; text-align: left; vertical-align: top; }
table.t th { background: #f5f7fa; }
table.t td.txt { font-family: ui-monospace, "DejaVu Sans Mono", monospace; font-size: 12px; word-break: break-all; max-width: 560px; }
tr.is-root td { background: #fdecec; font-weight: 600; }
ul.check { list-style: none; padding-left: 4px; } ul.check li::before { content: "\\2610  "; }
figure { margin: 8px 0; } figcaption { color: #57606a; font-size: 13px; margin-top: 4px; }
svg.tl { width: 100%; height: auto; border: 1px solid #e3e8ee; background: #fff; }
svg.tl text { font-family: system-ui, "DejaVu Sans", sans-serif; font-size: 11px; fill: #1d232b; }
svg.tl .host { font-weight: 700; font-size: 12px; }
svg.tl .lbl-root { fill: #c62828; font-weight: 700; }
svg.tl .lbl-fold { fill: #57606a; font-style: italic; }
svg.tl .axis { stroke: #8c959f; stroke-width: 1; } svg.tl .grid { stroke: #eef1f4; stroke-width: 1; }
svg.tl .tick { font-size: 10px; fill: #57606a; }
svg.tl .hostbg-0 { fill: #fafbfc; } svg.tl .hostbg-1 { fill: #f3f5f8; }
svg.tl .act { fill: #c9d1d9; } svg.tl .act-silent { fill: #b39ddb; } svg.tl .act-root { fill: #ef9a9a; }
svg.tl .wave-collateral { fill: #f5a623; fill-opacity: 0.14; } svg.tl .wave-teardown { fill: #4a78c2; fill-opacity: 0.10; }
svg.tl .wave-job { fill: #6a3fb5; fill-opacity: 0.12; } svg.tl .wave-independent { fill: #e8590c; fill-opacity: 0.12; }
svg.tl .wavelbl { font-size: 10.5px; fill: #6b4a00; }
svg.tl .band-teardown { fill: #4a78c2; fill-opacity: 0.35; } svg.tl .band-job { fill: #6a3fb5; fill-opacity: 0.35; }
svg.tl .gap line { stroke: #c62828; stroke-width: 1; stroke-dasharray: 2 2; } svg.tl .gap polygon { fill: #c62828; }
svg.tl .gaplbl { font-size: 10.5px; fill: #8e1c1c; paint-order: stroke; stroke: #fff; stroke-width: 3px; }
.impact { font-size: 14px; margin: 8px 0; } section.fix { background: #eef6ee; border: 1px solid #cfe3cf; border-radius: 6px; padding: 2px 14px 6px; margin: 10px 0; }
section.fix h2 { border: none; margin-top: 10px; } details.tl-table summary { cursor: pointer; }
details.tl-table summary h2 { display: inline-block; border: none; margin: 20px 8px 8px 0; }
pre.context { font-size: 12px; } .stamp { margin-top: 28px; border-top: 1px solid #dde3ea; padding-top: 8px; }
.m-root, .sw-root { fill: #c62828; background: #c62828; } .m-independent, .sw-independent { fill: #e8590c; background: #e8590c; }
.m-collateral, .sw-collateral { fill: #d99100; background: #d99100; } .m-teardown, .sw-teardown { fill: #4a78c2; background: #4a78c2; }
.m-job, .sw-job { fill: #6a3fb5; background: #6a3fb5; } .m-context, .sw-context { fill: #9aa5b1; background: #9aa5b1; }
svg.tl .rootline { stroke: #c62828; stroke-width: 1.5; stroke-dasharray: 5 3; }
svg.tl #root-event polygon { fill: #c62828; stroke: #fff; stroke-width: 1.5; }
.legend span.sw { display: inline-block; width: 10px; height: 10px; margin: 0 4px 0 12px; vertical-align: middle; }
.legend { font-size: 12.5px; color: #57606a; }
"""

_LANE_H = 14
_HOST_H = 16
_HOST_GAP = 4
_WIDTH = 1220
_GUTTER = 250
_RIGHT = 24
_AXIS_H = 46
_WAVE_ROWS = 6
_BUCKET_PX = 3
_LABELS = ("root", "independent", "collateral", "teardown", "job", "context")


def _e(text: object) -> str:
    return html.escape(visible(str(text)), quote=True)


def _e_lines(*lines: str) -> str:
    """Lines of this module's own (a tooltip's), each escaped, joined by real line breaks."""
    return "\n".join(_e(line) for line in lines)


_BACKTICKS = re.compile(r"`([^`]+)`")


def _prose(text: str) -> str:
    """Rule prose: escaped, with its `code spans` shown as code and blank lines as paragraphs."""
    paragraphs = [p.strip() for p in re.split(r"\n\s*\n", text.strip()) if p.strip()]
    return "".join(f"<p>{_inline_prose(p)}</p>" for p in paragraphs)


def _inline_prose(text: str) -> str:
    # a line break inside prose is HTML white space: kept, the other controls are shown
    return _BACKTICKS.sub(r"<code>\1</code>", html.escape(visible_lines(text.strip()), quote=True))


def _link(url: str) -> str:
    if re.fullmatch(r"https?://[^\s<>\"']+", url):
        return f'<a href="{_e(url)}" rel="noreferrer noopener">{_e(url)}</a>'
    return f"<code>{_e(url)}</code>"


def _table(header: Sequence[str], rows: Iterable[Sequence[str]], row_classes: Sequence[str] = ()) -> str:
    """Cells are already HTML (callers escape); header is plain text."""
    out = ['<table class="t"><thead><tr>', "".join(f"<th>{_e(h)}</th>" for h in header), "</tr></thead><tbody>"]
    for index, row in enumerate(rows):
        cls = row_classes[index] if index < len(row_classes) and row_classes[index] else ""
        out.append(f'<tr class="{cls}">' if cls else "<tr>")
        out.append("".join(row))
        out.append("</tr>")
    out.append("</tbody></table>")
    return "".join(out)


def _td(inner: str, cls: str = "") -> str:
    return f'<td class="{cls}">{inner}</td>' if cls else f"<td>{inner}</td>"


# --- the page ------------------------------------------------------------------------------------


def render(report: Report, *, timeline_limit: int = TIMELINE_LIMIT, lane_budget: int = LANE_BUDGET,
           command: str | None = None) -> str:
    """The whole page as one string; ``command`` is the command line that asked for it (stamped)."""
    v = views.build(report, command=command)
    job_id = report.job.id
    title = f"correlate post-mortem: job {job_id}" if job_id else "correlate post-mortem"
    svg, root_drawn, caption = timeline_svg(report, lane_budget=lane_budget, view=v)
    root = v.root
    data = f' data-verdict="{_e(report.verdict)}"'
    if root is not None:
        data += (f' data-rank="{_e("" if root.rank is None else root.rank)}" data-rule="{_e(root.rule)}"'
                 f' data-time="{_e(root.time or "")}"')
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f'<meta http-equiv="Content-Security-Policy" content="{_CSP}">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        '<meta name="referrer" content="no-referrer">',
        f"<title>{_e(title)}</title>",
        f"<style>{_CSS}</style></head><body>",
        f"<h1>{_e(title)}</h1>",
        f'<div class="banner v-{_e(report.verdict)}" id="verdict"{data}>{_e(v.headline)}</div>',
        f'<div class="sub">{verdict_line(v, _e, lambda t: f"<code>{_e(t)}</code>")}</div>',
        _impact(v),
        _action_box(v),
        "<h2>Timeline</h2>",
        f"<figure>{svg}<figcaption>{caption}</figcaption></figure>",
        _detail_figure(report, lane_budget, v),
        _legend(),
        _root_section(report, v, mark_root=not root_drawn),
        _job_section(report),
        _chain_section(report, v),
        _collateral_section(report, v),
        _timeline_table(report, v, timeline_limit),
        _ranks_section(report),
        _attempts_section(report),
        _diagnostics_section(report),
        f'<p class="sub stamp">Written by {_e(v.stamp.line())}. All times are UTC.</p>',
        "</body></html>",
    ]
    return visible_lines("\n".join(p for p in parts if p))  # every piece was made safe; this catches one that was not


def _impact(v: views.View) -> str:
    lines = v.impact_lines()
    if not lines:
        return ""
    return '<p class="impact"><b>Impact</b> · ' + " · ".join(_e(x) for x in lines) + "</p>"


def _action_box(v: views.View) -> str:
    """The fix and its checklist, above the fold: what a reader of a shared report does next."""
    root = v.root
    if root is None or not (root.fix or v.actions):
        return ""
    out = ['<section class="fix" id="fix"><h2>What to do</h2>']
    if root.fix:
        out.append(_prose(root.fix))
    if v.actions:
        out.append('<p class="sub">Action items:</p><ul class="check">'
                   + "".join(f"<li>{_inline_prose(c)}</li>" for c in v.actions) + "</ul>")
    out.append("</section>")
    return "".join(out)


def _detail_figure(report: Report, lane_budget: int, v: views.View) -> str:
    window = detail_window(report)
    if window is None:
        return ""
    svg, _, _ = timeline_svg(report, lane_budget=lane_budget, window=window, root_id=False, view=v)
    root_s = parse_iso(report.root_cause.time) if report.root_cause is not None else None
    span = (f"{fmt_delta(window[0] - root_s)} … {fmt_delta(window[1] - root_s)} after the root"
            if root_s is not None else f"{fmt_time(_iso_of(window[0]))} … {fmt_time(_iso_of(window[1]), date=False)} UTC")
    return (f'<figure class="detail">{svg}<figcaption>Detail: the waves that followed, {_e(span)} '
            f"(the whole picture above squeezes them into a few pixels).</figcaption></figure>")


def _iso_of(seconds: float) -> str:
    return views.iso_of(seconds)


def _legend() -> str:
    names = {"root": "root event", "independent": "independent failure", "collateral": "collateral",
             "teardown": "teardown", "job": "job-level", "context": "context"}
    swatches = "".join(f'<span class="sw sw-{k}"></span>{_e(v)}' for k, v in names.items())
    return (f'<p class="legend">{swatches}<span class="sw" style="background:#f5a623;opacity:.35"></span>'
            'collateral wave (first → last event of a group)'
            '<span class="sw" style="background:#4a78c2;opacity:.5"></span>teardown (bars above the lanes)'
            '<span class="sw" style="background:#c9d1d9"></span>rank output (first → last line)</p>')


def _root_section(report: Report, v: views.View, *, mark_root: bool) -> str:
    root = v.root
    out = ["<h2>Root cause</h2>"]
    if root is None:
        if report.verdict == Verdict.NO_FAILURE:
            survived = survived_notes(report)
            if survived:
                out.append("<p>No failure ended the job: the ranks went on from the failures they logged.</p><ul>"
                           + "".join(f"<li>{_e(x)}</li>" for x in survived) + "</ul>")
            else:
                out.append("<p>No rank logged a failure that the rules know, and no job-level end was seen.</p>")
        elif report.verdict == Verdict.JOB_LEVEL:
            out.append("<p>The job was ended from outside; no rank failed before that. See the chain below.</p>")
        else:
            out.append("<p>Failures were seen but the evidence does not single out a first rank; "
                       "see the timeline and the diagnostics.</p>")
            notes = report.verdict_notes(DiagCode.VERDICT_REASON)
            if notes:
                out.append("<ul>" + "".join(f"<li>{_inline_prose(x)}</li>" for x in notes) + "</ul>")
        return "".join(out)
    rows = root_facts(root, _e, lambda t: f"<code>{_e(t)}</code>")
    out.append(_table(("", ""), ((f"<th>{_e(k)}</th>", _td(v)) for k, v in rows)))
    out.append("<h3>Evidence</h3>")
    anchor = ' id="root-event"' if mark_root else ""
    if root.line is not None:
        out.append(f'<p class="sub">its own line</p><pre{anchor}><span class="sub">{_e(root.line.path)}:{root.line.line}'
                   f"</span>\n{_e(root.line.text)}</pre>")
        anchor = ""
    elif root.kind in (views.Kind.HANG, views.Kind.ODD_COLLECTIVE):
        out.append(f"<p{anchor}>{_e(root.who)} printed nothing about the hang: the verdict rests on what the other "
                   "ranks report and on what it did not do (see “Why this rank”).</p>")
        anchor = ""
    if root.peer_lines:
        out.append('<p class="sub">what the other ranks report</p>')
        for ev in root.peer_lines:
            out.append(f'<pre><span class="sub">{_e(ev.path)}:{ev.line}</span>\n{_e(ev.text)}</pre>')
    if root.line is None and not root.peer_lines and anchor:
        out.append(f"<p{anchor}>No log line carries this verdict on its own; see “Why this rank”.</p>")
    if root.context:
        # the root line's own stream around it (the traceback above it), as the Markdown shows it
        out.append('<h3>Around it (its traceback, as written)</h3><pre class="context">'
                   + "\n".join(_e(clip(x, 400)) for x in root.context) + "</pre>")
    if root.why:
        out.append("<h3>Why this rank</h3><ul>" + "".join(f"<li>{_inline_prose(w)}</li>" for w in root.why) + "</ul>")
    if root.mechanism:
        out.append("<h3>Mechanism</h3>" + _prose(root.mechanism))
    if root.prevention:
        out.append("<h3>Prevention</h3>" + _prose(root.prevention))
    if root.references:
        out.append("<h3>References</h3><ul>" + "".join(f"<li>{_link(r)}</li>" for r in root.references) + "</ul>")
    return "".join(out)


def _job_section(report: Report) -> str:
    out = ["<h2>Job</h2>",
           _table(("fact", "value"), ((_td(_e(k)), _td(_e(v))) for k, v in job_facts(report))),
           "<h3>Clock offsets</h3>", f"<p>{_e(clock_note(report))}</p>"]
    if report.clocks:
        rows = sorted(report.clocks, key=lambda c: -abs(c.offset_s))
        out.append(_table(("host", "offset", "residual", "anchors"),
                          ((_td(_e(c.host)), _td(f"{c.offset_s:+.3f} s"), _td(f"{c.residual_s * 1000:.1f} ms"),
                            _td(str(c.anchors))) for c in rows[:LIST_LIMIT])))
        if len(rows) > LIST_LIMIT:
            out.append(f'<p class="sub">… and {len(rows) - LIST_LIMIT} more hosts with smaller offsets.</p>')
    return "".join(out)


def _chain_section(report: Report, v: views.View) -> str:
    if not report.chain:
        return ""
    items = []
    for link in report.chain:
        ranks = f" ranks {_e(link.ranks)}" if link.ranks else ""
        count = f" ({link.count})" if link.count > 1 else ""
        text = v.link_summary(link)
        summary = f" — {_inline_prose(text)}" if text else ""
        items.append(f"<li><b>{_e(link.stage)}</b> <code>{_e(link.rule)}</code>{ranks}{count}{summary}</li>")
    return "<h2>Causal chain</h2><ol>" + "".join(items) + "</ol>"


def _collateral_section(report: Report, v: views.View) -> str:
    if not report.groups:
        return "<h2>Collateral</h2><p>No other rank's errors were attributed to the root.</p>"
    rows = []
    for g in report.groups:
        when = f"{fmt_delta(g.first_after_s)} … {fmt_delta(g.last_after_s)}" if g.first_after_s is not None else "-"
        rows.append((_td(f"<code>{_e(g.rule)}</code>" + (f" {_e(g.title)}" if g.title else "")),
                     _td(_e(group_part(g.label, g.role))), _td(_e(g.ranks or "-")), _td(str(g.count)), _td(_e(when)),
                     _td(_e(f"{fmt_time(g.first)} → {fmt_time(g.last, date=False)}"))))
    n = v.collateral_ranks
    lead = (f"Errors of {n} other rank{'s' if n != 1 else ''} follow from the root; with the root rank's own later "
            "lines and the teardown, grouped by rule and rank set:" if n else
            "No other rank's errors were attributed to the root; the lines the job ended with, grouped by rule:")
    return (f"<h2>Collateral</h2><p>{_e(lead)}</p>"
            + _table(("rule", "part", "ranks", "events", "after root", "first → last (UTC)"), rows))


def _timeline_table(report: Report, v: views.View, limit: int) -> str:
    if not report.timeline:
        return "<h2>Timeline table</h2><p>No rule matched any line.</p>"
    kept, left_out = select_timeline(report.timeline, limit)
    # folded: the picture is the overview; the table is for looking a line up
    out = [f'<details class="tl-table"><summary><h2>Timeline table</h2> '
           f'<span class="sub">{len(kept)} of {len(report.timeline)} events — click to open</span></summary>']
    if left_out:
        out.append(f'<p class="sub">{len(kept)} of {len(report.timeline)} events shown; {left_out} left out '
                   "(repeats of the waves above; the picture and the JSON or Parquet output have all of them).</p>")
    root_event = v.root.event if v.root is not None else None
    rows, classes = [], []
    for e in kept:
        when = fmt_time(e.time) if e.time else "-"
        if e.time and e.time_kind != "own":
            when += " ~"
        rows.append((_td(_e(when)), _td(_e(fmt_delta(e.after_root_s))), _td(_e(e.host or "-")),
                     _td("-" if e.rank is None else str(e.rank)), _td(f"<code>{_e(e.rule)}</code>"),
                     _td(_e(v.part(e))), _td(f"<code>{_e(e.path)}:{e.line}</code>"),
                     _td(_e(clip(e.text, 400)), "txt")))
        classes.append("is-root" if root_event is not None and e is root_event else "")
    out.append(_table(("time (UTC)", "after root", "host", "rank", "rule", "part", "where", "text"), rows, classes))
    if any(e.time and e.time_kind != "own" for e in kept):
        out.append('<p class="sub">~ the line had no timestamp of its own: its time comes from a neighbouring line.</p>')
    return "".join(out) + "</details>"


def _ranks_section(report: Report) -> str:
    if not report.ranks:
        return ""
    by_state: dict[str, list[int]] = {}
    for row in report.ranks:
        by_state.setdefault(str(row.state), []).append(row.rank)
    rows = [(_td(_e(s)), _td(str(len(r))), _td(_e(clip(rank_ranges(r), 200)))) for s, r in
            sorted(by_state.items(), key=lambda kv: -len(kv[1]))]
    out = ["<h2>Ranks</h2>", _table(("state", "ranks", "which"), rows)]
    silent = [r for r in report.ranks if str(r.state) == "silent"]
    if silent:
        items = "".join(f"<li>rank {r.rank} on {_e(r.host or '?')}: last line {_e(fmt_time(r.last_time))}"
                        + (f", last step {r.last_step}" if r.last_step is not None else "") + "</li>"
                        for r in silent[:LIST_LIMIT])
        more = f"<li>… and {len(silent) - LIST_LIMIT} more</li>" if len(silent) > LIST_LIMIT else ""
        out.append(f"<p>Silent ranks (no error, output stopped early — hang suspects):</p><ul>{items}{more}</ul>")
    return "".join(out)


def _attempts_section(report: Report) -> str:
    if not report.attempts:
        return ""
    items = "".join("<li>" + _e(", ".join(f"{k}: {getattr(a, k)}" for k in field_names(AttemptVerdict))) + "</li>"
                    for a in report.attempts)
    return f"<h2>Attempts (torchelastic restarts)</h2><ul>{items}</ul>"


def _diagnostics_section(report: Report) -> str:
    from correlator.report.markdown import (
        unread_notes,  # one wording for both documents
    )

    notes = unread_notes(report)
    if not report.diagnostics and not notes:
        return "<h2>What could not be read</h2><p>Everything given was read.</p>"
    items = [f"<li>{_e(n)}</li>" for n in notes]
    for d in report.diagnostics[:LIST_LIMIT]:
        where = f"<code>{_e(d.path)}</code>: " if d.path else ""
        items.append(f"<li><b>{_e(d.level)}</b> {where}{_e(d.message)}</li>")
    if len(report.diagnostics) > LIST_LIMIT:
        items.append(f"<li>… and {len(report.diagnostics) - LIST_LIMIT} more diagnostics (see the JSON output)</li>")
    return "<h2>What could not be read</h2><ul>" + "".join(items) + "</ul>"


# --- the timeline picture ------------------------------------------------------------------------


@dataclass
class _Lane:
    label: str
    #: "rank" (one rank), "fold" (several ranks folded), "agent" (lines with no rank)
    kind: str
    ranks: list[int] = field(default_factory=list)
    state: str = ""
    events: list[tuple[float, TimelineEvent]] = field(default_factory=list)
    active: tuple[float, float] | None = None
    title: str = ""


@dataclass
class _Block:
    host: str
    lanes: list[_Lane]
    note: str = ""


def _event_seconds(event: TimelineEvent, root_s: float | None) -> float | None:
    seconds = parse_iso(event.time)
    if seconds is None and event.after_root_s is not None and root_s is not None:
        seconds = root_s + event.after_root_s
    return seconds


def _plan_lanes(report: Report, budget: int, root_s: float | None
                ) -> tuple[list[_Block], int, int]:
    """Host blocks and their lanes: ``(blocks, untimed events, fold level)``.

    Level 0 gives every rank a lane. Level 1 keeps a lane for the root, ranks with an independent
    failure and a few silent ranks per host, and folds each host's other ranks into one lane per
    state (collateral, silent, healthy). Level 2 also folds every host with nothing notable into
    one "other hosts" block. The first level that fits ``budget`` lanes is used.
    """
    root = report.root_cause
    rank_host: dict[int, str | None] = {}
    rows = {r.rank: r for r in report.ranks}
    for r in report.ranks:
        rank_host[r.rank] = r.host
    host_order: dict[str, int] = {}
    unknown = "(host unknown)"

    def host_of(rank: int | None, host: str | None) -> str:
        return host or (rank_host.get(rank) if rank is not None else None) or unknown

    by_key: dict[tuple[str, int | None], list[tuple[float, TimelineEvent]]] = {}
    untimed = 0
    for event in report.timeline:
        seconds = _event_seconds(event, root_s)
        if seconds is None:
            untimed += 1
            continue
        by_key.setdefault((host_of(event.rank, event.host), event.rank), []).append((seconds, event))
    ranks_of_host: dict[str, set[int]] = {}
    for r in report.ranks:
        ranks_of_host.setdefault(host_of(r.rank, r.host), set()).add(r.rank)
    for host, rank in by_key:
        ranks_of_host.setdefault(host, set())
        if rank is not None:
            ranks_of_host[host].add(rank)
    if root is not None and root.rank is not None:
        ranks_of_host.setdefault(host_of(root.rank, root.host), set()).add(root.rank)
    for host, _ranks in sorted(ranks_of_host.items(), key=lambda kv: (kv[0] == unknown, min(kv[1], default=1 << 62), kv[0])):
        host_order[host] = len(host_order)

    notable: set[int] = set()
    if root is not None and root.rank is not None:
        notable.add(root.rank)
    for (_, rank), events in by_key.items():
        if rank is not None and any(e.label in ("root", "independent") for _, e in events):
            notable.add(rank)
    for r in report.ranks:
        if str(r.state) == "root":
            notable.add(r.rank)

    def state_of(rank: int) -> str:
        row = rows.get(rank)
        if row is not None:
            return str(row.state)
        events = by_key.get((host_of(rank, None), rank), [])
        return "collateral" if events else "unknown"

    def active(ranks: Iterable[int]) -> tuple[float, float] | None:
        los, his = [], []
        for rank in ranks:
            row = rows.get(rank)
            if row is None:
                continue
            lo, hi = parse_iso(row.first_time), parse_iso(row.last_time)
            if lo is not None:
                los.append(lo)
            if hi is not None:
                his.append(hi)
        if not los or not his:
            return None
        return min(los), max(his)

    def rank_lane(host: str, rank: int) -> _Lane:
        row = rows.get(rank)
        label = f"rank {rank}" + (f" · local {row.local_rank}" if row and row.local_rank is not None else "")
        state = state_of(rank)
        if rank in notable and root is not None and rank == root.rank:
            state = "root"
        title = f"{label} on {host}: {state}" + (f", {row.lines:,} lines" if row else "")
        if row and row.last_step is not None:
            title += f", last step {row.last_step}"
        return _Lane(label=f"{label} · {state}", kind="rank", ranks=[rank], state=state,
                     events=list(by_key.get((host, rank), [])), active=active([rank]), title=title)

    def fold_lane(host_label: str, ranks: list[int], state: str, keys: list[tuple[str, int]]) -> _Lane:
        events = [pair for key in keys for pair in by_key.get(key, [])]
        words = {"collateral": "with collateral errors", "silent": "silent (output stopped)",
                 "healthy": "healthy", "unknown": "state unknown", "root": "root"}
        label = f"{len(ranks)} ranks {words.get(state, state)}"
        title = f"{label} on {host_label}: ranks {rank_ranges(ranks)}"
        return _Lane(label=label, kind="fold", ranks=ranks, state=state, events=events,
                     active=active(ranks), title=title)

    def agent_lane(host_label: str, keys: list[tuple[str, None]]) -> _Lane | None:
        events = [pair for key in keys for pair in by_key.get(key, [])]
        if not events:
            return None
        return _Lane(label="agent / scheduler lines", kind="agent", events=events,
                     title=f"lines about no single rank on {host_label} (launcher agent, srun, slurmstepd)")

    hosts = sorted(host_order, key=host_order.__getitem__)

    def expand(host: str, level: int) -> _Block:
        ranks = sorted(ranks_of_host.get(host, ()))
        lanes: list[_Lane] = []
        if level == 0:
            lanes = [rank_lane(host, r) for r in ranks]
        else:
            own = [r for r in ranks if r in notable]
            silent = [r for r in ranks if r not in notable and state_of(r) == "silent"]
            if len(silent) <= 3:
                own += silent
            own_set = set(own)
            lanes = [rank_lane(host, r) for r in sorted(own_set)]
            folded: dict[str, list[int]] = {}
            for r in ranks:
                if r not in own_set:
                    state = state_of(r)
                    folded.setdefault("healthy" if state in ("healthy", "unknown") else state, []).append(r)
            for state in ("collateral", "silent", "healthy"):
                if folded.get(state):
                    lanes.append(fold_lane(host, folded[state], state, [(host, r) for r in folded[state]]))
            for state, members in folded.items():
                if state not in ("collateral", "silent", "healthy"):
                    lanes.append(fold_lane(host, members, state, [(host, r) for r in members]))
        agent = agent_lane(host, [(host, None)])
        if agent is not None:
            lanes.append(agent)
        note = f"{len(ranks)} ranks" if ranks else ""
        return _Block(host=host, lanes=lanes, note=note)

    def count(blocks: list[_Block]) -> int:
        return sum(len(b.lanes) for b in blocks) + len(blocks)  # host header rows count too

    for level in (0, 1):
        blocks = [expand(h, level) for h in hosts]
        if count(blocks) <= budget:
            return blocks, untimed, level
    # level 2: keep hosts with notable ranks (as many as fit), fold the others into one block
    keep: list[_Block] = []
    rest: list[str] = []
    for host in hosts:
        block = expand(host, 1)
        if any(r in notable for r in ranks_of_host.get(host, ())) and count(keep + [block]) <= budget - 5:
            keep.append(block)
        else:
            rest.append(host)
    if rest:
        label = f"{len(rest)} other hosts"
        folded: dict[str, list[int]] = {}
        keys: dict[str, list[tuple[str, int]]] = {}
        for host in rest:
            for rank in sorted(ranks_of_host.get(host, ())):
                state = state_of(rank)
                state = "healthy" if state in ("healthy", "unknown") else state
                folded.setdefault(state, []).append(rank)
                keys.setdefault(state, []).append((host, rank))
        lanes = [fold_lane(label, folded[s], s, keys[s]) for s in sorted(folded, key=lambda s: (s != "collateral", s))]
        agent = agent_lane(label, [(h, None) for h in rest])
        if agent is not None:
            lanes.append(agent)
        shown = ", ".join(rest[:6]) + (f", … (+{len(rest) - 6})" if len(rest) > 6 else "")
        keep.append(_Block(host=label, lanes=lanes, note=shown))
    keep.sort(key=lambda b: host_order.get(b.host, len(host_order)))
    return keep, untimed, 2


#: a gap between the root and its first collateral wider than this share of the plot is annotated
_GAP_SHARE = 0.12


def _gap_note(view: views.View, root_s: float, xr: float, cy: float, x_of: Callable[[float], float],
              inside: Callable[[float], bool], plot_w: float) -> str:
    """The wait between the root and the other ranks' first error, drawn along the root's lane as an
    arrow and said in words, with the first collateral group's title (for a watchdog timeout, the
    NCCL timeout the peers waited out)."""
    firsts = [(t, g) for g in view.collateral if (t := parse_iso(g.first)) is not None and t > root_s]
    if not firsts:
        return ""
    t, group = min(firsts, key=lambda p: p[0])
    x = x_of(t)
    if not inside(t) or x - xr < _GAP_SHARE * plot_w:
        return ""
    label = f"{fmt_delta(t - root_s)}: until the other ranks' first error ({group.title or group.rule})"
    return (f'<g class="gap"><line class="gapline" x1="{xr + 10:.1f}" y1="{cy:.1f}" x2="{x - 4:.1f}" y2="{cy:.1f}"/>'
            f'<polygon points="{x - 4:.1f},{cy - 4:.1f} {x:.1f},{cy:.1f} {x - 4:.1f},{cy + 4:.1f}"/>'
            f'<text class="gaplbl" x="{(xr + x) / 2:.1f}" y="{cy - 3:.1f}" text-anchor="middle">{_e(label)}</text></g>')


def _nice_step(span: float) -> float:
    for step in (0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 15, 30, 60, 120, 300,
                 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, *(86400 * d for d in (1, 2, 7, 14, 30, 61, 91, 182, 365))):
        if span / step <= 9:
            return step
    return 86400 * 365 * math.ceil(span / (86400 * 365 * 8))


def _tick_label(seconds: float, step: float, multi_day: bool) -> str:
    dt = datetime.fromtimestamp(seconds, tz=UTC)
    if step < 1:
        text = dt.strftime("%H:%M:%S") + f".{int(round(dt.microsecond / 1000)) % 1000:03d}"
    elif step < 60:
        text = dt.strftime("%H:%M:%S")
    else:
        text = dt.strftime("%H:%M")
    return dt.strftime("%m-%d ") + text if multi_day else text


def _short(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _find_root_event(report: Report, view: views.View | None = None) -> TimelineEvent | None:
    """The timeline event that is the root's own line (the view's), or None (a hang's culprit has none)."""
    v = view if view is not None else views.build(report)
    if v.root is None:
        return None
    if v.root.event is not None:
        return v.root.event
    if v.root.line is None:
        return None
    for event in report.timeline:
        if event.label == "root":
            return event
    root = report.root_cause
    if root is not None:
        for ev in root.evidence:
            for event in report.timeline:
                if event.path == ev.path and event.line == ev.line:
                    return event
    return None


def detail_window(report: Report) -> tuple[float, float] | None:
    """The span of the waves after the root, when it is too narrow to read in the whole picture.

    A watchdog timeout puts the collateral wave ~600 s after the root and only a second wide; the
    order inside that wave (who timed out first, when the launcher reacted) then needs its own axis.
    """
    root = _find_root_event(report)
    spans: list[float] = []
    core: list[float] = []  # the collateral wave(s): what the detail is for
    later: list[float] = []  # teardown and job-level reactions, shown when they come soon after
    for event in report.timeline:
        seconds = parse_iso(event.time)
        if seconds is None:
            continue
        spans.append(seconds)
        if event is root or event.label == "root":
            continue
        (core if event.label in ("collateral", "independent") else later).append(seconds)
    if report.root_cause is not None and (root_s := parse_iso(report.root_cause.time)) is not None:
        spans.append(root_s)
    if len(core) < 2:
        core, later = core + later, []
    if len(core) < 2 or not spans:
        return None
    whole = max(spans) - min(spans)
    lo, hi = min(core), max(core)
    if whole <= 0 or (hi - lo) > 0.15 * whole:
        return None
    reach = hi + max(hi - lo, 2.0)
    hi = max([hi] + [t for t in later if hi <= t <= reach])
    return lo, hi


def timeline_svg(report: Report, *, lane_budget: int = LANE_BUDGET, window: tuple[float, float] | None = None,
                 root_id: bool = True, view: views.View | None = None) -> tuple[str, bool, str]:
    """``(svg markup, whether the root event was drawn with its id, caption HTML)``.

    ``window`` limits the axis to that span (seconds since the epoch) for a detail picture;
    ``root_id`` puts ``id="root-event"`` on the root mark (only one picture of a page may).
    """
    root = report.root_cause
    view = view if view is not None else views.build(report)
    root_event = _find_root_event(report, view)
    root_s = parse_iso(root.time) if root is not None else None
    if root_s is None and root_event is not None:
        root_s = parse_iso(root_event.time)
    blocks, untimed, level = _plan_lanes(report, lane_budget, root_s)

    times = [s for b in blocks for lane in b.lanes for s, _ in lane.events]
    # a rank's output end belongs in view (a silent rank stops early); its start is clipped to the edge
    times += [lane.active[1] for b in blocks for lane in b.lanes if lane.active]
    if root_s is not None:
        times.append(root_s)
    caption_bits = [_e(clock_note(report))]
    if untimed:
        caption_bits.append(f"{untimed} events without any timestamp are not drawn (see the table).")
    if level:
        caption_bits.append("Lanes are folded to stay legible: "
                            + ("healthy and collateral ranks share one lane per host."
                               if level == 1 else "hosts with nothing notable share one block."))
    caption_bits.append("Hover a mark for its line.")
    caption = " ".join(caption_bits)
    if not times:
        return ('<p class="sub">No event carries a time: there is nothing to draw on a time axis.</p>',
                False, caption)
    t0, t1 = window if window is not None else (min(times), max(times))
    if t1 - t0 < 1e-3:
        t0, t1 = t0 - 1, t1 + 1
    pad = (t1 - t0) * 0.03
    t0, t1 = t0 - pad, t1 + pad
    plot_w = _WIDTH - _GUTTER - _RIGHT

    def x_of(seconds: float) -> float:
        return _GUTTER + (seconds - t0) / (t1 - t0) * plot_w

    def inside(seconds: float) -> bool:
        return t0 <= seconds <= t1

    def clamp(x: float) -> float:
        return min(max(x, float(_GUTTER)), float(_GUTTER + plot_w))

    def wave_span(group: Group) -> tuple[float, float] | None:
        lo = parse_iso(group.first) or parse_iso(group.last)
        hi = parse_iso(group.last) or lo
        if lo is None or hi is None or hi < t0 or lo > t1:
            return None
        return lo, hi

    waves = [g for g in report.groups if (g.label or g.role) in ("collateral", "teardown", "job", "independent")
             and wave_span(g) is not None]
    labelled = sorted(waves, key=lambda g: -g.count)[:_WAVE_ROWS]
    top = 8 + 14 * len(labelled) + (14 if len(waves) > len(labelled) else 0) + 6
    y = top
    body: list[str] = []
    lane_rows: list[tuple[_Lane, float]] = []
    for index, block in enumerate(blocks):
        height = _HOST_H + _LANE_H * len(block.lanes)
        host_label = _short(block.host, 30)
        # host names are bold 12 px (~7.5 px a character), notes 10 px (~5.5 px): keep them apart
        note_room = int((_GUTTER - 18 - 7.5 * len(host_label)) / 5.5)
        body.append(f'<g class="hostblock" data-host="{_e(block.host)}">'
                    f'<rect class="hostbg-{index % 2}" x="0" y="{y:.1f}" width="{_WIDTH}" height="{height}"/>'
                    f'<text class="host" x="6" y="{y + 12:.1f}">{_e(host_label)}'
                    f'<title>{_e(block.host)}{(" — " + _e(block.note)) if block.note else ""}</title></text>'
                    + (f'<text class="tick" x="{_GUTTER - 6}" y="{y + 12:.1f}" text-anchor="end">'
                       f'{_e(_short(block.note, note_room))}</text>' if block.note and note_room >= 8 else "")
                    + "</g>")
        y += _HOST_H
        for lane in block.lanes:
            lane_rows.append((lane, y))
            y += _LANE_H
        y += _HOST_GAP
    bottom = y
    height = bottom + _AXIS_H

    svg: list[str] = [f'<svg class="tl" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {_WIDTH} {height:.0f}" '
                      f'width="{_WIDTH}" height="{height:.0f}" role="img" aria-label="timeline of the job by host and rank">']
    svg.extend(body)

    # grid and axis
    step = _nice_step(t1 - t0)
    multi_day = datetime.fromtimestamp(t0, tz=UTC).date() != datetime.fromtimestamp(t1, tz=UTC).date()
    tick = math.ceil(t0 / step) * step
    axis = [f'<line class="axis" x1="{_GUTTER}" y1="{bottom:.1f}" x2="{_GUTTER + plot_w}" y2="{bottom:.1f}"/>']
    while tick <= t1:
        x = x_of(tick)
        svg.append(f'<line class="grid" x1="{x:.1f}" y1="{top - 4:.1f}" x2="{x:.1f}" y2="{bottom:.1f}"/>')
        axis.append(f'<line class="axis" x1="{x:.1f}" y1="{bottom:.1f}" x2="{x:.1f}" y2="{bottom + 4:.1f}"/>'
                    f'<text class="tick" x="{x:.1f}" y="{bottom + 15:.1f}" text-anchor="middle">'
                    f'{_e(_tick_label(tick, step, multi_day))}</text>')
        tick += step
    day = datetime.fromtimestamp(t0, tz=UTC).strftime("%Y-%m-%d")
    skew = (f"host clocks corrected ({len(report.clocks)} hosts, residual ≤ "
            f"{max(c.residual_s for c in report.clocks) * 1000:.0f} ms)" if report.clocks
            else "no clock correction (no anchors)")
    axis.append(f'<text class="tick" x="{_GUTTER}" y="{bottom + 32:.1f}">time, UTC {day} — {_e(skew)}</text>')

    # collateral waves: shaded over the lanes from a group's first to its last event; teardown and
    # job-level groups (every rank's SIGTERM, the scheduler's cancel) would cover the whole plot, so
    # they are bars in the label band above the lanes, on their label's row
    row_of = {id(g): row for row, g in enumerate(labelled)}
    for group in waves:
        lo, hi = wave_span(group) or (t0, t0)
        x0, x1 = clamp(x_of(lo)), clamp(x_of(hi))
        kind = group.label or group.role
        wave_title = (f'<title>{_e(kind)} wave: {_e(group.rule)} — {group.count} events on '
                      f'ranks {_e(group.ranks or "-")}, {_e(fmt_delta(group.first_after_s))} … '
                      f'{_e(fmt_delta(group.last_after_s))} after the root</title>')
        if kind in ("teardown", "job"):
            row = row_of.get(id(group))
            by, bh = (8 + 14 * row, 12.0) if row is not None else (top - 7, 3.0)
            svg.append(f'<rect class="band band-{_e(kind)}" x="{x0 - 1:.1f}" y="{by:.1f}" '
                       f'width="{max(x1 - x0, 3.0) + 2:.1f}" height="{bh:.1f}">{wave_title}</rect>')
            continue
        svg.append(f'<rect class="wave wave-{_e(kind)}" x="{x0 - 1:.1f}" y="{top - 4:.1f}" width="{max(x1 - x0, 3.0) + 2:.1f}" '
                   f'height="{bottom - top + 4:.1f}">{wave_title}</rect>')
    for row, group in enumerate(labelled):
        lo, _ = wave_span(group) or (t0, t0)
        x0 = clamp(x_of(lo))
        text = (f"{group.label or group.role}: {group.rule} · {group.count} event{'s' if group.count != 1 else ''}"
                + (f" · ranks {_short(group.ranks, 40)}" if group.ranks else "")
                + (f" · {fmt_delta(group.first_after_s)}" if group.first_after_s is not None else ""))
        anchor = "end" if x0 > _GUTTER + plot_w * 0.6 else "start"
        svg.append(f'<text class="wavelbl" x="{x0:.1f}" y="{8 + 14 * row + 10}" text-anchor="{anchor}">{_e(text)}</text>')
    if len(waves) > len(labelled):
        svg.append(f'<text class="wavelbl" x="{_GUTTER}" y="{8 + 14 * len(labelled) + 10}">'
                   f'+ {len(waves) - len(labelled)} more waves (see Collateral)</text>')

    # lanes: label, activity bar, event marks bucketed by pixel column
    root_lane_y: float | None = None
    for lane, ly in lane_rows:
        cls = "lbl-root" if lane.state == "root" else ("lbl-fold" if lane.kind != "rank" else "")
        svg.append(f'<text class="{cls}" x="16" y="{ly + 10.5:.1f}">{_e(_short(lane.label, 38))}'
                   f'<title>{_e(lane.title or lane.label)}</title></text>')
        if lane.active is not None:
            a0, a1 = clamp(x_of(lane.active[0])), clamp(x_of(lane.active[1]))
            act = "act-root" if lane.state == "root" else ("act-silent" if lane.state == "silent" else "act")
            if lane.active[1] >= t0 and lane.active[0] <= t1:
                svg.append(f'<rect class="{act}" x="{a0:.1f}" y="{ly + 6:.1f}" width="{max(a1 - a0, 1):.1f}" height="2"/>')
        if root is not None and root.rank is not None and lane.kind == "rank" and lane.ranks == [root.rank]:
            root_lane_y = ly
        buckets: dict[tuple[int, str], list[tuple[float, TimelineEvent]]] = {}
        for seconds, event in lane.events:
            if not inside(seconds):
                continue
            if root_event is not None and event is root_event:
                if root_lane_y is None:
                    root_lane_y = ly
                continue
            kind = event.label if event.label in _LABELS else (event.role if event.role in _LABELS else "context")
            buckets.setdefault((int(x_of(seconds) // _BUCKET_PX), kind), []).append((seconds, event))
        for (_, kind), members in sorted(buckets.items(), key=lambda kv: _LABELS.index(kv[0][1]), reverse=True):
            seconds, first = members[0]
            x = x_of(seconds)
            if len(members) == 1:
                tip = (f"{fmt_time(first.time)} UTC ({fmt_delta(first.after_root_s)}) · {who(first.rank, first.host)} · "
                       f"{first.rule} · {first.path}:{first.line}", clip(first.text, 300))
            else:
                ranks = sorted({e.rank for _, e in members if e.rank is not None})
                rules = sorted({e.rule for _, e in members})
                tip = (f"{len(members)} {kind} events from {fmt_time(first.time)} UTC · ranks {rank_ranges(ranks) or '-'} · "
                       f"{', '.join(rules[:4])}", f"first: {clip(first.text, 300)}")
            svg.append(f'<rect class="m-{kind}" x="{x - 1.5:.1f}" y="{ly + 2:.1f}" width="3" height="{_LANE_H - 4}">'
                       f'<title>{_e_lines(*tip)}</title></rect>')

    drawn = False
    if root is not None and root_s is not None and inside(root_s):
        if root_lane_y is None:
            for lane, ly in lane_rows:
                if root.rank is not None and root.rank in lane.ranks:
                    root_lane_y = ly
                    break
        xr = x_of(root_s)
        svg.append(f'<line class="rootline" x1="{xr:.1f}" y1="{top - 4:.1f}" x2="{xr:.1f}" y2="{bottom:.1f}"/>')
        if root_lane_y is not None:
            cy = root_lane_y + _LANE_H / 2
            text = root_event.text if root_event is not None else (root.evidence[0].text if root.evidence else root.title)
            where = (f"{root_event.path}:{root_event.line}" if root_event is not None
                     else (f"{root.evidence[0].path}:{root.evidence[0].line}" if root.evidence else ""))
            if view.root is not None and view.root.line is None:  # a hang's culprit: no line of its own
                text, where = view.headline, ""
            root_tip = (f"ROOT CAUSE {fmt_time(root.time)} UTC ({view.root.time_means if view.root else ''}) · "
                        f"{who(root.rank, root.host, root.local_rank)} · {root.rule}" + (f" · {where}" if where else ""),
                        clip(text, 300))
            ident = ' id="root-event"' if root_id else ""
            svg.append(f'<g{ident} class="root-event" data-rank="{_e(root.rank)}" data-rule="{_e(root.rule)}">'
                       f'<title>{_e_lines(*root_tip)}</title>'
                       f'<polygon points="{xr:.1f},{cy - 7:.1f} {xr + 7:.1f},{cy:.1f} {xr:.1f},{cy + 7:.1f} {xr - 7:.1f},{cy:.1f}"/>'
                       f'<text class="lbl-root" x="{xr + 9:.1f}" y="{cy + 4:.1f}">root</text></g>')
            drawn = root_id
            svg.append(_gap_note(view, root_s, xr, cy, x_of, inside, plot_w))
    svg.extend(axis)
    svg.append("</svg>")
    return "".join(svg), drawn, caption
