"""``correlate rules site DIR``: the rules as a static, self-contained web site.

Owns the site's pages: ``index.html`` (the rules by category, and a search box), ``messages.html``
(the message texts the rules are found by: their literal keywords and example lines) and one page
per rule under ``rules/``. Nothing is fetched: styles and the one script are inline, the search
index is a JSON block inside ``index.html``, and each page's Content-Security-Policy allows
nothing else. Every piece of rule text is HTML-escaped; the script writes text nodes only.
It renders ``Rule`` values: no loading, no checking.
"""

from __future__ import annotations

import base64
import hashlib
import html
import json
import os
import re
from collections.abc import Sequence
from pathlib import Path
from urllib.parse import quote

from correlator.explain import missing_entry_fields
from correlator.model import Rule

RULES_DIR = "rules"

_STYLE = """
body{font:15px/1.5 system-ui,sans-serif;max-width:64rem;margin:1.5rem auto;padding:0 1rem;color:#1b1b1b}
a{color:#0b57d0}h1{font-size:1.5rem;margin:.2rem 0}h2{font-size:1.15rem;margin-top:1.6rem;border-bottom:1px solid #ddd}
code,pre{font:13px/1.4 ui-monospace,monospace;background:#f4f4f4}pre{padding:.5rem;overflow-x:auto;white-space:pre-wrap;
word-break:break-all}table{border-collapse:collapse;width:100%}td,th{text-align:left;vertical-align:top;padding:.2rem .5rem;
border-bottom:1px solid #eee}.badge{display:inline-block;padding:0 .4rem;margin-right:.3rem;border-radius:.3rem;
background:#eef;font-size:13px}.muted{color:#666}#q{width:100%;font:14px ui-monospace,monospace;padding:.4rem;
box-sizing:border-box}#results li{margin:.2rem 0}
""".strip()

# the search: the rules whose patterns (rewritten for JavaScript where they can be) match the
# pasted text first, then those whose literal keywords it contains, then those whose words hold
# every word typed. Results are text nodes and links to the rule pages, nothing parsed as HTML.
_SEARCH_JS = r"""
(function () {
  "use strict";
  var rules = JSON.parse(document.getElementById("rule-index").textContent);
  var box = document.getElementById("q"), out = document.getElementById("results");
  var count = document.getElementById("count");
  rules.forEach(function (r) {
    r.rx = [];
    r.patterns.forEach(function (p) {
      try { r.rx.push(new RegExp(p[0], p[1])); } catch (e) { /* not expressible in JS: keywords only */ }
    });
    r.hay = (r.id + " " + r.title + " " + r.category + " " + r.role + " " + r.words.join(" ")).toLowerCase();
  });
  var PREFIX = /^(?:\s*(?:\d+: |\[default\d+\]:|\[rank\d+\]:|[\w.-]+: (?=\S)))*/;
  function score(r, text, lines, words) {
    var i, j;
    for (i = 0; i < r.rx.length; i++) {
      for (j = 0; j < lines.length; j++) { if (r.rx[i].test(lines[j])) return 3000 + r.priority; }
    }
    var best = 0;
    r.keywords.forEach(function (k) { if (text.indexOf(k) >= 0) best = Math.max(best, 2000 + Math.min(k.length, 999)); });
    if (best) return best;
    if (!words.length) return 0;
    for (i = 0; i < words.length; i++) { if (r.hay.indexOf(words[i]) < 0) return 0; }
    return 1000 + r.priority;
  }
  function search() {
    var text = box.value, lines = [];
    text.split(/\r?\n/).forEach(function (l) { if (l.trim()) { lines.push(l); lines.push(l.replace(PREFIX, "")); } });
    var words = text.length > 200 ? [] : text.toLowerCase().split(/[^a-z0-9_]+/).filter(function (w) { return w.length > 1; });
    var hits = [];
    if (text.trim()) {
      rules.forEach(function (r) { var s = score(r, text, lines, words); if (s) hits.push([s, r]); });
      hits.sort(function (a, b) { return b[0] - a[0] || (a[1].id < b[1].id ? -1 : 1); });
    }
    while (out.firstChild) out.removeChild(out.firstChild);
    hits.slice(0, 25).forEach(function (h) {
      var r = h[1], li = document.createElement("li"), a = document.createElement("a");
      a.href = r.url; a.textContent = r.id; a.className = "hit";
      li.appendChild(a);
      li.appendChild(document.createTextNode(" \u2014 " + r.title + " (" + r.role + ")"));
      out.appendChild(li);
    });
    count.textContent = text.trim() ? hits.length + " matching rule(s)" : "";
  }
  box.addEventListener("input", search);
  search();
})();
""".strip()


