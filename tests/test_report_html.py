"""The HTML post-mortem: self-contained, escaped, legible at 4096 ranks, and loaded in real Chromium.

The Chromium tests fail (they do not skip) when the browser is missing: CI installs it with
``apt-get install -y chromium``.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import replace
from html.parser import HTMLParser
from pathlib import Path

import pytest
from report_fixtures import EIO, HOSTILE, NS, T0, _ranges, empty_report, make_report  # noqa: F401

from correlator.model import (
    Diagnostic,
    Report,
    Verdict,
)
from correlator.report import html as html_report


class _Tags(HTMLParser):
    """Every start tag and attribute the browser would build from the page."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def _parse(page: str) -> _Tags:
    parser = _Tags()
    parser.feed(page)
    parser.close()
    return parser


# --- page content --------------------------------------------------------------------------------


def test_page_is_self_contained() -> None:
    page = html_report.render(make_report())
    tags = _parse(page).tags
    names = {t for t, _ in tags}
    assert "script" not in names and "link" not in names and "iframe" not in names and "img" not in names
    for tag, attrs in tags:
        assert "src" not in attrs, tag
        assert not any(k.startswith("on") for k in attrs), (tag, attrs)
        if tag != "a":  # reference links are links, not fetches
            assert not any(str(v).startswith(("http:", "https:", "//")) for k, v in attrs.items()
                           if k not in ("xmlns",)), (tag, attrs)
    assert "@import" not in page and "url(" not in page and "@font-face" not in page
    csp = [a["content"] for t, a in tags if t == "meta" and a.get("http-equiv") == "Content-Security-Policy"]
    assert csp and "default-src 'none'" in csp[0]


def test_page_has_the_post_mortem_content() -> None:
    page = html_report.render(make_report())
    text = " ".join(_parse(page).text)
    for heading in ("What to do", "Timeline", "Root cause", "Evidence", "Why this rank", "Mechanism",
                    "Prevention", "References", "Job", "Clock offsets", "Causal chain", "Collateral",
                    "Timeline table", "Ranks", "What could not be read"):
        assert f"<h2>{heading}</h2>" in page or f"<h3>{heading}</h3>" in page, heading
    assert "rank 1 on gpu-a01 failed first: Checkpoint save failed with EIO" in text
    assert "slurm-88123.out:20418" in text
    assert "truncated gzip stream at byte 1048576" in text
    assert page.count('id="root-event"') == 1


def test_svg_marks_root_shades_waves_and_notes_clock_correction() -> None:
    page = html_report.render(make_report())
    svg = page[page.index("<svg"):page.index("</svg>")]
    assert '<g id="root-event"' in svg and 'data-rank="1"' in svg
    assert svg.count('class="wave wave-collateral"') == 1
    # teardown groups are bars above the lanes, not shading over them
    assert svg.count('class="wave wave-teardown"') == 0 and svg.count('class="band band-teardown"') == 2
    for bar in re.findall(r'<rect class="band band-teardown" x="[^"]+" y="([^"]+)"', svg):
        assert float(bar) < float(re.search(r'<rect class="wave wave-collateral" x="[^"]+" y="([^"]+)"', svg).group(1))
    assert "host clocks corrected (2 hosts, residual ≤ 3 ms)" in svg
    assert "time, UTC 2026-03-02" in svg
    hosts = re.findall(r'data-host="([^"]+)"', svg)
    assert hosts == ["gpu-a01", "gpu-a02"]
    assert svg.count(">rank ") >= 8  # small jobs: one lane per rank


def test_a_narrow_wave_gets_a_detail_picture() -> None:
    report = make_report()
    page = html_report.render(report)
    assert page.count("<svg") == 2 and page.count('id="root-event"') == 1
    detail = page[page.index('<figure class="detail">'):]
    detail = detail[:detail.index("</figure>")]
    assert "Detail: the waves that followed, +600.2 s … +601.0 s after the root" in detail
    assert detail.count('class="m-collateral"') == 7  # each timeout in its own place on the zoomed axis
    assert "14:17:31.700" in detail                     # sub-second ticks
    lo, hi = html_report.detail_window(report)
    assert hi - lo == pytest.approx(0.801, abs=1e-3)  # the wave, then the SIGTERMs right after it
    # a job whose events spread over the whole span needs no detail
    spread = replace(report, timeline=report.timeline[:1] + report.timeline[-1:])
    assert html_report.detail_window(spread) is None and html_report.render(spread).count("<svg") == 1


