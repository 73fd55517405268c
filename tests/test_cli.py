"""The command line as a user meets it: exit codes and the first line of stderr."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
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
    assert r.returncode == 2 and r.stderr.decode().startswith("error: unknown format")
    r = cli(str(job), "--scanner", "nope")
    assert r.returncode == 2 and r.stderr.decode().startswith("error: unknown scanner")


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
    first = docs["typer"]
    assert first["root_cause"]["rank"] is not None
    for name, doc in docs.items():
        assert doc == first, name


def test_plain_command_line_keeps_exit_codes_and_errors(pool_job, tmp_path):
    r = cli(str(pool_job), "--fail-on-failure", "-f", "json")
    assert r.returncode == 1 and json.loads(r.stdout)["verdict"] == "root_cause"
    r = cli(str(pool_job), "-f", "yaml")
    assert r.returncode == 2 and r.stderr.decode().startswith("error: unknown format 'yaml'")
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
