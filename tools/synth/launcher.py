"""The torchelastic agent of each node: start-up warnings, SIGTERM fan-out, ChildFailedError tables.

Each agent's table names the first failure of its own node, so tables of several nodes disagree.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence

from tools.synth.job import Job, Worker

ELASTIC_TRACEBACK_DOC = "To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html"
OMP_WARNING = ("Setting OMP_NUM_THREADS environment variable for each process to be 1 in default, to avoid your system "
               "being overloaded, please further tune the variable for optimal performance in your application as needed. ")
SIGNAL_NAMES = {6: "SIGABRT", 9: "SIGKILL", 11: "SIGSEGV", 15: "SIGTERM", 7: "SIGBUS"}


def agent_startup(job: Job) -> None:
    """torchrun's OMP_NUM_THREADS banner on every node that runs several workers."""
    for n in range(job.nodes):
        t = job.rng.uniform(1.0, 4.0)
        if job.workers_on_node[n] > 1:
            for msg in ("", "*****************************************", OMP_WARNING,
                        "*****************************************"):
                job.print_agent(n, t, job.agent_log_line(n, t, "WARNING", "torch.distributed.run", 793, msg))


def agent_reports_exit(job: Job, n: int, *, exits: Mapping[int, tuple[float, int]], start_poll: float) -> float | None:
    """Simulate one node's torchelastic agent once a worker of node ``n`` has exited.

    ``exits`` maps global rank -> (exit time, exit code) for the workers that end by themselves.
    Returns the time torchrun exits (None if none of the node's workers ever exits).
    """
    if not exits:
        return None
    p, rng = job.profile, job.rng
    mi = p.monitor_interval
    first = min(t for t, _ in exits.values())
    phase = (start_poll % mi) if mi > 0 else 0.0
    k = math.ceil((first - phase) / mi)
    t_poll = phase + k * mi + rng.uniform(0.0005, 0.004)
    node_workers = [w for w in job.workers if w.node == n]
    failed = [w for w in node_workers if w.rank in exits and exits[w.rank][0] <= t_poll]
    running = [w for w in node_workers if w not in failed]
    t = t_poll
    for w in running:
        t += rng.uniform(0.0005, 0.012)
        job.print_agent(n, t, job.agent_log_line(n, t, "WARNING", "torch.distributed.elastic.multiprocessing.api",
                                                 p.agent_py_line.get("sigterm", 0), f"Sending process {w.pid} closing signal SIGTERM"))
    sigterm_done = t + rng.uniform(0.2, 2.5) if running else t
    for w in running:
        own = exits.get(w.rank)
        if own is not None and own[0] < sigterm_done:
            w.exit_t, w.exit_code = own            # it died by itself while being signalled
        else:
            w.exit_t, w.exit_code = sigterm_done - rng.uniform(0.0, 0.2), -15
    # ProcessFailure timestamps: error file timestamp if one was written, else the poll time (int seconds)
    host_epoch = job.clock.epoch(job.host_time(n, t_poll))
    ts: dict[int, int] = {}
    for w in failed:
        w.exit_t, w.exit_code = exits[w.rank]
        if w.error_ts is not None and w.error_json is not None:
            ts[w.rank] = job.clock.epoch(job.host_time(n, w.error_ts))
        else:
            ts[w.rank] = host_epoch
    root_w = min(sorted(failed, key=lambda w: w.local), key=lambda w: ts[w.rank])
    t_fail = sigterm_done + rng.uniform(0.01, 0.3)
    job.print_agent(n, t_fail, job.agent_log_line(n, t_fail, "ERROR", "torch.distributed.elastic.multiprocessing.api",
                                                  p.agent_py_line.get("failed", 0),
                                                  f"failed (exitcode: {root_w.exit_code}) local_rank: {root_w.local} "
                                                  f"(pid: {root_w.pid}) of binary: {job.binary}"))
    table_entries = sorted(failed, key=lambda w: w.local)
    if p.key == "2.8":
        table_entries += sorted(running, key=lambda w: w.local)
        ts.update({w.rank: job.clock.epoch(job.host_time(n, sigterm_done)) for w in running})
    job.print_agent_lines(n, t_fail, child_failed_error(job, n, root_w, table_entries, ts))
    return t_fail + rng.uniform(0.05, 0.6)


