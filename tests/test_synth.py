"""Tests of the synthetic job generator (tools.synth) and the bundled sample jobs.

They check the generator's own promises (determinism, layouts, truth file, clocks, dropped stamps,
cascade shape); they do not run the analyzer.
"""

from __future__ import annotations

import ast
import importlib.util
import random
import re
import statistics
import sys
import tomllib
from datetime import UTC, datetime
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tools.synth import FAULTS, LAYOUTS, PROFILES, Truth, generate, generate_job, generate_suite, main, watchdog  # noqa: E402  # noqa: E402
from tools.synth.job import Job  # noqa: E402

SAMPLES = ROOT / "sample_logs"
_LOG_TS = re.compile(r"(\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}),(\d{3}) - train - INFO - \[rank (\d+)\] step (\d+) ")


def _files(d: Path) -> dict[str, bytes]:
    return {str(p.relative_to(d)): p.read_bytes() for p in sorted(d.rglob("*")) if p.is_file()}


def _read_all(d: Path) -> str:
    return "\n".join(p.read_text(encoding="utf-8") for p in sorted(d.rglob("*")) if p.is_file())


def _epoch(stamp: str, ms: str) -> float:
    dt = datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S").replace(tzinfo=UTC)
    return dt.timestamp() + int(ms) / 1000.0


# ------------------------------------------------------------------------------------------------ API


def test_registry_and_layouts() -> None:
    assert len(FAULTS) >= 10
    assert LAYOUTS == ("per-rank", "srun-combined", "torchrun-combined", "torchelastic")
    for name, kind in FAULTS.items():
        assert kind.name == name
        assert kind.verdict in ("root_cause", "job_level", "no_failure", "undetermined")


def test_package_is_independent_of_the_analyzer() -> None:
    """The generator is the ground truth: it imports only the standard library and its own modules."""
    modules = sorted((ROOT / "tools" / "synth").glob("*.py"))
    assert len(modules) > 10
    for path in modules:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = ([node.module or ""] if isinstance(node, ast.ImportFrom)
                     else [a.name for a in node.names] if isinstance(node, ast.Import) else [])
            for name in names:
                assert not isinstance(node, ast.ImportFrom) or node.level == 0, f"{path.name}: relative import"
                top = name.split(".")[0]
                assert name.startswith("tools.synth") or top in sys.stdlib_module_names, f"{path.name} imports {name}"


def test_same_seed_same_bytes(tmp_path: Path) -> None:
    kw = dict(fault="storage-eio", ranks=24, layout="srun-combined", seed=7, max_skew_s=2.0,
              drop_timestamps=0.1, lines_per_rank=20)
    t1 = generate_job(tmp_path / "a", **kw)
    t2 = generate_job(tmp_path / "b", **kw)
    assert t1 == t2
    assert _files(tmp_path / "a") == _files(tmp_path / "b")
    t3 = generate_job(tmp_path / "c", **{**kw, "seed": 8})
    assert _files(tmp_path / "c") != _files(tmp_path / "a") or t3 != t1


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_every_fault_and_layout(tmp_path: Path, fault: str, layout: str) -> None:
    t = generate_job(tmp_path, fault=fault, ranks=16, layout=layout, seed=3, lines_per_rank=12)
    kind = FAULTS[fault]
    assert isinstance(t, Truth)
    assert (t.fault, t.layout, t.ranks) == (fault, layout, 16)
    assert t.verdict == kind.verdict
    exp = tomllib.loads((tmp_path / "expected.toml").read_text(encoding="utf-8"))
    assert exp["verdict"] == t.verdict
    assert exp.get("root_rank") == t.root_rank
    assert exp.get("rule") == t.rule
    assert exp.get("root_host") == t.root_host
    assert exp["description"] == t.description and len(t.description) > 40
    assert exp["synth"]["collateral_ranks"] == list(t.collateral_ranks)
    for f in t.files:
        assert (tmp_path / f).is_file(), f
    if kind.verdict == "root_cause":
        assert t.root_rank is not None and 0 <= t.root_rank < 16
        assert t.root_host is not None
        assert t.root_rank not in t.collateral_ranks
        assert len(t.collateral_ranks) >= 1
    else:
        assert t.root_rank is None and t.root_host is None and t.collateral_ranks == ()
    _check_silence(tmp_path, t)
    names = [Path(f).name for f in t.files]
    if layout == "per-rank":
        assert sum(1 for n in names if re.fullmatch(r"(rank-\d+|slurm-\d+_\d+)\.out", n)) == 16
    elif layout == "srun-combined":
        assert len(names) == 1 and re.fullmatch(r"slurm-\d+\.out", names[0])
    elif layout == "torchrun-combined":
        assert any(n.startswith("train") for n in names)
    else:
        logs = [f for f in t.files if re.search(r"node-\d+/\d+_\w{8}/attempt_0/\d+/(stdout|stderr)\.log$", f)]
        assert len(logs) == 32


