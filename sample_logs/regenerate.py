"""Rebuild the bundled sample jobs from the generator with fixed seeds.

    python sample_logs/regenerate.py            # rewrite every sample folder
    python sample_logs/regenerate.py healthy    # only the named ones

Each sample is one ``tools.synth.generate_job`` call with pinned details (root rank, hosts,
job id, PyTorch profile, variant switches), followed by a short ``README.md``. The folders are
data for tests and demos; the truth each one encodes is its ``expected.toml``.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from tools.synth import generate_job  # noqa: E402

SAMPLES: dict[str, dict] = {
    "lustre-eio-checkpoint": dict(
        fault="storage-eio", ranks=32, layout="srun-combined", seed=88123, root_rank=19, job_id=88123,
        host_prefix="gpu-a", torch_version="2.6", lines_per_rank=40,
        variant=dict(kill_on_bad_exit=False, framework="lightning", eio_variant="close", record=True, stuck_node=True, tqdm=True,
                     ansi=False, fqdn="", steplog="logging", log_exception=False),
        readme="""\
Four nodes x 8 GPUs, `srun --label` + `torchrun --tee 3`, PyTorch 2.6 log format.
Rank 19 (gpu-a03, local rank 3) gets `OSError: [Errno 5] Input/output error` when Lightning's
`_atomic_save` closes its per-rank state file on Lustre. Its agent SIGTERMs the other seven workers
of gpu-a03 and prints a ChildFailedError table naming rank 19 (with the traceback, `@record` is on).
The 24 ranks of the other nodes block in the checkpoint barrier (`OpType=ALLREDUCE, NumelIn=1`)
and their NCCL watchdogs fire ~600 s later; two of the nodes print ChildFailedError tables that
name their own first local failure (a collateral rank). One node hangs in NCCL abort until the
user scancels the job, so the file ends with `slurmstepd ... CANCELLED` lines and a
`SignalException` - teardown, not the cause.""",
    ),
    "cuda-oom-per-rank": dict(
        fault="cuda-oom", ranks=16, layout="per-rank", seed=505, root_rank=5, job_id=311402,
        host_prefix="gpu-c", torch_version="2.4", lines_per_rank=40,
        variant=dict(kill_on_bad_exit=False, per_rank_names="rank", stuck_node=False, ansi=True, tqdm=True, steplog="logging"),
        readme="""\
One file per rank (`rank-N.out`, the script's stdout+stderr) plus the batch output
`slurm-311402.out` with srun's task-exit lines; 2 nodes x 8 GPUs, direct `srun` launch (no torchrun
agent). Rank 5 dies with `torch.cuda.OutOfMemoryError: CUDA out of memory` in the attention
forward. Every other rank (including the seven on the same node) times out in the next gradient
collective ~600 s later; some raise `DistBackendError`, the others abort. Step lines use ANSI colours.""",
    ),
    "nccl-hang-silent-culprit": dict(
        fault="nccl-hang", ranks=16, layout="torchrun-combined", seed=1111, root_rank=11, job_id=402117,
        host_prefix="hgx-", torch_version="2.8", lines_per_rank=40, gpus_per_node=16,
        variant=dict(culprit_dump=False, tqdm=True, steplog="logging", record=False),
        readme="""\
One 16-GPU node, torchrun output on one stream with `[rankN]:` prefixes (`train.log`), PyTorch 2.8
with the flight recorder. Rank 11 simply stops logging after its last step line and prints nothing
else. The other 15 ranks all time out on the same `SeqNum` within a fraction of a second; most print
`Received a dump signal due to a collective timeout from this local rank`, and a rank whose store poll
came before its own timeout prints `... from  rank N` - N is the first rank that timed out, not the
culprit. The only rank missing from the
timeout pattern (and from `last enqueued ... work`) is 11. The agent's ChildFailedError table names
whichever worker aborted first.""",
    ),
    "host-oom-kill-agent": dict(
        fault="host-oom-kill", ranks=16, layout="srun-combined", seed=4404, root_rank=12, job_id=552310,
        host_prefix="gpu-b", torch_version="2.4", lines_per_rank=40,
        variant=dict(stuck_node=False, record=False, tqdm=False),
        readme="""\
Two nodes x 8 GPUs, `srun --label` + `torchrun --tee 3`. Rank 12 (gpu-b02, local rank 4) is killed
by the host OOM killer: it prints nothing at all. The only trace is its agent's
`failed (exitcode: -9) local_rank: 4 (pid: ...)` after `Sending process ... closing signal SIGTERM`
to the seven other local workers, and the table's `Signal 9 (SIGKILL) received by PID`. The workers
of gpu-b01 time out in NCCL ~600 s later.""",
    ),
    "slurm-time-limit": dict(
        fault="slurm-time-limit", ranks=16, layout="srun-combined", seed=1234, job_id=1234,
        host_prefix="gpu-a", torch_version="2.3", lines_per_rank=40,
        variant=dict(tqdm=True),
        readme="""\