def agent_traceback_head(job: Job) -> list[str]:
    """The outer frames of torchrun's own traceback (from ``main`` down to ``launch_agent``)."""
    p, site, L = job.profile, job.site, job.profile.agent_py_line
    lines = ["Traceback (most recent call last):"]
    caret = p.python >= "3.11"
    if L.get("runpy"):
        lines += ['  File "<frozen runpy>", line 198, in _run_module_as_main',
                  '  File "<frozen runpy>", line 88, in _run_code',
                  f'  File "{site}/torch/distributed/run.py", line {L["runpy"]}, in <module>', "    main()"]
    else:
        lines += [f'  File "{job.torchrun}", line 8, in <module>', "    sys.exit(main())"]
        if caret:
            lines.append("             ^^^^^^")
    lines += [f'  File "{site}/torch/distributed/elastic/multiprocessing/errors/__init__.py", line {L["errors"]}, in wrapper',
              "    return f(*args, **kwargs)"]
    if caret:
        lines.append("           ^^^^^^^^^^^^^^^^^^")
    lines += [f'  File "{site}/torch/distributed/run.py", line {L["main"]}, in main', "    run(args)",
              f'  File "{site}/torch/distributed/run.py", line {L["run"]}, in run', "    elastic_launch(",
              f'  File "{site}/torch/distributed/launcher/api.py", line {L["call"]}, in __call__',
              "    return launch_agent(self._config, self._entrypoint, list(args))"]
    if caret:
        lines.append("           ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^")
    return lines


def child_failed_error(job: Job, n: int, root_w: Worker, entries: Sequence[Worker], ts: Mapping[int, int]) -> list[str]:
    """The agent's traceback and ChildFailedError table (format of torchelastic errors/__init__.py)."""
    p, L = job.profile, job.profile.agent_py_line
    lines = agent_traceback_head(job)
    lines += [f'  File "{job.site}/torch/distributed/launcher/api.py", line {L["launch"]}, in launch_agent',
              "    raise ChildFailedError("]
    host = job.hosts[n] + job.variant.fqdn
    title = f"{job.script} FAILED"
    order = list(entries)   # failures dict order: the failed workers by local rank, then (2.8) the SIGTERMed ones
    idx = {w.rank: i for i, w in enumerate(order)}
    fmts: dict[int, list[str]] = {}
    width = len(title)
    for w in order:
        if w.exit_code is not None and w.exit_code < 0:
            msg = f"Signal {-w.exit_code} ({SIGNAL_NAMES.get(-w.exit_code, '<N/A>')}) received by PID {w.pid}"
        elif w.error_json is not None:
            cs = json.loads(w.error_json)["message"]["extraInfo"]["py_callstack"]
            msg = cs.replace("\n", "\n  ")
        else:
            msg = ELASTIC_TRACEBACK_DOC
        base = (f"{job.code}/logs/{job.job_id}/node-{n}" if job.layout == "torchelastic" else job.tmpdir)
        err_file = (f"{base}/{job.log_run_dir}/attempt_0/{w.local}/error.json"
                    if w.error_json is not None else "<N/A>")
        code = f"{w.exit_code} (pid: {w.pid})"
        if p.key == "2.8":
            code += f"  ({SIGNAL_NAMES[-w.exit_code]})" if w.exit_code < 0 else " "
        fmt = [f"[{idx[w.rank]}]:", f"  time      : {job.clock.table(ts[w.rank] - job.clock.base)}",
               f"  host      : {host}", f"  rank      : {w.rank} (local_rank: {w.local})",
               f"  exitcode  : {code}", f"  error_file: {err_file}", f"  traceback : {msg}"]
        fmts[w.rank] = fmt
        for x in "\n".join(fmt).split("\n"):
            width = max(width, len(x))
    width = min(width, 60)
    others = [w for w in order if w is not root_w]
    lines.append("torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ")
    lines += ["=" * width, title, "-" * width, "Failures:"]
    if others:
        for w in others:
            lines += "\n".join(fmts[w.rank]).split("\n")
    else:
        lines.append("  <NO_OTHER_FAILURES>")
    lines += ["-" * width, "Root Cause (first observed failure):"]
    lines += "\n".join(fmts[root_w.rank]).split("\n")
    lines.append("=" * width)
    return lines


