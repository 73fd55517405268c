"""A throw-away single-node SLURM cluster on localhost, for recording real job logs.

Owns: a private directory (munge key and socket, slurm.conf, state, spool, daemon logs), the three
daemons it starts there (munged, slurmctld, slurmd, all in the foreground as our children), and
the jobs submitted through it. Nothing is written outside that directory and nothing system-wide
is touched: the system munge socket and /etc/slurm are never used, and every client command gets
``SLURM_CONF`` pointing at the private slurm.conf.

    with SlurmCluster() as cluster:
        job = cluster.sbatch(script_text, workdir)
        cluster.wait(job.job_id, timeout_s=300)
        text = job.output_path.read_text()

It must not touch: other sessions' processes (only the pids it started, and the slurmstepd
processes that hold files in its own directory, are ever signalled).
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import IO

#: job states after which a job never runs again (scontrol's JobState=...)
TERMINAL_STATES = frozenset(
    {
        "BOOT_FAIL",
        "CANCELLED",
        "COMPLETED",
        "DEADLINE",
        "FAILED",
        "NODE_FAIL",
        "OUT_OF_MEMORY",
        "PREEMPTED",
        "TIMEOUT",
    }
)

REQUIRED_PROGRAMS = ("munged", "mungekey", "slurmctld", "slurmd", "sbatch", "srun", "scontrol", "scancel", "squeue")


class SlurmClusterError(RuntimeError):
    """The cluster could not be set up, a daemon died, or a job did not behave."""


@dataclass(frozen=True, slots=True)
class SubmittedJob:
    job_id: int
    #: the file SLURM writes the job's stdout/stderr to (``--output``)
    output_path: Path
    script_path: Path


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def missing_programs() -> list[str]:
    """The SLURM/munge programs that are not on PATH (empty when everything is installed)."""
    return [p for p in REQUIRED_PROGRAMS if shutil.which(p) is None and not Path("/usr/sbin", p).exists()]


class SlurmCluster:
    """slurmctld + slurmd on 127.0.0.1 with ``cpus`` oversubscribed CPUs, in a private temp dir."""

    def __init__(
        self,
        *,
        cpus: int = 16,
        kill_wait_s: int = 5,
        first_job_id: int = 81001,
        keep_dir: bool = False,
        start_timeout_s: float = 60.0,
    ) -> None:
        self.cpus = cpus
        self.kill_wait_s = kill_wait_s
        self.first_job_id = first_job_id
        self.keep_dir = keep_dir
        self.start_timeout_s = start_timeout_s
        # slurmd must know itself by the NodeName in slurm.conf; the short host name is what a
        # real node uses and what srun prints in "srun: error: <host>: task N: ..."
        self.node_name = socket.gethostname().split(".")[0] or "localhost"
        self.dir: Path | None = None
        self._procs: dict[str, subprocess.Popen[bytes]] = {}
        self._logs: list[IO[bytes]] = []

    # ------------------------------------------------------------------ set-up and tear-down
    def __enter__(self) -> SlurmCluster:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    @property
    def conf_path(self) -> Path:
        assert self.dir is not None, "cluster not started"
        return self.dir / "slurm.conf"

    def env(self, extra: dict[str, str] | None = None) -> dict[str, str]:
        """The environment for client commands: our slurm.conf, nothing from an outer allocation."""
        env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "SBATCH_", "SRUN_", "SALLOC_"))}
        env["SLURM_CONF"] = str(self.conf_path)
        if extra:
            env.update(extra)
        return env

    def start(self) -> None:
        missing = missing_programs()
        if missing:
            raise SlurmClusterError(
                f"SLURM/munge programs not found: {', '.join(missing)}; "
                "install them with: apt-get update && apt-get install -y slurm-wlm munge"
            )
        if os.geteuid() != 0:
            raise SlurmClusterError("the local SLURM cluster runs its daemons as root (SlurmUser=root); run as root")
        self.dir = Path(tempfile.mkdtemp(prefix="correlate-slurm-"))
        os.chmod(self.dir, 0o700)
        try:
            self._write_config()
            self._start_munge()
            self._start_daemon("slurmctld", ["slurmctld", "-D", "-f", str(self.conf_path), "-i"])
            self._wait_for(self._controller_up, "slurmctld to answer 'scontrol ping'")
            self._start_daemon(
                "slurmd", ["slurmd", "-D", "-f", str(self.conf_path), "-N", self.node_name]
            )
            self._wait_for(self._node_idle, f"node {self.node_name} to become idle")
        except BaseException:
            self.stop()
            raise

    def _write_config(self) -> None:
        assert self.dir is not None
        d = self.dir
        for sub in ("munge", "state", "spool", "log", "jobs"):
            (d / sub).mkdir(mode=0o700)
        (d / "plugstack.conf").write_text("")
        ctl_port, slurmd_port = _free_port(), _free_port()
        self.munge_socket = d / "munge" / "munge.socket"
        conf = f"""\
