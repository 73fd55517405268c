"""What the NCCL watchdog makes a rank print: collective timeouts, ``terminate called``, DistBackendError.

This is the collateral of nearly every failing job (the ranks that wait for the root in a collective
it never joins) and the end of a rank whose NCCL communicator failed.
"""

from __future__ import annotations

from collections.abc import Sequence

from tools.synth import tracebacks
from tools.synth.job import Job
from tools.synth.profiles import PY_EXIT_S

WATCHDOG_TAIL = (
    "This is most likely caused by incorrect usages of collectives, e.g., wrong sizes used across ranks, "
    "the order of collectives is not same for all ranks or the scheduled collective, for some reason, didn't "
    "run. Additionally, this can be caused by GIL deadlock or other reasons such as network errors or bugs in "
    "the communications library (e.g. NCCL), etc. ")
SOME_NCCL_OPS_FAILED = ("Some NCCL operations have failed or timed out. Due to the asynchronous nature of CUDA kernels, "
                        "subsequent GPU operations might run on corrupted/incomplete data.")
TAKING_PROCESS_DOWN = "To avoid data inconsistency, we are taking the entire process down."
REMOTE_ERROR = "remote process exited or there was a network error"
REMOTE_ERROR_EXPLAINED = "ncclRemoteError: A call failed possibly due to a network error or a remote process exiting prematurely."


def timeout_output(job: Job, r: int, t: float, seq: int, op: str, numel: int, ran_ms: int, *,
                   enq: int, comp: int, first_dump: bool, observed_from: tuple[int, float] | None,
                   mode: str) -> tuple[float, list[str] | None, float]:
    """Watchdog timeout output of a collateral rank detected at ``t``.

    ``observed_from``: (first rank that timed out, time this rank's heartbeat monitor saw its dump signal
    in the TCPStore), 2.8 only. Returns (process exit time, Python traceback block if it raised, time of
    the exception).
    """
    p, n, L = job.profile, job.workers[r].node, job.profile.cpp_line
    work = job.work_nccl(seq, op, numel, numel)
    wd_msg = f"[Rank {r}] Watchdog caught collective operation timeout: {work} ran for {ran_ms} milliseconds before timing out."
    pg = job.pg_name(r)
    g = lambda tt, key: job.glog_tag(n, tt, "ProcessGroupNCCL.cpp", L[key])  # noqa: E731
    t_abort = t + job.rng.uniform(*p.abort_delay)
    if p.flight_recorder == "stack" and observed_from is not None:
        src_rank, to = observed_from
        job.print_rank(r, to, f"{g(to, 'observed')} {pg} Observed flight recorder dump signal from another rank via TCPStore.", "glog")
        job.print_rank(r, to + 0.0002, f"{g(to + 0.0002, 'dump')} {pg} Received a dump signal due to a collective timeout from  rank "
                       f"{src_rank} and we will try our best to dump the debug info. Last enqueued NCCL "
                       f"work: {enq}, last completed NCCL work: {comp}.{WATCHDOG_TAIL}", "glog")
        job.print_rank(r, to + 0.0003, f"{g(to + 0.0003, 'prep')} {pg} ProcessGroupNCCL preparing to dump debug info. "
                       "Include stack trace: 1, only active collectives: 0", "glog")
    if p.key == "2.1":
        job.print_rank(r, t, f"{g(t, 'wd')} {wd_msg}", "glog")
        job.print_rank(r, t + 0.0002, f"{g(t, 'some')} {SOME_NCCL_OPS_FAILED}", "glog")
        job.print_rank(r, t + 0.0003, f"{g(t, 'avoid')} {TAKING_PROCESS_DOWN}", "glog")
    elif p.key == "2.3":
        job.print_rank(r, t, f"{g(t, 'wd')} {wd_msg}", "glog")
        job.print_rank(r, t + 0.0003, f"{g(t, 'timeout_at')} {pg} Timeout at NCCL work: {seq}, last enqueued NCCL work: "
                       f"{enq}, last completed NCCL work: {comp}.", "glog")
    elif p.key == "2.4":
        job.print_rank(r, t, f"{g(t, 'wd')} {wd_msg}", "glog")
        t2 = t + 0.005
        job.print_rank(r, t2, f"{g(t2, 'detected')} {pg} Exception (either an error or timeout) detected by watchdog at "
                       f"work: {seq}, last enqueued NCCL work: {enq}, last completed NCCL work: {comp}.", "glog")
    else:  # 2.6, 2.8
        job.print_rank(r, t, f"{g(t, 'wd')} {wd_msg}", "glog")
        t2 = t + 0.004
        job.print_rank(r, t2, f"{g(t2, 'failure')} {pg}  failure detected by watchdog at work sequence id: {seq} PG status: "
                       f"last enqueued work: {enq}, last completed work: {comp}", "glog")
        if p.flight_recorder == "notfound":
            job.print_rank(r, t2, f"{g(t2, 'notfound')} Stack trace of the failed collective not found, potentially because "
                           "FlightRecorder is disabled. You can enable it by setting TORCH_NCCL_TRACE_BUFFER_SIZE to a "
                           "non-zero value.", "glog")
        else:
            job.print_rank(r, t2, f"{g(t2, 'stack')} Stack trace of the failed collective:", "glog")
            if numel == 1:
                stack = [f"#0 barrier from {job.site}/torch/distributed/distributed_c10d.py:4159",
                         f"#1 wrapper from {job.site}/torch/distributed/c10d_logger.py:81"]
            else:
                stack = [f"#0 _engine_run_backward from {job.site}/torch/autograd/graph.py:825",
                         f"#1 backward from {job.site}/torch/autograd/__init__.py:347",
                         f"#2 backward from {job.site}/torch/_tensor.py:581"]
            stack += [f"#{len(stack)} train from {job.code}/{job.script}:274",
                      f"#{len(stack) + 1} main from {job.code}/{job.script}:398",
                      f"#{len(stack) + 2} <module> from {job.code}/{job.script}:412", ""]
            job.print_rank_lines(r, t2, stack, "raw")
        if first_dump or observed_from is None:
            job.print_rank(r, t2 + 0.0001, f"{g(t2, 'first')} {pg} First PG on this rank to signal dumping.", "glog")
            t3 = t2 + job.rng.uniform(0.05, 0.35)
            job.print_rank(r, t3, f"{g(t3, 'dump')} {pg} Received a dump signal due to a collective timeout from this local "
                           f"rank and we will try our best to dump the debug info. Last enqueued NCCL work: {enq}, last "
                           f"completed NCCL work: {comp}.{WATCHDOG_TAIL}", "glog")
            extra = ", only active collectives: 0" if p.key == "2.8" else ""
            job.print_rank(r, t3 + 0.0002, f"{g(t3, 'prep')} {pg} ProcessGroupNCCL preparing to dump debug info. Include "
                           f"stack trace: 1{extra}", "glog")
    if mode == "python":
        t_exit = t + job.rng.uniform(0.05, 0.4)
        blk = backend_error_traceback(job, r, t_exit, wd_msg)
        if p.key != "2.1":
            job.print_rank(r, t_exit + 0.01, f"{job.glog_tag(n, t_exit, 'ProcessGroupNCCL.cpp', L['some'])} [Rank {r}] {SOME_NCCL_OPS_FAILED}", "glog")
            job.print_rank(r, t_exit + 0.01, f"{job.glog_tag(n, t_exit, 'ProcessGroupNCCL.cpp', L['avoid'])} [Rank {r}] {TAKING_PROCESS_DOWN}", "glog")
        return t_exit + job.rng.uniform(*PY_EXIT_S), blk, t_exit
    if p.key != "2.1":
        job.print_rank(r, t_abort, f"{g(t_abort, 'some')} [Rank {r}] {SOME_NCCL_OPS_FAILED}", "glog")
        job.print_rank(r, t_abort, f"{g(t_abort, 'avoid')} [Rank {r}] {TAKING_PROCESS_DOWN}", "glog")
    terminate_block(job, r, t_abort + 0.002, wd_msg, "checkTimeout")
    return t_abort + 0.02, None, t_abort


