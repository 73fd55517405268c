"""Seeded fault-injection generator of realistic dead distributed-training jobs.

``generate_job`` writes one job (its log files plus ``expected.toml``) and returns its ``Truth``;
``generate_suite`` writes the accuracy benchmark's varied mix; ``main`` is the command line.
"""

from __future__ import annotations

import argparse
import random
from collections.abc import Mapping, Sequence
from pathlib import Path

from tools.synth import cascade, healthy, launcher, layouts, slurm
from tools.synth.faults import FAULTS, LAYOUTS, Truth
from tools.synth.job import Job
from tools.synth.profiles import PROFILES


def toml_string(s: str) -> str:
    """A TOML basic string."""
    out = s.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\t", "\\t")
    return f'"{out}"'


def expected_toml(t: Truth) -> str:
    """The job's ``expected.toml``: the analyzer's contract first, then the generator's own facts."""
    lines = [f"verdict = {toml_string(t.verdict)}"]
    if t.root_rank is not None:
        lines.append(f"root_rank = {t.root_rank}")
    if t.rule is not None:
        lines.append(f"rule = {toml_string(t.rule)}")
    if t.root_host is not None:
        lines.append(f"root_host = {toml_string(t.root_host)}")
    lines.append(f"description = {toml_string(t.description)}")
    lines.append("")
    lines.append("# generator facts (not part of the analyzer contract)")
    lines.append("[synth]")
    lines.append(f"fault = {toml_string(t.fault)}")
    lines.append(f"layout = {toml_string(t.layout)}")
    lines.append(f"ranks = {t.ranks}")
    if t.root_local_rank is not None:
        lines.append(f"root_local_rank = {t.root_local_rank}")
    if t.root_time is not None:
        lines.append(f"root_time = {toml_string(t.root_time)}")
    lines.append(f"collateral_ranks = [{', '.join(str(x) for x in t.collateral_ranks)}]")
    lines.append("")
    lines.append("[synth.skew_s]")
    for h, v in t.skew_s.items():
        lines.append(f"{toml_string(h)} = {v!r}")
    return "\n".join(lines) + "\n"


def simulate(job: Job) -> None:
    """Run the job's scenario: every process's output, exits and the truth's words (nothing is written yet)."""
    f = job.fault
    if job.has_agent:
        launcher.agent_startup(job)
    if f.mechanism == "none":
        healthy.simulate(job)
    elif f.mechanism == "job":
        slurm.simulate_time_limit(job)
    else:
        cascade.simulate(job)
    job.prune_after_exit()
    if job.description_facts is not None:
        cascade.describe(job, *job.description_facts)


def generate_job(out_dir: Path, *, fault: str, ranks: int, layout: str, seed: int,
                 gpus_per_node: int = 8, max_skew_s: float = 0.0, drop_timestamps: float = 0.0,
                 lines_per_rank: int = 200, root_rank: int | None = None, host_prefix: str | None = None,
                 job_id: int | None = None, torch_version: str | None = None,
                 skew: Mapping[str, float] | None = None, variant: Mapping[str, object] | None = None) -> Truth:
    """Write one simulated job into ``out_dir`` (its logs and ``expected.toml``) and return the truth.

    The keyword arguments after ``lines_per_rank`` pin details for hand-made samples: the root rank,
    host name prefix, Slurm job id, PyTorch profile (one of ``PROFILES``), exact per-host clock offsets
    and ``variant`` switches (fields of the internal options: ``record``, ``framework``, ``steplog``,
    ``ansi``, ``tqdm``, ``stuck_node``, ``per_rank_names``, ``eio_variant``, ``ecc_variant``,
    ``culprit_dump``, ``secondary``, ``secondary_delay``, ``secondary_rank``, ``fail_after_logs``,
    ``scancel_delay``, ``fqdn``, ``log_exception``).
    """
    if fault not in FAULTS:
        raise ValueError(f"unknown fault {fault!r}; known: {', '.join(FAULTS)}")
    if layout not in LAYOUTS:
        raise ValueError(f"unknown layout {layout!r}; known: {', '.join(LAYOUTS)}")
    if ranks < 1 or gpus_per_node < 1:
        raise ValueError("ranks and gpus_per_node must be >= 1")
    if fault in ("nccl-hang",) and ranks < 2:
        raise ValueError("nccl-hang needs at least two ranks")
    if not 0.0 <= drop_timestamps <= 1.0:
        raise ValueError("drop_timestamps must be in [0, 1]")
    rng = random.Random(f"correlate-synth:{seed}:{fault}:{ranks}:{layout}:{gpus_per_node}")
    job = Job(fault=FAULTS[fault], ranks=ranks, layout=layout, gpus_per_node=gpus_per_node,
              max_skew_s=max_skew_s, drop_timestamps=drop_timestamps, lines_per_rank=max(8, lines_per_rank), rng=rng,
              root_rank=root_rank, host_prefix=host_prefix, job_id=job_id, torch_version=torch_version,
              skew=skew, variant=variant)
    simulate(job)
    out_dir = Path(out_dir)
    files = layouts.write_job(job, out_dir)
    truth = job.truth(files)
    (out_dir / "expected.toml").write_text(expected_toml(truth), encoding="utf-8")
    return truth


