"""The post-mortem document (``--format markdown``), and the presentation helpers other renderers share.

This module owns how a ``Report`` reads as a post-mortem: the headline verdict, the job facts, the
root cause with its evidence lines, the fix and the checklist to confirm it, the causal chain, the
collateral groups, a capped timeline table and what could not be read. It also owns the small
view helpers that the HTML renderer reuses so both documents say the same thing (job facts,
timeline capping, time and delay formatting, rank ranges).

It reads a ``Report`` and never recomputes analysis: no ordering, attribution or clock work
happens here. Log text is already secret-masked upstream; here it is only quoted safely: control
characters are shown as escapes (``correlator.report.safe``), log lines go into code spans or a
fence longer than any run of tildes they hold (where Markdown and HTML are inert), plain text is
escaped, prose (which quotes host names, paths and titles from the logs) can open neither raw HTML
nor a link or image, and table cells escape ``|`` so a log line cannot break the table.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence

from correlator.model import (
    AttemptVerdict,
    DiagCode,
    LauncherTableRow,
    Report,
    TimelineEvent,
    Verdict,
    expand_ranks,
    field_names,
)
from correlator.report import view as views
from correlator.report.safe import visible, visible_lines
from correlator.report.view import fmt_duration, fmt_time, parse_dt, parse_iso, rank_ranges, time_span, who

__all__ = ["fmt_duration", "fmt_time", "parse_dt", "parse_iso", "rank_ranges", "who"]  # shared with html, trace

#: timeline rows a Markdown post-mortem shows before it says how many were left out
TIMELINE_LIMIT = 200
#: log text longer than this is cut in tables (the full line is in the source at ``path:line``)
TEXT_LIMIT = 240
#: list items (hosts, clock rows, diagnostics) shown before "... and N more"
LIST_LIMIT = 40




# --- shared view helpers (also used by html.py) --------------------------------------------------


def root_facts(root: views.RootView, esc: Callable[[str], str], code: Callable[[str], str]) -> list[tuple[str, str]]:
    """The root cause's fact rows, one wording for the Markdown and HTML documents; ``esc`` and
    ``code`` make text safe (and code-styled) for the document being written."""
    rows = [("where", esc(root.where)),
            ("what", esc(root.what) + f" ({code(root.rule)})"),
            ("category / severity", f"{esc(root.category)} / {esc(root.severity)}"),
            ("when", esc(f"{fmt_time(root.time)} UTC ({root.time_means})") if root.time else "no timestamp"),
            ("confidence", f"{root.confidence:.2f}"),
            ("decided by", esc(root.decided_text))]
    if root.tie:
        rows.append(("tied with", esc(f"ranks {rank_ranges(root.tie)} (could not be ordered before it)")))
    if root.attempt is not None:
        rows.append(("attempt", esc(str(root.attempt))))
    return rows


def survived_notes(report: Report) -> list[str]:
    """The failures the ranks went on from, as the attribution said them (also used by terminal.py)."""
    return report.verdict_notes(DiagCode.VERDICT_SURVIVED)


def unread_notes(report: Report) -> list[str]:
    """What the stats say was not read, in the words both post-mortem documents use."""
    stats = report.stats
    notes = []
    if stats.sources_unreadable:
        notes.append(f"{stats.sources_unreadable} sources could not be read at all")
    if stats.bytes_skipped:
        notes.append(f"{stats.bytes_skipped:,} bytes were skipped")
    if stats.lines_capped:
        notes.append(f"{stats.lines_capped:,} over-long lines were cut (still scanned in full)")
    return notes


def fmt_delta(seconds: float | None) -> str:
    """A delay after the root: ``+600.2 s``, ``+35 ms``, ``-1.20 s``, ``0 s``."""
    if seconds is None:
        return "-"
    if seconds == 0:
        return "0 s"
    sign = "+" if seconds > 0 else "-"
    mag = abs(seconds)
    if mag < 1:
        return f"{sign}{mag * 1000:.0f} ms"
    if mag < 100:
        return f"{sign}{mag:.2f} s"
    if mag < 3600:
        return f"{sign}{mag:.1f} s"
    hours, rest = divmod(int(round(mag)), 3600)
    return f"{sign}{mag:.0f} s ({hours} h {rest // 60:02d} min)"


def headline(report: Report) -> str:
    """One line a person reads first (the view's); plain text (callers escape it for their format)."""
    return views.build(report).headline


def clip(text: str, limit: int = TEXT_LIMIT) -> str:
    """One line of log text for a table, a tooltip or a fence: line breaks marked, controls shown, capped."""
    text = visible(text.replace("\r", " ").replace("\n", " ⏎ "))
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _seq_text(value: object) -> str:
    if isinstance(value, dict):
        return ", ".join(f"{k}={v}" for k, v in value.items() if v is not None)
    if isinstance(value, (list, tuple)) and value and all(isinstance(v, dict) for v in value):
        rows = [_seq_text(v) for v in value]
        more = len(rows) - LIST_LIMIT
        return "; ".join(rows[:LIST_LIMIT]) + (f"; … and {more} more" if more > 0 else "")
    if isinstance(value, (list, tuple, set, frozenset)):
        items = [str(v) for v in value]
        more = len(items) - LIST_LIMIT
        shown = ", ".join(items[:LIST_LIMIT])
        return f"{len(items)}: {shown}" + (f", … and {more} more" if more > 0 else "")
    return str(value)


def job_hosts(report: Report) -> list[str]:
    if report.job.hosts:
        return list(report.job.hosts)
    seen: dict[str, None] = {}
    for row in report.ranks:
        if row.host:
            seen.setdefault(row.host)
    for event in report.timeline:
        if event.host:
            seen.setdefault(event.host)
    return list(seen)


def job_counts(report: Report) -> tuple[int | None, int | None]:
    """(ranks, hosts) of the job as the report states them."""
    n_ranks = report.job.ranks if report.job.ranks is not None else (len(report.ranks) or None)
    return n_ranks, len(job_hosts(report)) or None


def zone_note(report: Report) -> str:
    """Which zone stamps without one were read in, and whether any needed it (plain text)."""
    zone = report.job.time_zone
    if report.job.time_zone_used:
        return f"stamps without a zone read in {zone} (--tz to choose another zone)"
    return f"{zone} (not needed: every stamp carried its zone)"


def job_facts(report: Report) -> list[tuple[str, str]]:
    """(label, value) pairs, plain text: the job's id, size, time span and whatever else it states."""
    facts: list[tuple[str, str]] = []
    job = report.job
    if job.id:
        facts.append(("job id", job.id))
    n_ranks, n_hosts = job_counts(report)
    facts.append(("ranks", str(n_ranks) if n_ranks is not None else "unknown"))
    hosts = job_hosts(report)
    if hosts:
        facts.append(("hosts", _seq_text(hosts)))
    elif n_hosts is not None:
        facts.append(("hosts", str(n_hosts)))
    first, last = time_span(report)
    if first or last:
        span = f"{fmt_time(first)} → {fmt_time(last)} UTC"
        lo, hi = parse_iso(first), parse_iso(last)
        if lo is not None and hi is not None:
            span += f" ({fmt_duration(hi - lo)})"
        facts.append(("time span", span))
    if job.procs_per_node is not None:
        facts.append(("ranks per node", str(job.procs_per_node)))
    if job.attempts:
        facts.append(("attempts", _seq_text(job.attempts)))
    if job.launcher_root_cause_tables:
        facts.append(("torchrun's own root-cause tables",
                      _seq_text([{k: getattr(t, k) for k in field_names(LauncherTableRow)}
                                 for t in job.launcher_root_cause_tables])))
    facts.append(("time zone", zone_note(report)))
    stats = report.stats
    facts.append(("input read", f"{stats.sources} sources, {stats.lines:,} lines, {stats.bytes:,} bytes "
                                f"in {stats.seconds:.2f} s ({stats.engine})"))
    return facts


def clock_note(report: Report) -> str:
    """What was done to host clocks, in one sentence (plain text)."""
    if not report.clocks:
        return "No clock correction was applied (no synchronisation anchors): times are as each host logged them."
    worst = max(report.clocks, key=lambda c: abs(c.offset_s))
    residual = max(c.residual_s for c in report.clocks)
    return (f"Times are UTC after clock-skew correction of {len(report.clocks)} hosts "
            f"(largest offset {worst.offset_s:+.3f} s on {worst.host}, residual skew ≤ {residual * 1000:.0f} ms).")


def select_timeline(events: Sequence[TimelineEvent], limit: int) -> tuple[list[TimelineEvent], int]:
    """Cap a long timeline for reading: ``(kept events in their order, how many were left out)``.

    Keeps, in this order until ``limit``: the root, independent and job-level events; the first
    three and the last event of each (rule, label) wave; then the rest in timeline order. The
    order of the kept events is the report's order; nothing is re-sorted.
    """
    if len(events) <= limit:
        return list(events), 0
    tiers: list[list[int]] = [[], [], []]
    seen: dict[tuple[str, str], list[int]] = {}
    for index, event in enumerate(events):
        if event.label in ("root", "independent", "job") or event.role in ("primary", "job"):
            tiers[0].append(index)
        else:
            seen.setdefault((event.rule, event.label or event.role), []).append(index)
    placed = set(tiers[0])
    for indices in seen.values():
        for index in indices[:3] + indices[-1:]:
            if index not in placed:
                tiers[1].append(index)
                placed.add(index)
    tiers[2] = [i for i in range(len(events)) if i not in placed]
    chosen: list[int] = []
    for tier in tiers:
        room = limit - len(chosen)
        if room <= 0:
            break
        chosen.extend(tier[:room])
    chosen.sort()
    return [events[i] for i in chosen], len(events) - len(chosen)


# --- Markdown quoting ----------------------------------------------------------------------------

_MD_PUNCT = re.compile(r"([\\`*_\[\]<>~&])")
#: a code span as CommonMark reads one: a backtick run not escaped and not part of a longer run,
#: closed by a run of exactly its length (a looser match would leave live text unescaped)
_CODE_SPAN = re.compile(r"(?<![`\\])(`+)(?!`)(.+?)(?<!`)\1(?!`)", re.S)
#: what can open raw HTML in CommonMark (a tag, a closing tag, a comment, a declaration);
#: ``<=`` or ``< 5`` cannot, and stay readable
_TAG_START = re.compile(r"<(?=[A-Za-z/!?])")
#: the ``]`` that would close a link's or image's text (``[t](url)``, ``[t][ref]``) and the one of
#: a link reference definition at a line's start (``[ref]: url``); written as a character
#: reference, which CommonMark shows as ``]`` and never reads as structure
_LINK_CLOSE = re.compile(r"\](?=[(\[])|(?m:^([ \t]*\[[^\]\n]*)\](?=:))")


def md_code(text: str) -> str:
    """Inline code span that holds any text (backticks, HTML, pipes) literally."""
    text = visible(text.replace("\r", " ").replace("\n", " ⏎ "))
    if not text:
        return "` `"
    longest = max((len(m) for m in re.findall(r"`+", text)), default=0)
    fence = "`" * (longest + 1)
    pad = " " if text.startswith("`") or text.endswith("`") or longest else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def md_escape(text: str) -> str:
    """Plain text (a host name, a title) with every Markdown/HTML-active character escaped."""
    return _MD_PUNCT.sub(r"\\\1", visible(text.replace("\r", " ").replace("\n", " ")))


def md_cell(text: str) -> str:
    """Table cell content: a ``|`` would end the cell even inside a code span (GFM)."""
    return text.replace("|", "\\|")


def _inert(text: str) -> str:
    """Prose outside code spans: no raw HTML, autolink, link, image or link definition can open."""
    return _LINK_CLOSE.sub(lambda m: (m.group(1) or "") + "&#93;", _TAG_START.sub("&lt;", text))


def md_prose(text: str, *, inline: bool = False) -> str:
    """Rule prose keeps its Markdown (code spans, emphasis) but cannot open raw HTML, autolinks,
    links or images; the attribution's sentences (``why``) quote host names, paths and titles from
    the logs, so the same holds for them. ``inline`` text (a list item) is kept on one line: a line
    break in it could start a heading or a new list below the item."""
    text = visible(text.replace("\r", " ").replace("\n", " ")) if inline else visible_lines(text.replace("\r", " "))
    out: list[str] = []
    pos = 0
    for m in _CODE_SPAN.finditer(text):
        out.append(_inert(text[pos:m.start()]))
        out.append(m.group(0))
        pos = m.end()
    out.append(_inert(text[pos:]))
    return "".join(out).strip()


def fence_for(lines: Iterable[str], char: str = "~") -> str:
    """A code fence longer than any run of ``char`` in ``lines`` (at least three), so no line closes it."""
    longest = max((len(m) for line in lines for m in re.findall(re.escape(char) + "+", line)), default=0)
    return char * max(3, longest + 1)


def _md_link(url: str) -> str:
    if re.fullmatch(r"https?://[^\s<>]+", url):
        return f"<{url}>"
    return md_code(url)


def _table(header: Sequence[str], rows: Iterable[Sequence[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(md_cell(c) for c in row) + " |" for row in rows]
    return lines


def _one_date(report: Report) -> bool:
    dates = {e.time[:10] for e in report.timeline if e.time}
    return len(dates) <= 1


# --- the document --------------------------------------------------------------------------------


def render(report: Report, *, timeline_limit: int = TIMELINE_LIMIT, command: str | None = None) -> str:
    """The post-mortem as GitHub-flavoured Markdown; ``command`` is the command line that asked for it."""
    v = views.build(report, command=command)
    out: list[str] = []
    job_id = report.job.id
    title = f"Post-mortem: job {job_id}" if job_id else "Post-mortem"
    out += [f"# {md_escape(title)}", "", f"**{md_escape(v.headline)}**", ""]
    out += [verdict_line(v, md_escape, md_code), ""]
    out += _impact_section(v)
    out += _action_section(v)
    out += _root_section(report, v)
    out += _mermaid_section(report, v)
    out += _job_section(report)
    out += _chain_section(report, v)
    out += _collateral_section(report, v)
    out += _timeline_section(report, v, timeline_limit)
    out += _ranks_section(report)
    out += _attempts_section(report)
    out += _diagnostics_section(report)
    out += ["---", f"_Written by {md_escape(v.stamp.line())}; all times UTC._", ""]
    return visible_lines("\n".join(out))  # every piece was made safe; this catches one that was not


def verdict_line(v: views.View, esc: Callable[[str], str], code: Callable[[str], str]) -> str:
    """``verdict: root cause found · rank 11 · rule `x` · at ... UTC (...) · confidence 0.83``: one
    wording for the Markdown and HTML documents (``esc`` and ``code`` make it safe for each)."""
    bits = [esc(f"verdict: {v.words}")]
    root = v.root
    if root is not None:
        if root.rank is not None:
            bits.append(esc(f"rank {root.rank}"))
        bits.append(f"rule {code(root.rule)}")
        bits.append(esc(v.time_line()))
    return " · ".join(bits)


def _impact_section(v: views.View) -> list[str]:
    lines = v.impact_lines()
    if not lines:
        return []
    return ["## Impact", ""] + [f"- {md_escape(x)}" for x in lines] + [""]


def _action_section(v: views.View) -> list[str]:
    root = v.root
    if root is None or not (root.fix or v.actions):
        return []
    out = ["## What to do", ""]
    if root.fix:
        out += [md_prose(root.fix), ""]
    if v.actions:
        out += ["Action items:", ""] + [f"- [ ] {md_prose(c, inline=True)}" for c in v.actions] + [""]
    return out


def _job_section(report: Report) -> list[str]:
    out = ["## Job", ""]
    out += _table(("fact", "value"), ((label, md_escape(value)) for label, value in job_facts(report)))
    out += ["", "### Clock offsets", "", md_escape(clock_note(report)), ""]
    if report.clocks:
        rows = sorted(report.clocks, key=lambda c: -abs(c.offset_s))
        out += _table(("host", "offset", "residual", "anchors"),
                      ((md_escape(c.host), f"{c.offset_s:+.3f} s", f"{c.residual_s * 1000:.1f} ms",
                        str(c.anchors)) for c in rows[:LIST_LIMIT]))
        if len(rows) > LIST_LIMIT:
            out += ["", f"_… and {len(rows) - LIST_LIMIT} more hosts with smaller offsets._"]
        out.append("")
    return out


def _root_section(report: Report, v: views.View) -> list[str]:
    root = v.root
    out = ["## Root cause", ""]
    if root is None:
        if report.verdict == Verdict.NO_FAILURE:
            survived = survived_notes(report)
            if survived:
                out += ["No failure ended the job: the ranks went on from the failures they logged.", ""]
                out += [f"- {md_escape(x)}" for x in survived] + [""]
            else:
                out += ["No rank logged a failure that the rules know, and no job-level end was seen.", ""]
        elif report.verdict == Verdict.JOB_LEVEL:
            out += [f"The job was ended from outside ({md_escape(views.job_end_title(report) or 'job-level event')}); "
                    "no rank failed before that.", ""]
        else:
            out += ["Failures were seen but the evidence does not single out a first rank; "
                    "see the timeline and the diagnostics below.", ""]
            out += [f"- {md_prose(x, inline=True)}" for x in report.verdict_notes(DiagCode.VERDICT_REASON)] + [""]
        return out
    out += _table(("", ""), root_facts(root, md_escape, md_code)) + [""]
    out += ["### Evidence", ""]
    if root.line is not None:
        out.append(f"- its own line: {md_code(f'{root.line.path}:{root.line.line}')} {md_code(clip(root.line.text))}")
    elif root.kind in (views.Kind.HANG, views.Kind.ODD_COLLECTIVE):
        out.append(f"- {md_escape(root.who)} printed nothing about the hang: the verdict rests on what the other "
                   "ranks report and on what it did not do (see “Why this rank”).")
    for ev in root.peer_lines:
        out.append(f"- what the other ranks report: {md_code(f'{ev.path}:{ev.line}')} {md_code(clip(ev.text))}")
    if root.line is None and not root.peer_lines:
        out.append("_No log line carries this verdict on its own; see “Why this rank”._")
    out.append("")
    if root.context:
        # the lines around the root line in its own stream (the traceback above it), as written
        shown = [clip(x) for x in root.context]
        fence = fence_for(shown)
        out += ["Around it (its traceback, as written):", "", fence + "text"]
        out += shown
        out += [fence, ""]
    if root.why:
        out += ["### Why this rank", ""] + [f"- {md_prose(w, inline=True)}" for w in root.why] + [""]
    if root.mechanism:
        out += ["### Mechanism", "", md_prose(root.mechanism), ""]
    if root.prevention:
        out += ["### Prevention", "", md_prose(root.prevention), ""]
    if root.references:
        out += ["### References", ""] + [f"- {_md_link(r)}" for r in root.references] + [""]
    return out


#: characters a Mermaid label may hold as they are; any other is replaced (``mermaid_text``)
_MERMAID_SAFE = re.compile(r"[^A-Za-z0-9 ._,+/()=\-]")
#: events a Mermaid timeline shows (the root, the largest waves, the ends)
MERMAID_EVENTS = 10


def mermaid_text(text: str, limit: int = 80) -> str:
    """Text for a Mermaid label: Mermaid has no escape that every diagram type honours, and ``:``,
    ``#``, ``;``, quotes, brackets and HTML act as syntax there, so every character outside a small
    safe set (letters, digits, space, ``._,+/()=-``) becomes ``_``, and the result is capped."""
    text = _MERMAID_SAFE.sub("_", visible(" ".join(text.split())))
    return text if len(text) <= limit else text[: limit - 1] + "_"


def mermaid_timeline(report: Report, v: views.View) -> list[str]:
    """The job as a Mermaid ``timeline`` diagram (GitHub renders it): its first line, the root, the
    collateral waves and teardown by their delay after the root, the last line. [] when nothing has
    a time."""
    root = v.root
    root_s = parse_iso(root.time) if root is not None else None
    points: list[tuple[float, str, str]] = []  # (seconds, period, event)

    def when(seconds: float) -> str:
        if root_s is None:
            return fmt_time(views.iso_of(seconds), date=False).replace(":", "h", 1).replace(":", "m", 1)
        return fmt_delta(seconds - root_s)

    start, end = parse_iso(v.impact.start), parse_iso(v.impact.end)
    if start is not None:
        points.append((start, when(start), "first line of the job"))
    if root is not None and root_s is not None:
        points.append((root_s, when(root_s), f"ROOT {root.who} {root.rule}"))
    groups = sorted(v.collateral + v.teardown, key=lambda g: -g.count)[:MERMAID_EVENTS - 3]
    for g in groups:
        at = parse_iso(g.first)
        if at is None:
            continue
        n = len(expand_ranks(g.ranks)) if g.ranks else 0
        subject = f"{n} rank{'s' if n != 1 else ''}" if n else f"{g.count} line{'s' if g.count != 1 else ''}"
        points.append((at, when(at), f"{g.label or g.role} {subject} {g.rule}"))
    if end is not None:
        points.append((end, when(end), "last line of the job"))
    if len(points) < 2:
        return []
    points.sort(key=lambda p: p[0])
    title = ("after the root, UTC " + fmt_time(root.time).replace(":", "h", 1).replace(":", "m", 1)
             if root is not None and root_s is not None else "UTC")
    lines = ["```mermaid", "timeline", f"    title {mermaid_text(title)}"]
    last_period = None
    for _, period, event in points:
        label = mermaid_text(event)
        if period == last_period:
            lines.append(f"        : {label}")
        else:
            lines.append(f"    {mermaid_text(period, 24)} : {label}")
            last_period = period
    return lines + ["```"]


def _mermaid_section(report: Report, v: views.View) -> list[str]:
    diagram = mermaid_timeline(report, v)
    if not diagram:
        return []
    return ["## Timeline", ""] + diagram + [""]


def _chain_section(report: Report, v: views.View) -> list[str]:
    if not report.chain:
        return []
    out = ["## Causal chain", ""]
    for number, link in enumerate(report.chain, start=1):
        ranks = f" ranks {md_escape(link.ranks)}" if link.ranks else ""
        count = f" ({link.count})" if link.count > 1 else ""
        text = v.link_summary(link)
        summary = f" — {md_prose(text, inline=True)}" if text else ""
        out.append(f"{number}. **{md_escape(link.stage)}** {md_code(link.rule)}{ranks}{count}{summary}")
    return out + [""]


def group_part(group_label: str, role: str) -> str:
    """A group's part in words (the root rank's own later lines are the root's, not collateral)."""
    return "root (its own later lines)" if group_label == "root" else (group_label or role)


def _collateral_section(report: Report, v: views.View) -> list[str]:
    out = ["## Collateral", ""]
    if not report.groups:
        return out + ["_No other rank's errors were attributed to the root._", ""]
    n = v.collateral_ranks
    out += [f"Errors of {n} other rank{'s' if n != 1 else ''} follow from the root; with the root rank's own "
            "later lines and the teardown, grouped by rule and rank set:" if n else
            "No other rank's errors were attributed to the root; the lines the job ended with, grouped by rule:", ""]
    rows = []
    for g in report.groups:
        when = f"{fmt_delta(g.first_after_s)} … {fmt_delta(g.last_after_s)}" \
            if g.first_after_s is not None else "-"
        rows.append((md_code(g.rule) + (f" {md_escape(g.title)}" if g.title else ""),
                     md_escape(group_part(g.label, g.role)), md_escape(g.ranks or "-"), str(g.count),
                     when, f"{fmt_time(g.first)} → {fmt_time(g.last, date=False)}"))
    out += _table(("rule", "part", "ranks", "events", "after root", "first → last (UTC)"), rows)
    return out + [""]


def _timeline_section(report: Report, v: views.View, limit: int) -> list[str]:
    if not report.timeline:
        return ["## Timeline table", "", "_No rule matched any line._", ""]
    kept, left_out = select_timeline(report.timeline, limit)
    # folded: GitHub shows a <details> block closed, and renders the Markdown inside it after a blank line
    out = ["<details>", f"<summary>Timeline table ({len(kept)} of {len(report.timeline)} events)</summary>", ""]
    one_date = _one_date(report)
    if one_date:
        first = next((e.time for e in report.timeline if e.time), None)
        if first:
            out += [f"Times are UTC on {first[:10]}.", ""]
    if left_out:
        out += [f"_{len(kept)} of {len(report.timeline)} events shown; {left_out} left out "
                "(repeats of the waves above; the JSON or Parquet output has all of them)._", ""]
    root_event = v.root.event if v.root is not None else None
    rows = []
    for e in kept:
        marker = "**ROOT** " if root_event is not None and e is root_event else ""
        when = fmt_time(e.time, date=not one_date) if e.time else "-"
        if e.time and e.time_kind != "own":
            when += " ~"
        rows.append((when, fmt_delta(e.after_root_s), md_escape(e.host or "-"),
                     "-" if e.rank is None else str(e.rank), marker + md_code(e.rule),
                     md_escape(v.part(e)), md_code(f"{e.path}:{e.line}"), md_code(clip(e.text))))
    out += _table(("time", "after root", "host", "rank", "rule", "part", "where", "text"), rows)
    if any(e.time and e.time_kind != "own" for e in kept):
        out += ["", "_~ the line had no timestamp of its own: its time is taken from a neighbouring line._"]
    return out + ["", "</details>", ""]


def _ranks_section(report: Report) -> list[str]:
    if not report.ranks:
        return []
    by_state: dict[str, list[int]] = {}
    for row in report.ranks:
        by_state.setdefault(str(row.state), []).append(row.rank)
    out = ["## Ranks", ""]
    rows = [(md_escape(state), str(len(ranks)), md_escape(clip(rank_ranges(ranks), 160)))
            for state, ranks in sorted(by_state.items(), key=lambda kv: -len(kv[1]))]
    out += _table(("state", "ranks", "which"), rows)
    silent = [r for r in report.ranks if str(r.state) == "silent"]
    if silent:
        out += ["", "Silent ranks (no error, output stopped early — hang suspects):", ""]
        for r in silent[:LIST_LIMIT]:
            step = f", last step {r.last_step}" if r.last_step is not None else ""
            out.append(f"- rank {r.rank} on {md_escape(r.host or '?')}: last line {fmt_time(r.last_time)}{step}")
        if len(silent) > LIST_LIMIT:
            out.append(f"- … and {len(silent) - LIST_LIMIT} more")
    return out + [""]


def _attempts_section(report: Report) -> list[str]:
    if not report.attempts:
        return []
    out = ["## Attempts (torchelastic restarts)", ""]
    for attempt in report.attempts:
        out.append("- " + md_escape(", ".join(f"{k}: {_seq_text(getattr(attempt, k))}"
                                              for k in field_names(AttemptVerdict))))
    return out + [""]


def _diagnostics_section(report: Report) -> list[str]:
    out = ["## What could not be read", ""]
    notes = unread_notes(report)
    if not report.diagnostics and not notes:
        return out + ["Everything given was read.", ""]
    out += [f"- {n}" for n in notes]
    shown = report.diagnostics[:LIST_LIMIT]
    for d in shown:
        where = f"{md_code(d.path)}: " if d.path else ""
        out.append(f"- **{md_escape(d.level)}** {where}{md_escape(d.message)}")
    if len(report.diagnostics) > LIST_LIMIT:
        out.append(f"- … and {len(report.diagnostics) - LIST_LIMIT} more diagnostics (see the JSON output)")
    return out + [""]
