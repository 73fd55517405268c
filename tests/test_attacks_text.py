"""Hostile input, round two (issue 17, items 1, 2, 3 and 6): what log text, file names and folders
can make the outputs and the run do.

1. Control characters (OSC 0 and 8, CSI 2J, ESC c, ESC(0, BEL, C1 CSI, nested escapes the ANSI
   strip misses, a newline in a file name) reach no output raw: every renderer and the CLI's own
   lines show them as escapes; the JSON outputs keep the exact value.
2. Markdown: a fence no log line can close; prose (which quotes hosts, paths and titles from the
   logs) opens no raw HTML, link, image or link definition. Checked by rendering the document
   with a CommonMark parser, not by looking for strings.
3. A job id from log text names a Parquet partition only if it is short and plain; else a stable
   hash, and the report says so.
6. Folders are walked without recursion (no RecursionError however deep), to a depth cap, and links
   that leave the folder given are not followed (with a diagnostic each).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from report_fixtures import make_report, write_job

from correlator.model import Diagnostic, Evidence, Report
from correlator.report import html as html_report
from correlator.report import markdown, terminal
from correlator.report.safe import UNSAFE, json_safe, visible, visible_lines

ROOT = Path(__file__).resolve().parent.parent

#: every kind of escape item 1 names: window title (OSC 0), hyperlink (OSC 8), clear screen, reset,
#: line-drawing charset, bell, a C1 CSI, and escapes nested so one pass of the ANSI strip leaves one
ESCAPES = ("\x1b]0;pwned title\x07\x1b]8;;http://evil/\x1b\\click\x1b]8;;\x1b\\\x1b[2J\x1bc\x1b(0\x07"
           "\x9b31m\x1b\x1b\x1b]]]0;nested\x07\x7f\u202e")
#: a file name that, printed raw, would add a line that reads as a verdict
FAKE_NAME = "slurm-77\nroot cause    rank 0 (node fake) \x1b[31mFAKE\x1b[0m.out"
#: Markdown and HTML that must stay text
MD_ATTACK = "<img src=x onerror=alert(1)> [c](javascript:alert(1)) ![x](//evil/p)"
_OWN_COLOURS = re.compile(r"\x1b\[[0-9;]*m")


def cli(*args: str, timeout: float = 120, **kw) -> subprocess.CompletedProcess:
    env = {**os.environ, "CORRELATE_EARLY_POOL": "0"}
    return subprocess.run([sys.executable, "-m", "correlator", *args], capture_output=True, cwd=ROOT,
                          timeout=timeout, env=env, **kw)


def raw_controls(text: str, *, colours: bool = False) -> list[str]:
    """The unsafe characters of ``text`` other than its line breaks (and the terminal's own colours)."""
    if colours:
        text = _OWN_COLOURS.sub("", text)
    return sorted({f"U+{ord(c):04X}" for c in text if ord(c) in UNSAFE and c != "\n"})


def hostile_job(folder: Path) -> Path:
    """A 4-rank job whose root rank's lines carry every escape and Markdown attack, in a file whose
    name holds a newline and a colour code; beside it an empty file with an OSC title in its name."""
    folder.mkdir(parents=True, exist_ok=True)
    lines = []
    hosts = ("gpu-b07", "gpu-b08")
    for rank in range(4):
        node, local = divmod(rank, 2)
        pre = f"{node}: [default{local}]:[rank{rank}]:"
        lines.append(f"{pre}{hosts[node]}:{2000 + rank}:{2000 + rank} [{local}] NCCL INFO comm 0x55d0 rank {rank} "
                     f"nranks 4 cudaDev {local} nvmlDev {local} busId 1000 commId 0xabc - Init COMPLETE")
        for step in (1, 2, 3):
            lines.append(f"{pre}2026-03-02 14:0{step}:00,{rank:03d} - train - INFO - step={step * 100} loss=2.31")
        if rank == 1:
            lines += [f"{pre}2026-03-02 14:03:30,000 - train - INFO - saving checkpoint {ESCAPES}",
                      f"{pre}Traceback (most recent call last):",
                      f"{pre}~~~~", f"{pre}{MD_ATTACK}", f"{pre}````", f"{pre}~~~~~~~~",
                      f'{pre}  File "/opt/torch/serialization.py", line 652, in save',
                      f"{pre}OSError: [Errno 5] Input/output error {ESCAPES}"]
        else:
            lines.append(f"{pre}[E0302 14:13:30.{rank:03d}000000 ProcessGroupNCCL.cpp:616] [Rank {rank}] Watchdog "
                         f"caught collective operation timeout: WorkNCCL(SeqNum=301, OpType=ALLREDUCE, NumelIn=1, "
                         f"NumelOut=1, Timeout(ms)=600000) ran for 600010 milliseconds before timing out.")
    lines.append(f"slurmstepd: error: *** STEP 77.0 ON {hosts[0]} CANCELLED AT 2026-03-02T14:14:03 ***")
    (folder / FAKE_NAME).write_text("\n".join(lines) + "\n", encoding="utf-8")
    (folder / "empty\x1b]0;t\x07\nroot cause    rank 9.log").write_bytes(b"")
    return folder


@pytest.fixture(scope="module")
def hostile(tmp_path_factory) -> Path:
    return hostile_job(tmp_path_factory.mktemp("hostile") / "job")


def hostile_report() -> Report:
    """A hand-built report whose every log- and rule-derived string is an attack."""
    rep = make_report(hosts=[f"gpu-a01{ESCAPES}", "![x](//evil/p)\n# Fake heading <img src=x onerror=alert(1)>"],
                      root_text=f"OSError: {ESCAPES} {MD_ATTACK}")
    root = rep.root_cause
    assert root is not None
    root = replace(
        root, title=f"Checkpoint save failed {ESCAPES}", host=rep.ranks[4].host,
        evidence=(Evidence(path=FAKE_NAME, line=3, text=f"OSError {ESCAPES}"),),
        context=("~~~~", MD_ATTACK, "~" * 9, "`````", f"line {ESCAPES}"),
        why=(f"rank 1 on {rep.ranks[4].host} has the earliest primary failure",
             # code-span look-alikes that CommonMark does not read as code spans
             "`x```[c](javascript:alert(2))` and \\`[d](javascript:alert(3))`",
             "[ref]: javascript:alert(4)\n[ref] and <http://evil/autolink>"),
        # rule prose keeps its own Markdown blocks (a rule file is configuration), but no link or HTML
        mechanism=f"The file system returned `EIO`.\n\n{MD_ATTACK}\n[r]: javascript:alert(5)",
        confirm=(f"Look at {MD_ATTACK}\n# Fake confirm heading",))
    return replace(rep, root_cause=root,
                   diagnostics=(Diagnostic("warning", FAKE_NAME, f"cannot read {ESCAPES}"),))


def _commonmark(text: str) -> str:
    from markdown_it import MarkdownIt

    return MarkdownIt("commonmark").enable("table").render(text)


# --- item 1: control characters --------------------------------------------------------------------


def test_visible_shows_every_control_but_tab_and_is_idempotent() -> None:
    every = "".join(chr(c) for c in range(0x20)) + "\x7f" + "".join(chr(c) for c in range(0x80, 0xA0))
    shown = visible(every)
    assert raw_controls(shown) == [] and "\n" not in shown and "\t" in shown
    assert "\\x1b" in shown and "\\x9b" in shown and "\\x0a" in shown and "\\x7f" in shown
    assert visible(shown) == shown and visible("plain: ok [x] `y`") == "plain: ok [x] `y`"
    assert visible_lines("a\nb\x1bc") == "a\nb\\x1bc"
    assert visible("\u202egnp.exe \u2028") == "\\u202egnp.exe \\u2028"


def test_json_safe_keeps_the_value_and_writes_no_raw_control() -> None:
    value = {"text": ESCAPES + "\u2028"}
    dumped = json_safe(json.dumps(value, ensure_ascii=False))
    assert raw_controls(dumped) == [] and json.loads(dumped) == value


@pytest.mark.parametrize("fmt", ["terminal", "color", "json", "markdown", "html", "trace"])
def test_no_output_of_a_hostile_job_carries_a_raw_control(hostile: Path, fmt: str, tmp_path: Path) -> None:
    args = ["-f", "terminal", "--color"] if fmt == "color" else ["-f", fmt]
    out = tmp_path / f"report.{fmt}"
    r = cli(str(hostile), *args, "--tz", "UTC", "-o", str(out))
    assert r.returncode == 0, r.stderr
    text = out.read_text(encoding="utf-8")
    assert raw_controls(text, colours=fmt == "color") == []
    assert raw_controls(r.stderr.decode()) == []
    if fmt in ("terminal", "color"):
        plain = _OWN_COLOURS.sub("", text)
        # the verdict is named once; the file name's newline did not print a line of its own
        assert [x.split()[:2] for x in plain.splitlines() if x.startswith("root cause")] == [["root", "cause"]]
        words = " ".join(plain.split())  # the summary wraps at the width: compare words
        assert "rank 1 on gpu-b07" in words and "\\x0aroot cause rank 0 (node fake)" in words
        assert "\\x1bc" in plain and "\\x9b31m" in plain  # shown, not silently dropped
    if fmt == "json":
        doc = json.loads(text)
        assert doc["root_cause"]["rank"] == 1
        ev = doc["root_cause"]["evidence"][0]
        assert ev["path"].endswith(FAKE_NAME) and "\x9b31m" in ev["text"] and "\x1bc" in ev["text"]


def test_stdout_terminal_summary_of_a_hostile_job(hostile: Path) -> None:
    r = cli(str(hostile), "--tz", "UTC")
    assert r.returncode == 0, r.stderr
    assert raw_controls(r.stdout.decode()) == [] and raw_controls(r.stderr.decode()) == []


def test_the_cli_error_line_shows_a_hostile_file_name(tmp_path: Path) -> None:
    r = cli(str(tmp_path / "gone\x1b]0;title\x07\nroot cause    rank 0.log"))
    assert r.returncode == 3
    err = r.stderr.decode()
    assert len(err.strip().splitlines()) == 1 and raw_controls(err) == []
    assert "gone\\x1b]0;title\\x07\\x0aroot cause" in err


def test_renderers_in_process_show_controls_of_titles_hosts_and_paths() -> None:
    rep = hostile_report()
    for text, colours in ((terminal.render(rep), False), (terminal.render(rep, color=True), True),
                          (markdown.render(rep), False), (html_report.render(rep), False)):
        assert raw_controls(text, colours=colours) == []
    plain = terminal.render(rep, width=1000)  # wide: the escapes are looked for whole, not wrapped
    assert "Checkpoint save failed \\x1b]0;pwned title\\x07" in plain
    assert not any(line.startswith("root cause    rank 0") for line in plain.splitlines())


def test_html_pre_gets_no_fake_line_from_a_file_name() -> None:
    page = html_report.render(hostile_report())
    pre = re.search(r'<pre[^>]*><span class="sub">(.*?)</span>\n(.*?)</pre>', page, re.S)
    assert pre is not None and "\n" not in pre.group(1) and "\\x0aroot cause" in pre.group(1)


def test_history_tables_show_controls_and_open_no_link(tmp_path: Path) -> None:
    from correlator import history
    from correlator.report import parquet

    for job in ("1", "2"):  # the same hostile host is the root twice: a drain candidate row
        parquet.write_parquet(hostile_report(), tmp_path, job)
    summary = history.summarize(tmp_path)
    assert summary.repeated_roots and "\n" in summary.repeated_roots[0].host
    table = history.render(summary, "table")
    assert raw_controls(table) == [] and "# Fake heading" not in table.split("\n# ")[0].splitlines()[0]
    assert not any(line.startswith("# Fake heading") for line in table.splitlines())
    rendered = _commonmark(history.render(summary, "markdown"))
    assert "<img" not in rendered and "<a " not in rendered and "<h1>Fake" not in rendered
    dumped = history.render(summary, "json")
    assert raw_controls(dumped) == [] and json.loads(dumped)["repeated_roots"][0]["host"] == summary.repeated_roots[0].host


# --- item 2: Markdown injection -------------------------------------------------------------------


def test_no_log_line_closes_the_fence_and_prose_opens_no_link_or_html() -> None:
    rep = hostile_report()
    doc = markdown.render(rep)
    rendered = _commonmark(doc)
    assert "<img" not in rendered and "<script" not in rendered
    links = re.findall(r'<a href="([^"]*)"', rendered)
    assert links == list(rep.root_cause.references)  # the rule's own references, nothing from the logs
    assert "Fake" not in " ".join(re.findall(r"<h\d>(.*?)</h\d>", rendered))
    # the whole context is one code block: every line of it is inside the same <pre>
    blocks = re.findall(r"<pre><code[^>]*>(.*?)</code></pre>", rendered, re.S)
    around = [b for b in blocks if "~~~~" in b]
    assert len(around) == 1 and "`````" in around[0] and "line \\x1b]0;pwned" in around[0]
    assert "&lt;img src=x onerror=alert(1)&gt;" in around[0]


def test_a_hostile_job_end_to_end_renders_no_image_link_or_html(hostile: Path) -> None:
    r = cli(str(hostile), "-f", "markdown", "--tz", "UTC")
    assert r.returncode == 0, r.stderr
    rendered = _commonmark(r.stdout.decode())
    assert "<img" not in rendered and 'href="javascript' not in rendered
    around = [b for b in re.findall(r"<pre><code[^>]*>(.*?)</code></pre>", rendered, re.S) if "Traceback" in b]
    assert len(around) == 1 and "~~~~~~~~" in around[0] and "OSError" in around[0]


@pytest.mark.parametrize("text", [
    "![x](//evil/p)", "[c](javascript:alert(1))", "[c][r]", "<img src=x onerror=alert(1)>",
    "<http://evil/>", "`a```[c](javascript:x)`", "\\`[c](javascript:x)`", "[r]: javascript:x\n[r]",
    "x\\](javascript:x)", "[a [b](c)](d)",
])
def test_md_prose_cannot_link_or_open_html(text: str) -> None:
    for inline in (False, True):
        rendered = _commonmark(markdown.md_prose(text, inline=inline))
        assert "<a " not in rendered and "<img" not in rendered, (text, rendered)


def test_md_prose_keeps_the_markdown_of_ordinary_rule_text() -> None:
    text = "Run `lfs check osts` on *the* node [rank25]: see `[c](x)` and (a) [b]."
    assert markdown.md_prose(text) == text and markdown.md_prose(text, inline=True) == text


def test_fence_is_longer_than_any_run_of_tildes() -> None:
    assert markdown.fence_for(["plain"]) == "~~~"
    assert markdown.fence_for(["a ~~~ b"]) == "~~~~"
    assert markdown.fence_for(["~~~~", "x ~~~~~~~~ y"]) == "~" * 9


# --- item 3: job ids from log text ----------------------------------------------------------------


def _job_named_in_a_line(folder: Path, job_line_id: str) -> Path:
    """A job whose only job id is in the scheduler's line (the file is not named slurm-<id>)."""
    write_job(folder, "4242")
    text = (folder / "slurm-4242.out").read_text().replace("*** STEP 4242.0 ON", f"*** JOB {job_line_id} ON")
    (folder / "slurm-4242.out").unlink()
    (folder / "train.out").write_text(text)
    return folder


@pytest.mark.parametrize("job_line_id", [".5", "..", "9" * 3900, "a" * 65, "+1"])
def test_a_job_id_that_cannot_name_a_partition_is_replaced_by_a_stable_hash(tmp_path: Path, job_line_id: str) -> None:
    from correlator.model import DiagCode
    from correlator.pipeline import Options, analyze
    from correlator.report import parquet

    folder = _job_named_in_a_line(tmp_path / "job", job_line_id)
    reports = [analyze([str(folder)], Options(workers=1, tz="UTC")) for _ in range(2)]
    ids = [r.job.id for r in reports]
    assert ids[0] == ids[1] and re.fullmatch(r"job-[0-9a-f]{12}", str(ids[0])), ids
    said = [d for d in reports[0].diagnostics if d.code is DiagCode.JOB_ID_REPLACED]
    assert len(said) == 1 and said[0].level == "warning" and str(ids[0]) in said[0].message
    assert "--job-id" in said[0].message and len(said[0].message) < 400
    assert reports[0].root_cause is not None and reports[0].root_cause.rank == 1
    written = parquet.write_parquet(reports[0], tmp_path / "pq", str(ids[0]))
    assert all(p.is_file() for p in written) and written[0].parent.name == f"job_id={ids[0]}"


@pytest.mark.parametrize("job_line_id, expected", [("55595933.0", "55595933"), ("1234+1", "1234"), ("77", "77")])
def test_a_plain_job_id_from_a_line_is_kept(tmp_path: Path, job_line_id: str, expected: str) -> None:
    from correlator.model import DiagCode
    from correlator.pipeline import Options, analyze

    report = analyze([str(_job_named_in_a_line(tmp_path / "job", job_line_id))], Options(workers=1, tz="UTC"))
    assert report.job.id == expected
    assert not [d for d in report.diagnostics if d.code is DiagCode.JOB_ID_REPLACED]


def test_the_cli_writes_the_parquet_partition_of_a_job_dot_five(tmp_path: Path) -> None:
    folder = _job_named_in_a_line(tmp_path / "job", ".5")
    r = cli(str(folder), "--tz", "UTC", "--parquet", str(tmp_path / "pq"), "-f", "json")
    assert r.returncode == 0, r.stderr  # was 70: "job id '' cannot name a partition"
    doc = json.loads(r.stdout)
    assert (tmp_path / "pq" / "incidents" / f"job_id={doc['job']['id']}" / "part-0.parquet").is_file()
    assert [d["code"] for d in doc["diagnostics"] if d["code"] == "job-id-replaced"] == ["job-id-replaced"]


# --- item 6: folder walking -----------------------------------------------------------------------


@pytest.fixture
def nest(tmp_path: Path):
    """Makes ``top/d/d/.../d`` one level at a time (``os.makedirs`` recurses) and removes it the same
    way afterwards: pytest's clean-up (``shutil.rmtree``) recurses once per level and would fail."""
    made: list[Path] = []

    def make(top: Path, levels: int) -> Path:
        path = top
        for _ in range(levels):
            path = path / "d"
            path.mkdir()
            made.append(path)
        return path

    yield make
    for folder in reversed(made):
        for entry in folder.iterdir():
            if not entry.is_dir() or entry.is_symlink():
                entry.unlink()
        folder.rmdir()


def test_a_thousand_nested_folders_are_walked_without_recursion(tmp_path: Path, nest) -> None:
    from correlator.extract import sources

    job = write_job(tmp_path / "job", "4242")
    bottom = nest(job, 1100)
    (bottom / "rank-0.log").write_text("2026-03-02 14:01:00,000 - train - INFO - step=100 loss=2.31\n")
    (job / "d" / "d" / "d" / "note-abc.log").write_text("[eval] ok\n")  # shallow: read
    r = cli(str(job), "--tz", "UTC", "-f", "json")
    assert r.returncode == 0, r.stderr  # was 70: RecursionError
    doc = json.loads(r.stdout)
    assert doc["root_cause"]["rank"] == 1 and doc["stats"]["sources"] == 2
    (deep,) = [d for d in doc["diagnostics"] if d["code"] == "too-deep"]
    assert deep["level"] == "warning" and deep["path"].count("/d") == sources.MAX_DEPTH + 1
    assert doc["stats"]["skipped"]["too-deep"]["sources"] == 1
    # a pattern with ** walks the same way
    r = cli(str(job) + "/**/*.out", "--tz", "UTC", "-f", "json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["root_cause"]["rank"] == 1


def test_links_that_leave_the_folder_given_are_not_followed(tmp_path: Path) -> None:
    job = write_job(tmp_path / "job", "4242")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    # outside the folder: a rank's OOM an hour earlier would change the verdict if it were read
    (elsewhere / "rank-3.log").write_text("2026-03-02 13:00:00,000 - train - INFO - step=1\ntorch.OutOfMemoryError: "
                                          "CUDA out of memory. Tried to allocate 2.00 GiB.\n")
    (job / "sub").mkdir()
    (job / "sub" / "note-abc.log").write_text("[eval] ok\n")
    os.symlink("/etc", job / "etc")
    os.symlink(elsewhere / "rank-3.log", job / "rank-3.log")
    os.symlink(elsewhere, job / "more")
    os.symlink(job / "sub", job / "same-sub")  # inside: followed (and the folder read once)
    os.symlink("..", job / "sub" / "up")  # back to the top: inside, a loop
    r = cli(str(job), "--tz", "UTC", "-f", "json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["root_cause"]["rank"] == 1 and doc["stats"]["sources"] == 2  # the job and sub/note-abc.log
    outside = sorted(Path(d["path"]).name for d in doc["diagnostics"] if d["code"] == "link-outside")
    assert outside == ["etc", "more", "rank-3.log"]
    assert doc["stats"]["skipped"]["link-outside"]["sources"] == 3
    assert not any("/etc/" in (e["path"] or "") for e in doc["timeline"])
    assert any(d["code"] == "symlink-loop" for d in doc["diagnostics"])
    # what the user names is read: the link's target passed by name
    r = cli(str(job), str(elsewhere / "rank-3.log"), "--tz", "UTC", "-f", "json")
    assert json.loads(r.stdout)["stats"]["sources"] == 3


@pytest.mark.parametrize("pattern, path, hit", [
    ("**/*.log", "a/b/c.log", True), ("**/*.log", "c.log", True), ("**/*.log", "a/.hidden/c.log", False),
    ("*/x/**", "a/x/y/z", True), ("*/x/**", "a/y/z", False), ("**/rank-*.out", "a/rank-1.out", True),
    ("**/*.log", "a/.c.log", False), (".*/**/*.log", ".cache/a/c.log", True),
])
def test_recursive_patterns_match_like_glob(pattern: str, path: str, hit: bool) -> None:
    from correlator.extract.sources import _glob_match

    assert _glob_match(pattern.split("/"), path.split("/")) is hit