def test_hostile_log_lines_render_as_text() -> None:
    page = html_report.render(make_report(root_text=HOSTILE))
    parsed = _parse(page)
    assert not any(tag in ("script", "img") for tag, _ in parsed.tags)
    assert not any(k.startswith("on") for _, attrs in parsed.tags for k in attrs)
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "&lt;img src=x onerror=alert(1)&gt;" in page
    assert any("<script>alert(1)</script>" in chunk for chunk in parsed.text)  # shown as text


def test_hostile_host_names_and_rule_ids_are_escaped() -> None:
    report = make_report(hosts=['gpu"><script>x()</script>', "n<img src=x>"], per_host=2, root_rank=0)
    report = replace(report, diagnostics=(Diagnostic(level="error", path='"><marquee>', message="<svg onload=x()>"),),
                     root_cause=replace(report.root_cause, references=("javascript:alert(1)",)))
    parsed = _parse(html_report.render(report))
    assert {t for t, _ in parsed.tags}.isdisjoint({"script", "img", "marquee"})
    assert not any(k.startswith("on") for _, attrs in parsed.tags for k in attrs)
    assert not any(str(a.get("href", "")).startswith("javascript:") for _, a in parsed.tags)


def test_4096_ranks_fold_into_a_legible_picture() -> None:
    report = make_report(n_hosts=512, per_host=8, root_rank=37)
    page = html_report.render(report)
    svg = page[page.index("<svg"):page.index("</svg>")]
    blocks = re.findall(r'data-host="([^"]+)"', svg)
    assert blocks == ["gpu-a05", "511 other hosts"]
    assert "rank 37 · local 5 · root" in svg
    assert "4088 ranks with collateral errors" in svg
    lanes = svg.count('<text class="lbl-fold"') + svg.count('<text class="lbl-root"') + svg.count('<text class=""')
    assert lanes <= html_report.LANE_BUDGET
    height = float(re.search(r'viewBox="0 0 \d+ ([\d.]+)"', svg).group(1))
    assert height < 600
    assert len(page) < 2_000_000
    assert "hosts with nothing notable share one block" in page
    assert f"500 of {len(report.timeline)} events shown" in page


def test_middle_sized_job_folds_ranks_per_host() -> None:
    page = html_report.render(make_report(n_hosts=16, per_host=8, root_rank=20))
    svg = page[page.index("<svg"):page.index("</svg>")]
    assert len(re.findall(r'data-host="', svg)) == 16
    assert "7 ranks with collateral errors" in svg and "8 ranks with collateral errors" in svg
    assert "healthy and collateral ranks share one lane per host" in page


def test_report_without_times_or_root_still_renders() -> None:
    report = make_report()
    untimed = tuple(replace(e, time=None, after_root_s=None, time_kind="none") for e in report.timeline)
    no_time = replace(report, timeline=untimed, ranks=(), groups=(),
                      root_cause=replace(report.root_cause, time=None))
    page = html_report.render(no_time)
    assert "nothing to draw" in page
    assert page.count('id="root-event"') == 1  # then the evidence line carries it
    assert '<pre id="root-event">' in page
    for verdict in (Verdict.NO_FAILURE, Verdict.JOB_LEVEL, Verdict.UNDETERMINED):
        page = html_report.render(empty_report(verdict))
        assert 'id="root-event"' not in page and "</html>" in page


# --- real Chromium -------------------------------------------------------------------------------

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--enable-logging=stderr", "--v=0"]