def cpp_frames(job: Job, where: str) -> list[str]:
    """The C++ stack of an exception raised ``where`` (checkTimeout, ncclCommWatchdog, ...), random addresses."""
    lib = f"{job.site}/torch/lib"
    rng = job.rng
    a = lambda: f"0x{rng.randrange(0x7f0000000000, 0x7fffffffffff):x}"  # noqa: E731
    k = job.profile.key
    if where == "checkTimeout":
        out = [f"frame #0: c10::Error::Error(c10::SourceLocation, std::__cxx11::basic_string<char, "
               f"std::char_traits<char>, std::allocator<char> >) + 0x98 ({a()} in {lib}/libc10.so)",
               f"frame #1: c10d::ProcessGroupNCCL::WorkNCCL::checkTimeout(std::optional<std::chrono::duration<long, "
               f"std::ratio<1l, 1000l> > >) + 0x23d ({a()} in {lib}/libtorch_cuda.so)"]
        if k == "2.1":
            out += [f"frame #2: c10d::ProcessGroupNCCL::workCleanupLoop() + 0x19d ({a()} in {lib}/libtorch_cuda.so)",
                    f"frame #3: c10d::ProcessGroupNCCL::ncclCommWatchdog() + 0x119 ({a()} in {lib}/libtorch_cuda.so)"]
        elif k == "2.8":
            out += [f"frame #2: c10d::ProcessGroupNCCL::Watchdog::runLoop() + 0x14f1 ({a()} in {lib}/libtorch_cuda.so)",
                    f"frame #3: c10d::ProcessGroupNCCL::Watchdog::run() + 0x157 ({a()} in {lib}/libtorch_cuda.so)"]
        else:
            out += [f"frame #2: c10d::ProcessGroupNCCL::watchdogHandler() + 0xc80 ({a()} in {lib}/libtorch_cuda.so)",
                    f"frame #3: c10d::ProcessGroupNCCL::ncclCommWatchdog() + 0x14d ({a()} in {lib}/libtorch_cuda.so)"]
    else:
        out = [f"frame #0: c10::Error::Error(c10::SourceLocation, std::__cxx11::basic_string<char, "
               f"std::char_traits<char>, std::allocator<char> >) + 0x98 ({a()} in {lib}/libc10.so)",
               f"frame #1: <unknown function> + 0x11b4abe ({a()} in {lib}/libtorch_cuda.so)",
               f"frame #2: <unknown function> + 0xe07bed ({a()} in {lib}/libtorch_cuda.so)"]
    base = len(out)
    out += [f"frame #{base}: <unknown function> + 0xdc253 ({a()} in /lib/x86_64-linux-gnu/libstdc++.so.6)",
            f"frame #{base + 1}: <unknown function> + 0x94ac3 ({a()} in /lib/x86_64-linux-gnu/libc.so.6)",
            f"frame #{base + 2}: clone + 0x44 ({a()} in /lib/x86_64-linux-gnu/libc.so.6)", ""]
    return out


