"""One simulated job: its hosts, processes, environment and the records each process prints.

``Job`` holds the state every fault family writes into: who prints what at which true time
(``print_rank``, ``print_agent``, ``print_batch``, ``print_stepd``), the host clocks, the stamp
formats of the chosen PyTorch profile. It decides nothing about a fault's cascade (``cascade``,
``healthy`` and ``slurm`` do) and writes no file (``layouts`` does).
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from tools.synth.clock import Clock
from tools.synth.faults import FaultKind, Truth
from tools.synth.profiles import PROFILES


@dataclass(slots=True)
class Record:
    """One line (or a lead-only fragment) a worker process prints, at its true time."""

    t: float
    seq: int
    kind: str      # log (user/NCCL output) | glog (PyTorch C++ log line) | tb (uncaught traceback) | raw
    stream: str    # o | e
    text: str
    lead: str = "" # text glued in front (tqdm frames without newline), placed before the in-process prefix


@dataclass(slots=True)
class Worker:
    """One training process (a rank) and how it ended."""

    rank: int
    node: int
    local: int
    pid: int
    exit_t: float | None = None     # when the process ended by itself (None: never / killed by agent)
    exit_code: int | None = None    # positive exit code, or -signal
    error_ts: float | None = None   # true time of the exception (error file timestamp) when @record wrote one
    error_json: str | None = None
    state: str = "ok"               # ok | root | collateral | silent | stuck


@dataclass(slots=True)
class Variant:
    """The switches of one job's scenario: drawn from the seed, each one can be pinned (``variant=``)."""

    record: bool = False            # entry point decorated with torchelastic @record (error.json files)
    framework: str = "plain"        # plain | lightning
    steplog: str = "logging"        # logging | deepspeed
    ansi: bool = False
    tqdm: bool = True
    stuck_node: bool = False        # a non-root node hangs in NCCL abort until the user scancels the job
    per_rank_names: str = "slurm"   # slurm (slurm-<job>_<rank>.out) | rank (rank-<rank>.out)
    eio_variant: str = "close"      # close | move (EXDEV fallback copy fails with EIO)
    ecc_variant: str = "python"     # python | watchdog
    culprit_dump: bool = False      # hang: the silent rank's heartbeat monitor still prints its dump line
    secondary: bool = False         # a second, later primary failure on another host (same storage fault)
    secondary_delay: float = 1.5
    secondary_rank: int = -1        # pin the secondary failure to this rank (-1: a rank on a host whose clock is behind)
    fail_after_logs: int = 0        # number of logged steps before the fault (0: derived from lines_per_rank)
    scancel_delay: float = 900.0
    fqdn: str = ""                  # domain appended to host names in ChildFailedError tables
    log_exception: bool = False     # the script logs the exception (stamped ERROR line + traceback) before dying
    kill_on_bad_exit: bool = False  # srun --kill-on-bad-exit=1; the root process hangs at exit after its traceback,
                                    # so the first task to exit is a collateral one and srun then cancels the step