def agent_receives_sigterm(job: Job, n: int, t: float) -> float:
    """The agent receives SIGTERM (scancel / time limit): fan-out and SignalException traceback."""
    p, site = job.profile, job.site
    job.print_agent(n, t, job.agent_log_line(n, t, "WARNING", "torch.distributed.elastic.agent.server.api",
                                             p.agent_py_line.get("death", 719), "Received Signals.SIGTERM death signal, shutting down workers"))
    tt = t
    for w in job.workers:
        if w.node == n and w.exit_t is None:
            tt += job.rng.uniform(0.0005, 0.01)
            job.print_agent(n, tt, job.agent_log_line(n, tt, "WARNING", "torch.distributed.elastic.multiprocessing.api",
                                                      p.agent_py_line.get("sigterm", 0), f"Sending process {w.pid} closing signal SIGTERM"))
            w.exit_t, w.exit_code = tt + 0.5, -15
    tt += job.rng.uniform(0.3, 3.0)
    lines = ["Traceback (most recent call last):",
             f'  File "{site}/torch/distributed/elastic/agent/server/api.py", line 711, in run',
             "    result = self._invoke_run(role)",
             f'  File "{site}/torch/distributed/elastic/agent/server/api.py", line 870, in _invoke_run',
             "    time.sleep(monitor_interval)",
             f'  File "{site}/torch/distributed/elastic/multiprocessing/api.py", line 84, in _terminate_process_handler',
             '    raise SignalException(f"Process {os.getpid()} got signal: {sigval}", sigval=sigval)',
             f"torch.distributed.elastic.multiprocessing.api.SignalException: Process {job.agent_pid[n]} got signal: 15",
             "", "During handling of the above exception, another exception occurred:", ""]
    lines += agent_traceback_head(job)
    lines += [f'  File "{site}/torch/distributed/launcher/api.py", line 260, in launch_agent',
              "    result = agent.run()",
              f'  File "{site}/torch/distributed/elastic/metrics/api.py", line 137, in wrapper',
              "    result = f(*args, **kwargs)",
              f'  File "{site}/torch/distributed/elastic/agent/server/api.py", line 720, in run',
              "    self._shutdown(e.sigval)",
              f'  File "{site}/torch/distributed/elastic/agent/server/local_elastic_agent.py", line 372, in _shutdown',
              "    self._pcontext.close(death_sig)",
              f'  File "{site}/torch/distributed/elastic/multiprocessing/api.py", line 572, in close',
              "    self._close(death_sig=death_sig, timeout=timeout)",
              f'  File "{site}/torch/distributed/elastic/multiprocessing/api.py", line 909, in _close',
              "    handler.proc.wait(time_to_wait)",
              f'  File "{job.stdlib}/subprocess.py", line 1264, in wait',
              "    return self._wait(timeout=timeout)",
              f'  File "{job.stdlib}/subprocess.py", line 2047, in _wait',
              "    time.sleep(delay)",
              f'  File "{site}/torch/distributed/elastic/multiprocessing/api.py", line 84, in _terminate_process_handler',
              '    raise SignalException(f"Process {os.getpid()} got signal: {sigval}", sigval=sigval)',
              f"torch.distributed.elastic.multiprocessing.api.SignalException: Process {job.agent_pid[n]} got signal: 15"]
    job.print_agent_lines(n, tt, lines)
    return tt + 0.1
