"""Report objects built by hand, shared by the renderer tests (markdown, html, trace, parquet)."""

from __future__ import annotations

from pathlib import Path

from correlator.model import (
    ChainLink,
    ClockRow,
    CollateralItem,
    Diagnostic,
    Evidence,
    Group,
    JobFacts,
    RankRow,
    RankState,
    Report,
    RootCause,
    Stats,
    TimelineEvent,
    Verdict,
    compress_ranks,
    iso,
)

NS = 1_000_000_000
T0 = 1_772_460_451_412_000_000  # 2026-03-02T14:07:31.412Z
HOSTILE = "OSError: <script>alert(1)</script> <img src=x onerror=alert(1)> a|b `tick` & done"
EIO = "OSError: [Errno 5] Input/output error: '/lustre/ckpt/step_18000/model.pt'"


def _ranges(ranks: list[int]) -> str:
    return compress_ranks(ranks)


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
        job=JobFacts(id=job_id, hosts=tuple(hosts), ranks=n))


def empty_report(verdict: Verdict = Verdict.NO_FAILURE) -> Report:
    return Report(verdict=verdict, root_cause=None, collateral=(), groups=(), timeline=(), ranks=(), clocks=(),
                  diagnostics=(), stats=Stats(sources=1, bytes=10, lines=1, seconds=0.01))


# --- small real jobs for the end-to-end renderer tests ---------------------------------------------

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
