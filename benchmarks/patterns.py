"""The ~40 failure patterns that ``rg`` and ``grep -E`` get in the speed benchmark.

They are the rules' own regexes (the first ``any`` pattern of each rule the project's other
parts rely on), so the comparison is with the same failure knowledge correlate uses, rewritten
only as far as each tool's syntax needs: ripgrep's Rust regex has no look-arounds and spells
named groups ``(?P<...>``; POSIX ERE has neither named nor non-capturing groups, ``\\d``, lazy
quantifiers nor inline flags. Rewrites only ever widen a pattern.
"""

from __future__ import annotations

import re

CANONICAL = (
    "storage.eio-on-checkpoint-save", "storage.estale-stale-file-handle", "storage.exdev-cross-device-rename",
    "storage.enospc-no-space-left", "storage.edquot-disk-quota-exceeded", "storage.enotempty-rename-race",
    "checkpoint.lightning-fsspec-cross-device", "checkpoint.pytorch-stream-writer-failed",
    "cuda.out-of-memory", "cuda.illegal-memory-access", "cuda.device-side-assert",
    "gpu-hardware.uncorrectable-ecc", "gpu-hardware.xid-error",
    "nccl.watchdog-collective-timeout", "nccl.unhandled-system-error", "nccl.remote-error",
    "nccl.ib-completion-error", "nccl.connection-closed-by-peer", "nccl.heartbeat-monitor-stuck",
    "nccl.dump-signal-from-rank", "nccl.last-enqueued-completed",
    "python.segmentation-fault", "python.bus-error-sigbus", "python.abort-sigabrt", "python.fatal-python-error",
    "python.uncaught-exception", "python-env.import-error",
    "launcher.torchrun-sigterm-to-workers", "launcher.worker-killed-by-signal", "launcher.worker-failed-exitcode",
    "launcher.child-failed-error", "launcher.signal-exception", "launcher.rendezvous-error",
    "slurm.time-limit", "slurm.step-cancelled", "slurm.oom-kill", "slurm.task-exited", "slurm.job-step-aborted",
    "slurm.preempted", "slurm.node-fail",
    "data.dataloader-worker-killed", "numerics.nan-loss", "host-memory.kernel-oom-killer",
)


def rule_patterns() -> list[str]:
    """The first ``any`` regex of each canonical rule (in the ``regex`` module's syntax)."""
    from correlator.ruleset import load_rules

    rules = {r.id: r for r in load_rules()}
    return [rules[i].match.any[0] for i in CANONICAL if i in rules]


def _drop_lookarounds(p: str) -> str:
    from correlator.extract.scan import group_end

    out, i = [], 0
    while i < len(p):
        if p.startswith(("(?=", "(?!", "(?<=", "(?<!"), i) and not p.startswith("(?<P", i):
            end = group_end(p, i)
            i = (end if end >= 0 else len(p)) + 1
            continue
        if p[i] == "\\":
            out.append(p[i:i + 2])
            i += 2
            continue
        out.append(p[i])
        i += 1
    return "".join(out)


def _ascii_word_boundaries(p: str) -> str:
    """``\\b`` and ``\\B`` as ASCII word boundaries: ripgrep's fast engines cannot do a Unicode
    word boundary once the text holds a non-ASCII byte (tqdm's bars) and fall back to one that is
    hundreds of times slower; the words the rules bound are ASCII, so the lines found are the same."""
    out, i = [], 0
    while i < len(p):
        if p[i] == "\\":
            pair = p[i:i + 2]
            out.append(f"(?-u:{pair})" if pair in ("\\b", "\\B") else pair)
            i += 2
            continue
        out.append(p[i])
        i += 1
    return "".join(out)


def to_rust(p: str) -> str:
    """For ripgrep: named groups unnamed (one alternation of all patterns repeats names),
    look-arounds dropped, word boundaries ASCII."""
    p = re.sub(r"\(\?P?<(?=[A-Za-z_])[A-Za-z_]\w*>", "(?:", p)
    return _ascii_word_boundaries(_drop_lookarounds(p))


def to_ere(p: str) -> str:
    """For ``grep -E`` (GNU, run with ``LC_ALL=C``: bytes, ASCII word boundaries): plain groups,
    POSIX classes, greedy quantifiers."""
    p = re.sub(r"\(\?P?<(?=[A-Za-z_])[A-Za-z_]\w*>", "(?:", p)
    p = _drop_lookarounds(p)
    p = p.replace("(?:", "(")
    p = p.replace("[^\\n]", ".")
    p = re.sub(r"([*+?}])\?", r"\1", p)  # lazy -> greedy
    p = p.replace("\\d", "[0-9]").replace("\\n", "")
    p = p.replace("[^[0-9]", "[^0-9")
    return p


def write_pattern_files(rust_path: str, ere_path: str) -> int:
    pats = rule_patterns()
    with open(rust_path, "w") as f:
        f.write("\n".join(to_rust(p) for p in pats) + "\n")
    with open(ere_path, "w") as f:
        f.write("\n".join(to_ere(p) for p in pats) + "\n")
    return len(pats)
