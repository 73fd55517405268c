"""GPU hardware faults: an uncorrectable ECC error, seen by Python in backward or by the NCCL watchdog thread."""

from __future__ import annotations

from tools.synth import tracebacks, watchdog
from tools.synth.job import Job
from tools.synth.tracebacks import RootTraceback

CUDA_ASYNC_NOTE = [
    "CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below might be incorrect.",
    "For debugging consider passing CUDA_LAUNCH_BLOCKING=1",
    "Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.",
]


def ecc_traceback(job: Job, r: int, step: int) -> RootTraceback:
    """Python sees the uncorrectable ECC error in backward."""
    site = job.site
    joins: list[str] = []
    blk = tracebacks.format_frames(tracebacks.script_frames(job, "train(cfg, model, optimizer, train_loader)") + [
        (f"{job.code}/{job.script}", 274, "train", "loss.backward()"),
        (f"{site}/torch/_tensor.py", 581, "backward", "torch.autograd.backward("),
        (f"{site}/torch/autograd/__init__.py", 347, "backward", "_engine_run_backward("),
        (f"{site}/torch/autograd/graph.py", 825, "_engine_run_backward",
         "return Variable._execution_engine.run_backward(  # Calls into the C++ engine to run the backward pass"),
    ])
    blk.append("RuntimeError: CUDA error: uncorrectable ECC error encountered")
    blk += CUDA_ASYNC_NOTE
    blk.append("")
    return [blk], joins, "RuntimeError: CUDA error: uncorrectable ECC error encountered"


def ecc_in_watchdog(job: Job, root: int, t_fail: float) -> tuple[str, tuple[float, int]]:
    """The NCCL watchdog thread of rank ``root`` hits the ECC error first; the process aborts.

    Returns the truth's details and the root's (exit time, exit code).
    """
    rng, p, rn = job.rng, job.profile, job.workers[root].node
    what = "CUDA error: uncorrectable ECC error encountered"
    job.print_rank(root, t_fail, f"{job.glog_tag(rn, t_fail, 'ProcessGroupNCCL.cpp', p.cpp_line.get('term', p.cpp_line['wd']))} "
                   f"{job.pg_name(root)} Process group watchdog thread terminated with exception: {what}", "glog")
    job.print_rank_lines(root, t_fail, CUDA_ASYNC_NOTE + [""], "raw")
    lines = ["terminate called after throwing an instance of 'c10::DistBackendError'",
             f"  what():  {job.pg_name(root)} Process group watchdog thread terminated with exception: {what}",
             *CUDA_ASYNC_NOTE, "",
             "Exception raised from c10_cuda_check_implementation at /pytorch/c10/cuda/CUDAException.cpp:43 "
             "(most recent call first):", *watchdog.cpp_frames(job, "cuda"),
             "Fatal Python error: Aborted", ""]
    lines += tracebacks.faulthandler_dump(job, root, "backward")
    job.print_rank_lines(root, t_fail + 0.001, lines, "raw")
    details = "Process group watchdog thread terminated with exception: CUDA error: uncorrectable ECC error encountered"
    return details, (t_fail + rng.uniform(0.3, 1.5), -6)
