"""Hostile conditions for what correlate writes and reads back (issue 17, items 4 and 5).

* ``--parquet DIR``: a writer killed at every step of a write, four writers of one job at once
  (with a reader beside them), a disk that fills at every point of a write. ``history`` must see
  each job whole, old or new, never missing and never a mix of versions; the next write leaves
  nothing behind.
* ``-o FILE`` on a full disk keeps the previous report.
* ``history`` over a dataset with a truncated or stray file leaves that file out, says so, and
  summarises the rest.

The kills are real: each write runs in a child process that sends itself SIGKILL when
``parquet.STEP_HOOK`` reaches the chosen step. The children are forked by one driver process that
has imported pyarrow and the fixtures once (a new interpreter per kill would cost a second each).
"""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from report_fixtures import make_report, write_job

from correlator import history
from correlator.errors import InputError, UsageError
from correlator.model import DiagCode
from correlator.report import parquet

ROOT = Path(__file__).resolve().parent.parent
TESTS = Path(__file__).resolve().parent

#: versions of a job, told apart by their size: (hosts, ranks a host)
VERSIONS = {"A": (1, 4), "B": (2, 4), "C": (3, 4), "W0": (1, 2), "W1": (1, 3), "W2": (1, 5), "W3": (1, 6)}


def report_of(version: str, job: str = "J"):
    hosts, per_host = VERSIONS[version]
    return make_report(n_hosts=hosts, per_host=per_host, job_id=job)


def write(out: Path, job: str, version: str) -> None:
    parquet.write_parquet(report_of(version, job), out, job)


def signature(out: Path, job: str) -> tuple[int, int, int] | None:
    """(events rows, ranks rows, the verdict row's n_ranks) of ``job`` as read back, or None."""
    counts = []
    diags: list = []
    tables = parquet.read_tables(out, parquet.TABLES, diags)  # one snapshot: a job is one version in all three
    assert not [d for d in diags if d.level != "info"], diags
    for table in parquet.TABLES:
        rows = [r for r in tables[table].to_pylist() if r["job_id"] == job]
        if table == "incidents":
            verdicts = [r for r in rows if r["kind"] == "verdict"]
            assert len(verdicts) <= 1, f"{job}: {len(verdicts)} verdict rows"
            counts.append(verdicts[0]["n_ranks"] if verdicts else 0)
        else:
            counts.append(len(rows))
    return None if counts == [0, 0, 0] else (counts[0], counts[1], counts[2])


_SIGNATURES: dict[str, tuple[int, int, int]] = {}


def signatures(tmp: Path) -> dict[tuple[int, int, int], str]:
    if not _SIGNATURES:
        for version in VERSIONS:
            out = tmp / f"sig-{version}"
            write(out, "J", version)
            _SIGNATURES[version] = signature(out, "J")  # type: ignore[assignment]
        assert len(set(_SIGNATURES.values())) == len(VERSIONS)
        assert all(len({s[i] for s in _SIGNATURES.values()}) == len(VERSIONS) for i in range(3)), \
            "versions must differ in every table, or a mix could pass for a version"
    return {sig: version for version, sig in _SIGNATURES.items()}


def seen(out: Path, job: str, tmp: Path) -> str | None:
    """The version of ``job`` a reader sees: a name, None when the job is missing; a mix fails."""
    sig = signature(out, job)
    if sig is None:
        return None
    known = signatures(tmp)
    assert sig in known, f"{job}: a mix of versions: {sig} (versions: {_SIGNATURES})"
    return known[sig]


def leftovers(out: Path) -> list[str]:
    """Everything of an unfinished write: hidden entries beside the partitions, commit records."""
    found = [str(p.relative_to(out)) for t in parquet.TABLES if (out / t).is_dir()
             for p in (out / t).iterdir() if p.name.startswith(".")]
    commit = out / parquet.META / "commit"
    if commit.is_dir():
        found += [str(p.relative_to(out)) for p in commit.iterdir()]
    return sorted(found)


