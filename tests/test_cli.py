"""The command line as a user meets it: exit codes and the first line of stderr."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from jobs import combined_srun, rank_lines

ROOT = Path(__file__).resolve().parent.parent


def cli(*args: str, cwd: Path | None = None, input: bytes | None = None, env: dict | None = None):
    e = {**os.environ, **(env or {})}
    return subprocess.run([sys.executable, "-m", "correlator", *args], capture_output=True, cwd=cwd,
                          input=input, env=e, timeout=120)


@pytest.fixture()
def job(tmp_path: Path) -> Path:
    p = tmp_path / "slurm-4242.out"
    p.write_text("\n".join(combined_srun(rank_lines(8, 4, 5), 4)) + "\n")
    return p


def test_analyze_terminal_and_exit_code(job):
    r = cli(str(job), "--tz", "UTC")
    assert r.returncode == 0, r.stderr
    first = r.stdout.decode().splitlines()[0]
    assert first.startswith("root cause") and "rank 5" in first


def test_json_output_file(job, tmp_path):
    out = tmp_path / "r.json"
    r = cli(str(job), "-f", "json", "-o", str(out))
    assert r.returncode == 0
    doc = json.loads(out.read_text())
    assert doc["schema"] == "correlate.report/1" and doc["root_cause"]["rank"] == 5


def test_stdin(job):
    r = cli("-", "-f", "json", input=job.read_bytes())
    assert r.returncode == 0
    assert json.loads(r.stdout)["root_cause"]["rank"] == 5


def test_missing_path_is_one_clear_line(tmp_path):
    r = cli(str(tmp_path / "nope.out"))
    assert r.returncode == 3
    err = r.stderr.decode().strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: no log could be read") and "nope.out" in err[0]
    assert "Traceback" not in r.stderr.decode()


def test_missing_path_beside_a_real_one_is_a_diagnostic(job, tmp_path):
    r = cli(str(job), str(tmp_path / "nope.out"), "-f", "json")
    assert r.returncode == 0
    doc = json.loads(r.stdout)
    assert doc["root_cause"]["rank"] == 5
    assert any("nope.out" in (d["path"] or "") and d["level"] == "error" for d in doc["diagnostics"])


def test_bad_rule_file_stops_with_one_line(job, tmp_path):
    bad = tmp_path / "rules" / "custom"
    bad.mkdir(parents=True)
    (bad / "broken.toml").write_text('schema = 1\nid = "custom.broken"\nbogus_key = 1\n')
    r = cli(str(job), "--rules", str(tmp_path / "rules"))
    assert r.returncode == 2
    err = r.stderr.decode().strip().splitlines()
    assert len(err) == 1 and "broken.toml" in err[0] and "bogus_key" in err[0]


def test_unreadable_file_is_reported_not_fatal(job, tmp_path):
    # a log whose target vanished (a dangling link, as on a scratch file system after a purge)
    gone = tmp_path / "rank-9.out"
    os.symlink(tmp_path / "purged" / "rank-9.out", gone)
    r = cli(str(job), str(gone), "-f", "json")
    assert r.returncode == 0
    doc = json.loads(r.stdout)
    mine = [d for d in doc["diagnostics"] if "rank-9.out" in (d["path"] or "")]
    assert len(mine) == 1 and mine[0]["level"] == "error"
    assert doc["root_cause"]["rank"] == 5


def test_unknown_format_and_scanner(job):
    r = cli(str(job), "-f", "yaml")
    assert r.returncode == 2 and r.stderr.decode().startswith("error: invalid value for '--format' / '-f': 'yaml'")
    r = cli(str(job), "--scanner", "nope")
    assert r.returncode == 2 and r.stderr.decode().startswith("error: invalid value for '--scanner': 'nope' is not "
                                                              "one of 'auto', 'hyperscan', 'regex'")


def test_fail_on_failure(job):
    assert cli(str(job), "--fail-on-failure").returncode == 1


def test_rules_commands():
    r = cli("rules", "list", "--category", "nccl")
    assert r.returncode == 0 and "nccl.watchdog-collective-timeout" in r.stdout.decode()
    r = cli("rules", "explain", "nccl.watchdog-collective-timeout")
    assert r.returncode == 0
    out = r.stdout.decode()
    assert "Mechanism" in out and "Fix" in out and "Confirm" in out
    r = cli("rules", "explain", "nccl.nope")
    assert r.returncode == 2 and r.stderr.decode().startswith("error: no rule")


def test_rules_check_reports_every_broken_file(tmp_path):
    d = tmp_path / "r" / "custom"
    d.mkdir(parents=True)
    (d / "a.toml").write_text("not toml [")
    (d / "b.toml").write_text('schema = 1\nid = "custom.b"\n')
    r = cli("rules", "check", "--no-builtin-rules", "--rules", str(tmp_path / "r"))
    assert r.returncode == 1
    err = r.stderr.decode()
    assert "a.toml" in err and "not valid TOML" in err and "b.toml" in err and "missing required key" in err


def test_help_for_every_command():
    for args in ([], ["analyze"], ["rules"], ["rules", "check"], ["rules", "list"], ["rules", "explain"], ["history"]):
        r = cli(*args, "--help")
        assert r.returncode == 0 and b"Usage" in r.stdout, args


def test_parquet_pointed_at_a_file_is_one_line(job, tmp_path):
    f = tmp_path / "not-a-dir"
    f.write_text("x")
    r = cli(str(job), "--parquet", str(f))
    err = r.stderr.decode().strip().splitlines()
    assert r.returncode == 2 and len(err) == 1 and "needs a folder" in err[0]


def test_follow_with_json_keeps_stdout_json(job):
    r = cli("--follow", str(job), "-f", "json", "--interval", "0.05", "--quiet", "0.5")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["root_cause"]["rank"] == 5


# --- the plain path: paths and report options only (no typer coercion; extraction started early) ---

GEN = [sys.executable, str(ROOT / "benchmarks" / "gen_speed.py")]


@pytest.fixture(scope="module")
def pool_job(tmp_path_factory) -> Path:
    """A 64-rank job of ~40 MB: big enough for the local pool (engines.POOL_MIN_BYTES)."""
    out = tmp_path_factory.mktemp("pool") / "job"
    subprocess.run(GEN + ["ranks", "--ranks", "64", "--per-rank", "640K", "-o", str(out)], check=True,
                   stderr=subprocess.DEVNULL, timeout=120)
    return out


def test_plain_command_line_gives_the_report_of_the_typer_path(pool_job, tmp_path):
    from correlator.extract.engines import POOL_MIN_BYTES

    assert sum(p.stat().st_size for p in pool_job.iterdir()) >= POOL_MIN_BYTES
    runs = {
        "plain, started early": (["analyze", str(pool_job), "-f", "json", "-o"], {}),
        "plain, not early": ([str(pool_job), "--format=json", "--output"], {"CORRELATE_EARLY_POOL": "0"}),
        # --interval only matters with --follow: it sends the command line through typer's parse
        "typer": ([str(pool_job), "--interval", "2", "-f", "json", "-o"], {}),
    }
    docs = {}
    for i, (name, (args, env)) in enumerate(runs.items()):
        out = tmp_path / f"{i}.json"
        r = cli(*args, str(out), env=env)
        assert r.returncode == 0, (name, r.stderr.decode()[-2000:])
        docs[name] = json.loads(out.read_text())
        assert docs[name]["stats"].pop("seconds") > 0
        assert docs[name]["stats"].pop("analyzed_at").endswith("Z")  # when it ran: its own each time
    first = docs["typer"]
    assert first["root_cause"]["rank"] is not None
    for name, doc in docs.items():
        assert doc == first, name


def test_a_command_of_paths_and_report_options_takes_the_plain_path():
    """The plain path is taken at all: with a typer that carries its own copy of click (0.25 and
    later), the check that the command is a click ``Group`` was never true, so every command line
    went through typer's coercion (pydantic's import) and no extraction started early."""
    from correlator.cli import _plain_analyze

    assert _plain_analyze(["job/", "-f", "json", "-o", "r.json"]) == {"paths": ["job/"], "fmt": "json",
                                                                      "output": Path("r.json")}
    assert _plain_analyze(["a.out", "b.out", "--brief"]) == {"paths": ["a.out", "b.out"], "brief": True}
    for typer_path in (["job/", "--tz", "UTC"], ["job/", "-f", "yaml"], ["--format", "json"], ["job/", "--bogus"]):
        assert _plain_analyze(typer_path) is None, typer_path


def test_plain_command_line_keeps_exit_codes_and_errors(pool_job, tmp_path):
    r = cli(str(pool_job), "--fail-on-failure", "-f", "json")
    assert r.returncode == 1 and json.loads(r.stdout)["verdict"] == "root_cause"
    r = cli(str(pool_job), "-f", "yaml")
    assert r.returncode == 2 and r.stderr.decode().startswith("error: invalid value for '--format' / '-f': 'yaml'")
    r = cli(str(pool_job), "--bogus")
    assert r.returncode == 2 and "--bogus" in r.stderr.decode()


def test_early_extraction_of_files_that_changed_is_redone(pool_job, tmp_path):
    """Extraction started before the rules were loaded is thrown away when a file changed since."""
    import shutil

    from correlator.extract import engines
    from correlator.pipeline import Options, analyze

    job = tmp_path / "job"
    shutil.copytree(pool_job, job)
    engines.speculate([str(job)])
    assert engines._SPECULATION is not None
    victim = sorted(job.iterdir())[3]
    with open(victim, "a") as f:
        f.write("2026-03-02 16:00:00,000 - root - ERROR - RuntimeError: CUDA error: an illegal memory access "
                "was encountered\n")
    report = analyze([str(job)], Options())
    assert engines._SPECULATION is None and engines._EARLY is None
    texts = [e.text for e in report.timeline if e.path == str(victim)]
    assert any("illegal memory access" in t for t in texts)


def test_nothing_is_read_early_from_a_fifo(pool_job, tmp_path):
    """A named pipe gives its bytes once: extraction is not started early when one is named."""
    from correlator.extract import engines

    fifo = tmp_path / "live.log"
    os.mkfifo(fifo)
    engines.speculate([str(pool_job), str(fifo)])
    try:
        assert engines._SPECULATION is None and engines._EARLY is None
    finally:
        engines.drop_early()
    engines.speculate([str(pool_job)])
    try:
        assert engines._SPECULATION is not None
    finally:
        engines.drop_early()
    assert engines._SPECULATION is None and engines._EARLY is None


# --- the option surface: -h, boolean pairs, choices, completion (issue 15 item 8) ----------------

COMMANDS = ([], ["analyze"], ["rules"], ["rules", "check"], ["rules", "list"], ["rules", "explain"],
            ["rules", "site"], ["history"], ["serve"], ["completion"])


def _help(*args: str) -> str:
    r = cli(*args, "--help", env={"COLUMNS": "200", "NO_COLOR": "1", "TERM": "dumb"})
    assert r.returncode == 0, (args, r.stderr)
    return r.stdout.decode()


@pytest.mark.slow
def test_dash_h_is_help_on_every_command():
    for args in COMMANDS:
        r = cli(*args, "-h", env={"COLUMNS": "200", "NO_COLOR": "1", "TERM": "dumb"})
        assert r.returncode == 0, (args, r.stderr)
        assert r.stdout.decode() == _help(*args), args


@pytest.mark.slow
def test_no_boolean_option_reads_no_no():
    import re

    for args in COMMANDS:
        text = _help(*args)
        assert "--no-no-" not in text, args
        # a boolean with a negative form shows it beside the positive one, and never alone
        for neg in re.findall(r"--no-([a-z-]+)", text):
            assert f"--{neg}" in text.replace(f"--no-{neg}", ""), (args, neg)
    analyze = _help("analyze")
    for pair in ("--redact", "--no-redact", "--builtin-rules", "--no-builtin-rules", "--color", "--no-color"):
        assert pair in analyze, pair
    for flag in ("--all-files", "--fail-on-failure", "--follow"):
        assert f"--no-{flag[2:]}" not in analyze, flag


def test_both_forms_of_a_boolean_pair_work(tmp_path):
    job = tmp_path / "slurm-1.out"
    job.write_text("[rank3]: RuntimeError: CUDA error: out of memory (key AKIAABCDEFGHIJKLMNOP)\n")
    runs = {flag: cli(str(job), "-f", "json", *flag) for flag in ((), ("--redact",), ("--no-redact",))}
    assert all(r.returncode == 0 for r in runs.values()), {k: r.stderr for k, r in runs.items()}
    texts = {k: json.loads(r.stdout)["root_cause"]["evidence"][0]["text"] for k, r in runs.items()}
    assert texts[("--no-redact",)].endswith("(key AKIAABCDEFGHIJKLMNOP)")
    assert "ABCDEFGHIJKLMNOP" not in texts[("--redact",)] and "***" in texts[("--redact",)] and texts[("--redact",)] == texts[()]
    # --no-builtin-rules without --rules: no rule to find the OOM with
    r = cli(str(job), "-f", "json", "--no-builtin-rules", "--workers", "1")
    assert r.returncode == 0 and json.loads(r.stdout)["root_cause"] is None


def test_choices_are_listed_in_help_and_enforced(job):
    for args, choices in ((["analyze"], ("terminal", "json", "markdown", "html", "trace")),
                          (["analyze"], ("local", "dask")), (["analyze"], ("auto", "hyperscan", "regex")),
                          (["rules", "list"], ("table", "json")), (["history"], ("table", "json", "markdown")),
                          (["completion"], ("bash", "zsh", "fish", "powershell"))):
        assert "|".join(choices) in _help(*args), (args, choices)
    for args in (["-f", "yaml"], ["--engine", "spark"], ["--format", "yaml", "--workers", "1"]):
        r = cli(str(job), *args)
        err = r.stderr.decode().strip().splitlines()
        assert r.returncode == 2 and len(err) == 1, (args, err)
        assert err[0].startswith("error: invalid value for") and "is not one of" in err[0], err
    from correlator.history import RENDERERS

    assert tuple(RENDERERS) == ("table", "json", "markdown")  # the choices history --format offers


def test_completion_prints_a_script_for_each_shell():
    for shell, marker in (("bash", "complete -o default -F _correlate_completion correlate"),
                          ("zsh", "#compdef correlate"), ("fish", "complete --command correlate"),
                          ("powershell", "Register-ArgumentCompleter")):
        r = cli("completion", shell)
        assert r.returncode == 0 and marker in r.stdout.decode() and "_CORRELATE_COMPLETE" in r.stdout.decode(), shell
    r = cli("completion", "ksh")
    assert r.returncode == 2 and "'bash', 'zsh', 'fish', 'powershell'" in r.stderr.decode()


def _complete(words: str) -> list[str]:
    parts = words.split(" ")
    r = cli(env={"_CORRELATE_COMPLETE": "complete_bash", "COMP_WORDS": words, "COMP_CWORD": str(len(parts) - 1)})
    assert r.returncode == 0, r.stderr
    return r.stdout.decode().split()


def test_completion_answers_what_the_script_asks():
    assert _complete("correlate rules l") == ["list"]
    assert "history" in _complete("correlate h")
    assert _complete("correlate analyze x.log --format ") == ["terminal", "json", "markdown", "html", "trace"]
    # 'correlate PATH ...' is 'correlate analyze PATH ...' for completion as for running
    assert _complete("correlate logs/ --fail") == ["--fail-on-failure"]
    assert _complete("correlate logs/ --no-re") == ["--no-redact"]
    assert _complete("correlate rules list --role x --format ") == ["table", "json"]


# --- Ctrl-C (issue 15 item 8, issue 18 item 4) ------------------------------------------------------


def _descendants(pid: int) -> set[int]:
    """Live (not zombie) processes under ``pid``, from /proc."""
    parents: dict[int, list[int]] = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            stat = Path(f"/proc/{d}/stat").read_text()
        except OSError:
            continue
        state, ppid = stat.rsplit(")", 1)[1].split()[:2]
        if state != "Z":
            parents.setdefault(int(ppid), []).append(int(d))
    out, todo = set(), [pid]
    while todo:
        for child in parents.get(todo.pop(), []):
            if child not in out:
                out.add(child)
                todo.append(child)
    return out


def _alive(pids: set[int]) -> set[int]:
    alive = set()
    for p in pids:
        try:
            if Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z":
                alive.add(p)
        except OSError:
            pass
    return alive


@pytest.fixture(scope="module")
def slow_job(tmp_path_factory) -> Path:
    """16 rank files of 4 MB: with the pure-Python scanner, tens of seconds of work for the pool."""
    out = tmp_path_factory.mktemp("slow") / "job"
    subprocess.run(GEN + ["ranks", "--ranks", "16", "--per-rank", "4M", "-o", str(out)], check=True,
                   stderr=subprocess.DEVNULL, timeout=120)
    return out


@pytest.mark.parametrize("who, extra", [("group", []), ("parent", ["-j", "2", "-f", "json"])])
def test_ctrl_c_stops_the_workers_and_exits_130(slow_job, who, extra):
    """A terminal's Ctrl-C (SIGINT to the process group: the plain path, whose workers start early)
    and a SIGINT to the parent alone (the typer path): the parent and every worker are gone within
    a bounded wait, long before the work would have ended, exit 130, no traceback."""
    import signal
    import time

    env = {**os.environ, "CORRELATE_SCANNER": "regex"}
    p = subprocess.Popen([sys.executable, "-m", "correlator", str(slow_job), *extra], env=env, start_new_session=True,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 60
        while len(kids := _descendants(p.pid)) < 2 and p.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(kids) >= 2, "the pool did not start"
        time.sleep(0.5)  # the workers are reading
        kids = _descendants(p.pid)
        assert p.poll() is None, "the analysis ended before it could be interrupted"
        if who == "group":
            os.killpg(p.pid, signal.SIGINT)
        else:
            os.kill(p.pid, signal.SIGINT)
        deadline = time.monotonic() + 2.0  # bounded wait, polled (the work left is tens of seconds)
        while (p.poll() is None or _alive(kids)) and time.monotonic() < deadline:
            time.sleep(0.05)
        code = p.poll()
        err = p.stderr.read().decode() if code is not None else ""  # type: ignore[union-attr]
        # 130, or ended by the SIGINT itself (what a shell also reports as 130)
        assert code in (130, -signal.SIGINT), (code, err)
        assert not _alive(kids), f"workers still running: {_alive(kids)}"
        assert "Traceback" not in err, err
    finally:
        if p.poll() is None:
            os.killpg(p.pid, 9)
        for k in _alive(_descendants(p.pid)):
            os.kill(k, 9)
        p.wait()


def test_progress_bar_shows_bytes_rate_and_time_left():
    """The bar (rich) after its delay: bytes of the total, the rate once there are two reports, the
    time left, the files; closing it clears its line and shows the cursor again."""
    import io

    from correlator.progress import Progress

    now = [0.0]
    out = io.StringIO()
    bar = Progress(out, delay_s=2.0, clock=lambda: now[0], force_terminal=True, auto_refresh=False)
    bar(1, 64, 10_000_000, 1_000_000_000)
    assert out.getvalue() == ""  # a quick run prints nothing
    for t, files, done in ((2.5, 2, 20_000_000), (3.5, 10, 120_000_000), (4.5, 20, 320_000_000)):
        now[0] = t
        bar(files, 64, done, 1_000_000_000)
    import re

    shown = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", out.getvalue()).split("\r")[-1]
    assert "0.3/1.0 GB" in shown and "200.0 MB/s" in shown and "0:00:04" in shown and "20/64 files" in shown, shown
    bar.close()
    assert out.getvalue().endswith("\x1b[2K") and "\x1b[?25h" in out.getvalue()[-20:]


def test_ctrl_c_under_a_terminal_stops_the_bar_cleanly(slow_job):
    """stderr a terminal: the bar is drawn with bytes, rate and files; Ctrl-C clears it, shows the
    cursor again, exits 130 with nothing on stdout."""
    import pty
    import re
    import select
    import signal
    import time

    master, slave = pty.openpty()
    env = {**os.environ, "CORRELATE_SCANNER": "regex", "COLUMNS": "120", "TERM": "xterm"}
    p = subprocess.Popen([sys.executable, "-m", "correlator", str(slow_job), "-j", "2"], env=env,
                         start_new_session=True, stdout=subprocess.PIPE, stderr=slave, stdin=subprocess.DEVNULL)
    os.close(slave)
    got = b""

    def drain(until: float, stop=lambda: False) -> None:
        nonlocal got
        while time.monotonic() < until and not stop():
            ready, _, _ = select.select([master], [], [], 0.05)
            if ready:
                try:
                    got += os.read(master, 65536)
                except OSError:
                    return
    try:
        drain(time.monotonic() + 60, lambda: b"files" in got and b"/s" in got)
        assert p.poll() is None and b"files" in got, got[-300:]
        # the last read may end inside a frame: some whole frame drawn so far shows all three
        frames = re.sub(rb"\x1b\[[0-9;?]*[A-Za-z]", b"", got).split(b"\r")
        files = f"/{len(list(slow_job.iterdir()))} files".encode()
        assert any(re.search(rb"[\d.]+/[\d.]+ [kMG]B", f) and b"B/s" in f and files in f for f in frames), frames[-3:]
        os.killpg(p.pid, signal.SIGINT)
        drain(time.monotonic() + 5, lambda: p.poll() is not None)
        drain(time.monotonic() + 0.3)
        assert p.wait(timeout=5) == 130
        tail = got[got.rindex(b"files"):]
        assert b"\x1b[?25h" in tail and tail.rstrip(b"\r\n").endswith(b"\x1b[2K"), tail  # cursor back, line cleared
        assert b"Traceback" not in got and p.stdout.read() == b""  # type: ignore[union-attr]
    finally:
        if p.poll() is None:
            os.killpg(p.pid, 9)
        p.wait()
        os.close(master)


# --- the launcher: the pool forked before typer loads (correlator.launch) -------------------------

def test_the_launchers_options_are_the_plain_options_of_analyze():
    """``launch.EARLY_OPTIONS`` spells exactly the options of ``cli._PLAIN``, each taking a value
    where click's does: an option added, renamed or turned into a flag fails this."""
    from typer.main import get_command

    from correlator import launch
    from correlator.cli import _PLAIN, FORMATS, app

    cmd = get_command(app).commands["analyze"]  # type: ignore[attr-defined]
    spelled: dict[str, bool] = {}
    for p in cmd.params:
        if p.name in _PLAIN and p.param_type_name == "option":
            for opt in (*p.opts, *p.secondary_opts):
                spelled[opt] = not p.is_flag
    assert spelled == launch.EARLY_OPTIONS
    assert launch.FORMATS == FORMATS


