"""The words the rules and the code share: the capture names and tags the correlator reads.

A rule's captures and tags are otherwise free-form (captures are shown with the evidence, tags are
filters for ``rules list --tag``). The names here are the ones code gives a meaning to; code reads
them through these members, never as string literals of its own (``tests/test_structure.py`` holds
it to that), and ``rules/README.md`` documents every one (a test compares).

``near_misses`` finds the names of a rule that are one slip away from one of these: a capture
spelled ``exit_code`` is shown, but never read as an exit code; the rule loader warns about them.
This module must not import from the stages.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from enum import StrEnum


class Capture(StrEnum):
    """A named group of a rule's pattern whose value the correlator reads."""

    #: the global rank the line is about, when no prefix says it (``[Rank 5] Watchdog caught ...``)
    RANK = "rank"
    #: the local rank (on its node) of the process the line is about (torchrun's agent lines)
    LOCAL_RANK = "local_rank"
    #: the host of the process the line is about
    HOST = "host"
    #: the process id of the process the line is about (matched against the launcher's signals)
    PID = "pid"
    #: srun task id(s) a line is about (``task 2: Out Of Memory``); a single id is the line's task
    TASKS = "tasks"
    #: the process group a ProcessGroupNCCL line is about (``[PG ID 3 ...]``)
    PG = "pg"
    #: the rank within that process group; the global rank only in the default group (``pg`` 0)
    PG_RANK = "pg_rank"
    #: a worker's exit code (``-9`` is SIGKILL)
    EXITCODE = "exitcode"
    #: the signal a process died of, as a number or a name (``11``, ``SIGSEGV``)
    SIGNAL = "signal"
    #: the signal's name in a launcher's words (``Bus error``, ``Segmentation fault``)
    SIGNAME = "signame"
    #: the NCCL collective's sequence number (``SeqNum=18812``): anchors clocks, finds a hang's missing rank
    SEQ = "seq"
    #: the collective's type (``ALLREDUCE``)
    OP = "op"
    #: the collective's input size in elements: ranks in one collective with other sizes diverged
    NUMEL_IN = "numel_in"
    #: the collective's timeout
    TIMEOUT_MS = "timeout_ms"
    #: how long the collective ran before it timed out (anchors clocks with ``seq``)
    RAN_FOR_MS = "ran_for_ms"
    #: the last NCCL work a rank enqueued (``last enqueued NCCL work: 18812``)
    LAST_ENQUEUED = "last_enqueued"
    #: ranks a desync report saw join the collective
    JOINED_RANKS = "joined_ranks"
    #: ranks a desync report saw finish it
    FINISHED_RANKS = "finished_ranks"
    #: ranks a report names as never having joined
    MISSING_RANKS = "missing_ranks"
    #: ranks a stall report lists as not having submitted a collective (Horovod's ``Stalled ranks:``)
    STALLED_RANKS = "stalled_ranks"
    #: a rank the line points at as the culprit (``Received a dump signal ... from rank 3``)
    SUSPECT_RANK = "suspect_rank"
    #: one of the pair a collective-mismatch report compares
    FIRST_RANK = "first_rank"
    #: the other of that pair
    SECOND_RANK = "second_rank"
    #: the other side of a mismatch or a connection, when it is not a rank number
    PEER = "peer"
    #: the number of ranks an NCCL communicator or a launcher states (the job's world size)
    NRANKS = "nranks"
    #: the same, in the launcher's word
    WORLD_SIZE = "world_size"
    #: a kernel line's PCI address (``0000:38:00.0``): joined with NCCL's busId to name the rank on a GPU
    PCI = "pci"
    #: the scheduler's job id
    JOB_ID = "job_id"
    #: the same, as SLURM spells it
    JOBID = "jobid"