DRIVER = r"""
import os, signal, sys
sys.path[:0] = [sys.argv[1], sys.argv[2]]
import pyarrow.parquet  # loaded before any fork; the driver itself never starts an Arrow thread
import pandas  # pyarrow's from_pylist imports it: a second a child otherwise
from correlator.report import parquet
from report_fixtures import make_report
VERSIONS = %r

for line in sys.stdin:
    out, job, version, kill = line.rstrip("\n").split("\t")
    pid = os.fork()
    if pid == 0:
        def hook(step):
            if step == kill or (kill.endswith("*") and step.startswith(kill[:-1])):
                os.kill(os.getpid(), signal.SIGKILL)
        parquet.STEP_HOOK = hook
        try:
            hosts, per_host = VERSIONS[version]
            parquet.write_parquet(make_report(n_hosts=hosts, per_host=per_host, job_id=job), out, job)
        except BaseException as e:
            print(repr(e), file=sys.stderr, flush=True)
            os._exit(1)
        os._exit(0)
    _, status = os.waitpid(pid, 0)
    print(os.waitstatus_to_exitcode(status), flush=True)
"""


class Driver:
    """One process that forks a writer per request; ``write`` returns the writer's exit code."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen([sys.executable, "-c", DRIVER % (VERSIONS,), str(ROOT), str(TESTS)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)

    def write(self, out: Path, job: str, version: str, kill: str = "") -> int:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(f"{out}\t{job}\t{version}\t{kill}\n")
        self.proc.stdin.flush()
        return int(self.proc.stdout.readline())

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(timeout=60)


@pytest.fixture(scope="module")
def driver():
    d = Driver()
    yield d
    d.close()


def _unmount(folder: Path) -> None:
    if subprocess.run(["umount", str(folder)], capture_output=True).returncode:
        subprocess.run(["umount", "-l", str(folder)], check=True)  # busy: detach it now, freed once unused


@pytest.fixture(scope="module")
def _memory_disk(tmp_path_factory: pytest.TempPathFactory):
    """A tmpfs when root may mount one: a write syncs about ten times, and on a busy shared disk
    each sync can take a tenth of a second; the kills do not depend on the filesystem."""
    base = tmp_path_factory.mktemp("memory")
    mounted = os.geteuid() == 0 and subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=256m", "tmpfs", str(base)], capture_output=True).returncode == 0
    yield base
    if mounted:
        _unmount(base)


@pytest.fixture
def fast_tmp(_memory_disk: Path, request: pytest.FixtureRequest) -> Path:
    folder = _memory_disk / request.node.name.replace("/", "_")
    folder.mkdir()
    return folder


def steps_of(out: Path, job: str, version: str, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    names: list[str] = []
    monkeypatch.setattr(parquet, "STEP_HOOK", names.append)
    write(out, job, version)
    monkeypatch.setattr(parquet, "STEP_HOOK", None)
    return names


# --- item 4: a kill at every step ------------------------------------------------------------------


def test_a_write_has_the_steps_the_kill_tests_walk(fast_tmp: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write(fast_tmp, "J", "A")
    names = steps_of(fast_tmp, "J", "B", monkeypatch)
    per_table = lambda *forms: [f.format(t) for t in parquet.TABLES for f in forms]  # noqa: E731
    assert names == (["locked", "recovered"] + per_table("staging {}", "staged {}")
                     + ["record written", "committed"] + per_table("moved old {}", "moved new {}")
                     + ["record removed"] + per_table("removed old {}"))
    assert leftovers(fast_tmp) == []


@pytest.mark.parametrize("existing", [True, False], ids=["replacing a job", "a new job"])
def test_a_writer_killed_at_any_step_leaves_the_old_or_the_new_job_whole(
        fast_tmp: Path, monkeypatch: pytest.MonkeyPatch, driver: Driver, existing: bool) -> None:
    probe = fast_tmp / "probe"
    if existing:
        write(probe, "J", "A")
    names = steps_of(probe, "J", "B", monkeypatch)
    commit = names.index("committed")
    for k, step in enumerate(names):
        out = fast_tmp / f"k{k}"
        write(out, "K", "A")  # a bystander job, which nothing may touch
        if existing:
            write(out, "J", "A")
        assert driver.write(out, "J", "B", kill=step) == -signal.SIGKILL, step
        before = ("A" if existing else None)
        expected = "B" if k >= commit else before
        assert seen(out, "J", fast_tmp) == expected, f"killed at {step!r}"
        summary = history.summarize(out)
        assert summary.jobs == (2 if expected else 1), step
        assert not [d for d in summary.diagnostics if d.level != "info"], step
        # the next write of another job finishes or cleans this one's write, and changes nothing else
        write(out, "K", "C")
        assert seen(out, "J", fast_tmp) == expected, f"killed at {step!r}, then K written"
        assert leftovers(out) == [], f"killed at {step!r}, then K written"
        # and the next write of the job itself replaces it whole
        assert driver.write(out, "J", "W0") == 0
        assert (seen(out, "J", fast_tmp), seen(out, "K", fast_tmp)) == ("W0", "C")
        assert leftovers(out) == []


def test_a_kill_while_finishing_an_interrupted_write_is_finished_by_the_next(
        fast_tmp: Path, monkeypatch: pytest.MonkeyPatch, driver: Driver) -> None:
    probe = fast_tmp / "probe"
    write(probe, "J", "A")
    names = steps_of(probe, "J", "B", monkeypatch)
    after_commit = names[names.index("committed"):names.index("record removed")]
    tried = 0
    for k, step in enumerate(after_commit):
        out = fast_tmp / f"k{k}"
        write(out, "J", "A")
        assert driver.write(out, "J", "B", kill=step) == -signal.SIGKILL
        # the second writer dies in the middle of finishing the first one's swap
        code = driver.write(out, "J", "C", kill="recover *")
        tried += code == -signal.SIGKILL
        assert seen(out, "J", fast_tmp) == "B", (step, code)
        assert driver.write(out, "J", "C") == 0
        assert seen(out, "J", fast_tmp) == "C" and leftovers(out) == []
    assert tried >= len(after_commit) - 1  # only a kill after the last swap leaves nothing to finish


def test_what_writes_before_the_lock_left_is_recovered(tmp_path: Path) -> None:
    """The old writer renamed each table's partition away, then the new one in: killed between the
    two, the job had only hidden ``.old-*``/``.tmp-*`` folders, and history lost it for good."""
    write(tmp_path, "J", "A")
    write(tmp_path, "K", "A")
    for table in ("ranks", "incidents"):  # it had got through events
        folder = tmp_path / table
        (folder / "job_id=J").rename(folder / ".job_id=J.old-0123abcd")
        (folder / ".job_id=J.tmp-4242-89abcdef").mkdir()
        (folder / ".job_id=J.tmp-4242-89abcdef" / "part-0.parquet").write_bytes(b"PAR1 cut")
    assert history.summarize(tmp_path).jobs == 1  # what the old code left: J is gone from history
    write(tmp_path, "K", "B")  # any next write brings it back and clears the rest
    assert seen(tmp_path, "J", tmp_path) == "A" and seen(tmp_path, "K", tmp_path) == "B"
    assert leftovers(tmp_path) == []


def test_leftovers_of_other_jobs_with_similar_names_are_not_touched(tmp_path: Path) -> None:
    write(tmp_path, "J", "A")
    write(tmp_path, "J.5", "A")
    stray = tmp_path / "events" / ".job_id=J.5.new-0123456789ab"  # J.5's, not J's: J's lock does not cover it
    stray.mkdir()
    with parquet._flock(tmp_path / parquet.META / "locks" / "job_id=J.5.lock", parquet.fcntl.LOCK_EX):
        write(tmp_path, "J", "B")  # J.5's writer is alive (it holds its lock): its staging stays
        assert stray.is_dir()
    write(tmp_path, "J", "C")
    assert not stray.exists() and leftovers(tmp_path) == []


# --- item 4: parallel writers ----------------------------------------------------------------------


WRITER = r"""
import os, sys, time
sys.path[:0] = [sys.argv[1], sys.argv[2]]
from correlator.report import parquet
from report_fixtures import make_report
out, version, n, go = sys.argv[3], sys.argv[4], int(sys.argv[5]), sys.argv[6]
hosts, per_host = %r[version]
report = make_report(n_hosts=hosts, per_host=per_host, job_id="J")
while not os.path.exists(go):
    time.sleep(0.005)