Two nodes x 8 GPUs training normally until Slurm's time limit: `slurmstepd: error: *** JOB 1234 ON
gpu-a01 CANCELLED AT ... DUE TO TIME LIMIT ***`, the matching STEP line, and both torchrun agents
receiving SIGTERM (`Received Signals.SIGTERM death signal`, `SignalException: Process ... got
signal: 15`). No rank failed on its own: verdict job_level.""",
    ),
    "healthy": dict(
        fault="healthy", ranks=16, layout="srun-combined", seed=7, job_id=600001, host_prefix="gpu-c",
        torch_version="2.6", lines_per_rank=40, variant=dict(tqdm=True),
        readme="""\
A clean two-node run that finishes: step lines to the end, `destroy_process_group() was not
called` warnings at exit (harmless), and the agents' `Local worker group finished
(WorkerState.SUCCEEDED)`. Verdict no_failure.""",
    ),
    "skewed-clocks": dict(
        fault="storage-eio", ranks=16, layout="per-rank", seed=4242, root_rank=6, job_id=771204,
        host_prefix="node", torch_version="2.6", lines_per_rank=40, gpus_per_node=4,
        skew={"node01": 0.0, "node02": 1.9, "node03": -1.7, "node04": 0.6},
        variant=dict(kill_on_bad_exit=False, secondary=True, secondary_rank=9, secondary_delay=1.5, log_exception=True,
                     per_rank_names="slurm", stuck_node=False, framework="plain", tqdm=False),
        readme="""\
Per-rank files (`slurm-771204_N.out`) on four hosts whose clocks differ: node02 runs 1.9 s ahead,
node03 1.7 s behind (node04 +0.6 s). Rank 6 (node02) fails first with EIO while saving its
checkpoint shard; 1.5 s later (true time) rank 9 on node03 hits the same storage error. Sorting by
printed stamps puts rank 9 first (its ERROR line is stamped ~2.1 s earlier) - wrong. Every rank logs
the same step lines, so the per-host offsets can be estimated from them and the order corrected.""",
    ),
    "torchelastic-logdir": dict(
        fault="import-error", ranks=8, layout="torchelastic", seed=808, root_rank=5, job_id=640052,
        host_prefix="dgx", torch_version="2.6", lines_per_rank=40, gpus_per_node=4,
        variant=dict(kill_on_bad_exit=False, record=True, stuck_node=False),
        readme="""\
A torchrun `--log-dir` tree: `node-<n>/<run_id>_<suffix>/attempt_0/<local_rank>/{stdout,stderr}.log`
for 2 nodes x 4 GPUs, plus the agents' console output in `slurm-640052.out`. Rank 5 (node-1,
local rank 1) hits `ModuleNotFoundError` on a lazy import in its evaluation code; the entry point
is decorated with `@record`, so its `error.json` holds the message and traceback in torchelastic's
format and the agent's ChildFailedError table prints it.""",
    ),
    "multinode-disagreeing-tables": dict(
        fault="gpu-ecc", ranks=32, layout="srun-combined", seed=2222, root_rank=22, job_id=903318,
        host_prefix="gpu-b", torch_version="2.6", lines_per_rank=40,
        variant=dict(ecc_variant="watchdog", stuck_node=False, record=False),
        readme="""\
Four nodes x 8 GPUs. Rank 22 (gpu-b03, local rank 6) loses its GPU to an uncorrectable ECC error:
the NCCL watchdog thread reports `CUDA error: uncorrectable ECC error encountered` and the process
aborts. Its agent tears gpu-b03 down; the other nodes time out ~600 s later. Each of the four
agents prints its own ChildFailedError "Root Cause (first observed failure)" table, and they name
four different ranks - three of them collateral.""",
    ),
    "ecc-repeat-node": dict(
        fault="gpu-ecc", ranks=32, layout="per-rank", seed=3333, root_rank=17, job_id=904871,
        host_prefix="gpu-b", torch_version="2.4", lines_per_rank=30,
        variant=dict(kill_on_bad_exit=False, ecc_variant="python", stuck_node=False, per_rank_names="slurm"),
        readme="""\
A later job on the same cluster whose root is again on gpu-b03: rank 17 (local rank 1) raises
`RuntimeError: CUDA error: uncorrectable ECC error encountered` in backward. Per-rank files from a
direct `srun` launch. Together with `multinode-disagreeing-tables`, a cross-job history should
point at gpu-b03 as a repeat offender.""",
    ),
}


def build(name: str) -> None:
    spec = dict(SAMPLES[name])
    readme = spec.pop("readme")
    out = HERE / name
    if out.exists():
        shutil.rmtree(out)
    t = generate_job(out, **spec)
    head = f"# {name}\n\n"
    facts = (f"\n\nTruth: verdict `{t.verdict}`"
             + (f", root rank {t.root_rank} on {t.root_host}" if t.root_rank is not None else "")
             + (f", rule `{t.rule}`" if t.rule else "")
             + f". Generated by `sample_logs/regenerate.py` (seed {spec['seed']}); see `expected.toml`.\n")
    (out / "README.md").write_text(head + readme + facts, encoding="utf-8")


def main(argv: list[str]) -> int:
    names = argv or list(SAMPLES)
    for n in names:
        build(n)
        print(n)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
