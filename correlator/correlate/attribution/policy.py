"""Every weight and threshold of the verdict, named once, each with the reason for its value.

The attribution steps read their numbers from here and nowhere else; a test asserts that no other
module of the package defines a time window or a weight of its own.
"""

from __future__ import annotations

from correlator.model import NS
from correlator.model.evidence import EvidenceKind as K

# --- what a failure is ---------------------------------------------------------------------------

#: primaries below this rule priority are catch-alls (a bare uncaught exception): they decide only
#: when no specific rule names a failure, or when they come long before it (GENERIC_LEAD_NS)
GENERIC_PRIORITY = 20
#: a plain uncaught exception this long before every failure a specific rule names is the first
#: failure (closer than that the specific one wins: the generic line may be its echo, its wrapper or
#: a clock's error)
GENERIC_LEAD_NS = 10 * NS
#: primaries of one rank this close to its first one are one event (``terminate called ...``, then
#: ``what(): CUDA error``, then ``Fatal Python error: Aborted``): the most specific names it
EVENT_WINDOW_NS = 5 * NS
#: the same, by line distance, when the lines carry no time
EVENT_WINDOW_LINES = 60
#: exit codes of workers their launcher or scheduler stopped (SIGTERM, SIGINT, SIGHUP): a consequence
STOPPED_EXIT_CODES = frozenset({"-15", "-2", "-1"})
#: the signals launchers and schedulers stop workers with
STOPPING_SIGNALS = frozenset({"TERM", "INT", "HUP"})
#: a signal death of one worker within this of the launcher's own signal to that pid was sent by it
SIGNAL_SENT_SLACK_NS = 1 * NS

#: a launcher's listing of the workers it kills, this close to the death it reports, is one teardown
LISTED_WORKERS_NS = 5 * NS
#: a node-level line (slurmstepd's oom-kill notice) and the ranked line of the same event (srun's "task
#: 2: Out Of Memory") are this far apart at most, beyond their uncertainties
TWIN_SLACK_NS = 1 * NS
#: the next failure this long after the root is another story (a cascade's first step comes sooner)
NEXT_FAR_NS = 10 * NS

# --- time ------------------------------------------------------------------------------------------

#: the uncertainty of a time inherited from a neighbouring line, at most: an unstamped traceback is
#: printed within a second or two of the stamped lines around it
INHERIT_UNC_NS = 2 * NS

#: the latest possible time of a line whose writer printed no stamped line after it
UNBOUNDED_NS = 1 << 62

# --- survived or terminal --------------------------------------------------------------------------

#: a failure its rank's training progress goes on from for this long (by the progress lines' own
#: stamps, in another file of the rank) was survived: fairseq's OOM recovery, a retried batch
SURVIVED_NS = 120 * NS
#: an unstamped failure line counts for the time rule above only between stamps this close
SURVIVED_BRACKET_NS = 120 * NS
#: a rank that reported its training complete and then wrote stamped output this long after a failure
#: (an evaluation, an export) went on from it
SURVIVED_OUTPUT_NS = 30 * NS
#: in a job nothing tore down and nobody waited in, a failure whose writer went on writing stamped
#: lines this long after it was caught (a fatal error's process prints its exit lines within a second
#: or two, and a job it ended would show a teardown or a waiting peer)
SURVIVED_QUIET_NS = 10 * NS

# --- causal explanation ----------------------------------------------------------------------------

#: a transport error (a peer closed the connection, an IB completion error) this close to another
#: rank's death is what that death looks like from the other side of the wire. Both sides of the
#: window count: the death is often told later than it happened (torchrun's agent polls its workers
#: every 5 s; faulthandler's banner carries no stamp), and a peer notices within the transport's
#: retry time
PEER_DEATH_NS = 15 * NS
#: deaths of the ranks of one node by the same failure within this are one node-level event (a full
#: /dev/shm, a node's OOM killer, a power or driver fault): one second of log stamps, plus the spread of
#: the agent's reports
NODE_WAVE_NS = 2 * NS
#: a node wave needs at least this many ranks, and all of the node's ranks that the logs show
NODE_WAVE_MIN_RANKS = 2
#: a wave of the same failure across this share of all known ranks, within NODE_WAVE_NS, on two or
#: more nodes, is a job-wide event (no rank and no node is first)
JOB_WAVE_SHARE = 0.75