_WORDS = ["a.log", "dir/", "x.json", "rules", "analyze", "json", "yaml", "html", "-", "--", "-x",
          "--tz", "UTC", "-j", "--bogus", "-fjson", "-f=json", "--format=json", "--format=yaml", "--brief=1",
          "--help", "-h", *__import__("correlator.launch", fromlist=["EARLY_OPTIONS"]).EARLY_OPTIONS]


@settings(max_examples=400, deadline=None)
@given(st.lists(st.sampled_from(_WORDS), max_size=7))
def test_the_launcher_reads_a_command_line_as_click_does(argv):
    """Where the launcher takes a command line for paths and report options, click's parser of the
    same command (``cli._plain_analyze``, after ``cli.main``'s 'analyze' rule) finds the same paths."""
    from correlator.cli import SUBCOMMANDS, _plain_analyze
    from correlator.launch import early_inputs

    paths = early_inputs(argv)
    if paths is None:
        return
    args = argv if argv[0] in SUBCOMMANDS else ["analyze", *argv]
    assert args[0] == "analyze"
    values = _plain_analyze(args[1:])
    assert values is not None, argv
    assert values["paths"] == paths


def test_the_launcher_starts_the_pool_only_for_a_plain_command_line(monkeypatch):
    from correlator import cli, launch
    from correlator.extract import engines

    asked: list[list[str]] = []
    monkeypatch.setattr(engines, "speculate", lambda inputs: asked.append(inputs))
    monkeypatch.setattr(cli, "main", lambda: None)
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    monkeypatch.delenv("CORRELATE_EARLY_POOL", raising=False)
    monkeypatch.delenv(launch.COMPLETE_VAR, raising=False)
    for argv, want in ((["job/", "-f", "json"], [["job/"]]), (["analyze", "a", "b", "--brief"], [["a", "b"]]),
                       (["job/", "--tz", "UTC"], []), (["history"], []), (["-"], [])):
        asked.clear()
        monkeypatch.setattr(sys, "argv", ["correlate", *argv])
        launch.main()
        assert asked == want, argv
    monkeypatch.setattr(sys, "argv", ["correlate", "job/"])
    for env in ({"CORRELATE_EARLY_POOL": "0"}, {launch.COMPLETE_VAR: "bash_complete"}):
        asked.clear()
        with monkeypatch.context() as m:
            for k, v in env.items():
                m.setenv(k, v)
            launch.main()
        assert asked == [], env