def test_root_error_is_on_the_root_rank_only(tmp_path: Path) -> None:
    t = generate_job(tmp_path, fault="cuda-oom", ranks=16, layout="per-rank", seed=11, root_rank=5,
                     lines_per_rank=12, variant={"per_rank_names": "rank"})
    assert t.root_rank == 5 and t.rule == "cuda.out-of-memory"
    hits = [p.name for p in tmp_path.glob("rank-*.out") if "CUDA out of memory" in p.read_text()]
    assert hits == ["rank-5.out"]
    others = [p for p in tmp_path.glob("rank-*.out") if p.name != "rank-5.out"]
    assert all("Watchdog caught collective operation timeout" in p.read_text() for p in others)


def test_silent_culprit_prints_nothing_and_everyone_else_times_out_on_one_seq(tmp_path: Path) -> None:
    t = generate_job(tmp_path, fault="nccl-hang", ranks=16, layout="per-rank", seed=2, root_rank=11,
                     lines_per_rank=15, torch_version="2.8", variant={"per_rank_names": "rank", "culprit_dump": False})
    culprit = (tmp_path / "rank-11.out").read_text()
    assert "Watchdog" not in culprit and "Error" not in culprit and "Traceback" not in culprit
    seqs = set()
    for r in range(16):
        if r == 11:
            continue
        text = (tmp_path / f"rank-{r}.out").read_text()
        seqs |= set(re.findall(r"Watchdog caught collective operation timeout: WorkNCCL\(SeqNum=(\d+)", text))
        assert "Timeout(ms)=600000" in text
    assert len(seqs) == 1
    # the culprit's last step line is no later than anyone else's
    last = {r: max(int(s) for s in re.findall(r"\] step (\d+) \|", (tmp_path / f"rank-{r}.out").read_text()))
            for r in range(16)}
    assert last[11] == min(last.values())
    assert "CANCELLED AT" in (tmp_path / next(f for f in t.files if re.fullmatch(r"slurm-\d+\.out", f))).read_text()


# ------------------------------------------------------------------- who prints what after the root


_FAILURE = re.compile(r"Watchdog caught collective operation timeout|NCCL WARN|Traceback \(most recent call last\)|"
                      r"terminate called after throwing|Fatal Python error|dump signal")
_INIT = re.compile(r"\] NCCL INFO .*\brank (\d+) nranks \d+ cudaDev (\d+) ")
_TIMEOUT = re.compile(r"\[Rank (\d+)\] Watchdog caught collective operation timeout: WorkNCCL\(SeqNum=(\d+),.*? ran for "
                      r"(\d+) milliseconds")


