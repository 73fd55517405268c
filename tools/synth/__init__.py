"""Seeded fault-injection generator of realistic dead distributed-training jobs.

This package is the ground truth the analyzer is measured against (tests, the accuracy benchmark,
``sample_logs/``), so it imports nothing from ``correlator`` and uses only the standard library. It is a
development package: the installed wheel does not ship it. ``generate_job`` writes one job (its log
files plus ``expected.toml``) and returns a :class:`Truth`; ``generate_suite`` writes a varied mix of jobs.

Modules: ``generate`` (the entry points and the command line), ``faults`` (the registry and ``Truth``),
``profiles`` (what each PyTorch release prints, the cascade's timing), ``job`` (the simulated job and
its records), ``clock``, ``training`` (normal output), ``tracebacks``, ``layouts`` (writing files);
the fault families ``storage``, ``cuda``, ``hardware``, ``host_oom``, ``environment``, ``nccl``
(IB errors, the silent hang culprit), ``healthy``; and what every failure sets off: ``cascade`` (who
waits, times out and is torn down), ``watchdog`` (NCCL timeouts and aborts), ``launcher`` (torchelastic
agents), ``slurm`` (srun, scancel, time limits).

How a job is simulated
----------------------
Every event happens at a *true* time (seconds since the job started). Each host has a clock offset;
a printed stamp is ``true time + offset of the host that printed it``. Combined files interleave lines
in true-time order (the order the writes reached the file), never in printed-stamp order.

A failing job follows the cascade seen in real jobs:

* normal output first: torchrun warnings, NCCL init (``NCCL INFO`` ... ``Init COMPLETE``), step lines
  logged by every rank at the same step (clock anchors), tqdm ``\\r`` frames on rank 0, some ANSI colour;
* the root fault on one rank (a Python traceback, a fatal signal, an NCCL network error, or silence);
* the root's torchrun agent sends SIGTERM to the other local workers, logs
  ``failed (exitcode: N) local_rank: L (pid: P)`` and prints a ``ChildFailedError`` table;
* the ranks on the other nodes block in the next collective and their NCCL watchdogs fire after
  ``Timeout(ms)=600000`` (with the flight-recorder lines of newer PyTorch), some raise
  ``DistBackendError`` in Python, the others abort (SIGABRT);
* each node agent prints its own table whose "Root Cause (first observed failure)" is the first local
  failure of *that* node, so multi-node tables disagree and usually name collateral ranks;
* ``srun: error: host: task N: Exited with exit code 1`` lines, and sometimes a user ``scancel`` of a
  node stuck in NCCL abort (``slurmstepd: error: *** STEP ... CANCELLED AT ... ***``).

Who is silent after the root event
----------------------------------
The ranks that wait for the root in the collective it never joins were synchronised by the previous
collective: they enqueue the stuck one within 80 ms of each other, and their watchdogs poll every 100 ms
(``ran for 6000xx milliseconds``, under 100 ms over the timeout, as in real logs). Every way such a rank
ends (the watchdog's comm abort and ``terminate``, or a Python ``DistBackendError`` followed by interpreter
shutdown) takes longer than that window, so an agent's SIGTERM or an ``srun --kill-on-bad-exit`` kill
triggered by a sibling's exit never reaches a waiting rank before its own timeout is printed. A stuck node
hangs in abort *after* printing its timeouts. A process prints nothing after it died, and
``Truth.collateral_ranks`` is exactly the non-root ranks that print failure output (timeouts, tracebacks,
aborts, ``NCCL WARN``). The only non-root ranks that print nothing after the root event are:

* the other workers on the root's node when its torchrun agent sees the root exit: the agent SIGTERMs
  them (``Sending process PID closing signal SIGTERM``; the PID is in their NCCL INFO lines) long before
  their 600 s timeout, and they die without output (the same holds for a ``secondary`` failure's node);
* with ``srun --kill-on-bad-exit`` and a ``secondary`` failure (hand-made variants only), the ranks srun
  kills when that rank exits.

So in ``nccl-hang`` the culprit is the one rank missing from the SeqNum timeout pattern (its own node's
workers time out too, and only then does their agent SIGTERM it); with the 2.8 flight recorder a
``culprit_dump`` culprit also reports ``Last enqueued NCCL work`` below the stuck SeqNum.

Message texts are the ones the real software prints (PyTorch ``ProcessGroupNCCL.cpp`` for several
releases, torchelastic, NCCL, Slurm, Lightning, CPython); the sources are listed in
``sample_logs/README.md``. Stack-frame line numbers are representative of the release a profile models,
not pinned to one exact build.

CLI::

    python -m tools.synth suite OUT --jobs 200 --seed 1
    python -m tools.synth job OUT --fault storage-eio --ranks 32 --layout srun-combined
"""

from __future__ import annotations

from tools.synth.faults import FAULTS, LAYOUTS, FaultKind, Truth
from tools.synth.generate import generate_job, generate_suite, main
from tools.synth.profiles import PROFILES

__all__ = ["FAULTS", "LAYOUTS", "PROFILES", "FaultKind", "Truth", "generate_job", "generate_suite", "main"]