def terminate_block(job: Job, r: int, t: float, what: str, where: str, *, extra: Sequence[str] = ()) -> None:
    """``terminate called after throwing ...`` on the watchdog thread (the process then dies of SIGABRT)."""
    p, n = job.profile, job.workers[r].node
    pg = job.pg_name(r)
    if p.key == "2.1":
        whole = f"[Rank {r}] NCCL watchdog thread terminated with exception: {what}"
        lines = ["terminate called after throwing an instance of 'c10::DistBackendError'",
                 f"  what():  {whole}", *extra,
                 f"Exception raised from {where} at {p.c10d_src}/ProcessGroupNCCL.cpp:{p.cpp_line['check']} (most recent call first):",
                 *cpp_frames(job, where)]
        job.print_rank_lines(r, t, lines, "raw")
        return
    whole = f"{pg} Process group watchdog thread terminated with exception: {what}"
    line_no = p.cpp_line["check"] if where == "checkTimeout" else p.cpp_line.get("remote", p.cpp_line["check"])
    raised = f"Exception raised from {where} at {p.c10d_src}/ProcessGroupNCCL.cpp:{line_no} (most recent call first):"
    job.print_rank(r, t, f"{job.glog_tag(n, t, 'ProcessGroupNCCL.cpp', p.cpp_line['term'])} {whole}", "glog")
    job.print_rank_lines(r, t, [*extra, raised, *cpp_frames(job, where)], "raw")
    lines = ["terminate called after throwing an instance of 'c10::DistBackendError'",
             f"  what():  {whole}", *extra, raised, *cpp_frames(job, where)]
    if "watchdog" in p.cpp_line:
        lines += [f"Exception raised from ncclCommWatchdog at {p.c10d_src}/ProcessGroupNCCL.cpp:{p.cpp_line['watchdog']} "
                  "(most recent call first):", *cpp_frames(job, "ncclCommWatchdog")]
    job.print_rank_lines(r, t + 0.0005, lines, "raw")


def backend_error_traceback(job: Job, r: int, t: float, wd_msg: str) -> list[str]:
    """A waiting rank raises DistBackendError in Python from its collective's ``wait()``; returns the block."""
    site = job.site
    if job.variant.framework == "lightning":
        items = tracebacks.lightning_frames(job, "batch_end")[:-2] + [
            (f"{job.code}/callbacks.py", 96, "on_train_batch_end", 'trainer.strategy.barrier("rank_state_saved")'),
            (f"{site}/lightning/pytorch/strategies/ddp.py", 301, "barrier",
             "torch.distributed.barrier(device_ids=self.determine_ddp_device_ids())")]
        call = (f"{site}/torch/distributed/distributed_c10d.py", 4159, "barrier", "work.wait()")
    else:
        items = tracebacks.script_frames(job, "train(cfg, model, optimizer, train_loader)") + [
            (f"{job.code}/{job.script}", 287, "train", "dist.all_reduce(loss_sum, op=dist.ReduceOp.SUM)")]
        call = (f"{site}/torch/distributed/distributed_c10d.py", 2501, "all_reduce", "work.wait()")
    items += [(f"{site}/torch/distributed/c10d_logger.py", 81, "wrapper", "return func(*args, **kwargs)"), call]
    blk = tracebacks.format_frames(items)
    blk.append(f"torch.distributed.DistBackendError: {wd_msg}")
    tracebacks.print_traceback(job, r, t, [blk])
    return blk