for _ in range(n):
    parquet.write_parquet(report, out, "J")
"""

READER = r"""
import os, sys, time
sys.path[:0] = [sys.argv[1], sys.argv[2]]
import test_attacks_dataset as t
from pathlib import Path
out, tmp, go, stop = Path(sys.argv[3]), Path(sys.argv[4]), sys.argv[5], sys.argv[6]
t.signatures(tmp)
while not os.path.exists(go):
    time.sleep(0.005)
reads = 0
while not os.path.exists(stop) or reads == 0:
    version = t.seen(out, "J", tmp)
    assert version is not None, "the job vanished while it was rewritten"
    reads += 1
print(reads)
"""


@pytest.mark.slow
def test_four_writers_of_one_job_at_once(fast_tmp: Path) -> None:
    """The old writer failed 'Directory not empty' about once in 60 runs of four writers."""
    signatures(fast_tmp)
    writes = 15
    for round_ in range(3):
        out, go, stop = fast_tmp / f"d{round_}", fast_tmp / f"go{round_}", fast_tmp / f"stop{round_}"
        write(out, "J", "A")
        writers = [subprocess.Popen([sys.executable, "-c", WRITER % (VERSIONS,), str(ROOT), str(TESTS), str(out),
                                     f"W{i}", str(writes), str(go)], stderr=subprocess.PIPE, text=True)
                   for i in range(4)]
        reader = subprocess.Popen([sys.executable, "-c", READER, str(ROOT), str(TESTS), str(out), str(fast_tmp),
                                   str(go), str(stop)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            time.sleep(1.0)  # let the interpreters start, so the writes overlap
            go.touch()
            for w in writers:
                _, err = w.communicate(timeout=300)
                assert w.returncode == 0, err[-2000:]
            stop.touch()
            reads, err = reader.communicate(timeout=120)
            assert reader.returncode == 0, err[-2000:]
            assert int(reads) > 0
        finally:
            for proc in (*writers, reader):
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
        assert seen(out, "J", fast_tmp) in {"W0", "W1", "W2", "W3"}
        assert leftovers(out) == []
        assert history.summarize(out).jobs == 1


# --- item 4: a full disk ---------------------------------------------------------------------------


def test_a_full_disk_at_any_sync_leaves_the_old_job_or_commits_the_new(fast_tmp: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """ENOSPC at each fsync of a write (every point where the data must reach the disk)."""
    probe = fast_tmp / "probe"
    write(probe, "J", "A")
    calls = 0
    real_fsync = os.fsync

    def counting(fd: int) -> None:
        nonlocal calls
        calls += 1
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", counting)
    write(probe, "J", "B")
    total, calls = calls, 0
    assert total >= 10
    outcomes = set()
    for n in range(1, total + 1):
        out = fast_tmp / f"n{n}"
        write(out, "J", "A")
        count = 0

        def full(fd: int, n: int = n) -> None:
            nonlocal count
            count += 1
            if count == n:
                raise OSError(errno.ENOSPC, "No space left on device")
            real_fsync(fd)

        monkeypatch.setattr(os, "fsync", full)
        with pytest.raises(UsageError) as caught:
            write(out, "J", "B")
        monkeypatch.setattr(os, "fsync", real_fsync)
        text = str(caught.value)
        assert "No space left on device" in text and str(out) in text
        version = seen(out, "J", fast_tmp)
        if "nothing was changed" in text:
            assert version == "A" and leftovers(out) == [], n
        else:
            assert "committed" in text and version == "B", n
        outcomes.add(version)
        write(out, "K", "A")
        assert seen(out, "J", fast_tmp) == version and leftovers(out) == []
    assert outcomes == {"A", "B"}


@pytest.fixture
def small_disk(tmp_path: Path):
    """A 1 MiB tmpfs, and a function that fills it to ``free`` bytes left. Mounting it needs root,
    as the suite does anyway (``.ci/run`` installs Chromium with apt): a machine that cannot mount
    one fails these tests, saying why, rather than passing over a real full disk."""
    mnt = tmp_path / "disk"
    mnt.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mnt)], capture_output=True)
    if r.returncode:
        pytest.fail(f"a real full disk needs a 1 MiB tmpfs, and mounting one failed (run the suite as root, "
                    f"as .ci/run does): {r.stderr.decode().strip()}")
    filler = mnt / "filler"

    def fill(free: int = 0) -> None:
        filler.unlink(missing_ok=True)
        with open(filler, "wb", buffering=0) as f:  # unbuffered: the close has nothing left to fail on
            try:
                while True:
                    f.write(b"\0" * 4096)
            except OSError as e:
                assert e.errno == errno.ENOSPC
        size = filler.stat().st_size
        os.truncate(filler, max(0, size - free))

    yield mnt, fill
    _unmount(mnt)


def test_a_disk_that_fills_during_the_write_keeps_the_old_job(tmp_path: Path, small_disk) -> None:
    """A real full disk: a 1 MiB tmpfs with 0, 4, 8, ... KiB left until the write fits."""
    mnt, fill = small_disk
    out = mnt / "dataset"
    write(out, "J", "A")
    write(out, "K", "A")
    big = make_report(n_hosts=16, per_host=8, job_id="J")  # about 60 KiB of Parquet
    failures = 0
    for free_kib in range(0, 512, 4):
        fill(free_kib * 1024)
        try:
            parquet.write_parquet(big, out, "J")
        except UsageError as e:
            failures += 1
            assert "No space left on device" in str(e) and "nothing was changed" in str(e)
            assert seen(out, "J", tmp_path) == "A" and seen(out, "K", tmp_path) == "A", free_kib
            assert leftovers(out) == [], free_kib
            continue
        break
    else:
        pytest.fail("the write never fitted")
    assert failures >= 3  # the disk filled in more than one place of the write
    fill(64 * 1024)
    assert parquet.read_table(out, "ranks").num_rows == 4 + 128
    assert leftovers(out) == []


def test_the_cli_says_the_dataset_is_unchanged_on_a_full_disk(tmp_path: Path, small_disk) -> None:
    mnt, fill = small_disk
    logs = write_job(tmp_path / "logs", "777")
    out = mnt / "dataset"
    first = cli(str(logs), "--parquet", str(out), "-f", "json")
    assert first.returncode == 0, first.stderr
    before = parquet.read_table(out, "incidents").to_pylist()
    fill(0)
    r = cli(str(logs), "--parquet", str(out), "-f", "json", "--job-id", "777")
    assert r.returncode == 2
    err = r.stderr.decode()
    assert "cannot write the Parquet dataset" in err and "No space left on device" in err
    assert "nothing was changed: job '777' keeps its previous rows" in err
    fill(256 * 1024)
    assert parquet.read_table(out, "incidents").to_pylist() == before and leftovers(out) == []


def test_a_bad_job_id_is_a_usage_error_not_an_internal_one(tmp_path: Path) -> None:
    logs = write_job(tmp_path / "logs", "778")
    r = cli(str(logs), "--parquet", str(tmp_path / "d"), "--job-id", "..")
    assert r.returncode == 2 and b"cannot name a partition" in r.stderr and b"internal error" not in r.stderr
    r = cli(str(logs), "--parquet", str(tmp_path / "d"), "--job-id", "x" * 300)
    assert r.returncode == 2 and b"too long to name a partition" in r.stderr


# --- item 5: -o on a full disk ---------------------------------------------------------------------


def cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "correlator", *args], capture_output=True, cwd=ROOT, timeout=timeout)


def test_output_on_a_full_disk_keeps_the_previous_report(tmp_path: Path, small_disk) -> None:
    """The old ``write_text`` truncated the file, then ran out of room part-way: a cut report."""
    mnt, fill = small_disk
    logs = write_job(tmp_path / "logs", "779")
    report = mnt / "report.out"
    assert cli(str(logs), "-f", "json", "-o", str(report)).returncode == 0
    before = report.read_bytes()
    json.loads(before)
    html = cli(str(logs), "-f", "html").stdout
    assert len(html) > len(before) + 3 * 4096  # the new report needs more than the old one frees
    for free in (0, 4096, 8192):
        fill(free)
        r = cli(str(logs), "-f", "html", "-o", str(report))
        err = r.stderr.decode()
        assert r.returncode == 2 and "cannot write the report: No space left on device" in err, (free, err)
        assert "(the file is unchanged)" in err and "free space or pick another --output" in err
        assert report.read_bytes() == before
        assert sorted(p.name for p in mnt.iterdir()) == ["filler", "report.out"]  # no temporary file left
    fill(len(html) + 8192)
    assert cli(str(logs), "-f", "html", "-o", str(report)).returncode == 0
    assert report.read_bytes().rstrip().endswith(b"</html>") and sorted(p.name for p in mnt.iterdir()) == [
        "filler", "report.out"]


def test_output_write_errors_keep_the_file_and_leave_no_temporary(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    import typer

    from correlator import cli as cli_module

    target = tmp_path / "report.json"
    target.write_text('{"old": true}\n')
    os.chmod(target, 0o640)

    def full(fd: int) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(typer.Exit) as stop:
        cli_module._write('{"new": true}\n', target)
    assert stop.value.exit_code == 2
    assert "No space left on device (the file is unchanged)" in capsys.readouterr().err
    assert target.read_text() == '{"old": true}\n' and [p.name for p in tmp_path.iterdir()] == ["report.json"]
    monkeypatch.undo()
    cli_module._write('{"new": true}\n', target)
    assert target.read_text() == '{"new": true}\n' and oct(target.stat().st_mode & 0o777) == oct(0o640)
    link = tmp_path / "latest.json"
    link.symlink_to(target.name)
    cli_module._write("via the link\n", link)
    assert link.is_symlink() and target.read_text() == "via the link\n"
    cli_module._write("gone\n", Path(os.devnull))  # a device is written, never replaced
    assert Path(os.devnull).is_char_device()


# --- item 5: history over a damaged dataset -------------------------------------------------------


def damaged(tmp_path: Path) -> Path:
    out = tmp_path / "dataset"
    for job, version in (("1", "A"), ("2", "B"), ("3", "C")):
        write(out, job, version)
    part = out / "incidents" / "job_id=2" / "part-0.parquet"
    part.write_bytes(part.read_bytes()[: part.stat().st_size // 2])  # a copy cut short
    return out


def test_history_leaves_out_a_truncated_partition_file(tmp_path: Path) -> None:
    out = damaged(tmp_path)
    summary = history.summarize(out)
    assert summary.jobs == 2
    [diag] = summary.diagnostics
    assert diag.code == DiagCode.UNREADABLE and diag.level == "warning"
    assert diag.path == str(out / "incidents" / "job_id=2" / "part-0.parquet")
    with pytest.raises(InputError) as caught:  # without a list to collect in, the reader says which file
        parquet.read_table(out, "incidents")
    assert caught.value.location == diag.path
    r = cli("history", str(out))
    err = r.stderr.decode()
    assert r.returncode == 0 and r.stdout.decode().startswith("2 jobs in ")
    assert f"warning: {diag.path}: not a readable Parquet file" in err and "write the job again" in err
    r = cli("history", str(out), "-f", "json")
    data = json.loads(r.stdout)
    assert data["jobs"] == 2 and [d["code"] for d in data["diagnostics"]] == ["unreadable"]


def test_history_leaves_out_stray_files_and_folders(tmp_path: Path) -> None:
    out = tmp_path / "dataset"
    write(out, "1", "A")
    write(out, "2", "B")
    incidents = out / "incidents"
    (incidents / "job_id=1" / "notes.txt").write_text("copied here by hand\n")
    (incidents / "job_id=1" / "sub").mkdir()
    (incidents / "README").write_text("not a partition\n")
    (incidents / "backup").mkdir()
    (incidents / "job_id=2" / "part-1.parquet").write_bytes((out / "events" / "job_id=2" / PART).read_bytes())
    (incidents / "job_id=1" / "_SUCCESS").touch()  # hidden by convention, as every dataset reader does
    summary = history.summarize(out)
    assert summary.jobs == 2  # both jobs, from their own files
    by_path = {Path(d.path).relative_to(incidents).as_posix(): d for d in summary.diagnostics}
    assert sorted(by_path) == ["README", "backup", "job_id=1/notes.txt", "job_id=1/sub", "job_id=2/part-1.parquet"]
    assert by_path["job_id=2/part-1.parquet"].code == DiagCode.UNREADABLE
    assert "not a file of the incidents table" in by_path["job_id=2/part-1.parquet"].message
    assert {by_path[p].code for p in ("README", "backup", "job_id=1/sub", "job_id=1/notes.txt")} == {DiagCode.STRAY_FILE}
    r = cli("history", str(out), "-f", "markdown")
    assert r.returncode == 0 and r.stderr.decode().count("warning: ") == 5


def test_history_with_nothing_readable_exits_3_naming_a_file(tmp_path: Path) -> None:
    out = tmp_path / "dataset"
    write(out, "1", "A")
    (out / "incidents" / "job_id=1" / PART).write_bytes(b"PAR1")
    r = cli("history", str(out))
    err = r.stderr.decode()
    assert r.returncode == 3 and "no file of the incidents table could be read" in err and "job_id=1" in err


def test_a_job_name_with_control_characters_is_printed_escaped(tmp_path: Path) -> None:
    out = tmp_path / "dataset"
    write(out, "1", "A")
    (out / "incidents" / "evil\x1b[2J").write_text("x")
    r = cli("history", str(out))
    assert r.returncode == 0 and b"\x1b" not in r.stderr and b"evil\\x1b[2J" in r.stderr


PART = parquet.PART_FILE