def _worker_lines(d: Path, t: Truth) -> tuple[dict[int, list[str]], int]:
    """Each rank's own output lines (as the layout attributes them) and the GPUs per node."""
    files = {f: (d / f).read_text(encoding="utf-8") for f in t.files if not f.endswith(".json")}
    gpn = 1 + max(int(m.group(2)) for text in files.values() for m in _INIT.finditer(text))
    out: dict[int, list[str]] = {r: [] for r in range(t.ranks)}
    for f, text in files.items():
        lines = text.splitlines()
        if t.layout == "per-rank":
            m = re.fullmatch(r"(?:rank-(\d+)|slurm-\d+_(\d+))\.out", Path(f).name)
            if m:
                out[int(m.group(1) or m.group(2))] += lines
        elif t.layout == "torchelastic":
            m = re.match(r"node-(\d+)/[^/]+/attempt_0/(\d+)/std(?:out|err)\.log$", f)
            if m:
                out[int(m.group(1)) * gpn + int(m.group(2))] += lines
        elif t.layout == "srun-combined":
            for line in lines:
                m = re.match(r"(\d+): \[default(\d+)\]:", line)
                if m:
                    out[int(m.group(1)) * gpn + int(m.group(2))].append(line)
        else:  # torchrun-combined: every worker line carries [rankN]: (after tqdm frames glued in front)
            for line in lines:
                m = re.search(r"\[rank(\d+)\]:", line)
                if m:
                    out[int(m.group(1))].append(line)
    return out, gpn