def page_name(rule_id: str) -> str:
    """The file name of a rule's page: the id when it is plain, else a safe spelling of it."""
    if re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", rule_id):
        return f"{rule_id}.html"
    digest = hashlib.sha256(rule_id.encode()).hexdigest()[:8]
    return re.sub(r"[^A-Za-z0-9._-]", "_", rule_id)[:80] + f"-{digest}.html"


def _e(text: object) -> str:
    return html.escape(str(text), quote=True)


def _csp(script: str | None) -> str:
    policy = "default-src 'none'; style-src 'unsafe-inline'; img-src 'none'; base-uri 'none'; form-action 'none'"
    if script is not None:
        digest = base64.b64encode(hashlib.sha256(script.encode()).digest()).decode()
        policy += f"; script-src 'sha256-{digest}'"
    return policy


def _page(title: str, body: str, script: str | None = None, data: str | None = None) -> str:
    head = (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
            f'<meta http-equiv="Content-Security-Policy" content="{_e(_csp(script))}">'
            f'<meta name="viewport" content="width=device-width, initial-scale=1">'
            f"<title>{_e(title)}</title><style>{_STYLE}</style></head>\n<body>\n")
    tail = ""
    if data is not None:
        tail += f'<script type="application/json" id="rule-index">{data}</script>\n'
    if script is not None:
        tail += f"<script>{script}</script>\n"
    return head + body + "\n" + tail + "</body></html>\n"


def _paras(text: str) -> str:
    return "".join(f"<p>{_e(' '.join(p.split()))}</p>" for p in text.strip().split("\n\n") if p.strip())


def _link(url: str) -> str:
    """A reference as a link when it is a web address, as text otherwise (no javascript: links)."""
    if re.match(r"https?://[^\s\"'<>]+$", url):
        return f'<a href="{_e(url)}">{_e(url)}</a>'
    return f"<code>{_e(url)}</code>"


def _rule_link(rule_id: str, known: set[str], up: str = "") -> str:
    if rule_id in known:
        return f'<a href="{_e(up + quote(page_name(rule_id)))}">{_e(rule_id)}</a>'
    return f"<code>{_e(rule_id)}</code>"


def _seen_lines(r: Rule) -> list[str]:
    return [ex.log.strip().splitlines()[-1] for ex in r.examples if ex.expect == "match" and ex.log.strip()]