class Tag(StrEnum):
    """A rule tag that the correlator gives a meaning to."""

    #: the launcher sent a signal to a worker (``Sending process 1234 closing signal SIGTERM``); the
    #: line captures ``pid``
    SIGNAL_SENT = "signal-sent"
    #: a worker died by a signal: a root-cause candidate only if no ``signal-sent`` line sent that
    #: pid a signal first, and not for SIGTERM, SIGINT or SIGHUP
    SIGNAL_EXIT = "signal-exit"
    #: a launcher reports how a worker ended: a failing exit makes that rank's last failure terminal
    WORKER_EXIT = "worker-exit"
    #: printed by a launcher (torchrun's agent, mpirun, PALS, DeepSpeed's launcher), not a worker:
    #: behind a bare srun task prefix it says the task is a node's agent, not a rank
    LAUNCHER = "launcher"
    #: the launcher line that names a failure table's entry: the root when the tables are all there is
    FAILURE_TABLE = "failure-table"
    #: torchelastic's own lines: its agent's completion line is its node's workers all exiting 0
    TORCHELASTIC = "torchelastic"
    #: a native crash (a segfault, a bus error) whose line names no signal: a death no peer's network
    #: error causes (its peers' transport errors are explained by it)
    NATIVE_CRASH = "native-crash"
    #: printed by the processes present about one that never came: names neither printer nor host
    ABSENT_PEER = "absent-peer"
    #: the scheduler or launcher ended the job: ``--follow`` stops a grace period after the first
    JOB_END = "job-end"
    #: a normal end: a failure of the same rank before it was survived
    COMPLETION = "completion"
    #: the launcher restarted the worker group: the lines after it are the next attempt's
    RESTART = "restart"
    #: a transport error seen from the other end of a connection: explained by a peer's death
    #: a few seconds before
    PEER_TRANSPORT = "peer-transport"
    #: collateral a normal end prints too (connections closing)
    SHUTDOWN = "shutdown"
    #: the store's server going away (after a normal end, shutdown chatter like ``shutdown``)
    STORE = "store"
    #: a collective or store timeout: the evidence a hang analysis starts from
    TIMEOUT = "timeout"
    #: a report comparing ranks (a collective mismatch): it does not say which side diverged
    MISMATCH = "mismatch"


#: the prefix of a tag that names the signal a rule's failure is (``signal:SEGV``), for rules whose
#: line does not capture it
SIGNAL_TAG_PREFIX = "signal:"
_SIGNAL_NAME = re.compile(r"[A-Z][A-Z0-9]*")


def signal_of_tag(tag: str) -> str | None:
    """The signal a ``signal:NAME`` tag names, or None for any other tag."""
    return tag[len(SIGNAL_TAG_PREFIX):] if tag.startswith(SIGNAL_TAG_PREFIX) else None


def _folded(name: str) -> str:
    return name.lower().replace("_", "").replace("-", "")


def _one_slip(a: str, b: str) -> bool:
    """Whether ``a`` and ``b`` (of one length) differ by one changed or two swapped characters. (A
    letter more or less is not a slip: ``task`` and ``tasks``, ``timeout_s`` and ``timeout_ms`` are
    different names.)"""
    if len(a) != len(b):
        return False
    diff = [i for i, (x, y) in enumerate(zip(a, b)) if x != y]
    return len(diff) == 1 or (len(diff) == 2 and diff[1] == diff[0] + 1
                              and a[diff[0]] == b[diff[1]] and a[diff[1]] == b[diff[0]])


def _near(name: str, known: Iterable[str]) -> str | None:
    """The known word ``name`` is likely a slip for: the same once case and ``_``/``-`` are set
    aside, or (for words of five letters or more) one changed or swapped character away."""
    words = tuple(known)
    if name in words:
        return None
    folded = _folded(name)
    for w in words:
        if _folded(w) == folded or (len(w) >= 5 and _one_slip(folded, _folded(w))):
            return str(w)
    return None


def near_misses(captures: Iterable[str], tags: Iterable[str]) -> list[str]:
    """What is likely misspelt among a rule's capture names and tags, each said in a sentence."""
    out = []
    for c in captures:
        w = _near(c, Capture)
        if w is not None:
            out.append(f"capture {c!r} is not read by the correlator: did you mean {w!r}?")
    for t in tags:
        sig = signal_of_tag(t)
        if sig is not None:
            if not _SIGNAL_NAME.fullmatch(sig) or sig.startswith("SIG"):
                out.append(f"tag {t!r}: the signal is named without SIG, in capitals ('signal:SEGV')")
            continue
        w = _near(t, Tag)
        if w is not None:
            out.append(f"tag {t!r} has no meaning to the correlator: did you mean {w!r}?")
    return out