def _check_silence(d: Path, t: Truth) -> None:
    """Truth.collateral_ranks are exactly the non-root ranks that print failure output, and every other
    non-root rank's silence has the one documented cause: it is on the root's node and the root's agent
    SIGTERMed it (by PID). In nccl-hang nobody but the culprit is silent."""
    lines, gpn = _worker_lines(d, t)
    printers = {r for r, ls in lines.items() if r != t.root_rank and any(_FAILURE.search(x) for x in ls)}
    assert printers == set(t.collateral_ranks), (sorted(printers ^ set(t.collateral_ranks))[:10], d)
    if t.root_rank is None:
        assert not printers
        return
    silent = set(range(t.ranks)) - printers - {t.root_rank}
    assert all(r // gpn == t.root_rank // gpn for r in silent), (sorted(silent)[:10], t.root_rank, gpn, d)
    if silent:
        assert t.layout != "per-rank" and t.fault != "nccl-hang", sorted(silent)[:10]
        everything = _read_all(d)
        for r in silent:
            pid = next(m.group(1) for x in lines[r] for m in [re.search(r":(\d+):\1 \[\d+\] NCCL INFO Bootstrap", x)] if m)
            assert f"Sending process {pid} closing signal SIGTERM" in everything, (r, pid)
    if t.fault == "nccl-hang":
        seqs: dict[int, set[str]] = {}
        for r, ls in lines.items():
            for x in ls:
                m = _TIMEOUT.search(x)
                if m:
                    assert int(m.group(1)) == r
                    assert 600000 <= int(m.group(3)) < 600100, x
                    seqs.setdefault(r, set()).add(m.group(2))
        assert set(seqs) == set(range(t.ranks)) - {t.root_rank}, sorted(set(range(t.ranks)) - set(seqs))
        assert len(set().union(*seqs.values())) == 1


def test_suite_collateral_ranks_print_and_only_the_roots_node_is_silent(tmp_path: Path) -> None:
    # jobs 0..16 are one of each fault; job 11 is the 1024-rank nccl-hang where eleven non-culprit ranks
    # used to be SIGTERMed by their agent before their own watchdog fired (printing nothing at all)
    res = generate_suite(tmp_path, jobs=len(FAULTS), seed=1)
    assert res[11][1].fault == "nccl-hang" and res[11][1].ranks == 1024
    for d, t in res:
        _check_silence(d, t)


@pytest.mark.parametrize("torch_version", sorted(PROFILES))
def test_nccl_hang_culprit_is_the_only_rank_missing_from_the_timeouts(tmp_path: Path, torch_version: str) -> None:
    for i, layout in enumerate(("srun-combined", "torchrun-combined")):
        t = generate_job(tmp_path / layout, fault="nccl-hang", ranks=256 if i == 0 else 64, layout=layout, seed=41,
                         lines_per_rank=12, torch_version=torch_version)
        _check_silence(tmp_path / layout, t)
        assert str(t.ranks - 1) in t.description


def test_no_waiting_rank_is_killed_before_its_own_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    """Internal check over many seeds: a rank planned to time out is never ended (SIGTERM, srun kill)
    before its watchdog fires, and an error.json is never stamped after its process died."""
    seen = 0
    timeouts: dict[int, float] = {}
    orig = watchdog.timeout_output

    def spy(job, r, t, *a, **k):  # type: ignore[no-untyped-def]
        timeouts[r] = t
        return orig(job, r, t, *a, **k)

    monkeypatch.setattr(watchdog, "timeout_output", spy)
    for seed in range(12):
        for fault in ("nccl-hang", "cuda-oom", "storage-eio", "storage-exdev", "nccl-ib-error"):
            rng = random.Random(f"t:{seed}:{fault}")
            job = Job(fault=FAULTS[fault], ranks=128, layout=rng.choice(LAYOUTS), gpus_per_node=8, max_skew_s=0.0,
                      drop_timestamps=0.0, lines_per_rank=12, rng=rng, root_rank=None, host_prefix=None, job_id=None,
                      torch_version=None, skew=None, variant=None)
            timeouts.clear()
            generate.simulate(job)
            for w in job.workers:
                t_to = timeouts.get(w.rank)
                if t_to is not None and w.exit_t is not None:
                    assert w.exit_t > t_to, (fault, seed, job.layout, w.rank)
                    seen += 1
                if w.error_ts is not None and w.exit_t is not None:
                    assert w.error_ts < w.exit_t
    assert seen > 1000


def test_multinode_tables_disagree(tmp_path: Path) -> None:
    t = generate_job(tmp_path, fault="gpu-ecc", ranks=32, layout="srun-combined", seed=5, root_rank=22,
                     host_prefix="gpu-b", torch_version="2.6", variant={"stuck_node": False})
    assert t.root_host == "gpu-b03"
    text = (tmp_path / t.files[0]).read_text()
    roots = re.findall(r"Root Cause \(first observed failure\):\n\d+: \[\d+\]:\n\d+:   time +: \S+\n\d+:   host +: \S+\n"
                       r"\d+:   rank +: (\d+) \(local_rank: \d+\)", text)
    assert len(roots) == 4
    assert "22" in roots and len(set(roots)) >= 3


def test_host_oom_kill_only_shows_as_agent_exit_code(tmp_path: Path) -> None:
    t = generate_job(tmp_path, fault="host-oom-kill", ranks=16, layout="srun-combined", seed=9, root_rank=12,
                     variant={"stuck_node": False})
    text = (tmp_path / t.files[0]).read_text()
    assert re.search(r"failed \(exitcode: -9\) local_rank: 4 \(pid: \d+\)", text)
    assert "Signal 9 (SIGKILL) received by PID" in text
    assert not any("[rank12]" in line for line in text.splitlines())
    assert t.rule == "launcher.worker-killed-by-signal"
    t2 = generate_job(tmp_path / "pr", fault="host-oom-kill", ranks=16, layout="per-rank", seed=9, root_rank=12)
    assert t2.rule == "slurm.oom-kill"


def test_torchelastic_error_json_format(tmp_path: Path) -> None:
    import json
    t = generate_job(tmp_path, fault="import-error", ranks=8, layout="torchelastic", seed=1, root_rank=5,
                     gpus_per_node=4, variant={"record": True})
    err = [f for f in t.files if f.endswith("error.json") and "/attempt_0/1/" in f and f.startswith("node-1/")]
    assert len(err) == 1
    data = json.loads((tmp_path / err[0]).read_text())
    msg = data["message"]
    assert msg["message"].startswith("ModuleNotFoundError: No module named ")
    assert msg["extraInfo"]["py_callstack"].startswith("Traceback (most recent call last):")
    assert msg["extraInfo"]["timestamp"].isdigit()


# ------------------------------------------------------------------------------------------ clocks


def _step_stamps(d: Path) -> dict[tuple[int, int], float]:
    out: dict[tuple[int, int], float] = {}
    for p in d.rglob("*.out"):
        for m in _LOG_TS.finditer(p.read_text()):
            out[(int(m.group(3)), int(m.group(4)))] = _epoch(m.group(1), m.group(2))
    return out


def test_skew_is_applied_per_host(tmp_path: Path) -> None:
    skew = {"node01": 0.0, "node02": 2.5, "node03": -1.25}
    t = generate_job(tmp_path, fault="healthy", ranks=12, layout="per-rank", seed=4, gpus_per_node=4,
                     host_prefix="node", skew=skew, lines_per_rank=30,
                     variant={"steplog": "logging", "ansi": False, "per_rank_names": "rank"})
    assert t.skew_s == skew
    st = _step_stamps(tmp_path)
    steps = sorted({s for _, s in st})
    assert len(steps) >= 10
    for other, host in ((4, "node02"), (8, "node03")):
        diffs = [st[(other, s)] - st[(0, s)] for s in steps if (other, s) in st and (0, s) in st]
        assert abs(statistics.median(diffs) - skew[host]) < 0.06, (host, statistics.median(diffs))


def test_random_skew_respects_bound(tmp_path: Path) -> None:
    t = generate_job(tmp_path, fault="healthy", ranks=32, layout="srun-combined", seed=12, max_skew_s=3.0,
                     lines_per_rank=10)
    assert len(t.skew_s) == 4
    assert all(abs(v) <= 3.0 for v in t.skew_s.values())
    assert len(set(t.skew_s.values())) > 1
    t0 = generate_job(tmp_path / "zero", fault="healthy", ranks=32, layout="srun-combined", seed=12, lines_per_rank=10)
    assert set(t0.skew_s.values()) == {0.0}


@pytest.mark.parametrize("frac", [0.0, 0.3])
def test_timestamps_dropped_at_the_given_fraction(tmp_path: Path, frac: float) -> None:
    generate_job(tmp_path, fault="healthy", ranks=8, layout="per-rank", seed=6, drop_timestamps=frac,
                 lines_per_rank=200, variant={"steplog": "logging", "ansi": False, "per_rank_names": "rank"})
    stamped = dropped = 0
    for p in tmp_path.glob("rank-*.out"):
        for line in p.read_text().splitlines():
            if re.search(r"\] step \d+ \| loss", line) or re.search(r"^\[rank \d+\] step \d+ \|", line):
                if " - train - INFO - " in line:
                    stamped += 1
                else:
                    dropped += 1
    total = stamped + dropped
    assert total >= 8 * 150
    assert abs(dropped / total - frac) < 0.04


def test_combined_streams_are_in_true_time_order_not_printed_order(tmp_path: Path) -> None:
    # with skew, printed stamps in a combined file are not monotonic, but each host's own are
    t = generate_job(tmp_path, fault="healthy", ranks=16, layout="srun-combined", seed=13, lines_per_rank=40,
                     skew={"gpu-a01": 0.0, "gpu-a02": 3.0}, host_prefix="gpu-a",
                     variant={"steplog": "logging", "ansi": False, "tqdm": False})
    per_task: dict[str, list[float]] = {"0": [], "1": []}
    for line in (tmp_path / t.files[0]).read_text().splitlines():
        m = re.match(r"(\d+): \[default\d\]:(\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}),(\d{3}) - train - INFO", line)
        if m:
            per_task[m.group(1)].append(_epoch(m.group(2), m.group(3)))
    for vals in per_task.values():
        assert vals == sorted(vals) and len(vals) > 20
    both = [x for x in per_task["0"]] + [x - 3.0 for x in per_task["1"]]
    assert max(both) - min(both) > 10


# ------------------------------------------------------------------------------------------- suite


def test_generate_suite_small(tmp_path: Path) -> None:
    res = generate_suite(tmp_path, jobs=8, seed=1)
    assert len(res) == 8
    assert len({t.fault for _, t in res}) == 8
    for d, t in res:
        assert (d / "expected.toml").is_file()
        assert d.name.startswith("job-") and t.fault in d.name


def test_cli_job(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["job", str(tmp_path / "j"), "--fault", "segfault", "--ranks", "16", "--layout",
                     "torchelastic", "--seed", "2", "--lines-per-rank", "12"])
    assert rc == 0
    assert "rule=python.segmentation-fault" in capsys.readouterr().out
    assert (tmp_path / "j" / "expected.toml").is_file()


def test_bad_arguments(tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        generate_job(tmp_path, fault="nope", ranks=8, layout="per-rank", seed=1)
    with pytest.raises(ValueError):
        generate_job(tmp_path, fault="healthy", ranks=8, layout="nope", seed=1)
    with pytest.raises(ValueError):
        generate_job(tmp_path, fault="nccl-ib-error", ranks=8, layout="per-rank", seed=1)
    with pytest.raises(ValueError):
        generate_job(tmp_path, fault="healthy", ranks=8, layout="per-rank", seed=1, skew={"nohost": 1.0})


# ------------------------------------------------------------------------------------------ samples


def _load_regenerate():
    spec = importlib.util.spec_from_file_location("sample_regenerate", SAMPLES / "regenerate.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


EXPECTED_SAMPLES = {
    "lustre-eio-checkpoint": (19, "storage.eio-on-checkpoint-save"),
    "cuda-oom-per-rank": (5, "cuda.out-of-memory"),
    "nccl-hang-silent-culprit": (11, None),
    "host-oom-kill-agent": (12, "launcher.worker-killed-by-signal"),
    "slurm-time-limit": (None, "slurm.time-limit"),
    "healthy": (None, None),
    "skewed-clocks": (6, "storage.eio-on-checkpoint-save"),
    "torchelastic-logdir": (5, "python-env.import-error"),
    "multinode-disagreeing-tables": (22, "gpu-hardware.uncorrectable-ecc"),
    "ecc-repeat-node": (17, "gpu-hardware.uncorrectable-ecc"),
}


def test_samples_are_present_small_and_as_documented() -> None:
    total = sum(p.stat().st_size for p in SAMPLES.rglob("*") if p.is_file())
    assert total < 3 * 1024 * 1024
    for name, (rank, rule) in EXPECTED_SAMPLES.items():
        d = SAMPLES / name
        assert (d / "README.md").is_file(), name
        exp = tomllib.loads((d / "expected.toml").read_text(encoding="utf-8"))
        assert exp.get("root_rank") == rank, name
        assert exp.get("rule") == rule, name
    assert tomllib.loads((SAMPLES / "multinode-disagreeing-tables/expected.toml").read_text())["root_host"] == "gpu-b03"
    assert tomllib.loads((SAMPLES / "ecc-repeat-node/expected.toml").read_text())["root_host"] == "gpu-b03"
    assert (SAMPLES / "lustre-eio-checkpoint/slurm-88123.out").is_file()
    text = (SAMPLES / "slurm-time-limit").joinpath(
        next(p.name for p in (SAMPLES / "slurm-time-limit").glob("slurm-*.out"))).read_text()
    assert re.search(r"\*\*\* JOB 1234 ON gpu-a01 CANCELLED AT \S+ DUE TO TIME LIMIT \*\*\*", text)


def test_lustre_sample_cascade() -> None:
    text = (SAMPLES / "lustre-eio-checkpoint/slurm-88123.out").read_text()
    assert re.search(r"^2: \[default3\]:\[rank19\]: OSError: \[Errno 5\] Input/output error$", text, re.M)
    timed_out = set(re.findall(r"\[Rank (\d+)\] Watchdog caught collective operation timeout", text))
    assert len(timed_out - {"19"}) >= 15
    roots = re.findall(r"Root Cause \(first observed failure\):\n\d+: \[\d+\]:\n.*\n.*\n\d+:   rank +: (\d+)", text)
    assert "19" in roots and len(set(roots) - {"19"}) >= 1
    assert "closing signal SIGTERM" in text


def test_samples_match_the_generator(tmp_path: Path) -> None:
    """The committed samples are exactly what regenerate.py produces (no drift)."""
    mod = _load_regenerate()
    for name, spec in mod.SAMPLES.items():
        spec = {k: v for k, v in spec.items() if k != "readme"}
        generate_job(tmp_path / name, **spec)
        got = {k: v for k, v in _files(tmp_path / name).items()}
        have = {k: v for k, v in _files(SAMPLES / name).items() if k != "README.md"}
        assert got == have, name