def render_rule(r: Rule, rules: Sequence[Rule]) -> str:
    """One rule's page: every key of its entry, its examples as code, its links to other rules."""
    known = {x.id for x in rules}
    explained_by = sorted(x.id for x in rules if r.id in x.explains)
    b: list[str] = [f'<p><a href="../index.html">All rules</a> · <a href="../index.html#cat-{_e(r.category)}">'
                    f'{_e(r.category)}</a> · <a href="../messages.html">By message</a></p>',
                    f"<h1>{_e(r.title)}</h1>", f'<p><code class="rule-id">{_e(r.id)}</code></p>']
    badges = [("category", r.category), ("role", r.role), ("severity", r.severity), ("priority", r.priority),
              ("domain", r.domain or "-"), ("restart", r.restart or "-"), ("window", f"{r.window_s:g} s")]
    b.append("<p>" + "".join(f'<span class="badge">{_e(k)}: {_e(v)}</span>' for k, v in badges) + "</p>")
    if r.when is not None:
        b.append(f"<p><b>When:</b> {_e(r.when.phase)}: {_e(' '.join(r.when.trigger.split()))}</p>")
    if r.affects:
        b.append(f"<p><b>Affects:</b> {_e(', '.join(r.affects))}</p>")
    if r.tags:
        b.append("<p><b>Tags:</b> " + " ".join(f"<code>{_e(t)}</code>" for t in r.tags) + "</p>")
    seen = _seen_lines(r)
    if seen:
        b.append('<h2 id="seen">What you see</h2>' + "".join(f"<pre><code>{_e(x)}</code></pre>" for x in seen[:4]))
    b += ['<h2 id="mechanism">Mechanism</h2>', _paras(r.root_cause), '<h2 id="fix">Fix</h2>', _paras(r.fix)]
    if r.confirm:
        b.append('<h2 id="confirm">Confirm</h2><ul>' + "".join(f"<li>{_e(c)}</li>" for c in r.confirm) + "</ul>")
    if r.cheapest_check:
        b += ['<h2 id="cheapest-check">Cheapest check</h2>', _paras(r.cheapest_check)]
    if r.fingerprint:
        b += ['<h2 id="fingerprint">Fingerprint</h2>', _paras(r.fingerprint)]
    if r.looks_like:
        b.append('<h2 id="looks-like">Looks like</h2><ul>' + "".join(f"<li>{_e(x)}</li>" for x in r.looks_like)
                 + "</ul>")
    if r.prevention:
        b += ['<h2 id="prevention">Prevention</h2>', _paras(r.prevention)]
    if r.info_level:
        b += ['<h2 id="info-level">Why an INFO line is a failure here</h2>', _paras(r.info_level)]
    if r.versions:
        rows = "".join(f"<tr><td>{_e(v.software)}</td><td>{_e(v.range)}</td><td><code>{_e(v.wording)}</code></td>"
                       f"<td>{_link(v.source)}</td></tr>" for v in r.versions)
        b.append('<h2 id="versions">Versions</h2><table><tr><th>software</th><th>versions</th><th>wording</th>'
                 f"<th>source</th></tr>{rows}</table>")
    if r.explains:
        b.append('<h2 id="explains">Typically causes on other ranks</h2><ul>'
                 + "".join(f"<li>{_rule_link(x, known)}</li>" for x in r.explains) + "</ul>")
    if explained_by:
        b.append('<h2 id="explained-by">Typically caused by</h2><ul>'
                 + "".join(f"<li>{_rule_link(x, known)}</li>" for x in explained_by) + "</ul>")
    if r.related:
        b.append('<h2 id="related">Related</h2><ul>'
                 + "".join(f"<li>{_rule_link(x.id, known)} ({_e(x.kind)})</li>" for x in r.related) + "</ul>")
    if r.references:
        b.append('<h2 id="references">References</h2><ul>' + "".join(f"<li>{_link(x)}</li>" for x in r.references)
                 + "</ul>")
    m = r.match
    b.append('<h2 id="match">Match</h2>'
             f"<p>scope <code>{_e(m.scope)}</code>"
             + (f", {m.context_lines} lines before, {m.context_after} after" if m.scope == "event" else "")
             + "; keywords: " + ", ".join(f"<code>{_e(k)}</code>" for k in m.prefilter) + "</p>"
             + "".join(f"<pre><code>{_e(key)}: {_e(p)}</code></pre>"
                       for key, pats in (("any", m.any), ("all", m.all), ("not", m.not_)) for p in pats))
    b.append(f'<h2 id="examples">Examples ({len(r.examples)})</h2>')
    for ex in r.examples:
        note = f' <span class="muted">{_e(ex.note)}</span>' if ex.note else ""
        caps = (" captures " + ", ".join(f"<code>{_e(k)}={_e(v)}</code>" for k, v in ex.captures)) if ex.captures else ""
        b.append(f'<p><span class="badge">{_e(ex.expect)}</span>{caps}{note}</p><pre><code>{_e(ex.log)}</code></pre>')
    missing = missing_entry_fields(r)
    if missing:
        b.append(f'<p class="muted">Not written yet: {_e(", ".join(missing))}</p>')
    b.append(f'<p class="muted">Defined in <code>{_e(os.path.basename(os.path.dirname(r.path)))}/'
             f'{_e(os.path.basename(r.path))}</code></p>')
    return _page(f"{r.id} — {r.title}", "\n".join(b))


def _js_pattern(pattern: str) -> tuple[str, str] | None:
    """A rule pattern rewritten for JavaScript's RegExp, with its flags; None when it uses syntax
    that has no counterpart (the browser drops any that still fail to compile)."""
    flags = ""
    m = re.match(r"\(\?([aiLmsux]+)\)", pattern)
    if m:
        if set(m.group(1)) - set("ims"):
            return None
        flags, pattern = "".join(sorted(set(m.group(1)))), pattern[m.end():]
    if re.search(r"\(\?[aiLmsux-]+[:)]|\(\?>|\\[AZGz]|[*+?}]\+|\(\?\(|\\p\{|\(\?[|#]", pattern):
        return None
    pattern = re.sub(r"\(\?P<(\w+)>", r"(?<\1>", pattern)
    pattern = re.sub(r"\(\?P=(\w+)\)", r"\\k<\1>", pattern)
    return pattern, flags


