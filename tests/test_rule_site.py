"""``correlate rules site``, ``rules list --format json`` and ``rules explain``: what a person or a
program reads about the rules. The site is opened in real headless Chromium (driven over its
DevTools pipe, no extra packages): text is typed into the search box and the result followed."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest
from cdp import Browser

from correlator.explain import explain, list_json, safe, summary
from correlator.model import Example, MatchSpec, Related, Role, Rule, Severity
from correlator.ruleset import load_rules
from correlator.site import _js_pattern, page_name, render_index, render_rule, search_index, write_site

RULES = load_rules()
BY_ID = {r.id: r for r in RULES}
HOSTILE = "<script>alert(1)</script>\x1b[31mred\x1b[0m \u202eevil\u202c & \"quoted\" 'single' </pre></code>"


def cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([sys.executable, "-m", "correlator", *args], capture_output=True, timeout=300, cwd=cwd)


def hostile_rule(rule_id: str = "custom.hostile", **extra) -> Rule:
    base = dict(
        id=rule_id, title=f"Hostile {HOSTILE}", category="custom", severity=Severity.HIGH, role=Role.PRIMARY,
        root_cause=f"Cause {HOSTILE}", fix=f"Fix {HOSTILE}",
        match=MatchSpec(any=("Hostile (?P<x>thing)",), prefilter=("Hostile <thing>",)),
        confirm=(f"check {HOSTILE}",), references=("javascript:alert(1)", "https://example.org/a?b=c&d=e", "https://example.org/x?<c>"),
        tags=("t<1>",), related=(Related("custom.other", "sibling"),), explains=("custom.other",),
        examples=(Example("match", f"Hostile thing {HOSTILE}", (("x", "thing"),), f"note {HOSTILE}"),
                  Example("no-match", "calm")),
        path="/rules/custom/hostile.toml", looks_like=(f"like {HOSTILE}",), cheapest_check=f"run {HOSTILE}",
        fingerprint=f"metric {HOSTILE}", prevention=f"prevent {HOSTILE}")
    base.update(extra)
    return Rule(**base)  # type: ignore[arg-type]


# --- rules list --------------------------------------------------------------------------------


LIST_FIELDS = ["id", "title", "category", "role", "severity", "priority", "tags", "affects", "domain", "restart",
               "when", "explains", "related", "references", "versions", "examples", "info_level", "entry_missing",
               "path"]


def test_list_json_fields_are_stable_and_documented():
    doc = json.loads(list_json(RULES, len(RULES)))
    assert doc["schema"] == "correlate.rules/1" and doc["total"] == len(RULES)
    assert [r["id"] for r in doc["rules"]] == [r.id for r in RULES]
    for rec in doc["rules"]:
        assert list(rec) == LIST_FIELDS
    readme = (Path(__file__).resolve().parent.parent / "rules" / "README.md").read_text(encoding="utf-8")
    section = readme[readme.index("rules list --format json"):]
    for field in LIST_FIELDS:
        assert f"`{field}`" in section, f"rules/README.md does not document the list field {field!r}"


def test_list_json_record_values():
    r = BY_ID["nccl.watchdog-collective-timeout"]
    rec = summary(r)
    assert rec["role"] == "collateral" and rec["category"] == "nccl" and rec["priority"] == r.priority
    assert rec["examples"] == len(r.examples) and rec["versions"] == len(r.versions)
    assert rec["references"] == list(r.references) and rec["path"] == r.path
    assert rec["related"][0] == {"id": r.related[0].id, "kind": r.related[0].kind}
    when_rule = hostile_rule(when=None)
    assert summary(when_rule)["when"] is None and summary(when_rule)["domain"] is None
    assert summary(when_rule)["entry_missing"] == ["domain", "restart", "when", "versions"]


def test_cli_rules_list_json_and_filters():
    r = cli("rules", "list", "--format", "json", "--category", "nccl", "--role", "collateral")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["rules"] and all(x["category"] == "nccl" and x["role"] == "collateral" for x in doc["rules"])
    assert "nccl.watchdog-collective-timeout" in {x["id"] for x in doc["rules"]}
    assert r.stderr == b""


@pytest.mark.parametrize("args, message", [
    (["--role", "fatal"], "unknown role 'fatal': use one of primary, collateral, teardown, job, context"),
    (["--category", "nccll"], "unknown category 'nccll': use one of checkpoint, cuda,"),
    (["--format", "yaml"], "invalid value for '--format' / '-f': 'yaml' is not one of 'table', 'json'"),
    (["--tag", "oomm"], "unknown tag 'oomm' (did you mean oom"),
])
def test_cli_rules_list_unknown_choice_is_a_usage_error(args, message):
    r = cli("rules", "list", *args)
    err = r.stderr.decode().strip().splitlines()
    assert r.returncode == 2 and len(err) == 1 and err[0].startswith(f"error: {message}"), r.stderr
    if "category" in args[0]:
        assert all(c in err[0] for c in {x.category for x in RULES})


# --- rules explain -------------------------------------------------------------------------------


def test_explain_shows_every_key():
    r = hostile_rule(info_level="why info", window_s=120.0, affects=("NCCL",))
    text = explain(r)
    for part in ("custom.hostile", "category custom", "role primary", "severity high", "priority 50", "window 120 s",
                 "domain -", "restart -", "affects: NCCL", "tags: t<1>", "What you see", "Mechanism", "Fix", "Confirm",
                 "Cheapest check", "Fingerprint", "Looks like", "Prevention", "Why an INFO line", "why info",
                 "Typically causes on other ranks", "custom.other (sibling)", "References", "javascript:alert(1)",
                 "Match", "keywords: 'Hostile <thing>'", "examples: 2 (1 match, 1 no-match)",
                 "Not written yet: domain, restart, when, versions", "Defined in /rules/custom/hostile.toml"):
        assert part in text, part


def test_explain_shows_the_new_entry_keys_of_a_complete_rule():
    from correlator.model import Domain, Phase, Restart, VersionNote, When

    r = hostile_rule(domain=Domain.HARDWARE, restart=Restart.EXCLUDE_NODE, when=When(Phase.CHECKPOINT, "a save"),
                     versions=(VersionNote("NCCL", ">= 2.23", "the wording", "https://example.org/v2.23"),))
    text = explain(r)
    assert "domain hardware · restart exclude-node · when checkpoint: a save" in text
    assert "Versions" in text and "NCCL >= 2.23: the wording" in text and "source: https://example.org/v2.23" in text
    assert "Not written yet" not in text


def test_explain_escapes_control_characters():
    text = explain(hostile_rule())
    assert "\x1b" not in text and "\u202e" not in text
    assert "\\x1b[31mred" in text and "\\u202eevil" in text
    assert all(c == "\n" or c >= " " for c in text), "a control character reached the terminal"
    assert safe("a\tb\rc\x07\x9b\u2028") == "a\\x09b\\x0dc\\x07\\x9b\\u2028"


def test_cli_rules_explain_prints_the_new_sections():
    r = cli("rules", "explain", "nccl.watchdog-collective-timeout")
    out = r.stdout.decode()
    assert r.returncode == 0
    for part in ("Mechanism", "Fix", "Confirm", "References", "Match", "examples:", "domain", "restart"):
        assert part in out, part


# --- the site, read as files ---------------------------------------------------------------------


class _Links(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.hrefs: list[str] = []
        self.ids: set[str] = set()
        self.tags: list[str] = []
        self.srcs: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        a = dict(attrs)
        if a.get("id"):
            self.ids.add(a["id"] or "")
        if tag == "a" and a.get("href") is not None:
            self.hrefs.append(a["href"] or "")
        for key in ("src", "srcset", "action", "data"):
            if a.get(key):
                self.srcs.append(f"{tag}[{key}]={a[key]}")
        if tag == "link":
            self.srcs.append(f"link={a}")


def _parse(path: Path) -> _Links:
    p = _Links()
    p.feed(path.read_text(encoding="utf-8"))
    return p


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("site")
    write_site(RULES, out)
    return out


@pytest.mark.slow
def test_every_rule_has_a_page_and_every_link_resolves(site):
    pages = sorted((site / "rules").glob("*.html"))
    assert len(pages) == len(RULES) == len({page_name(r.id) for r in RULES})
    for r in RULES:
        assert (site / "rules" / page_name(r.id)).is_file(), r.id
    checked = 0
    for page in [site / "index.html", site / "messages.html", *pages]:
        parsed = _parse(page)
        assert not parsed.srcs, (page, parsed.srcs)  # nothing is fetched
        for href in parsed.hrefs:
            parts = urlsplit(href)
            if parts.scheme in ("http", "https"):
                continue
            assert not parts.scheme and not parts.netloc, (page, href)  # no javascript:, no file: elsewhere
            target = (page.parent / unquote(parts.path)).resolve() if parts.path else page
            assert target.is_file(), (page.name, href)
            if parts.fragment:
                assert parts.fragment in _parse(target).ids, (page.name, href)
            checked += 1
    assert checked > 3 * len(RULES)


def test_rule_page_has_every_key_and_links(site):
    r = BY_ID["nccl.watchdog-collective-timeout"]
    page = (site / "rules" / page_name(r.id)).read_text(encoding="utf-8")
    for section in ("mechanism", "fix", "confirm", "related", "references", "match", "examples"):
        assert f'id="{section}"' in page, section
    for rel in r.related:
        assert f'href="{page_name(rel.id)}"' in page
    parent = next(x for x in RULES if r.id in x.explains)
    assert f'href="{page_name(parent.id)}"' in page  # "typically caused by"
    for ex in r.examples:
        assert f"<pre><code>{ex.log.splitlines()[0][:40]}" in page.replace("&#x27;", "'").replace("&quot;", '"')


def test_pages_escape_rule_text():
    other = hostile_rule("custom.other", explains=(), related=())
    rules = [hostile_rule(), other]
    for page in (render_rule(rules[0], rules), render_index(rules)):
        body = page.split("<body>", 1)[1]
        assert "<script>alert(1)" not in body and "</pre></code>" not in body.replace("</code></pre>", "")
        assert 'href="javascript:' not in body
    page = render_rule(rules[0], rules)
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert '<a href="https://example.org/a?b=c&amp;d=e">' in page
    assert "<code>https://example.org/x?&lt;c&gt;</code>" in page  # not a plain address: text, not a link
    assert "<code>javascript:alert(1)</code>" in page
    index = render_index(rules)
    data = index.split('id="rule-index">', 1)[1].split("</script>", 1)[0]
    assert "<" not in data and json.loads(data)[0]["title"].startswith("Hostile <script>")


def test_index_by_message_lists_keywords_and_example_lines(site):
    text = (site / "messages.html").read_text(encoding="utf-8")
    r = BY_ID["nccl.watchdog-collective-timeout"]
    for kw in r.match.prefilter:
        assert f"<code>{kw}</code>" in text.replace("&#x27;", "'").replace("&quot;", '"'), kw


@pytest.mark.parametrize("python, js", [
    ("(?P<rank>\\d+) failed", ("(?<rank>\\d+) failed", "")),
    ("(?i)cuda error", ("cuda error", "i")),
    ("(?P<a>x)(?P=a)", ("(?<a>x)\\k<a>", "")),
    ("a(?>b)", None),
    ("a++", None),
    ("end\\Z", None),
    ("(?x) a b", None),
])
def test_patterns_for_the_browser(python, js):
    assert _js_pattern(python) == js


def test_search_index_is_small_and_complete():
    idx = search_index(RULES)
    assert [x["id"] for x in idx] == [r.id for r in RULES]
    assert sum(1 for x in idx if x["patterns"]) > 0.8 * len(RULES)
    assert len(json.dumps(idx)) < 400_000


def test_cli_rules_site(tmp_path):
    for args in (["rules", "site"], ["rules", "list"], ["rules", "check"]):
        r = cli(*args, "--help")
        assert r.returncode == 0 and b"Usage" in r.stdout, args
    assert b"--entries" in cli("rules", "check", "--help").stdout
    r = cli("rules", "site", str(tmp_path / "out"))
    assert r.returncode == 0, r.stderr
    assert r.stdout.decode().strip() == str(tmp_path / "out" / "index.html")
    assert len(list((tmp_path / "out" / "rules").glob("*.html"))) == len(RULES)
    (tmp_path / "file").write_text("x")
    r = cli("rules", "site", str(tmp_path / "file"))
    assert r.returncode == 2 and b"needs a folder" in r.stderr


# --- the site in real Chromium -------------------------------------------------------------------


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory):
    b = Browser(tmp_path_factory.mktemp("chromium-profile"))
    yield b
    b.close()


HITS = "Array.from(document.querySelectorAll('#results a.hit')).map(a => a.getAttribute('href'))"

TYPED = [
    ("nccl.watchdog-collective-timeout",
     "[rank0]:[E1218 20:27:21.426415540 ProcessGroupNCCL.cpp:629] [Rank 0] Watchdog caught collective operation "
     "timeout: WorkNCCL(SeqNum=1, OpType=BROADCAST, NumelIn=131072000, NumelOut=131072000, Timeout(ms)=600000) ran "
     "for 600081 milliseconds before timing out."),
    ("cuda.out-of-memory",
     "[rank3]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 3 has a total capacity "
     "of 79.15 GiB of which 1.06 GiB is free. Including non-PyTorch memory, this process has 78.08 GiB memory in use."),
]


@pytest.mark.parametrize("rule_id, text", TYPED, ids=[t[0] for t in TYPED])
def test_typing_an_error_into_the_search_box_finds_its_rule(site, browser, rule_id, text):
    browser.open((site / "index.html").as_uri())
    browser.js("document.getElementById('q').value = ''; document.getElementById('q').focus(); true")
    browser.send("Input.insertText", {"text": text}, session=True)
    hits = browser.wait_for(HITS)
    assert hits[0] == f"rules/{page_name(rule_id)}", hits[:5]
    # follow the link as a reader would, and read the page
    browser.js("document.querySelector('#results a.hit').click(); true")
    want = (site / "rules" / page_name(rule_id)).as_uri()
    browser.wait_for(f"location.href === {json.dumps(want)} && document.readyState === 'complete'")
    rule = BY_ID[rule_id]
    assert browser.js("document.querySelector('h1').textContent") == rule.title
    fix = browser.js("document.getElementById('fix').nextElementSibling.textContent")
    assert fix == " ".join(rule.fix.split("\n\n")[0].split())
    assert browser.problems() == []


def test_typing_words_finds_rules(site, browser):
    browser.open((site / "index.html").as_uri())
    browser.js("document.getElementById('q').focus(); true")
    browser.send("Input.insertText", {"text": "watchdog timeout"}, session=True)
    hits = browser.wait_for(HITS)
    assert f"rules/{page_name('nccl.watchdog-collective-timeout')}" in hits
    assert browser.js("document.getElementById('count').textContent").endswith("matching rule(s)")
    browser.js("var q = document.getElementById('q'); q.value = ''; q.dispatchEvent(new Event('input')); true")
    assert browser.js(HITS) == []
    assert browser.problems() == []


def test_every_rules_own_example_line_finds_it(site, browser):
    """Each rule's example lines, pasted, list that rule (as long as the line holds a keyword)."""
    browser.open((site / "index.html").as_uri())
    cases = []
    for r in RULES:
        for line in [ex.log.strip().splitlines()[-1] for ex in r.examples if ex.expect == "match"][:2]:
            if any(k in line for k in r.match.prefilter):
                cases.append((r.id, line))
    assert len(cases) > len(RULES)
    script = """(function (cases) {
        var q = document.getElementById('q'), missed = [];
        cases.forEach(function (c) {
            q.value = c[1]; q.dispatchEvent(new Event('input'));
            var hits = Array.from(document.querySelectorAll('#results a.hit')).map(a => a.textContent);
            if (hits.indexOf(c[0]) < 0) missed.push(c[0] + ': ' + hits.slice(0, 3).join(','));
        });
        return missed;
    })(CASES)""".replace("CASES", json.dumps(cases))
    assert browser.js(script) == []
    assert browser.problems() == []


