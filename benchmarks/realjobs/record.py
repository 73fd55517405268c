"""Run real tiny distributed jobs (torch gloo on CPU, Lightning) under fault injection and commit
their logs as test cases in ``tests/recorded/<case>/``.

    python benchmarks/realjobs/record.py                 # every case (as root: tmpfs, unshare)
    python benchmarks/realjobs/record.py --case NAME ... # some cases
    python benchmarks/realjobs/record.py --list

Dev tooling, not part of the installed package (``pip install -e '.[record]'`` for torch,
lightning and tqdm). Each case is a launcher layout (``--tee 3`` into one file, ``--redirects 3
--log-dir``, one file per rank, several torchrun agents as "nodes" with their own host names and
clocks, Lightning's own launcher) plus a fault plan read by ``worker.py`` / ``lit_worker.py``. The
logs are written by the launchers themselves, straight into the case folder. ``expected.toml``
comes from the plan (which rank, which fault, which rule names that fault) and from the workers'
own record of the global rank that fired it -- never from what ``correlate`` prints.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
OUT = REPO / "tests" / "recorded"
WORKER = HERE / "worker.py"
LIT_WORKER = HERE / "lit_worker.py"
CASE_TIMEOUT_S = 150
# Every job gets these so two cores shared with other work stay usable and lines reach the log
# in the order they were written.
BASE_ENV = {"OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1", "GLOO_SOCKET_IFNAME": "lo"}
ENV_KEEP = ("PATH", "HOME", "LANG", "LC_ALL", "PYENV_ROOT", "PYENV_VERSION", "TERM")


@dataclass(frozen=True, slots=True)
class Case:
    name: str
    what: str                       # one sentence for README.md: what was injected and where
    layout: str                     # tee | logdir | perrank | nodes | lightning | lightning-tee
                                    # | rdzv-timeout | port-in-use
    nproc: int = 4                  # processes per node
    faults: str = ""                # RJ_FAULTS
    env: dict[str, str] = field(default_factory=dict)
    verdict: str = "root_cause"
    root: str | None = "plan"       # "plan": the rank that fired the first fault; None: no rank
    rule: str | None = None
    rule_any: tuple[str, ...] = ()
    #: the logs cannot order the injected failure against another (tests/test_recorded.py accepts the
    #: truth in the verdict's tie; the note says why)
    tie_ok: bool = False
    nnodes: int = 1
    shift: dict[int, str] = field(default_factory=dict)   # node index -> faketime offset
    restarts: int = 0
    tmpfs: bool = False             # a 1 MB tmpfs for RJ_CKPT_DIR
    note: str = ""                  # extra README prose (why this truth, what to look for)


EXC = "python.uncaught-exception"
SEGV = ("python.segmentation-fault", "launcher.worker-segfault-sigsegv", "launcher.worker-killed-by-signal")
BUS = ("python.bus-error-sigbus", "launcher.worker-bus-error-sigbus", "launcher.worker-killed-by-signal")
ENOSPC = ("checkpoint.pytorch-stream-writer-failed", "storage.enospc-no-space-left")

CASES: list[Case] = [
    # uncaught exceptions, several kinds and layouts
    Case("exc-shape-tee4", "rank 2 raises RuntimeError (a real matmul shape mismatch) at step 10",
         "tee", faults="2:10:shape", rule=EXC),
    Case("exc-keyerror-tee6", "rank 5 raises KeyError: 'labels' at step 8", "tee", nproc=6,
         faults="5:8:keyerror", rule=EXC),
    Case("exc-zerodiv-logdir4", "rank 1 raises ZeroDivisionError at step 12", "logdir",
         faults="1:12:zerodiv", rule=EXC),
    Case("exc-filenotfound-perrank4", "rank 3 opens a data shard that does not exist at step 6",
         "perrank", faults="3:6:filenotfound", rule="data.dataset-file-not-found"),
    Case("exc-assert-tee4-nostamps", "rank 3 fails an assert on a NaN loss at step 15; no timestamps",
         "tee", faults="3:15:assert", env={"RJ_TS": "0"}, rule=EXC),
    Case("exc-keyerror-perrank8-nostamps", "rank 6 raises KeyError at step 9; print() progress, no stamps",
         "perrank", nproc=8, faults="6:9:keyerror", env={"RJ_TS": "0"}, rule=EXC),
    Case("dataloader-exc-tee4", "rank 1's DataLoader worker raises KeyError on a sample at step 9",
         "tee", faults="1:9:dl-exc", rule=EXC),
    Case("dataloader-worker-sigkill-tee4", "rank 2's DataLoader worker is SIGKILLed at step 7",
         "tee", faults="2:7:dl-kill",
         rule_any=("data.dataloader-worker-killed", "data.dataloader-worker-exited-unexpectedly")),
    # signals
    Case("sigkill-tee8", "rank 6 is SIGKILLed (as the OOM killer does) at step 10", "tee", nproc=8,
         faults="6:10:sigkill", rule="launcher.worker-killed-by-signal"),
    Case("sigkill-logdir4", "rank 3 is SIGKILLed at step 5", "logdir", faults="3:5:sigkill",
         rule="launcher.worker-killed-by-signal"),
    Case("segv-tee4", "rank 1 segfaults (ctypes.string_at(0)) at step 10, no faulthandler", "tee",
         faults="1:10:segv", rule_any=SEGV),
    Case("segv-faulthandler-tee4", "rank 2 segfaults at step 10 with faulthandler enabled", "tee",
         faults="2:10:segv:faulthandler", rule_any=SEGV),
    Case("segv-faulthandler-perrank4", "rank 2 segfaults at step 8 with faulthandler; one file per rank",
         "perrank", faults="2:8:segv:faulthandler", rule="python.segmentation-fault"),
    Case("sigkill-perrank4-silent", "rank 1 is SIGKILLed at step 10; one file per rank and no launcher, "
         "so nothing reports the kill", "perrank", faults="1:10:sigkill",
         note="Nothing prints the kill (no launcher watches the processes): rank 1's file just stops. "
              "No rule can name the fault; the plan's truth is the rank, without a rule."),
    Case("sigbus-tee4", "rank 3 gets SIGBUS at step 10", "tee", faults="3:10:sigbus",
         rule_any=BUS),
    Case("abort-tee4", "rank 1 calls os.abort() at step 10", "tee", faults="1:10:abort",
         rule_any=("python.abort-sigabrt", "launcher.worker-aborted-sigabrt")),
    Case("abort-logdir6", "rank 4 calls os.abort() at step 6", "logdir", nproc=6, faults="4:6:abort",
         rule_any=("python.abort-sigabrt", "launcher.worker-aborted-sigabrt")),
    # hangs, early exits, mismatches
    Case("hang-tee4", "rank 2 sleeps before its all-reduce at step 10; gloo timeout 5 s", "tee",
         faults="2:10:hang", env={"RJ_TIMEOUT": "5"},
         note="No rule names a rank that silently stops; the plan's truth is the rank, without a rule."),
    Case("hang-tee6-nostamps", "rank 4 sleeps before its all-reduce at step 12; timeout 5 s; no stamps",
         "tee", nproc=6, faults="4:12:hang", env={"RJ_TIMEOUT": "5", "RJ_TS": "0"},
         note="No rule names a rank that silently stops; the plan's truth is the rank, without a rule."),
    Case("exit0-early-tee4", "rank 1 leaves the loop and exits 0 at step 10", "tee",
         faults="1:10:exit0",
         note="No rule names a rank that exits 0 early; the plan's truth is the rank, without a rule."),
    Case("mismatch-tee4", "rank 2 all-reduces a 7-element tensor where the others reduce the model "
         "gradients, at step 10", "tee", faults="2:10:mismatch", env={"RJ_TIMEOUT": "10"},
         note="Without TORCH_DISTRIBUTED_DEBUG=DETAIL only gloo's enforce on the mismatching rank asks "
              "'Is there a distributed collective mismatch in your code?' before it aborts; no rule in "
              "rules/ matches that text, so no rule is expected."),
    Case("mismatch-detail-tee4", "as mismatch-tee4 (rank 2, step 10) under TORCH_DISTRIBUTED_DEBUG=DETAIL",
         "tee", faults="2:10:mismatch", env={"RJ_TIMEOUT": "10", "TORCH_DISTRIBUTED_DEBUG": "DETAIL"},
         rule="nccl.collective-mismatch-detected"),
    Case("mismatch-broadcast-detail-tee4", "rank 3 calls broadcast where the others all-reduce, at "
         "step 6, under TORCH_DISTRIBUTED_DEBUG=DETAIL", "tee", faults="3:6:mismatch:op",
         env={"RJ_TIMEOUT": "10", "TORCH_DISTRIBUTED_DEBUG": "DETAIL"},
         rule="nccl.collective-mismatch-detected"),
    # storage and memory
    Case("save-enospc-tee4", "rank 0 torch.save()s a 2 MB checkpoint into a 1 MB tmpfs at step 10",
         "tee", faults="0:10:save", tmpfs=True, rule_any=ENOSPC),
    Case("save-enospc-perrank4", "rank 3 torch.save()s a 2 MB shard into a 1 MB tmpfs at step 7",
         "perrank", faults="3:7:save", tmpfs=True, rule_any=ENOSPC),
    Case("exdev-rename-tee4", "rank 1 os.rename()s its checkpoint from a tmpfs to /tmp at step 10",
         "tee", faults="1:10:exdev", tmpfs=True, rule="storage.exdev-cross-device-rename"),
    Case("rlimit-as-tee4", "rank 2 allocates 4 GiB under RLIMIT_AS (its size + 256 MB) at step 10",
         "tee", faults="2:10:rlimit", rule="host-memory.cannot-allocate-memory"),
    Case("rlimit-as-logdir4", "rank 1 allocates 4 GiB under RLIMIT_AS at step 4", "logdir",
         faults="1:4:rlimit", rule="host-memory.cannot-allocate-memory"),
    # launcher-level
    Case("rdzv-timeout", "one of two nodes never starts; the c10d rendezvous join timeout is 6 s",
         "rdzv-timeout", root=None, rule="launcher.rendezvous-error"),
    Case("master-port-in-use", "another process listens on the master port", "port-in-use",
         root=None, rule="launcher.master-port-in-use"),
    # two independent failures
    Case("two-failures-tee4", "rank 1 raises KeyError at step 10 and lingers 5 s at exit; rank 3 "
         "fails to open a file 2 s later in the same step", "tee",
         faults="1:10:keyerror;3:10:slowraise:2", env={"RJ_LINGER": "5"}, rule=EXC,
         note="The second failure is matched by a more specific rule (data.dataset-file-not-found) "
              "but comes two seconds later."),
    # healthy runs with noise
    Case("healthy-noise-tee4", "no fault; warnings, a logged and caught ConnectionRefusedError "
         "traceback, a tqdm bar on rank 0", "tee", env={"RJ_NOISE": "1"}, verdict="no_failure", root=None),
    Case("healthy-noise-logdir8-nostamps", "no fault; benign noise; 8 processes, no stamps", "logdir",
         nproc=8, env={"RJ_NOISE": "1", "RJ_TS": "0"}, verdict="no_failure", root=None),
    Case("healthy-noise-perrank4", "no fault; benign noise; one file per rank", "perrank",
         env={"RJ_NOISE": "1"}, verdict="no_failure", root=None),
    # restarts
    Case("restart-first-attempt-tee4", "--max-restarts 1; rank 2 raises KeyError at step 10 in the "
         "first attempt only; the second attempt finishes", "tee", faults="2:10:keyerror@0",
         restarts=1, verdict="no_failure", root=None,
         note="The job recovered: the last attempt finished, so the job's verdict is no_failure."),
    Case("restart-both-attempts-logdir4", "--max-restarts 1; rank 1 raises ZeroDivisionError at step 8 "
         "in both attempts", "logdir", faults="1:8:zerodiv", restarts=1, rule=EXC),
    Case("restart-both-attempts-tee4", "--max-restarts 1; rank 3 is SIGKILLed at step 6 in both attempts",
         "tee", faults="3:6:sigkill", restarts=1, rule="launcher.worker-killed-by-signal"),
    # several nodes (torchrun agents with their own host names and clocks)
    Case("nodes2-keyerror-skew", "2 nodes x 4; node1 local rank 2 raises KeyError at step 10; node1's "
         "clock is 7 s ahead", "nodes", nnodes=2, faults="node1/2:10:keyerror", shift={1: "+7s"}, rule=EXC),
    Case("nodes2-sigkill-skew", "2 nodes x 4; node0 local rank 3 is SIGKILLed at step 10; node0's clock "
         "is 7 s ahead", "nodes", nnodes=2, faults="node0/3:10:sigkill", shift={0: "+7s"},
         rule="launcher.worker-killed-by-signal"),
    Case("nodes3-segv-skew", "3 nodes x 4; node2 local rank 1 segfaults at step 8 (no faulthandler); "
         "node2's clock is 7 s ahead", "nodes", nnodes=3, faults="node2/1:8:segv", shift={2: "+7s"},
         rule_any=SEGV),
    Case("nodes2-hang-skew", "2 nodes x 4; node1 local rank 0 sleeps before its all-reduce at step 10; "
         "timeout 5 s; node0's clock is 7 s behind", "nodes", nnodes=2, faults="node1/0:10:hang",
         env={"RJ_TIMEOUT": "5"}, shift={0: "-7s"},
         note="No rule names a rank that silently stops; the plan's truth is the rank, without a rule."),
    Case("nodes2-two-failures-skew", "2 nodes x 4; node0 local rank 1 raises KeyError at step 10 and "
         "lingers 5 s; node1 local rank 3 fails to open a file 2 s later; node1's clock is 7 s behind",
         "nodes", nnodes=2, faults="node0/1:10:keyerror;node1/3:10:slowraise:2",
         env={"RJ_LINGER": "5"}, shift={1: "-7s"}, rule=EXC, tie_ok=True,
         note="Both tracebacks carry no stamp, and the last stamped lines before them are the same step on "
              "both nodes; rank 1 lingers 5 s before it exits, so rank 7 exits (and its peers lose it) first. "
              "Nothing in the logs orders the two failures: a correct verdict names one and ties the other."),
    Case("nodes2-abort-skew", "2 nodes x 4; node1 local rank 1 calls os.abort() at step 7; node1's clock "
         "is 7 s behind", "nodes", nnodes=2, faults="node1/1:7:abort", shift={1: "-7s"},
         rule_any=("python.abort-sigabrt", "launcher.worker-aborted-sigabrt")),
    # Lightning DDP on CPU
    Case("lightning-healthy", "Lightning DDP, 4 processes on CPU, no fault (progress bar, warnings)",
         "lightning", verdict="no_failure", root=None),
    Case("lightning-exc-rank1", "Lightning DDP x 4; rank 1 raises RuntimeError in training_step at step 8",
         "lightning", faults="1:8:shape", rule=EXC),
    Case("lightning-keyerror-nostamps", "Lightning DDP x 4, logging without asctime; rank 3 raises KeyError "
         "in training_step at step 12", "lightning", faults="3:12:keyerror", env={"RJ_TS": "0"}, rule=EXC),
    Case("lightning-ckpt-enospc", "Lightning DDP x 4; ModelCheckpoint every 10 steps into a 1 MB tmpfs "
         "(the ~1 MB model does not fit); rank 0 saves", "lightning", tmpfs=True,
         env={"RJ_CKPT_EVERY": "10"}, root="0", rule_any=ENOSPC,
         note="Lightning saves on rank 0 only, so rank 0 is the plan's root rank."),
    Case("lightning-tee-sigkill", "Lightning DDP under torchrun --tee 3 x 4; rank 2 SIGKILLed at step 8",
         "lightning-tee", faults="2:8:sigkill", rule="launcher.worker-killed-by-signal"),
]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _listening_ports() -> set[int]:
    """TCP ports in LISTEN state on this host (read from /proc, so nothing connects to them)."""
    ports = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) > 3 and fields[3] == "0A":  # TCP_LISTEN
                ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return ports


def _rdzv_port(argv: list[str]) -> str:
    """The port of a node's ``--rdzv-endpoint HOST:PORT`` (inside ``sh -c '... torchrun ...'``)."""
    text = " ".join(argv)
    return text.split("--rdzv-endpoint", 1)[1].split()[0].rsplit(":", 1)[1]