# --- hangs -----------------------------------------------------------------------------------------

#: how much each kind of hang evidence counts; the strongest kind present decides ``decided_by``
WEIGHTS: dict[K, float] = {
    # PyTorch's own analysis of who never joined: the strongest statement a log makes
    K.DESYNC_REPORT: 5.0,
    # Horovod's coordinator lists the ranks that did not submit the tensor: its own analysis
    K.STALL_REPORT: 5.0,
    # every other rank reports the collective; a quarter or fewer are missing from it
    K.MISSING_FROM_COLLECTIVE: 4.0,
    # the rank ended normally (or exited 0) while its peers were still waiting in a collective
    K.EXITED_EARLY: 4.0,
    # another op or element count at the same SeqNum of the same group: another code path
    K.OTHER_OPERATION: 3.0,
    # NCCL's work counter of the same group says it never enqueued the stuck collective
    K.NCCL_WORK_COUNTERS: 3.0,
    # timed out on an earlier SeqNum than the majority: it stopped before them
    K.EARLIER_COLLECTIVE: 2.0,
    # its step counter stopped below the others'
    K.PROGRESS_STOPPED: 2.0,
    # its output stopped half a timeout before the others' (alone: a quieter rank, a pasted excerpt)
    K.OUTPUT_STOPPED: 1.5,
    # a dump-signal pointer names the first rank to *detect* the timeout: a victim as often as not
    K.DUMP_POINTER: 0.5,
}
#: below this score no rank is named: a dump-signal pointer or output that stopped early alone are
#: hints, reported as such
HANG_MIN_SCORE = 2.0
#: ranks with evidence at least this strong are drawn as "silent" suspects in the rank table
SILENT_MIN_SCORE = 1.5
#: a rank missing from a collective, or behind in steps, names it only when a quarter of the ranks
#: or fewer are: more than that is a partition, not a culprit
ODD_SHARE = 4
#: a rank's output stopping this long before the median (at least) makes it a suspect; with a known
#: collective timeout, half of it
STOP_EARLY_NS = 30 * NS
#: without a known collective timeout, a rank's output must stop this long before the median
STOP_EARLY_UNTIMED_NS = 4 * STOP_EARLY_NS
#: a rank that ended normally this long before its peers' timeouts left them waiting
EXITED_EARLY_NS = 5 * NS

# --- confidence ------------------------------------------------------------------------------------

#: a root named by a specific primary failure with nothing to weaken it
CONF_PRIMARY = 0.95
#: the next failure comes more than 10 s later / within 10 s
CONF_NEXT_FAR, CONF_NEXT_NEAR = 0.05, 0.15
#: inherited time / no time at all
CONF_INHERITED, CONF_NO_TIME = 0.07, 0.2
#: a tie, a collective mismatch (the reporter is not the one that diverged): at most this
CONF_TIE_MAX = 0.5
#: only a generic exception / a generic exception long before a specific failure
CONF_GENERIC, CONF_GENERIC_LEAD = 0.25, 0.2
#: the rank could not be identified / was taken from the launcher's report
CONF_NO_RANK, CONF_LAUNCHER_NAMED = 0.15, 0.1
#: the collateral seen is what the root's rule says it causes
CONF_EXPLAINS_BONUS = 0.03
#: the odd rank out of a collective mismatch (the reports agree on it, but a report is a comparison)
CONF_ODD_ONE_OUT = 0.8
#: a node- or job-level wave
CONF_WAVE = 0.8
#: a hang: base + per point of score, at most; equal suspects at most
CONF_HANG_BASE, CONF_HANG_PER_POINT, CONF_HANG_MAX, CONF_HANG_TIED = 0.35, 0.12, 0.9, 0.45
#: a job-level end
CONF_JOB = 0.9
#: only torchrun's failure tables: entries two or more seconds apart / closer
CONF_TABLE_APART, CONF_TABLE_CLOSE = 0.55, 0.3
#: the bounds of every confidence
CONF_MIN, CONF_MAX = 0.05, 0.99

# --- output ----------------------------------------------------------------------------------------

#: the timeline keeps at most this many events (root, independent and job events always)
TIMELINE_CAP = 5000
#: the report lists at most this many collateral items (one per event); the groups count them all.
#: A job of 100,000 ranks each timing out would otherwise build (and mask, and render) an item per rank
COLLATERAL_ITEMS_CAP = 5000
