"""Record real SLURM job logs: start a local cluster, run every case under sbatch/srun, save them.

Owns: the SLURM case plans (what is injected where, and the truth that follows from it), and the
folders ``tests/recorded/slurm-<case>/`` (the job's output file as SLURM wrote it, ``expected.toml``
from the plan, ``README.md``). It never reads correlate's output: the truth comes from the plan.

    python benchmarks/realjobs/record_slurm.py                 # every case, one cluster
    python benchmarks/realjobs/record_slurm.py --case srun-raise --case time-limit
    python benchmarks/realjobs/record_slurm.py --list

It must not touch the other recordings in tests/recorded/ (only folders named slurm-*).
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from slurm_cluster import SlurmCluster, SlurmClusterError, _free_port  # noqa: E402

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
RECORDED = REPO / "tests" / "recorded"
WORKER = HERE / "slurm_worker.py"
MAX_CASE_BYTES = 5 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class Case:
    name: str
    #: one paragraph for the README: what is injected, and what SLURM does about it
    story: str
    #: the body of the batch script after the #SBATCH lines; {python}, {worker}, {port} are filled in
    body: str
    #: the truth, from the plan (written to expected.toml as it is)
    expected: dict[str, object]
    sbatch: tuple[str, ...] = ("--ntasks=8",)
    output: str = "slurm-%j.out"
    #: scancel the job once its output contains this text (None: let it end by itself)
    cancel_when: str | None = None
    timeout_s: float = 300
    layout: str = "srun --label, one task per rank"
    env: dict[str, str] = field(default_factory=dict)


SRUN8 = "srun --ntasks=8 --label {python} {worker}"
TORCHRUN = (
    "srun --ntasks=2 --ntasks-per-node=2 --label bash -c "
    "'exec torchrun --nnodes 2 --nproc-per-node 4 --node-rank $SLURM_PROCID "
    "--master-addr 127.0.0.1 --master-port {port} --tee 3 {worker} {args}'"
)
TORCHRUN_LAYOUT = "srun --label, one torchrun per task ('node'), --tee 3: '0: [default3]:' lines; rank = 4*task + local rank"


def torchrun(args: str) -> str:
    return TORCHRUN.replace("{args}", args)


CASES: tuple[Case, ...] = (
    Case(
        name="srun-raise",
        story="Rank 3 raises an IndexError (a sample index past the end of its data) just before step 5's "
        "gradient all-reduce. The other 7 ranks are left in that all-reduce; gloo reports the closed "
        "connection to them and they exit too.",
        body=SRUN8 + " --steps 12 --fault raise@3:step=5",
        expected={"verdict": "root_cause", "root_rank": 3, "rule": "python.uncaught-exception"},
    ),
    Case(
        name="srun-sigkill",
        story="Rank 5 is killed with SIGKILL before step 4's all-reduce (it signals itself, as the kernel's "
        "OOM killer or an operator's kill -9 would; nothing is printed by the rank). srun reports "
        "'task 5: Killed'; the other ranks fail in the all-reduce.",
        body=SRUN8 + " --steps 12 --fault sigkill@5:step=4",
        expected={"verdict": "root_cause", "root_rank": 5, "rule": "slurm.task-killed"},
    ),
    Case(
        name="srun-segfault",
        story="Rank 6 dereferences NULL (ctypes.string_at(0)) before step 4's all-reduce, with "
        "PYTHONFAULTHANDLER=1 so it prints 'Fatal Python error: Segmentation fault' and its stack. srun "
        "reports the task's signal; the other ranks fail in the all-reduce.",
        body="export PYTHONFAULTHANDLER=1\n" + SRUN8 + " --steps 12 --fault segv@6:step=4",
        expected={
            "verdict": "root_cause",
            "root_rank": 6,
            "rule_any": ["python.segmentation-fault", "slurm.task-crashed-signal"],
        },
    ),
    Case(
        name="srun-exit1",
        story="Rank 3 logs an ERROR line (its data shard is empty) and calls sys.exit(1) before step 5, "
        "without a traceback. srun reports 'task 3: Exited with exit code 1'; the other ranks fail in "
        "the all-reduce and exit 1 as well, later.",
        body=SRUN8 + " --steps 12 --fault exit1@3:step=5",
        expected={"verdict": "root_cause", "root_rank": 3, "rule": "slurm.task-exited"},
    ),
    Case(
        name="srun-kill-on-bad-exit",
        story="Rank 2 raises an IndexError before step 4, under `srun --kill-on-bad-exit=1`: srun "
        "terminates the step as soon as task 2 exits non-zero, so the other ranks are killed by SLURM "
        "(step CANCELLED, tasks Killed/Terminated) rather than failing on their own.",
        body="srun --ntasks=8 --label --kill-on-bad-exit=1 {python} {worker} --steps 12 --fault raise@2:step=4",
        expected={"verdict": "root_cause", "root_rank": 2, "rule": "python.uncaught-exception"},
    ),
    Case(
        name="srun-hang",
        story="Rank 2 stalls for 60 s ('loading next batch', a sleep) before step 4's all-reduce; the "
        "process group timeout is 20 s, so the 7 other ranks time out in the all-reduce and exit. Rank 2 "
        "wakes up after they are gone and fails too, last. Rank 2 is the cause; it prints no error "
        "before the others do.",
        body=SRUN8 + " --steps 12 --timeout-s 20 --fault hang@2:step=4:secs=60",
        expected={"verdict": "root_cause", "root_rank": 2},
    ),
    Case(
        name="srun-hang-wait",
        story="Rank 2 stalls for 10 minutes before step 4's all-reduce (process group timeout 20 s) under "
        "`srun --wait=15`: the 7 other ranks time out in the all-reduce and exit 1, and 15 s after the "
        "first of them SLURM kills the still-stuck task 2. Rank 2 prints no error at all.",
        body="srun --ntasks=8 --label --wait=15 {python} {worker} --steps 12 --timeout-s 20 --fault hang@2:step=4:secs=600",
        expected={"verdict": "root_cause", "root_rank": 2},
    ),
    Case(
        name="srun-per-task-files",
        story="Rank 4 raises an IndexError before step 5, with srun writing one file per task "
        "(`srun --output=%x-%j-%t.out`, no --label); srun's own messages ('task 4: Exited with exit "
        "code 1') go to the batch script's slurm-<jobid>.out. The other ranks fail in the all-reduce.",
        body="srun --ntasks=8 --output=%x-%j-%t.out {python} {worker} --steps 12 --fault raise@4:step=5",
        expected={"verdict": "root_cause", "root_rank": 4, "rule": "python.uncaught-exception"},
        layout="srun --output=%x-%j-%t.out: one file per task (= rank) next to the batch output file",
    ),
    Case(
        name="healthy-noise",
        story="A healthy 8-rank job that finishes (exit 0). Every rank emits a UserWarning; rank 0 logs a "
        "caught FileNotFoundError with its traceback (logger.exception) and a WARNING line.",
        body=SRUN8 + " --steps 10 --noise",
        expected={"verdict": "no_failure"},
    ),
    Case(
        name="time-limit",
        story="A 4-rank job with `#SBATCH --time=00:01:00` that would train for ~10 minutes. slurmctld "
        "ends it at the limit (OverTimeLimit=0, KillWait=5): slurmstepd prints 'CANCELLED AT ... DUE "
        "TO TIME LIMIT', the tasks get SIGTERM then SIGKILL. No rank failed.",
        sbatch=("--ntasks=4", "--time=00:01:00"),
        body="srun --ntasks=4 --label {python} {worker} --steps 2000",
        expected={"verdict": "job_level", "rule": "slurm.time-limit"},
        layout="srun --label, one task per rank (4)",
    ),
    Case(
        name="scancel",
        story="A 4-rank job cancelled with `scancel <jobid>` while it trains (once rank 0 logged step 20; "
        "the user cancelled it). No rank failed.",
        sbatch=("--ntasks=4",),
        body="srun --ntasks=4 --label {python} {worker} --steps 2000",
        cancel_when="[rank 0] train: step 20/",
        expected={"verdict": "job_level", "rule_any": ["slurm.job-cancelled", "slurm.step-cancelled"]},
        layout="srun --label, one task per rank (4)",
    ),
    Case(
        name="torchrun-raise",
        story="Two torchrun agents under srun (task 0 = node 0, task 1 = node 1), 4 workers each. Global "
        "rank 6 (node 1, local rank 2) raises an IndexError before step 5. Its agent reports the failure "
        "and stops its other workers; the workers on node 0 fail in the all-reduce.",
        output="%x-%j.out",
        sbatch=("--ntasks=2",),
        body=torchrun("--steps 12 --fault raise@6:step=5"),
        expected={"verdict": "root_cause", "root_rank": 6, "rule": "python.uncaught-exception"},
        layout=TORCHRUN_LAYOUT,
    ),
    Case(
        name="torchrun-sigkill",
        story="Two torchrun agents under srun, 4 workers each. Global rank 1 (node 0, local rank 1) is "
        "killed by SIGKILL before step 4 (it signals itself; nothing printed). Its agent reports "
        "'exitcode: -9'; the others fail in the all-reduce or are stopped by their agents.",
        sbatch=("--ntasks=2",),
        body=torchrun("--steps 12 --fault sigkill@1:step=4"),
        expected={"verdict": "root_cause", "root_rank": 1, "rule": "launcher.worker-killed-by-signal"},
        layout=TORCHRUN_LAYOUT,
    ),
    Case(
        name="torchrun-segfault",
        story="Two torchrun agents under srun, 4 workers each. Global rank 5 (node 1, local rank 1) "
        "dereferences NULL before step 4, without faulthandler: the worker prints nothing, its agent "
        "reports 'exitcode: -11' / 'Signal 11 (SIGSEGV)'.",
        sbatch=("--ntasks=2",),
        body=torchrun("--steps 12 --fault segv@5:step=4"),
        expected={
            "verdict": "root_cause",
            "root_rank": 5,
            "rule_any": [
                "launcher.worker-segfault-sigsegv",
                "launcher.worker-killed-by-signal",
                "python.segmentation-fault",
            ],
        },
        layout=TORCHRUN_LAYOUT,
    ),
    Case(
        name="torchrun-hang",
        story="Two torchrun agents under srun, 4 workers each, process group timeout 20 s. Global rank 4 "
        "(node 1, local rank 0) stalls for 60 s before step 4's all-reduce; the 7 others time out in the "
        "all-reduce and exit; node 1's agent then stops rank 4 (SIGTERM) while it still sleeps. Rank 4 "
        "prints no error before the others do.",
        sbatch=("--ntasks=2",),
        body=torchrun("--steps 12 --timeout-s 20 --fault hang@4:step=4:secs=60"),
        expected={"verdict": "root_cause", "root_rank": 4},
        layout=TORCHRUN_LAYOUT,
    ),
    Case(
        name="torchrun-scancel",
        story="Two torchrun agents under srun, cancelled with `scancel <jobid>` while training (once global "
        "rank 0 logged step 20). SLURM signals the agents, which stop their workers. No rank failed.",
        sbatch=("--ntasks=2",),
        body=torchrun("--steps 2000"),
        cancel_when="[rank 0] train: step 20/",
        expected={"verdict": "job_level", "rule_any": ["slurm.job-cancelled", "slurm.step-cancelled"]},
        layout=TORCHRUN_LAYOUT,
    ),
    Case(
        name="torchrun-time-limit",
        story="Two torchrun agents under srun with `#SBATCH --time=00:01:00` and a job that would run for "
        "~10 minutes. At the limit SLURM sends SIGTERM to the agents, which forward it to their workers "
        "(SignalException, 'Sending process ... closing signal SIGTERM'). No rank failed.",
        sbatch=("--ntasks=2", "--time=00:01:00"),
        body=torchrun("--steps 2000"),
        expected={"verdict": "job_level", "rule": "slurm.time-limit"},
        layout=TORCHRUN_LAYOUT,
    ),
)


def batch_script(case: Case, port: int) -> str:
    lines = ["#!/bin/bash", f"#SBATCH --job-name={case.name}"]
    lines += [f"#SBATCH {a}" for a in case.sbatch]
    lines.append(f"#SBATCH --output={case.output}")
    lines += [
        "",
        "export MASTER_ADDR=127.0.0.1",
        f"export MASTER_PORT={port}",
        "export OMP_NUM_THREADS=1",
        "export PYTHONUNBUFFERED=1",
        'echo "job $SLURM_JOB_ID on $SLURM_JOB_NODELIST: $SLURM_NTASKS tasks"',
    ]
    body = case.body.replace("{python}", sys.executable).replace("{worker}", str(WORKER)).replace("{port}", str(port))
    lines.append(body)
    return "\n".join(lines) + "\n"


def toml_value(v: object) -> str:
    if isinstance(v, str):
        return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int | float):
        return repr(v)
    if isinstance(v, list | tuple):
        return "[" + ", ".join(toml_value(x) for x in v) + "]"
    raise TypeError(f"no TOML for {v!r}")


def versions(cluster: SlurmCluster) -> dict[str, str]:
    import importlib.metadata as md

    return {
        "slurm": cluster.run(["sinfo", "--version"], check=False).stdout.strip() or "unknown",
        "torch": md.version("torch"),
        "python": platform.python_version(),
        "os": platform.platform(),
    }


def extra_files(dest: Path, out_file: Path) -> str:
    others = sorted(p.name for p in dest.iterdir() if p.name not in {out_file.name, "README.md", "expected.toml"})
    if not others:
        return ""
    return f"\nThe tasks' own files, as srun wrote them: {', '.join(f'`{n}`' for n in others)}."


def write_case(case: Case, job_id: int, state: str, out_file: Path, script: str, vers: dict[str, str], secs: float) -> Path:
    dest = RECORDED / f"slurm-{case.name}"
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    # the batch output file, and any file the job's tasks wrote next to it (srun --output=%t ...)
    for f in sorted(out_file.parent.iterdir()):
        if f.is_file():
            shutil.copy2(f, dest / f.name)
    exp = [f"# truth from the injection plan in benchmarks/realjobs/record_slurm.py (case {case.name!r}),", "# not from correlate's output"]
    exp += [f"{k} = {toml_value(v)}" for k, v in case.expected.items()]
    (dest / "expected.toml").write_text("\n".join(exp) + "\n")
    shown_script = script.replace(sys.executable, "python").replace(str(WORKER), "benchmarks/realjobs/slurm_worker.py")
    readme = f"""# slurm-{case.name}

