"""Writing a simulated job to disk in one of the ``LAYOUTS``: launcher prefixes, interleaving, file names.

Combined files interleave lines in true-time order (the order the writes reached the file), never
in printed-stamp order. Only this module writes log files.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path

from tools.synth.job import Job, Record


def worker_line(job: Job, r: int, rec: Record, outer: str) -> str:
    """One physical line of worker output. ``outer`` is the launcher prefix (srun label, tee tag)."""
    k = rec.kind
    inproc = ""
    if job.layout == "torchrun-combined":
        inproc = f"[rank{r}]: " if k == "tb" else f"[rank{r}]:"
    elif job.profile.rank_prefix:
        if k == "glog":
            inproc = f"[rank{r}]:"
        elif k == "tb":
            inproc = f"[rank{r}]: "
    return f"{outer}{rec.lead}{inproc}{rec.text}"


def write_job(job: Job, out: Path) -> list[str]:
    """Write the job's records as files of its layout under ``out``; returns their relative paths."""
    out.mkdir(parents=True, exist_ok=True)
    files: list[str] = []
    for rl in job.rank_records:
        rl.sort(key=lambda x: (x.t, x.seq))
    if job.layout == "per-rank":
        for r, rl in enumerate(job.rank_records):
            name = f"rank-{r}.out" if job.variant.per_rank_names == "rank" else f"slurm-{job.job_id}_{r}.out"
            write_with_leads(job, out / name, (worker_line(job, r, x, "") for x in rl if not (x.lead and not x.text)),
                             glue=[x for x in rl])
            files.append(name)
        batch = sorted([(t, s, txt) for t, s, txt in job.batch_records] + [(t, s, txt) for t, s, n, txt in job.stepd_records])
        name = f"slurm-{job.job_id}.out"
        write_text(out / name, [x[2] for x in batch])
        files.append(name)
    elif job.layout == "srun-combined":
        merged: list[tuple[float, int, str]] = []
        for r, rl in enumerate(job.rank_records):
            wk = job.workers[r]
            outer = f"{wk.node}: [default{wk.local}]:"
            merged += glued_lines(job, r, rl, outer)
        for n, al in enumerate(job.agent_records):
            merged += [(t, s, f"{n}: {txt}") for t, s, txt in al]
        merged += [(t, s, f"{n}: {txt}") for t, s, n, txt in job.stepd_records]
        merged += job.batch_records
        merged.sort(key=lambda x: (x[0], x[1]))
        name = f"slurm-{job.job_id}.out"
        write_text(out / name, [x[2] for x in merged])
        files.append(name)
    elif job.layout == "torchrun-combined":
        per_node: list[list[tuple[float, int, str]]] = [[] for _ in range(job.nodes)]
        for r, rl in enumerate(job.rank_records):
            per_node[job.workers[r].node] += glued_lines(job, r, rl, "")
        for n, al in enumerate(job.agent_records):
            per_node[n] += al
        for t, s, n, txt in job.stepd_records:
            per_node[n].append((t, s, txt))
        for n in range(job.nodes):
            name = "train.log" if job.nodes == 1 else f"train-{job.hosts[n]}.log"
            lines = sorted(per_node[n], key=lambda x: (x[0], x[1]))
            write_text(out / name, [x[2] for x in lines])
            files.append(name)
        if job.batch_records:
            name = f"slurm-{job.job_id}.out"
            write_text(out / name, [x[2] for x in sorted(job.batch_records, key=lambda x: (x[0], x[1]))])
            files.append(name)
    else:  # torchelastic --log-dir
        for r, rl in enumerate(job.rank_records):
            wk = job.workers[r]
            d = out / f"node-{wk.node}" / job.log_run_dir / "attempt_0" / str(wk.local)
            d.mkdir(parents=True, exist_ok=True)
            for stream, fname in (("o", "stdout.log"), ("e", "stderr.log")):
                sub = [x for x in rl if x.stream == stream or (stream == "e" and x.kind != "log")]
                sub = [x for x in sub if not (stream == "o" and x.kind != "log")]
                write_with_leads(job, d / fname, (worker_line(job, r, x, "") for x in sub if not (x.lead and not x.text)),
                                 glue=sub)
                files.append(str((d / fname).relative_to(out)))
            if wk.error_json is not None:
                (d / "error.json").write_text(wk.error_json)
                files.append(str((d / "error.json").relative_to(out)))
        merged = []
        for n, al in enumerate(job.agent_records):
            merged += [(t, s, f"{n}: {txt}") for t, s, txt in al]
        merged += [(t, s, f"{n}: {txt}") for t, s, n, txt in job.stepd_records]
        merged += job.batch_records
        merged.sort(key=lambda x: (x[0], x[1]))
        name = f"slurm-{job.job_id}.out"
        write_text(out / name, [x[2] for x in merged])
        files.append(name)
    return files


def glued_lines(job: Job, r: int, rl: Sequence[Record], outer: str) -> list[tuple[float, int, str]]:
    """Worker records as (t, seq, line); a lead-only record (tqdm frames) is glued to the next line."""
    out: list[tuple[float, int, str]] = []
    pending = ""
    for x in rl:
        if x.lead and not x.text:
            pending += x.lead
            continue
        line = worker_line(job, r, x, outer)
        if pending:
            line = outer + pending + line[len(outer):]
            pending = ""
        out.append((x.t, x.seq, line))
    return out


def write_with_leads(job: Job, path: Path, lines: Iterable[str], glue: Sequence[Record]) -> None:
    """Write rendered ``lines``, gluing each lead-only record of ``glue`` onto the next line."""
    # glue lead-only records onto the following record of the same file
    out: list[str] = []
    pending = ""
    rendered = iter(lines)
    for x in glue:
        if x.lead and not x.text:
            pending += x.lead
            continue
        line = next(rendered)
        if pending:
            line = pending + line
            pending = ""
        out.append(line)
    write_text(path, out)


def write_text(path: Path, lines: Sequence[str]) -> None:
    """Write ``lines`` with ``\\n`` endings (none translated), creating the folder."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8", newline="") as fh:
        fh.write("\n".join(lines))
        if lines:
            fh.write("\n")