def _chromium(page: Path, tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    assert Path(CHROMIUM).exists(), "Chromium is missing: install it with `apt-get install -y chromium`"
    profile = tmp_path / f"profile-{len(list(tmp_path.iterdir()))}"
    return subprocess.run([CHROMIUM, *FLAGS, f"--user-data-dir={profile}", *args, page.as_uri()],
                          capture_output=True, text=True, timeout=120, check=False)


def _console(stderr: str) -> list[str]:
    """Console messages (errors, CSP violations, anything a script said) Chromium logged."""
    return [line for line in stderr.splitlines() if ":CONSOLE" in line or "Uncaught" in line]


def test_console_check_sees_errors(tmp_path: Path) -> None:
    """Guards the next tests: a page that does throw is caught by ``_console``."""
    probe = tmp_path / "probe.html"
    probe.write_text("<!DOCTYPE html><html><body><script>undefinedFunction()</script></body></html>")
    result = _chromium(probe, tmp_path, "--dump-dom")
    assert any("Uncaught" in line for line in _console(result.stderr)), result.stderr[-2000:]


@pytest.mark.parametrize("name, report", [
    ("small", make_report()),
    ("hostile", make_report(root_text=HOSTILE)),
    ("4096", make_report(n_hosts=512, per_host=8, root_rank=37)),
])
def test_page_loads_in_chromium(name: str, report: Report, tmp_path: Path) -> None:
    page = tmp_path / f"{name}.html"
    page.write_text(html_report.render(report), encoding="utf-8")
    dom = _chromium(page, tmp_path, "--dump-dom")
    assert dom.returncode == 0, dom.stderr[-2000:]
    assert _console(dom.stderr) == [], _console(dom.stderr)
    assert 'id="root-event"' in dom.stdout
    assert "<script" not in dom.stdout and "<img" not in dom.stdout
    if name == "hostile":
        assert "&lt;script&gt;alert(1)&lt;/script&gt;" in dom.stdout
    shot = tmp_path / "shot.png"
    result = _chromium(page, tmp_path, f"--screenshot={shot}", "--window-size=1400,1000")
    assert result.returncode == 0, result.stderr[-2000:]
    assert _console(result.stderr) == []
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 20_000


# --- end to end: the real pipeline over small logs written here, and over sample_logs/*/ ---------

from report_fixtures import REPO, SAMPLE_JOBS, analyze_job, write_job  # noqa: E402,F401


@pytest.mark.slow
def test_every_sample_job_renders_as_html_and_loads_in_chromium(tmp_path: Path) -> None:
    jobs = [(write_job(tmp_path / "inline", "9001"), "9001")] + [(p, p.name) for p in SAMPLE_JOBS]
    for index, (folder, job_id) in enumerate(jobs):
        report = analyze_job(folder, job_id)
        page = tmp_path / f"job-{index}.html"
        page.write_text(html_report.render(report), encoding="utf-8")
        parsed = _parse(page.read_text(encoding="utf-8"))
        assert not any(tag == "script" for tag, _ in parsed.tags), folder
        dom = _chromium(page, tmp_path, "--dump-dom")
        assert dom.returncode == 0 and _console(dom.stderr) == [], (folder, _console(dom.stderr))
        if report.root_cause is not None:
            assert 'id="root-event"' in dom.stdout, folder
    shot = tmp_path / "shot.png"
    assert _chromium(tmp_path / "job-0.html", tmp_path, f"--screenshot={shot}", "--window-size=1400,1000").returncode == 0
    assert shot.stat().st_size > 20_000


def test_the_fix_impact_and_stamp_come_first_and_the_table_is_folded() -> None:
    """Issue 15 item 6: the impact line and the fix sit above the timeline picture; the long table is
    folded; the root's traceback is shown; the tool, rules and command line are stamped."""
    report = make_report()
    report = replace(report, root_cause=replace(report.root_cause, context=(
        'File "/workspace/train.py", line 812, in save_checkpoint', "torch.save(state, path)",
        ">> " + report.root_cause.evidence[0].text)),
        stats=replace(report.stats, rules_version="287 rules, 04467c77d7b1"))
    page = html_report.render(report, command="correlate logs/ -f html --token=hf_abc")
    assert page.index('class="impact"') < page.index('id="fix"') < page.index("<h2>Timeline</h2>")
    impact = re.search(r'<p class="impact">(.*?)</p>', page, re.S).group(1)
    assert "time to failure" in impact and "rank-hours lost" in impact and "last step reached: 18000" in impact
    assert "Run <code>lfs check osts</code> on the node" in page[:page.index("<h2>Timeline</h2>")]
    assert '<details class="tl-table">' in page and "<h2>Timeline table</h2>" in page
    assert "in save_checkpoint" in page and "torch.save(state, path)" in page
    stamp = re.search(r'<p class="sub stamp">(.*?)</p>', page, re.S).group(1)
    assert "correlate " in stamp and "rules: 287 rules, 04467c77d7b1" in stamp and "command: correlate logs/" in stamp


def test_the_nccl_wait_is_annotated_and_teardown_does_not_cover_the_lanes() -> None:
    page = html_report.render(make_report())
    svg = page[page.index("<svg"):page.index("</svg>")]
    gap = re.search(r'<text class="gaplbl"[^>]*>(.*?)</text>', svg)
    assert gap and gap.group(1).startswith("+600.2 s") and "NCCL watchdog" in gap.group(1)
    # no wave of teardown spans the lanes: only collateral is shaded over them
    assert "wave-teardown" not in svg and "wave-job" not in svg