def test_a_rule_page_opens_offline_with_title_and_fix(site, browser):
    rule = BY_ID["storage.eio-on-checkpoint-save"] if "storage.eio-on-checkpoint-save" in BY_ID else RULES[0]
    browser.open((site / "rules" / page_name(rule.id)).as_uri())
    assert browser.js("document.querySelector('h1').textContent") == rule.title
    assert browser.js("document.querySelector('code.rule-id').textContent") == rule.id
    fix = browser.js("document.getElementById('fix').nextElementSibling.textContent")
    assert fix == " ".join(rule.fix.split("\n\n")[0].split())
    assert browser.js("document.scripts.length") == 0
    assert browser.problems() == []


def test_console_problems_are_seen(tmp_path, browser):
    """Guards the checks above: a page whose script throws, or whose policy refuses a script, is caught."""
    page = tmp_path / "bad.html"
    page.write_text('<!DOCTYPE html><html><head><meta http-equiv="Content-Security-Policy" '
                    "content=\"default-src 'none'\"></head><body><script>undefinedFunction()</script></body></html>")
    seen = len(browser.events)
    browser.open(page.as_uri())
    deadline = time.monotonic() + 10
    while not browser.problems() and time.monotonic() < deadline:
        browser.js("1")
    assert any(re.search(r"Content Security Policy|Refused", p) for p in browser.problems()), browser.events[seen:]
    del browser.events[seen:]