def search_index(rules: Sequence[Rule]) -> list[dict[str, object]]:
    """What the search box searches, one record a rule."""
    out = []
    for r in rules:
        patterns = [p for p in (_js_pattern(x) for x in r.match.any) if p is not None]
        out.append({"id": r.id, "title": r.title, "category": r.category, "role": str(r.role), "priority": r.priority,
                    "url": f"{RULES_DIR}/{quote(page_name(r.id))}", "keywords": list(r.match.prefilter),
                    "patterns": patterns, "words": [*r.tags, *r.match.prefilter, *r.affects]})
    return out


def _json_block(value: object) -> str:
    """JSON safe inside a <script> data block: no '<', '>' or '&' that could end or open a tag."""
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def render_index(rules: Sequence[Rule]) -> str:
    """The rules by category, with the offline search box over ``search_index``."""
    cats: dict[str, list[Rule]] = {}
    for r in sorted(rules, key=lambda x: (x.category, x.id)):
        cats.setdefault(r.category, []).append(r)
    b = ["<h1>Failure rules</h1>",
         f'<p>{len(rules)} rules in {len(cats)} categories. <a href="messages.html">Find a rule by its message</a>.</p>',
         '<p><label for="q">Paste an error line, or type words:</label></p>',
         '<textarea id="q" rows="3" spellcheck="false" autocomplete="off"></textarea>',
         '<p class="muted" id="count"></p><ol id="results"></ol>',
         "<p>" + " · ".join(f'<a href="#cat-{_e(c)}">{_e(c)}</a> ({len(v)})' for c, v in cats.items()) + "</p>"]
    for cat, members in cats.items():
        rows = "".join(f"<tr><td>{_rule_link(r.id, {r.id}, RULES_DIR + '/')}</td><td>{_e(r.role)}</td>"
                       f"<td>{_e(r.severity)}</td><td>{_e(r.title)}</td></tr>" for r in members)
        b.append(f'<h2 id="cat-{_e(cat)}">{_e(cat)}</h2><table>{rows}</table>')
    return _page("Failure rules", "\n".join(b), _SEARCH_JS, _json_block(search_index(rules)))


def message_entries(rules: Sequence[Rule]) -> list[tuple[str, str, str]]:
    """(text, kind, rule id) for every literal keyword and every example line a rule is found by."""
    seen: set[tuple[str, str]] = set()
    out = []
    for r in rules:
        for text, kind in [*((k, "keyword") for k in r.match.prefilter), *((x, "example") for x in _seen_lines(r))]:
            if (text, r.id) not in seen:
                seen.add((text, r.id))
                out.append((text, kind, r.id))
    return sorted(out, key=lambda t: (t[0].strip().lower(), t[2]))


def render_messages(rules: Sequence[Rule]) -> str:
    """The index by message text: what a log line says, and the rule that says why."""
    known = {r.id for r in rules}
    rows = "".join(f"<tr><td><code>{_e(text)}</code></td><td>{_e(kind)}</td>"
                   f"<td>{_rule_link(rid, known, RULES_DIR + '/')}</td></tr>"
                   for text, kind, rid in message_entries(rules))
    b = ['<p><a href="index.html">All rules and the search box</a></p>', "<h1>Rules by message text</h1>",
         "<p>The literal keywords each rule's lines contain, and its example lines. Search this page with the "
         "browser's find (Ctrl+F) for a piece of your error.</p>",
         f"<table><tr><th>message text</th><th>kind</th><th>rule</th></tr>{rows}</table>"]
    return _page("Rules by message text", "\n".join(b))


def write_site(rules: Sequence[Rule], out_dir: Path) -> list[Path]:
    """Write the site into ``out_dir`` (created if needed); return the files written."""
    pages = out_dir / RULES_DIR
    pages.mkdir(parents=True, exist_ok=True)
    written = []
    for r in rules:
        path = pages / page_name(r.id)
        path.write_text(render_rule(r, rules), encoding="utf-8")
        written.append(path)
    for name, text in (("index.html", render_index(rules)), ("messages.html", render_messages(rules))):
        (out_dir / name).write_text(text, encoding="utf-8")
        written.append(out_dir / name)
    return written
