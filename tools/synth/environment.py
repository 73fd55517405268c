"""Environment faults: a module missing from one rank's environment (a lazy import fails)."""

from __future__ import annotations

from tools.synth import tracebacks
from tools.synth.job import Job
from tools.synth.tracebacks import RootTraceback


def import_error(job: Job, r: int, step: int) -> RootTraceback:
    """Rank ``r`` imports a module its environment lacks, in its evaluation code."""
    rng = job.rng
    joins: list[str] = []
    mod = rng.choice(["sacrebleu", "rouge_score", "evaluate", "nltk"])
    blk = tracebacks.format_frames(tracebacks.script_frames(job, "train(cfg, model, optimizer, train_loader)") + [
        (f"{job.code}/{job.script}", 322, "train", "metrics = evaluate(model, val_loader, step)"),
        (f"{job.code}/eval.py", 14, "evaluate", f"import {mod}"),
    ])
    blk.append(f"ModuleNotFoundError: No module named '{mod}'")
    return [blk], joins, f"ModuleNotFoundError: No module named '{mod}'"
