"""The kinds of evidence a verdict can rest on: one registry, read by the steps and the renderers.

``decided_by`` in every report is the value of one ``EvidenceKind``: the kind of the strongest
evidence for the root. Each member says, in its ``#:`` comment, what it means; ``describe(kind)``
gives the wording every renderer shows for it, so no renderer keeps a table of its own.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class EvidenceKind(StrEnum):
    """What decided a verdict (``RootCause.decided_by``)."""

    #: the earliest terminal, unexplained failure a rule names as able to start a cascade
    PRIMARY = "primary"
    #: a worker killed by a signal that neither its launcher nor its scheduler sent
    SIGNAL_EXIT = "signal-exit"
    #: its launcher reports it exited or was killed while the other ranks were still in a collective
    #: with it (they report the peer gone or time out): it left, they did not
    LEFT_THE_COLLECTIVE = "left-the-collective"
    #: the odd rank out of a collective mismatch: in every pair the ranks' reports compare
    MISMATCH_ODD_ONE_OUT = "mismatch-odd-one-out"
    #: every rank of one node (or of the job) died of the same failure within a second or two
    NODE_WAVE = "node-wave"
    #: PyTorch's desync report (``TORCH_NCCL_DESYNC_DEBUG``) says who never joined, or who is the odd
    #: group out
    DESYNC_REPORT = "desync-report"
    #: Horovod's stall inspector lists the ranks that did not submit the tensor the others wait for
    STALL_REPORT = "stall-report"
    #: every other rank reports a timeout in one collective; this rank does not
    MISSING_FROM_COLLECTIVE = "missing-from-collective"
    #: the rank ended (normally, or with exit code 0) while its peers still waited in a collective
    EXITED_EARLY = "exited-early"
    #: another operation or element count than its peers' at the same SeqNum of the same group
    OTHER_OPERATION = "other-operation"
    #: NCCL's work counters of the stuck group: it never enqueued the collective the others wait in
    NCCL_WORK_COUNTERS = "nccl-work-counters"
    #: it timed out on an earlier SeqNum of the group than the others
    EARLIER_COLLECTIVE = "earlier-collective"
    #: its step counter stopped below the others'
    PROGRESS_STOPPED = "progress-stopped"
    #: its output stopped long before the others'
    OUTPUT_STOPPED = "output-stopped"
    #: the flight recorder's dump-signal pointer names it (weak: it names who detected the timeout)
    DUMP_POINTER = "dump-pointer"
    #: only torchrun's failure tables tell of the failure: their earliest entry across every node
    FAILURE_TABLE = "failure-table"
    #: a job-level end (time limit, cancel, preemption, walltime) before any failure
    JOB = "job"


_TEXT: dict[EvidenceKind, str] = {
    EvidenceKind.PRIMARY: "the earliest failure that nothing else explains",
    EvidenceKind.SIGNAL_EXIT: "a worker killed by a signal nobody sent it",
    EvidenceKind.NODE_WAVE: "every rank of the node died of the same failure at once",
    EvidenceKind.LEFT_THE_COLLECTIVE: "its launcher reports its exit while the other ranks were still in a collective with it",
    EvidenceKind.MISMATCH_ODD_ONE_OUT: "the odd rank out of a collective mismatch (in every pair the reports compare)",
    EvidenceKind.DESYNC_REPORT: "PyTorch's desync report (TORCH_NCCL_DESYNC_DEBUG)",
    EvidenceKind.STALL_REPORT: "Horovod's stall report (the ranks that never submitted the tensor)",
    EvidenceKind.MISSING_FROM_COLLECTIVE: "the rank missing from the collective every other rank timed out in",
    EvidenceKind.EXITED_EARLY: "it ended while the other ranks still waited for it in a collective",
    EvidenceKind.OTHER_OPERATION: "another operation than its peers' in the same collective (SeqNum)",
    EvidenceKind.NCCL_WORK_COUNTERS: "NCCL work counters (it never enqueued the collective the others wait in)",
    EvidenceKind.EARLIER_COLLECTIVE: "it timed out on an earlier collective (SeqNum) than the others",
    EvidenceKind.PROGRESS_STOPPED: "its training progress stopped before the others'",
    EvidenceKind.OUTPUT_STOPPED: "its output stopped long before the others'",
    EvidenceKind.DUMP_POINTER: "the flight recorder's dump-signal pointer",
    EvidenceKind.FAILURE_TABLE: "the launcher's failure tables (earliest entry across nodes)",
    EvidenceKind.JOB: "a job-level end before any failure",
}

#: the kinds that name the culprit of a hang (no rank printed a failure of its own)
HANG_KINDS = frozenset({
    EvidenceKind.DESYNC_REPORT, EvidenceKind.STALL_REPORT, EvidenceKind.MISSING_FROM_COLLECTIVE,
    EvidenceKind.EXITED_EARLY, EvidenceKind.OTHER_OPERATION, EvidenceKind.NCCL_WORK_COUNTERS,
    EvidenceKind.EARLIER_COLLECTIVE, EvidenceKind.PROGRESS_STOPPED, EvidenceKind.OUTPUT_STOPPED,
    EvidenceKind.DUMP_POINTER,
})
#: hang kinds whose culprit reported the timeout itself, in another collective than its peers
ODD_COLLECTIVE_KINDS = frozenset({EvidenceKind.OTHER_OPERATION, EvidenceKind.EARLIER_COLLECTIVE})


def describe(kind: str) -> str:
    """The wording of a ``decided_by`` value (an unknown value is shown as it is)."""
    try:
        return _TEXT[EvidenceKind(kind)]
    except ValueError:
        return kind


@dataclass(frozen=True, slots=True)
class Clue:
    """One piece of evidence about one rank: what kind, and what the logs say (one sentence)."""

    kind: EvidenceKind
    rank: int
    detail: str
    #: a share of the kind's weight (a rank behind, but not the furthest behind, counts half)
    share: float = 1.0
