"""Parquet tables partitioned by job, and ``correlate history`` over them."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from correlator import history
from correlator.errors import InputError, UsageError
from correlator.model import (
    ChainLink, ClockRow, CollateralItem, Diagnostic, Evidence, Group, RankRow, RankState, Report, RootCause,
    Stats, TimelineEvent, Verdict, iso,
)
from correlator.report import parquet

# --- fixtures: Report objects built by hand -----------------------------------------------------

NS = 1_000_000_000
T0 = 1_772_460_451_412_000_000  # 2026-03-02T14:07:31.412Z
HOSTILE = "OSError: <script>alert(1)</script> <img src=x onerror=alert(1)> a|b `tick` & done"
EIO = "OSError: [Errno 5] Input/output error: '/lustre/ckpt/step_18000/model.pt'"


def _ranges(ranks: list[int]) -> str:
    out, i = [], 0
    while i < len(ranks):
        j = i
        while j + 1 < len(ranks) and ranks[j + 1] == ranks[j] + 1:
            j += 1
        out.append(str(ranks[i]) if i == j else f"{ranks[i]}-{ranks[j]}")
        i = j + 1
    return ",".join(out)


def make_report(n_hosts: int = 2, per_host: int = 4, root_rank: int = 1, root_text: str = EIO,
                job_id: str = "88123", hosts: list[str] | None = None) -> Report:
    """Rank ``root_rank`` hits EIO on save; 600 s later every other rank's NCCL watchdog fires;
    torchrun sends SIGTERM on every host; SLURM cancels the step."""
    hosts = hosts or [f"gpu-a{i:02d}" for i in range(1, n_hosts + 1)]
    n = n_hosts * per_host

    def host(rank: int) -> str:
        return hosts[rank // per_host]

    root_host = host(root_rank)
    events = [TimelineEvent(time=iso(T0), rank=root_rank, host=root_host, rule="storage.eio-on-checkpoint-save",
                            role="primary", path="slurm-88123.out", line=20418, text=root_text, label="root",
                            after_root_s=0.0, local_rank=root_rank % per_host)]
    collateral = []
    others = [r for r in range(n) if r != root_rank]
    for r in others:
        delay = 600.2 + (r % 7) / 10
        t = iso(T0 + int(delay * NS))
        text = (f"[Rank {r}] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=18812, OpType=ALLREDUCE, "
                f"NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for {600200 + r % 7} milliseconds before timing out.")
        events.append(TimelineEvent(time=t, rank=r, host=host(r), rule="nccl.watchdog-collective-timeout",
                                    role="collateral", path="slurm-88123.out", line=20500 + r, text=text,
                                    label="collateral", after_root_s=delay, local_rank=r % per_host))
        collateral.append(CollateralItem(rank=r, host=host(r), rule="nccl.watchdog-collective-timeout", time=t,
                                         after_root_s=delay, path="slurm-88123.out", line=20500 + r))
    for i, h in enumerate(hosts):
        events.append(TimelineEvent(
            time=iso(T0 + 601 * NS + i * 1_000_000), rank=None, host=h, rule="launcher.torchrun-sigterm-to-workers",
            role="teardown", path="slurm-88123.out", line=30000 + i, label="teardown", after_root_s=601 + i / 1000,
            text=f"[2026-03-02 14:17:32,412] torch.distributed.elastic.multiprocessing.api: [WARNING] "
                 f"Sending process {4000 + i} closing signal SIGTERM"))
    events.append(TimelineEvent(time=iso(T0 + 632 * NS), rank=None, host=hosts[0], rule="slurm.step-cancelled",
                                role="teardown", path="slurm-88123.out", line=40000, label="teardown",
                                after_root_s=632.0,
                                text="slurmstepd: error: *** STEP 88123.0 ON gpu-a01 CANCELLED AT 2026-03-02T14:18:03 ***"))
    events.sort(key=lambda e: e.time or "")
    groups = (
        Group(rule="nccl.watchdog-collective-timeout", role="collateral", ranks=_ranges(others), count=len(others),
              first=iso(T0 + int(600.2 * NS)), last=iso(T0 + int(600.8 * NS)), label="collateral",
              first_after_s=600.2, last_after_s=600.8, title="NCCL watchdog timed out a collective"),
        Group(rule="launcher.torchrun-sigterm-to-workers", role="teardown", ranks="", count=n_hosts,
              first=iso(T0 + 601 * NS), last=iso(T0 + 601 * NS + (n_hosts - 1) * 1_000_000), label="teardown",
              first_after_s=601.0, last_after_s=601 + (n_hosts - 1) / 1000),
        Group(rule="slurm.step-cancelled", role="teardown", ranks="", count=1, first=iso(T0 + 632 * NS),
              last=iso(T0 + 632 * NS), label="teardown", first_after_s=632.0, last_after_s=632.0),
    )
    ranks = tuple(RankRow(rank=r, host=host(r), local_rank=r % per_host,
                          state=RankState.ROOT if r == root_rank else RankState.COLLATERAL,
                          first_time=iso(T0 - 3600 * NS), last_time=iso(T0 + (0 if r == root_rank else 601) * NS),
                          lines=1200, last_step=18000) for r in range(n))
    root = RootCause(
        rank=root_rank, host=root_host, local_rank=root_rank % per_host, rule="storage.eio-on-checkpoint-save",
        title="Checkpoint save failed with EIO", category="storage", severity="critical", time=iso(T0),
        confidence=0.94, tie=(), evidence=(Evidence(path="slurm-88123.out", line=20418, text=root_text),),
        mechanism="The file system returned `EIO` while this rank wrote its shard.\n\nThe others waited.",
        fix="Check the storage targets with `lfs check osts`, then resume from the last good checkpoint.",
        confirm=("Run `lfs check osts` on the node", "Look for `LustreError` in the kernel log <dmesg>"),
        references=("https://github.com/pytorch/pytorch/blob/main/torch/serialization.py",),
        why=(f"rank {root_rank} is the only rank with a primary failure",),
        prevention="Write checkpoints to node-local disk first.")
    return Report(
        verdict=Verdict.ROOT_CAUSE, root_cause=root, collateral=tuple(collateral), groups=groups,
        timeline=tuple(events), ranks=ranks,
        clocks=tuple(ClockRow(host=h, offset_s=0.012 * i, residual_s=0.003, anchors=40) for i, h in enumerate(hosts)),
        diagnostics=(Diagnostic(level="warning", path="rank-3.log.gz", message="truncated gzip stream at byte 1048576"),),
        stats=Stats(sources=2, bytes=10_000_000, lines=120_000, seconds=0.8),
        chain=(ChainLink(stage="root", rule="storage.eio-on-checkpoint-save", ranks=str(root_rank), count=1,
                         summary="EIO while saving a checkpoint"),
               ChainLink(stage="collateral", rule="nccl.watchdog-collective-timeout", ranks=_ranges(others),
                         count=len(others), summary="watchdog timeouts 600 s later"),
               ChainLink(stage="teardown", rule="slurm.step-cancelled", ranks="", count=1, summary="step cancelled")),
        job={"id": job_id, "hosts": list(hosts), "ranks": n})


def empty_report(verdict: Verdict = Verdict.NO_FAILURE) -> Report:
    return Report(verdict=verdict, root_cause=None, collateral=(), groups=(), timeline=(), ranks=(), clocks=(),
                  diagnostics=(), stats=Stats(sources=1, bytes=10, lines=1, seconds=0.01))


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
        assert parquet.read_table(tmp_path, table).schema.names == schema.names + ["job_id"]


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

    for job in ("1001", "slurm-1002", "a/b c"):
        parquet.write_parquet(make_report(job_id=job), tmp_path, job)
    frame = pd.read_parquet(tmp_path / "incidents")
    assert sorted(set(frame["job_id"].astype(str))) == ["1001", "a/b c", "slurm-1002"]
    assert len(frame[frame["kind"] == "verdict"]) == 3


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

REPO = Path(__file__).resolve().parent.parent
SAMPLE_JOBS = sorted(p for p in (REPO / "sample_logs").glob("*/") if p.is_dir())


def write_job(folder: Path, job_id: str, hosts: tuple[str, str] = ("gpu-b07", "gpu-b08"), root_rank: int = 1,
              fault: str = "eio") -> Path:
    """A 4-rank job (2 nodes x 2) as one ``srun --label`` file with torchrun ``--tee`` and ``[rankN]`` prefixes:
    ``root_rank`` fails during step 3, the others' NCCL watchdogs fire 600 s later, SLURM cancels the step."""
    lines = []
    for rank in range(4):
        node, local = divmod(rank, 2)
        pre = f"{node}: [default{local}]:[rank{rank}]:"
        lines.append(f"{pre}{hosts[node]}:{2000 + rank}:{2000 + rank} [{local}] NCCL INFO comm 0x55d0 rank {rank} "
                     f"nranks 4 cudaDev {local} nvmlDev {local} busId 1000 commId 0xabc - Init COMPLETE")
        for step in (1, 2, 3):
            lines.append(f"{pre}2026-03-02 14:0{step}:00,{rank:03d} - train - INFO - step={step * 100} loss=2.31")
        if rank == root_rank:
            lines.append(f"{pre}2026-03-02 14:03:30,000 - train - INFO - saving checkpoint")
            lines.append(f"{pre}Traceback (most recent call last):")
            if fault == "eio":
                lines.append(f'{pre}  File "/opt/conda/lib/python3.11/site-packages/torch/serialization.py", '
                             f"line 652, in save")
                lines.append(f"{pre}OSError: [Errno 5] Input/output error")
            else:
                lines.append(f"{pre}torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU {local} "
                             f"has a total capacity of 79.15 GiB of which 1.02 GiB is free.")
        else:
            lines.append(f"{pre}[E0302 14:13:30.{rank:03d}000000 ProcessGroupNCCL.cpp:616] [Rank {rank}] Watchdog caught "
                         f"collective operation timeout: WorkNCCL(SeqNum=301, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, "
                         f"Timeout(ms)=600000) ran for 600010 milliseconds before timing out.")
    lines.append(f"slurmstepd: error: *** STEP {job_id}.0 ON {hosts[0]} CANCELLED AT 2026-03-02T14:14:03 ***")
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"slurm-{job_id}.out"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return folder


def analyze_job(folder: Path, job_id: str | None = None) -> Report:
    from correlator.pipeline import Options, analyze

    return analyze([str(folder)], Options(workers=1, tz="UTC", job_id=job_id))


def test_history_over_real_pipeline_output_names_the_shared_root_node(tmp_path: Path) -> None:
    out = tmp_path / "dataset"
    a = analyze_job(write_job(tmp_path / "a", "9001", hosts=("gpu-b07", "gpu-b08"), root_rank=1), "9001")
    b = analyze_job(write_job(tmp_path / "b", "9002", hosts=("gpu-c01", "gpu-b07"), root_rank=3, fault="oom"), "9002")
    for report in (a, b):
        parquet.write_parquet(report, out, str(report.job["id"]))
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