SUITE_RANKS = (8, 8, 16, 16, 16, 32, 32, 64, 64, 128, 256, 512, 1024)


def generate_suite(out_dir: Path, *, jobs: int, seed: int) -> list[tuple[Path, Truth]]:
    """Write ``jobs`` varied jobs under ``out_dir`` (``job-0000-<fault>-<layout>-<ranks>/``)."""
    rng = random.Random(f"correlate-suite:{seed}")
    out_dir = Path(out_dir)
    names = list(FAULTS)
    result: list[tuple[Path, Truth]] = []
    for i in range(jobs):
        fault = names[i % len(names)] if i < len(names) * 2 else rng.choice(names)
        kind = FAULTS[fault]
        gpn = rng.choice([8, 8, 8, 4])
        ranks = rng.choice(SUITE_RANKS)
        if ranks < gpn * kind.min_nodes:
            ranks = gpn * kind.min_nodes
        layout = rng.choice(LAYOUTS)
        if layout == "torchelastic" and ranks > 256:
            layout = "srun-combined"
        if layout == "torchrun-combined" and ranks > 64:
            layout = "srun-combined"
        lpr = max(12, min(160, 5000 // ranks))
        skew = rng.choice([0.0, 0.0, 0.2, 1.0, 3.0])
        drop = rng.choice([0.0, 0.0, 0.05, 0.2])
        d = out_dir / f"job-{i:04d}-{fault}-{layout}-{ranks}"
        t = generate_job(d, fault=fault, ranks=ranks, layout=layout, seed=rng.randrange(1 << 30),
                         gpus_per_node=gpn, max_skew_s=skew, drop_timestamps=drop, lines_per_rank=lpr)
        result.append((d, t))
    return result


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m tools.synth suite OUT`` / ``job OUT --fault F --ranks N --layout L``."""
    ap = argparse.ArgumentParser(prog="python -m tools.synth", description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("suite", help="write a varied mix of jobs")
    s.add_argument("out", type=Path)
    s.add_argument("--jobs", type=int, default=200)
    s.add_argument("--seed", type=int, default=1)
    j = sub.add_parser("job", help="write one job")
    j.add_argument("out", type=Path)
    j.add_argument("--fault", required=True, choices=sorted(FAULTS))
    j.add_argument("--ranks", type=int, required=True)
    j.add_argument("--layout", required=True, choices=LAYOUTS)
    j.add_argument("--seed", type=int, default=1)
    j.add_argument("--gpus-per-node", type=int, default=8)
    j.add_argument("--max-skew", type=float, default=0.0, dest="max_skew_s")
    j.add_argument("--drop-timestamps", type=float, default=0.0)
    j.add_argument("--lines-per-rank", type=int, default=200)
    j.add_argument("--root-rank", type=int, default=None)
    j.add_argument("--torch", dest="torch_version", choices=sorted(PROFILES), default=None)
    a = ap.parse_args(argv)
    if a.cmd == "suite":
        res = generate_suite(a.out, jobs=a.jobs, seed=a.seed)
        for d, t in res:
            print(f"{d.name}\t{t.verdict}\t{t.root_rank}\t{t.rule}")
        return 0
    t = generate_job(a.out, fault=a.fault, ranks=a.ranks, layout=a.layout, seed=a.seed,
                     gpus_per_node=a.gpus_per_node, max_skew_s=a.max_skew_s,
                     drop_timestamps=a.drop_timestamps, lines_per_rank=a.lines_per_rank,
                     root_rank=a.root_rank, torch_version=a.torch_version)
    print(f"{a.out}\t{t.verdict}\troot_rank={t.root_rank}\trule={t.rule}\thost={t.root_host}")
    return 0