class Job:
    """A job being simulated: hosts, processes, environment, and every record printed so far."""

    def __init__(self, *, fault: FaultKind, ranks: int, layout: str, gpus_per_node: int,
                 max_skew_s: float, drop_timestamps: float, lines_per_rank: int, rng: random.Random,
                 root_rank: int | None, host_prefix: str | None, job_id: int | None,
                 torch_version: str | None, skew: Mapping[str, float] | None,
                 variant: Mapping[str, object] | None) -> None:
        self.rng = rng
        self.fault = fault
        self.ranks = ranks
        self.layout = layout
        self.gpus_per_node = gpus_per_node
        self.drop = drop_timestamps             # the fraction of step lines printed without a stamp
        self.lines_per_rank = lines_per_rank
        self.nodes = -(-ranks // gpus_per_node)
        self.profile = PROFILES[torch_version] if torch_version else PROFILES[rng.choice(sorted(PROFILES))]
        self.job_id = job_id if job_id is not None else rng.randrange(100000, 9999999)
        self.clock = Clock(1772456400 + rng.randrange(0, 120) * 86400 + rng.randrange(0, 80000))
        prefix, width = (host_prefix, 2) if host_prefix else rng.choice(
            [("gpu-a", 2), ("gpu-b", 2), ("gpu-c", 2), ("node", 3), ("hgx-", 3), ("dgx", 2)])
        width = max(width, len(str(self.nodes)))
        self.hosts = [f"{prefix}{i + 1:0{width}d}" for i in range(self.nodes)]
        net = rng.randrange(1, 200)
        self.ips = [f"10.{net}.{i // 250}.{i % 250 + 10}" for i in range(self.nodes)]
        if skew is not None:
            unknown = sorted(set(skew) - set(self.hosts))
            if unknown:
                raise ValueError(f"skew names unknown hosts {unknown}; hosts are {self.hosts}")
            self.host_offset_s = [float(skew.get(h, 0.0)) for h in self.hosts]
        elif max_skew_s > 0:
            self.host_offset_s = [round(rng.uniform(-max_skew_s, max_skew_s), 6) for _ in self.hosts]
        else:
            self.host_offset_s = [0.0] * self.nodes
        self.variant = self._choose_variant(variant or {})
        # processes
        self.agent_pid = [rng.randrange(2000, 4_000_000) for _ in range(self.nodes)]
        self.workers = []
        for r in range(ranks):
            n, lr = divmod(r, gpus_per_node)
            self.workers.append(Worker(r, n, lr, self.agent_pid[n] + 9 + lr))
        self.workers_on_node = [sum(1 for w in self.workers if w.node == n) for n in range(self.nodes)]
        # output
        self.rank_records: list[list[Record]] = [[] for _ in range(ranks)]
        self.agent_records: list[list[tuple[float, int, str]]] = [[] for _ in range(self.nodes)]
        self.stepd_records: list[tuple[float, int, int, str]] = []   # slurmstepd lines written through a node's task
        self.batch_records: list[tuple[float, int, str]] = []
        self._seq = 0
        self.collateral: set[int] = set()
        # environment
        self._choose_environment()
        self.root_rank = self._choose_root(root_rank)
        self.description = ""
        self.root_time: float | None = None
        self.description_facts: tuple | None = None
        self.ib_peer: int | None = None

    def _choose_variant(self, v: Mapping[str, object]) -> Variant:
        """Draw the scenario's switches from the seed, then apply the pinned ones."""
        rng = self.rng
        o = Variant(
            record=rng.random() < 0.5,
            framework=rng.choice(["plain", "lightning"]),
            steplog=rng.choice(["logging", "logging", "deepspeed"]),
            ansi=rng.random() < 0.3,
            tqdm=rng.random() < 0.7,
            stuck_node=self.nodes >= 3 and rng.random() < 0.35,
            per_rank_names=rng.choice(["slurm", "rank"]),
            eio_variant="move" if rng.random() < 0.25 else "close",
            ecc_variant=rng.choice(["python", "watchdog"]),
            culprit_dump=self.profile.key == "2.8" and rng.random() < 0.5,
            fqdn=rng.choice(["", "", ".cluster.local", ".hpc.internal"]),
            log_exception=rng.random() < 0.35,
            kill_on_bad_exit=self.fault.mechanism == "exception" and rng.random() < 0.3,
        )
        if self.profile.key == "2.1":
            o.ecc_variant = "python"
        for k, val in v.items():
            if not hasattr(o, k):
                raise ValueError(f"unknown variant option {k!r}")
            setattr(o, k, val)
        return o

    def _choose_environment(self) -> None:
        """Draw paths, names and training dynamics (where Python lives, the script, step timing)."""
        rng, py = self.rng, self.profile.python
        user = rng.choice(["jdoe", "akumar", "mchen", "lgarcia", "spark", "tnguyen"])
        proj = rng.choice(["llm", "vision", "climate", "bio", "speech"])
        repo = rng.choice(["gpt-pretrain", "llama-ft", "vit-pretrain", "nanotron-exp", "mm-train"])
        kind = rng.choice(["conda", "venv", "system"])
        if kind == "conda":
            self.site = f"/opt/conda/lib/python{py}/site-packages"
            self.stdlib = f"/opt/conda/lib/python{py}"
            self.binary = f"/opt/conda/bin/python{py}"
            self.torchrun = "/opt/conda/bin/torchrun"
        elif kind == "venv":
            root = f"/lustre/fs1/{proj}/envs/{repo}"
            self.site = f"{root}/lib/python{py}/site-packages"
            self.stdlib = f"/usr/lib/python{py}"
            self.binary = f"{root}/bin/python"
            self.torchrun = f"{root}/bin/torchrun"
        else:
            self.site = f"/usr/local/lib/python{py}/dist-packages"
            self.stdlib = f"/usr/lib/python{py}"
            self.binary = "/usr/bin/python3"
            self.torchrun = "/usr/local/bin/torchrun"
        self.agent_path = rng.choice(["abs", "site", "short"])
        self.code = rng.choice([f"/lustre/fs1/{proj}/{user}/{repo}", f"/home/{user}/{repo}", f"/workspace/{repo}"])
        self.script = rng.choice(["train.py", "pretrain.py", "main.py"])
        self.run = f"{repo}-{rng.choice(['a', 'b', 'c'])}{rng.randrange(1, 40)}"
        self.ckpt = f"/lustre/fs1/{proj}/{user}/ckpt/{self.run}"
        self.tmpdir = f"/tmp/torchelastic_{''.join(rng.choice('abcdefghijklmnopqrstuvwxyz0123456789_') for _ in range(8))}"
        self.run_id = str(self.job_id)
        self.log_run_dir = f"{self.run_id}_{''.join(rng.choice('abcdefghijklmnopqrstuvwxyz0123456789_') for _ in range(8))}"
        # training dynamics
        self.step_dt = round(rng.uniform(0.6, 2.4), 3)
        self.log_every = rng.choice([10, 20, 25, 50])
        self.ckpt_every = self.log_every * rng.choice([20, 40, 50])
        self.seq_per_step = rng.choice([1, 2, 3, 4])
        self.seq0 = rng.randrange(2, 40)
        self.step0 = self.ckpt_every * rng.randrange(3, 30)        # resumed from a checkpoint
        self.t_train = rng.uniform(45.0, 110.0)
        self.loss0 = rng.uniform(1.8, 3.2)
        self.lr = rng.choice([3e-4, 2e-4, 1.5e-4, 6e-4])
        self.gpu_mem = rng.choice([79.10, 79.15, 39.39, 93.00])
        self.numel = rng.choice([26214400, 13107200, 6553600, 52428800])

    def _choose_root(self, root_rank: int | None) -> int | None:
        """The rank whose fault starts the cascade (None for job-level ends and healthy runs)."""
        f = self.fault
        if f.mechanism in ("job", "none"):
            return None
        if root_rank is not None:
            if not 0 <= root_rank < self.ranks:
                raise ValueError(f"root_rank {root_rank} outside 0..{self.ranks - 1}")
            return root_rank
        if f.saves == "rank0":
            return 0
        if f.name == "import-error":
            return 0 if self.rng.random() < 0.5 else self.rng.randrange(self.ranks)
        return self.rng.randrange(self.ranks)

    def _next_seq(self) -> int:
        self._seq += 1
        return self._seq

    def print_rank(self, r: int, t: float, text: str, kind: str = "log", stream: str = "e", lead: str = "") -> None:
        """Rank ``r`` prints ``text`` at true time ``t`` (``kind``: log, glog, tb or raw; ``stream``: o or e)."""
        self.rank_records[r].append(Record(t, self._next_seq(), kind, stream, text, lead))

    def print_rank_lines(self, r: int, t: float, lines: Sequence[str], kind: str, stream: str = "e") -> None:
        """Rank ``r`` prints ``lines`` at once."""
        for line in lines:
            self.rank_records[r].append(Record(t, self._next_seq(), kind, stream, line))

    def print_agent(self, n: int, t: float, text: str) -> None:
        """Node ``n``'s torchelastic agent prints ``text``."""
        self.agent_records[n].append((t, self._next_seq(), text))

    def print_agent_lines(self, n: int, t: float, lines: Sequence[str]) -> None:
        """Node ``n``'s agent prints ``lines`` at once."""
        for line in lines:
            self.agent_records[n].append((t, self._next_seq(), line))

    def print_batch(self, t: float, text: str) -> None:
        """A line of the batch script's own output (srun, slurmstepd about the job) in ``slurm-<job>.out``."""
        self.batch_records.append((t, self._next_seq(), text))

    def print_stepd(self, n: int, t: float, text: str) -> None:
        """A slurmstepd line written through node ``n``'s task (prefixed like that node's output)."""
        self.stepd_records.append((t, self._next_seq(), n, text))

    def host_time(self, n: int, t: float) -> float:
        """True time -> the time node ``n``'s clock shows."""
        return t + self.host_offset_s[n]

    def log_stamp(self, n: int, t: float) -> str:
        """Python logging's stamp as node ``n`` prints it at true time ``t``."""
        return self.clock.log(self.host_time(n, t))

    def glog_tag(self, n: int, t: float, src: str, line: int, level: str = "E") -> str:
        """PyTorch's C++ log tag (``[E0302 14:07:31.123456789 file:line]``, or undated before 2.4)."""
        if self.profile.glog_stamp:
            return f"[{self.clock.glog(self.host_time(n, t), level)} {src}:{line}]"
        return f"[{level} {src}:{line}]"

    def agent_log_line(self, n: int, t: float, level: str, module: str, line_no: int, msg: str) -> str:
        """A torchelastic agent log line in the profile's format."""
        if self.profile.agent_glog:
            rel = module.replace(".", "/") + ".py"
            if self.agent_path == "abs":
                path = f"{self.site}/{rel}"
            elif self.agent_path == "site":
                path = f"{self.site.rsplit('/', 1)[-1]}/{rel}"
            else:
                path = rel
            return f"{self.clock.agent(self.host_time(n, t), level[0])} {self.agent_pid[n]} {path}:{line_no}] {msg}"
        return f"[{self.clock.log(self.host_time(n, t))}] {module}: [{level}] {msg}"

    def pg_name(self, r: int) -> str:
        """How the watchdog names rank ``r``'s default process group in this profile."""
        return self.profile.pg_format.format(r=r)

    def work_nccl(self, seq: int, op: str, numel_in: int, numel_out: int) -> str:
        """The ``WorkNCCL(...)`` description of a collective."""
        return (f"WorkNCCL(SeqNum={seq}, OpType={op}, NumelIn={numel_in}, NumelOut={numel_out}, "
                f"Timeout(ms)=600000)")

    def seq_of_step(self, step: int) -> int:
        """The collective SeqNum at the start of ``step``."""
        return self.seq0 + (step - self.step0) * self.seq_per_step

    def step_time(self, step: int) -> float:
        """True time at which ``step`` starts."""
        return self.t_train + (step - self.step0) * self.step_dt

    def loss_at(self, step: int, r: int) -> float:
        """The loss rank ``r`` logs at ``step`` (deterministic, slowly falling)."""
        base = self.loss0 * (1.0 - 0.25 * (1 - math.exp(-(step - self.step0) / 4000.0)))
        return base + (((r * 7919 + step * 104729) % 1000) - 500) / 40000.0

    @property
    def has_agent(self) -> bool:
        """Whether torchrun agents launched the workers (every layout but per-rank, a direct srun)."""
        return self.layout != "per-rank"

    def steps_before_fault(self) -> int:
        """How many step lines every rank logs before the fault."""
        if self.variant.fail_after_logs:
            return self.variant.fail_after_logs
        init_lines = 7
        return max(3, self.lines_per_rank - init_lines)

    def prune_after_exit(self) -> None:
        """A process prints nothing after it died; collateral = non-root ranks that printed errors after the root."""
        for w in self.workers:
            if w.exit_t is not None:
                self.rank_records[w.rank] = [x for x in self.rank_records[w.rank] if x.t <= w.exit_t + 1e-9]
        if self.root_time is None:
            self.collateral = set()
            return
        coll: set[int] = set()
        for w in self.workers:
            if w.rank == self.root_rank:
                continue
            for x in self.rank_records[w.rank]:
                if x.t > self.root_time and (x.kind != "log" or " NCCL WARN " in x.text):
                    coll.add(w.rank)
                    break
        self.collateral = coll

    def truth(self, files: Sequence[str]) -> Truth:
        """What really happened, once the job has been simulated and written as ``files``."""
        f = self.fault
        rule = f.rule
        if not self.has_agent and f.rule_without_agent:
            rule = f.rule_without_agent
        r = self.root_rank
        return Truth(
            verdict=f.verdict, root_rank=r, rule=rule,
            root_host=self.hosts[self.workers[r].node] if r is not None else None,
            collateral_ranks=tuple(sorted(self.collateral)), fault=f.name, layout=self.layout, ranks=self.ranks,
            skew_s={h: self.host_offset_s[i] for i, h in enumerate(self.hosts)}, description=self.description,
            root_time=self.clock.iso(self.root_time) if self.root_time is not None and r is not None else None,
            root_local_rank=self.workers[r].local if r is not None else None, files=tuple(files))
