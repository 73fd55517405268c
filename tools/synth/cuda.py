"""CUDA faults of one rank: out of memory in the forward pass, a segmentation fault in a CUDA extension."""

from __future__ import annotations

from tools.synth import tracebacks
from tools.synth.job import Job
from tools.synth.tracebacks import RootTraceback


def gib(x: float) -> str:
    """Bytes in GiB as PyTorch's OOM message prints them."""
    return f"{x:.2f} GiB"


def mib_or_gib(mib: float) -> str:
    """MiB below 1 GiB, else GiB (PyTorch's ``format_size``)."""
    return f"{mib / 1024:.2f} GiB" if mib >= 1024 else f"{mib:.2f} MiB"


def out_of_memory(job: Job, r: int, step: int) -> RootTraceback:
    """Rank ``r`` runs out of GPU memory in the attention forward (the profile's message format)."""
    rng, site = job.rng, job.site
    joins: list[str] = []
    wk = job.workers[r]
    blk = tracebacks.format_frames(tracebacks.script_frames(job, "train(cfg, model, optimizer, train_loader)") + [
        (f"{job.code}/{job.script}", 268, "train", "loss = model(input_ids, labels=labels)"),
        (f"{site}/torch/nn/modules/module.py", 1736, "_wrapped_call_impl", "return self._call_impl(*args, **kwargs)"),
        (f"{site}/torch/nn/modules/module.py", 1747, "_call_impl", "return forward_call(*args, **kwargs)"),
        (f"{site}/torch/nn/parallel/distributed.py", 1643, "forward",
         "else self._run_ddp_forward(*inputs, **kwargs)"),
        (f"{site}/torch/nn/parallel/distributed.py", 1459, "_run_ddp_forward",
         "return self.module(*inputs, **kwargs)  # type: ignore[index]"),
        (f"{site}/torch/nn/modules/module.py", 1747, "_call_impl", "return forward_call(*args, **kwargs)"),
        (f"{job.code}/model.py", 231, "forward", "x = block(x, freqs_cis)"),
        (f"{site}/torch/nn/modules/module.py", 1747, "_call_impl", "return forward_call(*args, **kwargs)"),
        (f"{job.code}/model.py", 142, "forward",
         "att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))"),
    ])
    total = job.gpu_mem
    ask = rng.choice([512.0, 1024.0, 2048.0, 4096.0])
    free = rng.uniform(100.0, 900.0)
    if job.profile.oom_format == "old":
        alloc = total - rng.uniform(2.0, 5.0)
        msg = (f"{job.profile.oom_class}: CUDA out of memory. Tried to allocate {mib_or_gib(ask)} "
               f"(GPU {wk.local}; {gib(total)} total capacity; {gib(alloc)} already allocated; "
               f"{mib_or_gib(free)} free; {gib(alloc + 1.1)} reserved in total by PyTorch) If reserved "
               "memory is >> allocated memory try setting max_split_size_mb to avoid fragmentation.  See "
               "documentation for Memory Management and PYTORCH_CUDA_ALLOC_CONF")
    else:
        inuse = total - free / 1024
        by_pt = inuse - rng.uniform(1.5, 3.0)
        unalloc = rng.uniform(100.0, 900.0)
        msg = (f"{job.profile.oom_class}: CUDA out of memory. Tried to allocate {mib_or_gib(ask)}. GPU {wk.local} "
               f"has a total capacity of {gib(total)} of which {mib_or_gib(free)} is free. Including "
               f"non-PyTorch memory, this process has {gib(inuse)} memory in use. Of the allocated "
               f"memory {gib(by_pt)} is allocated by PyTorch, and {mib_or_gib(unalloc)} is reserved by "
               "PyTorch but unallocated. If reserved but unallocated memory is large try setting "
               "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation "
               "for Memory Management  (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)")
    blk.append(msg)
    return [blk], joins, "CUDA out of memory"


def segfault(job: Job, root: int, t_fail: float, lead: str) -> tuple[str, tuple[float, int]]:
    """Rank ``root`` dies of SIGSEGV in a CUDA extension: faulthandler's dump, nothing else.

    ``lead`` is text glued in front (rank 0's tqdm frames). Returns the truth's details and the
    root's (exit time, exit code).
    """
    if lead:
        job.print_rank(root, t_fail - 0.001, "", lead=lead, kind="raw")
    job.print_rank_lines(root, t_fail, ["Fatal Python error: Segmentation fault", ""]
                         + tracebacks.faulthandler_dump(job, root, "flash"), "raw")
    return "Fatal Python error: Segmentation fault", (t_fail + job.rng.uniform(0.05, 0.5), -11)
