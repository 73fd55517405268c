"""The injected faults and the truth a generated job encodes.

``FAULTS`` is the registry of fault kinds (what is injected and what the analyzer should conclude);
``Truth`` is what really happened in one job, also written to its ``expected.toml``. Owns no output.
"""

from __future__ import annotations

from dataclasses import dataclass

LAYOUTS: tuple[str, ...] = ("per-rank", "srun-combined", "torchrun-combined", "torchelastic")


@dataclass(frozen=True, slots=True)
class FaultKind:
    """One kind of injected failure and what the analyzer should conclude from it."""

    name: str
    title: str
    verdict: str            # root_cause | job_level | no_failure | undetermined
    rule: str | None        # canonical rule id the analyzer should name (None: no rule matches the root)
    mechanism: str          # exception | signal | network | hang | job | none
    saves: str = ""         # checkpoint faults: "per-rank" (any rank writes) or "rank0" (only rank 0)
    signal: int = 0         # mechanism == "signal": the signal that ends the root process
    rule_without_agent: str | None = None  # rule when no torchrun agent reports the death (per-rank layout)
    min_nodes: int = 1


FAULTS: dict[str, FaultKind] = {
    "storage-eio": FaultKind(
        "storage-eio", "EIO while writing a checkpoint on Lustre", "root_cause",
        "storage.eio-on-checkpoint-save", "exception", saves="per-rank"),
    "storage-estale": FaultKind(
        "storage-estale", "ESTALE (stale file handle) while creating the checkpoint directory", "root_cause",
        "storage.estale-stale-file-handle", "exception", saves="per-rank"),
    "storage-exdev": FaultKind(
        "storage-exdev", "EXDEV: atomic rename of a checkpoint from /tmp to the parallel filesystem", "root_cause",
        "storage.exdev-cross-device-rename", "exception", saves="rank0"),
    "lightning-exdev": FaultKind(
        "lightning-exdev", "Lightning _atomic_save cannot move its fsspec temp file across devices", "root_cause",
        "checkpoint.lightning-fsspec-cross-device", "exception", saves="rank0"),
    "storage-enospc": FaultKind(
        "storage-enospc", "ENOSPC while writing a checkpoint shard", "root_cause",
        "storage.enospc-no-space-left", "exception", saves="per-rank"),
    "storage-edquot": FaultKind(
        "storage-edquot", "EDQUOT while writing a checkpoint shard", "root_cause",
        "storage.edquot-disk-quota-exceeded", "exception", saves="per-rank"),
    "stream-writer": FaultKind(
        "stream-writer", "PytorchStreamWriter failed writing a checkpoint record", "root_cause",
        "checkpoint.pytorch-stream-writer-failed", "exception", saves="per-rank"),
    "cuda-oom": FaultKind(
        "cuda-oom", "CUDA out of memory in the forward pass", "root_cause", "cuda.out-of-memory", "exception"),
    "segfault": FaultKind(
        "segfault", "Segmentation fault in a CUDA extension", "root_cause",
        "python.segmentation-fault", "signal", signal=11),
    "host-oom-kill": FaultKind(
        "host-oom-kill", "Worker SIGKILLed by the host OOM killer (no output of its own)", "root_cause",
        "launcher.worker-killed-by-signal", "signal", signal=9, rule_without_agent="slurm.oom-kill"),
    "nccl-ib-error": FaultKind(
        "nccl-ib-error", "InfiniBand completion error (retry counter exceeded) on one rank", "root_cause",
        "nccl.ib-completion-error", "network", min_nodes=2),
    "nccl-hang": FaultKind(
        "nccl-hang", "One rank silently stops; everyone else times out on the same SeqNum", "root_cause",
        None, "hang"),
    "gpu-ecc": FaultKind(
        "gpu-ecc", "Uncorrectable ECC error on one GPU", "root_cause", "gpu-hardware.uncorrectable-ecc", "exception"),
    "dataloader-killed": FaultKind(
        "dataloader-killed", "DataLoader worker killed by the OOM killer", "root_cause",
        "data.dataloader-worker-killed", "exception"),
    "import-error": FaultKind(
        "import-error", "Lazy import fails on one rank (module missing from its environment)", "root_cause",
        "python-env.import-error", "exception"),
    "slurm-time-limit": FaultKind(
        "slurm-time-limit", "Job reached its Slurm time limit", "job_level", "slurm.time-limit", "job"),
    "healthy": FaultKind("healthy", "Clean run that finishes", "no_failure", None, "none"),
}


@dataclass(frozen=True, slots=True)
class Truth:
    """What really happened in a generated job (also written to ``expected.toml``)."""

    verdict: str
    root_rank: int | None
    rule: str | None
    root_host: str | None
    collateral_ranks: tuple[int, ...]
    fault: str
    layout: str
    ranks: int
    skew_s: dict[str, float]
    description: str = ""
    root_time: str | None = None          # true UTC time of the root event (ISO-8601)
    root_local_rank: int | None = None
    files: tuple[str, ...] = ()