Recorded under a real SLURM (single node on localhost, started by
`benchmarks/realjobs/slurm_cluster.py`) with `python benchmarks/realjobs/record_slurm.py --case {case.name}`.

**Injected:** {case.story}

**Layout:** {case.layout}.

**Expected:** `{", ".join(f"{k} = {toml_value(v)}" for k, v in case.expected.items())}` (see `expected.toml`).

**Job:** id {job_id}, final state `{state}`, {secs:.0f} s from submission to the end; `{out_file.name}` is the
job's output file exactly as slurmstepd wrote it (`--output={case.output}`).{extra_files(dest, out_file)}

## Batch script (submitted with `sbatch`)

```sh
{shown_script.rstrip()}
```
{"" if case.cancel_when is None else f"{chr(10)}Then, once the output file contained `{case.cancel_when}`: `scancel {job_id}`.{chr(10)}"}
## Versions

| | |
|---|---|
| SLURM | {vers["slurm"]} (Debian `slurm-wlm`, `munge`) |
| torch | {vers["torch"]} (gloo backend, CPU) |
| Python | {vers["python"]} |
| OS | {vers["os"]} |

slurm.conf: one node with `CPUs=16` (`SlurmdParameters=config_overrides`) on a 2-core machine,
`OverSubscribe=FORCE:4`, `ProctrackType=proctrack/linuxproc`, `TaskPlugin=task/none`,
`OverTimeLimit=0`, `KillWait=5`, no accounting.
"""
    (dest / "README.md").write_text(readme)
    size = sum(p.stat().st_size for p in dest.iterdir())
    if size > MAX_CASE_BYTES:
        raise SystemExit(f"{dest}: {size} bytes, over the {MAX_CASE_BYTES} byte limit")
    return dest


def record(cluster: SlurmCluster, case: Case, vers: dict[str, str], log: Callable[[str], None]) -> Path:
    assert cluster.dir is not None
    workdir = cluster.dir / "jobs" / case.name
    port = _free_port()
    script = batch_script(case, port)
    t0 = time.monotonic()
    job = cluster.sbatch(script, workdir, name=case.name)
    log(f"  job {job.job_id} submitted")
    if case.cancel_when is not None:
        cluster.wait_for_output(job, case.cancel_when, timeout_s=case.timeout_s)
        cluster.scancel(job.job_id)
    state = cluster.wait(job.job_id, timeout_s=case.timeout_s)
    secs = time.monotonic() - t0
    if not job.output_path.exists():
        raise SlurmClusterError(f"job {job.job_id} ended {state} without writing {job.output_path}")
    dest = write_case(case, job.job_id, state, job.output_path, script, vers, secs)
    log(f"  {state} after {secs:.0f} s -> {dest.relative_to(REPO)}")
    return dest


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Record the SLURM cases into tests/recorded/slurm-<case>/.")
    ap.add_argument("--case", action="append", default=[], help="a case name (repeatable; default: all)")
    ap.add_argument("--list", action="store_true", help="list the cases and exit")
    ap.add_argument("--keep-cluster-dir", action="store_true", help="keep the cluster's temp dir (daemon logs)")
    args = ap.parse_args(argv)
    by_name = {c.name: c for c in CASES}
    # torchrun must be the one installed with this interpreter's torch, also when the recorder is run
    # as venv/bin/python without activating the venv (PATH would then find no torchrun, or another's)
    os.environ["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
    if args.list:
        for c in CASES:
            print(f"{c.name:24} {c.expected}")
        return 0
    unknown = [n for n in args.case if n.removeprefix("slurm-") not in by_name]
    if unknown:
        print(f"error: unknown case(s) {', '.join(unknown)}; known: {', '.join(by_name)}", file=sys.stderr)
        return 2
    todo = [by_name[n.removeprefix("slurm-")] for n in args.case] or list(CASES)
    os.environ["OMP_NUM_THREADS"] = "1"

    def log(msg: str) -> None:
        print(msg, flush=True)

    # a SIGTERM to the driver unwinds through the cluster's __exit__, so no daemon is left behind
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    t0 = time.monotonic()
    try:
        with SlurmCluster(keep_dir=args.keep_cluster_dir) as cluster:
            log(f"cluster up in {cluster.dir} ({time.monotonic() - t0:.1f} s)")
            vers = versions(cluster)
            for case in todo:
                log(f"case {case.name}")
                record(cluster, case, vers, log)
            if args.keep_cluster_dir:
                log(f"cluster dir kept: {cluster.dir}")
    except SlurmClusterError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    log(f"{len(todo)} case(s) in {time.monotonic() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