# written by benchmarks/realjobs/slurm_cluster.py: one node on 127.0.0.1, CPUs oversubscribed
ClusterName=correlate
SlurmctldHost={self.node_name}(127.0.0.1)
SlurmctldPort={ctl_port}
SlurmdPort={slurmd_port}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket={self.munge_socket}
CredType=cred/munge
StateSaveLocation={d / "state"}
SlurmdSpoolDir={d / "spool"}
SlurmctldPidFile={d / "slurmctld.pid"}
SlurmdPidFile={d / "slurmd.pid"}
SlurmctldLogFile={d / "log" / "slurmctld.log"}
SlurmdLogFile={d / "log" / "slurmd.log"}
SlurmctldDebug=info
SlurmdDebug=info
PlugStackConfig={d / "plugstack.conf"}
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SwitchType=switch/none
MpiDefault=none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
# the node has fewer cores than it claims: trust slurm.conf, not the hardware
SlurmdParameters=config_overrides
ReturnToService=2
FirstJobId={self.first_job_id}
MinJobAge=600
InactiveLimit=0
# a time limit is a time limit: no grace minutes, and SIGKILL soon after SIGTERM
OverTimeLimit=0
KillWait={self.kill_wait_s}
MessageTimeout=30
NodeName={self.node_name} NodeAddr=127.0.0.1 CPUs={self.cpus} RealMemory=4000 State=UNKNOWN
PartitionName=debug Nodes={self.node_name} Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:4
"""
        self.conf_path.write_text(conf)

    def _start_munge(self) -> None:
        assert self.dir is not None
        key = self.dir / "munge" / "munge.key"
        subprocess.run(["mungekey", "--create", f"--keyfile={key}"], check=True, capture_output=True)
        os.chmod(key, 0o400)
        self._start_daemon(
            "munged",
            [
                "munged",
                "--foreground",
                "--force",
                f"--socket={self.munge_socket}",
                f"--key-file={key}",
                f"--pid-file={self.dir / 'munge' / 'munged.pid'}",
                f"--log-file={self.dir / 'log' / 'munged.log'}",
                f"--seed-file={self.dir / 'munge' / 'munged.seed'}",
            ],
        )
        self._wait_for(lambda: self.munge_socket.exists(), "munged to create its socket")

    def _start_daemon(self, name: str, argv: Sequence[str]) -> None:
        assert self.dir is not None
        log = open(self.dir / "log" / f"{name}.stderr", "wb")
        self._logs.append(log)
        exe = shutil.which(argv[0]) or str(Path("/usr/sbin", argv[0]))
        self._procs[name] = subprocess.Popen(
            [exe, *argv[1:]],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=self.env(),
            start_new_session=True,  # a Ctrl-C in the driver reaches the daemons only through stop()
        )

    def _check_daemons(self) -> None:
        for name, proc in self._procs.items():
            if proc.poll() is not None:
                raise SlurmClusterError(
                    f"{name} exited with code {proc.returncode} while starting; its log:\n{self.daemon_log(name)}"
                )

    def daemon_log(self, name: str, tail_lines: int = 30) -> str:
        if self.dir is None:
            return ""
        parts = []
        for p in (self.dir / "log" / f"{name}.log", self.dir / "log" / f"{name}.stderr"):
            if p.exists():
                parts.extend(p.read_text(errors="replace").splitlines()[-tail_lines:])
        return "\n".join(parts)

    def _wait_for(self, ready: Callable[[], bool], what: str) -> None:
        deadline = time.monotonic() + self.start_timeout_s
        while time.monotonic() < deadline:
            self._check_daemons()
            if ready():
                return
            time.sleep(0.5)
        raise SlurmClusterError(f"timed out after {self.start_timeout_s:.0f} s waiting for {what}")

    def _controller_up(self) -> bool:
        out = self.run(["scontrol", "ping"], check=False)
        return out.returncode == 0 and "UP" in out.stdout

    def _node_idle(self) -> bool:
        out = self.run(["sinfo", "-h", "-N", "-o", "%T"], check=False)
        return out.stdout.strip().rstrip("*") == "idle"

    def stop(self) -> None:
        """Cancel every job, stop the daemons, kill stray step daemons of ours, remove the dir."""
        if self.dir is None:
            return
        if "slurmctld" in self._procs and self._procs["slurmctld"].poll() is None:
            self.run(["scancel", "--full", "--quiet", f"--user={os.getuid()}"], check=False)
            deadline = time.monotonic() + self.kill_wait_s + 30
            while time.monotonic() < deadline:
                out = self.run(["squeue", "-h", "-o", "%i"], check=False)
                if out.returncode != 0 or not out.stdout.strip():
                    break
                time.sleep(0.5)
        for name in ("slurmd", "slurmctld", "munged"):
            proc = self._procs.pop(name, None)
            if proc is None or proc.poll() is not None:
                continue
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=5)
        for pid in self._stray_stepds():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        for log in self._logs:
            log.close()
        self._logs.clear()
        if not self.keep_dir:
            shutil.rmtree(self.dir, ignore_errors=True)
        self.dir = None

    def _stray_stepds(self) -> Iterator[int]:
        """slurmstepd processes (they detach from slurmd) that still hold a file in our directory."""
        assert self.dir is not None
        root = str(self.dir)
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                if (entry / "comm").read_text().strip() != "slurmstepd":
                    continue
                if any(os.readlink(fd).startswith(root) for fd in (entry / "fd").iterdir()):
                    yield int(entry.name)
            except OSError:
                continue

    # ------------------------------------------------------------------ jobs
    def run(self, argv: Sequence[str], *, check: bool = True, timeout_s: float = 60) -> subprocess.CompletedProcess[str]:
        """Run a SLURM client command against this cluster."""
        out = subprocess.run(list(argv), capture_output=True, text=True, env=self.env(), timeout=timeout_s, check=False)
        if check and out.returncode != 0:
            raise SlurmClusterError(f"{' '.join(argv)} failed ({out.returncode}): {out.stderr.strip()}")
        return out

    def sbatch(self, script: str, workdir: Path, *, name: str = "job", extra_args: Sequence[str] = ()) -> SubmittedJob:
        """Submit a batch script; its output goes to ``workdir/slurm-<jobid>.out`` unless it says otherwise."""
        assert self.dir is not None, "cluster not started"
        workdir.mkdir(parents=True, exist_ok=True)
        script_path = self.dir / "jobs" / f"{name}.sbatch"
        script_path.write_text(script)
        out = self.run(["sbatch", "--parsable", f"--chdir={workdir}", *extra_args, str(script_path)])
        job_id = int(out.stdout.strip().split(";")[0])
        m = re.search(r"^#SBATCH\s+--output=(\S+)", script, re.M)
        pattern = m.group(1) if m else "slurm-%j.out"
        output = Path(pattern.replace("%j", str(job_id)).replace("%x", name))
        if not output.is_absolute():
            output = workdir / output
        return SubmittedJob(job_id=job_id, output_path=output, script_path=script_path)

    def job_state(self, job_id: int) -> str:
        out = self.run(["scontrol", "-o", "show", "job", str(job_id)], check=False)
        m = re.search(r"\bJobState=(\S+)", out.stdout)
        return m.group(1) if m else "UNKNOWN"

    def wait_running(self, job_id: int, timeout_s: float = 120) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            state = self.job_state(job_id)
            if state == "RUNNING":
                return
            if state in TERMINAL_STATES:
                raise SlurmClusterError(f"job {job_id} ended ({state}) before it was seen running")
            time.sleep(0.5)
        raise SlurmClusterError(f"job {job_id} did not start within {timeout_s:.0f} s")

    def wait_for_output(self, job: SubmittedJob, text: str, timeout_s: float = 300) -> None:
        """Wait until the job's output file contains ``text`` (the job must still be running)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if job.output_path.exists() and text in job.output_path.read_text(errors="replace"):
                return
            state = self.job_state(job.job_id)
            if state in TERMINAL_STATES:
                raise SlurmClusterError(f"job {job.job_id} ended ({state}) before its output showed {text!r}")
            time.sleep(0.5)
        raise SlurmClusterError(f"job {job.job_id}: {text!r} not in its output after {timeout_s:.0f} s")

    def wait(self, job_id: int, timeout_s: float = 600) -> str:
        """Wait until the job is in a terminal state and its step daemons are gone; return the state."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for name, proc in self._procs.items():
                if proc.poll() is not None:
                    raise SlurmClusterError(f"{name} died while job {job_id} ran:\n{self.daemon_log(name)}")
            state = self.job_state(job_id)
            if state in TERMINAL_STATES:
                # the output file is closed by slurmstepd after the state is reported; let it finish
                self._wait_node_idle(timeout_s=self.kill_wait_s + 30)
                return state
            time.sleep(1.0)
        self.run(["scancel", str(job_id)], check=False)
        raise SlurmClusterError(f"job {job_id} still running after {timeout_s:.0f} s; cancelled it")

    def _wait_node_idle(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self._node_idle() and not any(True for _ in self._stray_stepds()):
                return
            time.sleep(0.5)

    def scancel(self, job_id: int, *args: str) -> None:
        self.run(["scancel", *args, str(job_id)])