def _wait_listening(port: int, proc: subprocess.Popen, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while port not in _listening_ports():
        if proc.poll() is not None or time.monotonic() > deadline:
            return  # the case's own wait reports what went wrong
        time.sleep(0.2)


def _env(case: Case, record: Path, ckpt: str) -> dict[str, str]:
    env = {k: os.environ[k] for k in ENV_KEEP if k in os.environ}
    env.update(BASE_ENV)
    env.update({"RJ_FAULTS": case.faults, "RJ_RECORD": str(record), "RJ_CKPT_DIR": ckpt})
    env.update(case.env)
    return env


def _torchrun(case: Case, script: Path, extra: list[str]) -> list[str]:
    argv = ["torchrun", "--nproc-per-node", str(case.nproc)]
    if case.restarts:
        argv += ["--max-restarts", str(case.restarts)]
    return argv + extra + [str(script)]


def _jobs(case: Case, out: Path) -> list[tuple[list[str], dict[str, str], str]]:
    """(argv, env additions, log file name) for every process the case starts."""
    if case.layout == "tee":
        return [(_torchrun(case, WORKER, ["--standalone", "--tee", "3"]), {}, "job.log")]
    if case.layout == "logdir":
        return [(_torchrun(case, WORKER, ["--standalone", "--redirects", "3", "--log-dir", "logs"]),
                 {}, "launcher.log")]
    if case.layout == "lightning":
        return [([sys.executable, str(LIT_WORKER)], {"RJ_DEVICES": str(case.nproc)}, "train.log")]
    if case.layout == "lightning-tee":
        return [(_torchrun(case, LIT_WORKER, ["--standalone", "--tee", "3"]),
                 {"RJ_DEVICES": str(case.nproc)}, "job.log")]
    if case.layout == "perrank":
        port = str(_free_port())
        return [([sys.executable, str(WORKER)],
                 {"RANK": str(r), "LOCAL_RANK": str(r), "WORLD_SIZE": str(case.nproc),
                  "LOCAL_WORLD_SIZE": str(case.nproc), "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port},
                 f"rank-{r}.out") for r in range(case.nproc)]
    if case.layout in ("nodes", "rdzv-timeout"):
        port = str(_free_port())
        nnodes = max(case.nnodes, 2)
        started = case.nnodes if case.layout == "nodes" else 1
        jobs = []
        for n in range(started):
            tr = _torchrun(case, WORKER, [
                "--nnodes", str(nnodes), "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{port}",
                "--rdzv-id", f"rj-{case.name}", "--local-addr", "127.0.0.1", "--tee", "3"]
                + (["--rdzv-conf", "join_timeout=6"] if case.layout == "rdzv-timeout" else []))
            if n in case.shift:
                tr = ["faketime", "-f", case.shift[n]] + tr
            script = f"hostname node{n} && exec {shlex.join(tr)}"
            jobs.append((["unshare", "--uts", "sh", "-c", script], {}, f"node{n}.log"))
        return jobs
    if case.layout == "port-in-use":
        return [(_torchrun(case, WORKER, ["--master-addr", "127.0.0.1", "--master-port", "{PORT}", "--tee", "3"]),
                 {}, "job.log")]
    raise ValueError(f"{case.name}: unknown layout {case.layout!r}")


def _versions() -> str:
    out = subprocess.run([sys.executable, "-c",
                          "import torch, lightning, tqdm; print(torch.__version__, lightning.__version__, tqdm.__version__)"],
                         capture_output=True, text=True, check=True).stdout.split()
    return (f"torch {out[0]}, lightning {out[1]}, tqdm {out[2]}, Python {platform.python_version()}, "
            f"{platform.system()} {platform.release()}")


def record_case(case: Case, versions: str) -> float:
    out = OUT / case.name
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    work = Path(tempfile.mkdtemp(prefix=f"rj-{case.name}-"))
    record = work / "injected.jsonl"
    mnt = Path(f"/mnt/rj-{case.name}")
    ckpt = str(mnt) if case.tmpfs else str(work / "ckpt")
    if case.tmpfs:
        mnt.mkdir(parents=True, exist_ok=True)
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mnt)], check=True)
    holder = None
    jobs = _jobs(case, out)
    if case.layout == "port-in-use":
        holder = socket.socket()
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = str(holder.getsockname()[1])
        jobs = [([a.replace("{PORT}", port) for a in argv], e, f) for argv, e, f in jobs]
    env = _env(case, record, ckpt)
    procs, commands = [], []
    t0 = time.monotonic()
    try:
        for i, (argv, extra, fname) in enumerate(jobs):
            penv = dict(env, **extra)
            shown = {k: v for k, v in {**case.env, **extra}.items()}
            if case.faults:
                shown = {"RJ_FAULTS": case.faults, **shown}
            prefix = " ".join(f"{k}={shlex.quote(v)}" for k, v in shown.items())
            commands.append(f"{prefix + ' ' if prefix else ''}{shlex.join(argv)} > {fname} 2>&1")
            fh = open(out / fname, "wb")
            procs.append((subprocess.Popen(argv, cwd=out, env=penv, stdout=fh, stderr=subprocess.STDOUT,
                                           start_new_session=True), fh))
            if case.layout == "nodes" and i == 0:
                # node0 hosts the rendezvous store: start the others only once it listens. Whichever
                # agent binds the port first hosts the store, and under load node0's torch import can
                # take longer than a fixed head start (then node1 hosts it and node0's log shows the
                # store going away instead of its workers' failure).
                _wait_listening(int(_rdzv_port(argv)), procs[0][0], timeout_s=CASE_TIMEOUT_S)
        deadline = time.monotonic() + CASE_TIMEOUT_S
        for p, fh in procs:
            try:
                p.wait(timeout=max(1.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
                raise RuntimeError(f"{case.name}: did not end within {CASE_TIMEOUT_S} s") from None
            finally:
                fh.close()
        if case.layout == "perrank":
            # the rank stuck in a hang would wait forever without a launcher; none of ours hang
            pass
    finally:
        for p, _fh in procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
        if holder is not None:
            holder.close()
        if case.tmpfs:
            subprocess.run(["umount", "-l", str(mnt)], check=False)
            mnt.rmdir()
    elapsed = time.monotonic() - t0
    fired = [json.loads(line) for line in record.read_text().splitlines()] if record.exists() else []
    shutil.rmtree(work, ignore_errors=True)
    exit_codes = [p.returncode for p, _ in procs]
    if case.verdict == "no_failure" and any(exit_codes):
        raise RuntimeError(f"{case.name}: planned to finish, but the launcher exit codes are {exit_codes}")
    _write_expected(case, out, fired)
    _write_readme(case, out, commands, versions, fired, exit_codes, elapsed)
    size = sum(p.stat().st_size for p in out.rglob("*") if p.is_file())
    if size >= 5_000_000:
        raise RuntimeError(f"{case.name}: {size} bytes, over 5 MB")
    return elapsed


def _root_rank(case: Case, fired: list[dict]) -> int | None:
    if case.root is None:
        return None
    if case.root != "plan":
        return int(case.root)
    first_who = case.faults.split(";")[0].split(":")[0]
    hits = sorted((f for f in fired), key=lambda f: f["time"])
    if not hits:
        raise RuntimeError(f"{case.name}: the planned fault never fired")
    mine = [f for f in hits if (f"{f['host']}/{f['local_rank']}" == first_who or str(f["rank"]) == first_who)]
    if not mine:
        raise RuntimeError(f"{case.name}: the first planned fault ({first_who}) never fired")
    if case.restarts and "@" not in case.faults.split(";")[0] and not any(f["attempt"] == case.restarts for f in mine):
        raise RuntimeError(f"{case.name}: the planned fault did not fire in the last attempt")
    return int(mine[-1]["rank"])  # with restarts the last attempt's rank; the same in every attempt here


def _write_expected(case: Case, out: Path, fired: list[dict]) -> None:
    lines = [f"# From the injection plan in benchmarks/realjobs/record.py ({case.name}), not from correlate.",
             f'verdict = "{case.verdict}"']
    root = _root_rank(case, fired)
    if root is not None:
        lines.append(f"root_rank = {root}")
    if case.rule:
        lines.append(f'rule = "{case.rule}"')
    if case.rule_any:
        lines.append("rule_any = [" + ", ".join(f'"{r}"' for r in case.rule_any) + "]")
    if case.tie_ok:
        lines.append("tie_ok = true")
    (out / "expected.toml").write_text("\n".join(lines) + "\n", encoding="utf-8")


def _write_readme(case: Case, out: Path, commands: list[str], versions: str, fired: list[dict],
                  exit_codes: list[int], elapsed: float) -> None:
    logs = sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file()
                  and p.name not in ("README.md", "expected.toml"))
    text = [f"# {case.name}", "",
            f"Recorded real job: {case.what}.", "",
            f"- layout: `{case.layout}`, {case.nnodes} node(s) x {case.nproc} process(es), backend gloo (CPU)",
            f"- fault plan: `RJ_FAULTS={case.faults or '(none)'}`",
            f"- versions: {versions}",
            f"- recorded {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} in {elapsed:.1f} s; "
            f"launcher exit codes {exit_codes}",
            f"- every process also ran with `{' '.join(f'{k}={v}' for k, v in BASE_ENV.items())}`",
            ]
    if case.shift:
        shifts = ", ".join(f"node{n} `faketime -f '{s}'`" for n, s in sorted(case.shift.items()))
        text.append(f"- clock shift: {shifts} (libfaketime shifts time.time() and therefore the logging "
                    "stamps and torchrun's own stamps of every process on that node)")
    if fired:
        text.append("- the injector's own record of what fired (global rank, host, local rank, attempt):")
        for f in fired:
            text.append(f"  - {f['kind']} at step {f['step']}: rank {f['rank']} on {f['host']} "
                        f"(local rank {f['local_rank']}), attempt {f['attempt']}")
    if case.note:
        text += ["", case.note]
    text += ["", "Commands (run from this folder; all at once for several nodes or ranks):", "", "```sh"]
    text += commands
    text += ["```", "", "Log files, exactly as the launcher wrote them: " + ", ".join(f"`{p}`" for p in logs),
             "", "Regenerate: `python benchmarks/realjobs/record.py --case " + case.name + "`", ""]
    (out / "README.md").write_text("\n".join(text), encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--case", nargs="+", metavar="NAME", help="record only these cases")
    ap.add_argument("--list", action="store_true", help="list the cases and exit")
    args = ap.parse_args(argv)
    by_name = {c.name: c for c in CASES}
    # torchrun must be the one installed with this interpreter's torch, also when the recorder is run
    # as venv/bin/python without activating the venv (PATH would then find no torchrun, or another's)
    os.environ["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
    if args.list:
        for c in CASES:
            print(f"{c.name:36s} {c.layout:13s} {c.what}")
        return 0
    unknown = [n for n in args.case or [] if n not in by_name]
    if unknown:
        print(f"error: unknown case(s): {', '.join(unknown)} (see --list)", file=sys.stderr)
        return 2
    chosen = [by_name[n] for n in args.case] if args.case else CASES
    versions = _versions()
    t0 = time.monotonic()
    failed = []
    for c in chosen:
        try:
            s = record_case(c, versions)
            print(f"{c.name:36s} {s:6.1f} s", flush=True)
        except Exception as e:  # one broken case must not lose the others
            failed.append(c.name)
            print(f"{c.name:36s} FAILED: {e}", flush=True)
    print(f"{len(chosen) - len(failed)}/{len(chosen)} cases recorded in {time.monotonic() - t0:.0f} s")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
