"""Parquet tables partitioned by job, and ``correlate history`` over them."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from report_fixtures import EIO, HOSTILE, NS, T0, _ranges, empty_report, make_report  # noqa: F401

from correlator import history
from correlator.errors import InputError, UsageError
from correlator.model import (
    Group,
    Verdict,
    iso,
)
from correlator.report import parquet


def test_three_tables_are_written_into_job_partitions(tmp_path: Path) -> None:
    written = parquet.write_parquet(make_report(), tmp_path, "88123")
    assert written == [tmp_path / t / "job_id=88123" / "part-0.parquet" for t in ("events", "ranks", "incidents")]
    assert all(p.is_file() for p in written)


def test_columns_have_the_documented_types(tmp_path: Path) -> None:
    import pyarrow as pa

    report = make_report()
    parquet.write_parquet(report, tmp_path, "88123")
    events = parquet.read_table(tmp_path, "events")
    assert events.num_rows == len(report.timeline)
    assert events.schema.field("time").type == pa.timestamp("ms", tz="UTC")
    assert events.schema.field("rank").type == pa.int32()
    assert events.schema.field("line").type == pa.int64()
    assert events.schema.field("job_id").type == pa.string()
    root = [r for r in events.to_pylist() if r["is_root"]]
    assert len(root) == 1 and root[0]["rank"] == 1 and root[0]["category"] == "storage"
    assert root[0]["time"].isoformat() == "2026-03-02T14:07:31.412000+00:00"
    agent = next(r for r in events.to_pylist() if r["rule"] == "slurm.step-cancelled")
    assert agent["rank"] is None and agent["host"] == "gpu-a01"

    ranks = parquet.read_table(tmp_path, "ranks").to_pylist()
    assert [r["rank"] for r in ranks] == list(range(8))
    assert [r["rank"] for r in ranks if r["is_root"]] == [1]
    assert {r["state"] for r in ranks} == {"root", "collateral"}

    incidents = parquet.read_table(tmp_path, "incidents").to_pylist()
    verdict = incidents[0]
    assert verdict["kind"] == "verdict" and verdict["verdict"] == "root_cause"
    assert (verdict["rule"], verdict["host"], verdict["rank"]) == ("storage.eio-on-checkpoint-save", "gpu-a01", 1)
    assert verdict["evidence"] == "slurm-88123.out:20418" and verdict["n_ranks"] == 8 and verdict["n_hosts"] == 2
    assert verdict["span_s"] == pytest.approx(3600 + 632)
    assert verdict["rank_hours"] == pytest.approx(8 * (3600 + 632) / 3600)
    groups = [r for r in incidents if r["kind"] == "group"]
    assert [g["rule"] for g in groups] == [g.rule for g in report.groups]
    assert groups[0]["ranks"] == "0,2-7" and groups[0]["count"] == 7 and groups[0]["rank_hours"] is None
    for table, schema in parquet.schemas().items():
        assert parquet.read_table(tmp_path, table).schema.names == schema.names and schema.names[-1] == "job_id"


def test_rerunning_a_job_replaces_its_partition(tmp_path: Path) -> None:
    parquet.write_parquet(make_report(), tmp_path, "88123")
    parquet.write_parquet(make_report(job_id="88124"), tmp_path, "88124")
    smaller = make_report(n_hosts=1, per_host=4)
    parquet.write_parquet(smaller, tmp_path, "88123")
    events = parquet.read_table(tmp_path, "events").to_pylist()
    assert sum(1 for e in events if e["job_id"] == "88123") == len(smaller.timeline)
    assert sum(1 for e in events if e["job_id"] == "88124") == len(make_report().timeline)
    assert sorted(p.name for p in (tmp_path / "events").iterdir()) == ["job_id=88123", "job_id=88124"]


def test_many_jobs_load_as_one_table_in_pandas(tmp_path: Path) -> None:
    import pandas as pd

    for job in ("1001", "00042", "slurm-1002", "a/b c"):
        parquet.write_parquet(make_report(job_id=job), tmp_path, job)
    # job_id is a string column in the files: read without Hive partitioning, ids keep their form
    frame = pd.read_parquet(tmp_path / "incidents", partitioning=None)
    assert sorted(set(frame["job_id"])) == ["00042", "1001", "a/b c", "slurm-1002"]
    assert len(frame[frame["kind"] == "verdict"]) == 4


def test_bad_job_ids_are_refused(tmp_path: Path) -> None:
    for bad in ("", " ", "..", "."):
        with pytest.raises(UsageError):
            parquet.write_parquet(make_report(), tmp_path, bad)
    assert parquet.partition_name("../x") == "job_id=..%2Fx"  # cannot climb out of the table folder


def test_job_level_and_no_failure_verdict_rows(tmp_path: Path) -> None:
    limit = Group(rule="slurm.time-limit", role="job", ranks="", count=1, first=iso(T0), last=iso(T0), label="job",
                  title="Job hit its time limit")
    parquet.write_parquet(replace(empty_report(Verdict.JOB_LEVEL), groups=(limit,)), tmp_path, "1")
    parquet.write_parquet(empty_report(Verdict.NO_FAILURE), tmp_path, "2")
    rows = {r["job_id"]: r for r in parquet.read_table(tmp_path, "incidents").to_pylist() if r["kind"] == "verdict"}
    assert (rows["1"]["verdict"], rows["1"]["rule"], rows["1"]["category"]) == ("job_level", "slurm.time-limit", "slurm")
    assert rows["2"]["verdict"] == "no_failure" and rows["2"]["rule"] is None
    assert parquet.read_table(tmp_path, "events").num_rows == 0


# --- history -------------------------------------------------------------------------------------


def _dataset(tmp_path: Path) -> Path:
    """Four jobs: two whose roots are on gpu-b07, one rooted elsewhere, one that hit its time limit."""
    out = tmp_path / "dataset"
    parquet.write_parquet(make_report(job_id="5001", hosts=["gpu-b07", "gpu-b08"], root_rank=2), out, "5001")
    parquet.write_parquet(make_report(job_id="5002", hosts=["gpu-c01", "gpu-b07"], root_rank=6), out, "5002")
    parquet.write_parquet(make_report(job_id="5003", hosts=["gpu-c01", "gpu-c02"], root_rank=0), out, "5003")
    limit = Group(rule="slurm.time-limit", role="job", ranks="", count=1, first=iso(T0), last=iso(T0), label="job")
    parquet.write_parquet(replace(empty_report(Verdict.JOB_LEVEL), groups=(limit,)), out, "5004")
    return out


def test_history_names_a_node_that_was_root_twice(tmp_path: Path) -> None:
    summary = history.summarize(_dataset(tmp_path))
    assert summary.jobs == 4 and dict(summary.verdicts) == {"root_cause": 3, "job_level": 1}
    assert summary.failures == 3
    assert [n.host for n in summary.repeated_roots] == ["gpu-b07"]
    node = summary.repeated_roots[0]
    assert node.failures == 2 and node.job_ids == ("5001", "5002") and node.ranks == (2, 6)
    assert node.rules == ("storage.eio-on-checkpoint-save",) and node.first == "2026-03-02T14:07:31.412Z"
    assert [(c.category, c.jobs) for c in summary.categories] == [("storage", 3), ("slurm", 1)]
    assert [(r.rule, r.jobs) for r in summary.rules] == [("storage.eio-on-checkpoint-save", 3), ("slurm.time-limit", 1)]


def test_rerun_does_not_count_a_job_twice(tmp_path: Path) -> None:
    out = _dataset(tmp_path)
    parquet.write_parquet(make_report(job_id="5001", hosts=["gpu-b07", "gpu-b08"], root_rank=2), out, "5001")
    summary = history.summarize(out)
    assert summary.jobs == 4 and summary.repeated_roots[0].failures == 2


def test_history_renderers(tmp_path: Path) -> None:
    summary = history.summarize(_dataset(tmp_path))
    table = history.render_table(summary)
    assert "candidates to drain" in table and "gpu-b07  2" in table and "5001, 5002" in table
    data = json.loads(history.render_json(summary))
    assert data["schema"] == "correlate.history/1" and data["repeated_roots"][0]["host"] == "gpu-b07"
    assert data["verdicts"] == {"root_cause": 3, "job_level": 1}
    md = history.render_markdown(summary)
    assert "## Nodes that were the root of more than one failure" in md
    assert "| gpu-b07 | 2 | storage.eio-on-checkpoint-save | 5001, 5002 |" in md
    assert set(history.RENDERERS) == {"table", "json", "markdown"}


def test_history_without_repeats_and_without_a_dataset(tmp_path: Path) -> None:
    out = tmp_path / "one"
    parquet.write_parquet(make_report(), out, "1")
    summary = history.summarize(out)
    assert summary.repeated_roots == ()
    assert "None: no node was the root" in history.render_markdown(summary)
    with pytest.raises(InputError):
        history.summarize(tmp_path / "missing")


# --- end to end: the real pipeline over small logs written here, and over sample_logs/*/ ---------

from report_fixtures import REPO, SAMPLE_JOBS, analyze_job, write_job  # noqa: E402,F401


def test_history_over_real_pipeline_output_names_the_shared_root_node(tmp_path: Path) -> None:
    out = tmp_path / "dataset"
    a = analyze_job(write_job(tmp_path / "a", "9001", hosts=("gpu-b07", "gpu-b08"), root_rank=1), "9001")
    b = analyze_job(write_job(tmp_path / "b", "9002", hosts=("gpu-c01", "gpu-b07"), root_rank=3, fault="oom"), "9002")
    for report in (a, b):
        parquet.write_parquet(report, out, report.job.id)
    summary = history.summarize(out)
    assert summary.jobs == 2
    assert [n.host for n in summary.repeated_roots] == ["gpu-b07"]
    assert "gpu-b07" in history.render(summary, "table")


def test_every_sample_job_goes_into_one_dataset(tmp_path: Path) -> None:
    """Issue 5: history over the Parquet of all sample jobs names the root node two of them share."""
    if not SAMPLE_JOBS:
        return  # sample_logs/ is not in the tree (yet): the inline jobs above cover the path
    out = tmp_path / "samples"
    for folder in SAMPLE_JOBS:
        report = analyze_job(folder, folder.name)
        parquet.write_parquet(report, out, folder.name)
    events = parquet.read_table(out, "incidents")
    assert sorted(set(events.column("job_id").to_pylist())) == sorted(p.name for p in SAMPLE_JOBS)
    summary = history.summarize(out)
    assert summary.jobs == len(SAMPLE_JOBS)
    assert summary.repeated_roots, "no node was the root of two sample jobs"


# --- history: counts that add up, --since, --node (issue 15 item 11) --------------------------------


def _mixed_dataset(tmp_path: Path) -> Path:
    """_dataset's four jobs, plus a healthy one, an undetermined one (failures, no rank, no rule) and
    a healthy one whose logs had no time at all."""
    out = _dataset(tmp_path)
    healthy = replace(make_report(hosts=["gpu-d01", "gpu-d02"]), verdict=Verdict.NO_FAILURE, root_cause=None,
                      collateral=(), groups=())
    parquet.write_parquet(healthy, out, "5005")
    undetermined = replace(make_report(hosts=["gpu-d01", "gpu-c01"]), verdict=Verdict.UNDETERMINED, root_cause=None)
    parquet.write_parquet(undetermined, out, "5006")
    parquet.write_parquet(empty_report(), out, "5007")
    return out


def _check_sums(s: history.HistorySummary) -> None:
    assert sum(n for _v, n in s.verdicts) == s.jobs
    assert s.ended == s.jobs - dict(s.verdicts).get("no_failure", 0)
    assert sum(c.jobs for c in s.categories) == s.ended == sum(r.jobs for r in s.rules)
    assert sum(len(r.job_ids) for r in s.rules) == s.ended
    assert sum(c.rank_hours for c in s.categories) == pytest.approx(s.ended_rank_hours, abs=0.01)
    assert sum(r.rank_hours for r in s.rules) == pytest.approx(s.ended_rank_hours, abs=0.01)
    assert s.ended_rank_hours <= s.rank_hours + 1e-9
    assert s.jobs + sum(n for _reason, n in s.left_out) == s.dataset_jobs


def test_history_counts_add_up(tmp_path: Path) -> None:
    s = history.summarize(_mixed_dataset(tmp_path))
    assert s.jobs == s.dataset_jobs == 7
    assert dict(s.verdicts) == {"root_cause": 3, "job_level": 1, "no_failure": 2, "undetermined": 1}
    _check_sums(s)
    # the undetermined job is counted where it can be: no rule was named
    assert (history.NO_RULE, 1) in [(r.rule, r.jobs) for r in s.rules]
    assert (history.NO_CATEGORY, 1) in [(c.category, c.jobs) for c in s.categories]
    healthy_hours = s.rank_hours - s.ended_rank_hours
    assert healthy_hours == pytest.approx(8 * (3600 + 632) / 3600, abs=0.01)  # the healthy job's, and only it
    table = history.render_table(s)
    totals = [line.split() for line in table.splitlines() if line.startswith("total")]
    assert totals == [["total", "5", f"{s.ended_rank_hours:,.1f}"]] * 2
    md = history.render_markdown(s)
    assert md.count("| **total** |") == 2 and f"**{s.ended}**" in md


def test_history_since_a_date_or_a_duration(tmp_path: Path) -> None:
    from datetime import UTC, datetime, timedelta

    out = _mixed_dataset(tmp_path)
    end = max(r["job_end"] for r in parquet.read_table(out, "incidents").to_pylist() if r["job_end"])
    every = history.summarize(out, since=end - timedelta(hours=3))
    _check_sums(every)
    # a job whose logs had no time: --since cannot say it is recent, so it is left out, and said
    assert every.jobs == 6 and dict(every.left_out) == {"without a time (--since)": 1}
    none = history.summarize(out, since=end + timedelta(seconds=1))
    _check_sums(none)
    assert none.jobs == 0 and dict(none.left_out) == {"before --since": 6, "without a time (--since)": 1}
    assert "7 of 7 jobs left out: 6 before --since, 1 without a time (--since)" in history.render_table(none)
    now = datetime(2026, 3, 9, 12, 0, tzinfo=UTC)
    assert history.parse_since("7d", now) == now - timedelta(days=7)
    assert history.parse_since("1d12h", now) == now - timedelta(hours=36)
    assert history.parse_since("2w", now) == now - timedelta(weeks=2)
    assert history.parse_since("90m", now) == now - timedelta(minutes=90)
    assert history.parse_since("2026-03-01", now) == datetime(2026, 3, 1, tzinfo=UTC)
    assert history.parse_since("2026-03-01T14:00+02:00") == datetime(2026, 3, 1, 12, tzinfo=UTC)
    assert history.parse_since("2026-03-01T14:00Z") == datetime(2026, 3, 1, 14, tzinfo=UTC)
    for bad in ("yesterday", "7 days", "-3d", ""):
        with pytest.raises(UsageError):
            history.parse_since(bad, now)


def test_history_node_keeps_the_jobs_that_ran_there(tmp_path: Path) -> None:
    out = _mixed_dataset(tmp_path)
    s = history.summarize(out, node="gpu-c01")
    _check_sums(s)
    # 5002 (root on gpu-b07, ranks on gpu-c01), 5003 (root on gpu-c01), 5006 (undetermined, ranks there)
    assert s.jobs == 3 and s.node_roots == 1 and dict(s.left_out) == {"not on --node": 4}
    assert sorted(j for r in s.rules for j in r.job_ids) == ["5002", "5003", "5006"]
    both = history.summarize(out, node="gpu-b07", since=parquet.read_table(out, "incidents").to_pylist()[0]["job_end"])
    _check_sums(both)
    assert "on node gpu-b07 (2 with their root there)" in history.render_table(both)
    assert history.summarize(out, node="nowhere").jobs == 0


def test_history_cli_since_and_node(tmp_path: Path) -> None:
    import subprocess
    import sys

    out = _mixed_dataset(tmp_path)

    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "correlator", "history", str(out), *args], capture_output=True,
                              timeout=120, cwd=REPO)

    r = run("--node", "gpu-c01", "--since", "2026-03-01", "-f", "json")
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    assert data["jobs"] == 3 and data["node"] == "gpu-c01" and data["since"] == "2026-03-01T00:00:00.000Z"
    assert sum(c["jobs"] for c in data["categories"]) == data["ended"] == 3
    r = run("--since", "100w")  # a duration: every job with a time is within 100 weeks of now
    assert r.returncode == 0 and "6 jobs in" in r.stdout.decode() and "1 without a time" in r.stdout.decode()
    r = run("--since", "last tuesday")
    err = r.stderr.decode().strip().splitlines()
    assert r.returncode == 2 and len(err) == 1 and "--since 'last tuesday' is neither a date nor a duration" in err[0]


# --- issue 15 items 5 and 12: array tasks are jobs of their own; rows say what wrote them ---------

def _cli(*args: str, cwd: Path | None = None):
    import os
    import subprocess
    import sys

    return subprocess.run([sys.executable, "-m", "correlator", *args], capture_output=True, cwd=cwd, timeout=180,
                          env={**os.environ, "CORRELATE_EARLY_POOL": "0"})


SAMPLE_EIO = Path(__file__).resolve().parent.parent / "sample_logs" / "lustre-eio-checkpoint" / "slurm-88123.out"


def test_slurm_array_tasks_are_two_jobs_in_the_dataset(tmp_path: Path) -> None:
    """``slurm-88123_5.out`` and ``_6`` (SLURM's ``%A_%a``: array job, task id) once both became job
    88123, the second replacing the first; each is now a job of its own, its id a string column."""
    import pyarrow.parquet as pq

    logs, ds = tmp_path / "logs", tmp_path / "ds"
    logs.mkdir()
    for task in (5, 6):
        (logs / f"slurm-88123_{task}.out").write_bytes(SAMPLE_EIO.read_bytes())
        r = _cli(str(logs / f"slurm-88123_{task}.out"), "--parquet", str(ds), "-f", "json")
        assert r.returncode == 0, r.stderr.decode()
        doc = json.loads(r.stdout)
        assert doc["job"]["id"] == f"88123_{task}" and doc["root_cause"]["rank"] == 19
    assert sorted(p.name for p in (ds / "incidents").iterdir() if not p.name.startswith(".")) == [
        "job_id=88123_5", "job_id=88123_6"]
    verdicts = [r for r in parquet.read_table(ds, "incidents").to_pylist() if r["kind"] == "verdict"]
    assert sorted(r["job_id"] for r in verdicts) == ["88123_5", "88123_6"]
    in_file = pq.read_table(ds / "events" / "job_id=88123_5" / parquet.PART_FILE)
    assert str(in_file.schema.field("job_id").type) == "string"
    assert set(in_file.column("job_id").to_pylist()) == {"88123_5"}


def test_per_task_files_of_one_job_keep_the_job_id_and_their_ranks(tmp_path: Path) -> None:
    """Several ``slurm-1234_<n>.out`` read together are one job's per-task files (``%j_%t``): the job
    is 1234 and each number its rank; a lone one is an array task, whose number is no rank."""
    from correlator.pipeline import Options, analyze

    err = "2026-03-02T14:07:31Z RuntimeError: CUDA error: an illegal memory access was encountered\n"
    ok = "2026-03-02T14:07:00Z step 10 loss 1.0\n"
    for n in range(4):
        (tmp_path / f"slurm-1234_{n}.out").write_text(ok + (err if n == 2 else ""))
    both = analyze([str(tmp_path)], Options(tz="UTC", workers=1))
    assert both.job.id == "1234" and both.root_cause is not None and both.root_cause.rank == 2
    alone = tmp_path / "alone"
    alone.mkdir()
    (alone / "slurm-1234_2.out").write_text(ok + err)
    one = analyze([str(alone)], Options(tz="UTC", workers=1))
    assert one.job.id == "1234_2"
    assert one.root_cause is not None and one.root_cause.rank != 2  # the task id is not taken for a rank


def test_rows_carry_tool_and_rules_version_analysis_time_and_stable_event_ids(tmp_path: Path) -> None:
    import os
    from datetime import UTC, datetime

    from correlator import __version__
    from correlator.model import rules_version
    from correlator.ruleset import load_rules

    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "slurm-88123.out").write_bytes(SAMPLE_EIO.read_bytes())
    before = datetime.now(UTC).replace(microsecond=0)
    assert _cli("logs", "--parquet", str(tmp_path / "a"), cwd=tmp_path).returncode == 0
    other = tmp_path / "elsewhere"
    other.mkdir()
    assert _cli(str(logs / "slurm-88123.out"), "--parquet", str(tmp_path / "b"), cwd=other).returncode == 0
    after = datetime.now(UTC)
    version = rules_version(load_rules())
    assert version.startswith(f"{len(load_rules())} rules, ")
    ids = {}
    for ds in ("a", "b"):
        tabs = parquet.read_tables(tmp_path / ds)
        for name, table in tabs.items():
            rows_ = table.to_pylist()
            assert rows_ and {r["tool_version"] for r in rows_} == {__version__}, name
            assert {r["rules_version"] for r in rows_} == {version}, name
            stamps = {r["analyzed_at"] for r in rows_}
            assert len(stamps) == 1, name
            assert before <= stamps.pop() <= after, name
        events = tabs["events"].to_pylist()
        ids[ds] = [r["event_id"] for r in events]
        assert len(set(ids[ds])) == len(events) > 10  # one id per event
    # relative from one folder, absolute from another: the same input, the same ids
    assert ids["a"] == ids["b"]
    # another job id gives other ids
    r = _cli("logs", "--parquet", str(tmp_path / "c"), "--job-id", "other", cwd=tmp_path)
    assert r.returncode == 0
    assert not set(r["event_id"] for r in parquet.read_table(tmp_path / "c", "events").to_pylist()) & set(ids["a"])
    assert os.path.isdir(tmp_path / "c" / "events" / "job_id=other")


def test_a_dataset_written_before_the_stamp_columns_is_still_read(tmp_path: Path) -> None:
    """Files without ``job_id``, the versions, the analysis time or the event id (written by an
    earlier correlate) are read with nulls there and the job id of their partition."""
    import pyarrow.parquet as pq

    parquet.write_parquet(make_report(), tmp_path, "77")
    for table in parquet.TABLES:
        path = tmp_path / table / "job_id=77" / parquet.PART_FILE
        old = pq.read_table(path)
        pq.write_table(old.drop_columns([n for n in old.schema.names if n in parquet.ADDED_COLUMNS]), path)
    events = parquet.read_table(tmp_path, "events").to_pylist()
    assert events and {r["job_id"] for r in events} == {"77"}
    assert {r["event_id"] for r in events} == {None} and {r["tool_version"] for r in events} == {None}
