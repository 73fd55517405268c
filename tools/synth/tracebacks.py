"""Python tracebacks as a rank prints them: frames, chained blocks, torchelastic's error.json, faulthandler.

Shared by every fault family whose process dies of an exception or a fatal signal.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from tools.synth.job import Job

Frame = tuple[str, int, str, str]                   # (path, line, function, source line)
RootTraceback = tuple[list[list[str]], list[str], str]   # (traceback blocks, the joins between them, summary)


def format_frames(items: Sequence[Frame]) -> list[str]:
    """Frames as a traceback prints them (``File ..., line N, in f`` and the source line)."""
    out: list[str] = []
    for path, line, func, code in items:
        out.append(f'  File "{path}", line {line}, in {func}')
        if code:
            out.append(f"    {code}")
    return out


def script_frames(job: Job, main_code: str) -> list[Frame]:
    """The training script's outer frames (through torchelastic's ``@record`` wrapper when it is on)."""
    items = [(f"{job.code}/{job.script}", 412, "<module>", "main()")]
    if job.variant.record:
        items.append((f"{job.site}/torch/distributed/elastic/multiprocessing/errors/__init__.py",
                      job.profile.agent_py_line["errors"], "wrapper", "return f(*args, **kwargs)"))
    items.append((f"{job.code}/{job.script}", 398, "main", main_code))
    return items


def lightning_frames(job: Job, hook: str) -> list[Frame]:
    """Frames from ``trainer.fit`` down to a checkpoint save (``hook``: "epoch_end", else a batch-end callback)."""
    s = f"{job.site}/lightning/pytorch"
    items = script_frames(job, "trainer.fit(model, datamodule=dm, ckpt_path=cfg.resume)")
    items += [
        (f"{s}/trainer/trainer.py", 561, "fit", "call._call_and_handle_interrupt("),
        (f"{s}/trainer/call.py", 48, "_call_and_handle_interrupt", "return trainer_fn(*args, **kwargs)"),
        (f"{s}/trainer/trainer.py", 599, "_fit_impl", "self._run(model, ckpt_path=ckpt_path)"),
        (f"{s}/trainer/trainer.py", 1012, "_run", "results = self._run_stage()"),
        (f"{s}/trainer/trainer.py", 1056, "_run_stage", "self.fit_loop.run()"),
    ]
    if hook == "epoch_end":
        items += [
            (f"{s}/loops/fit_loop.py", 217, "run", "self.on_advance_end()"),
            (f"{s}/loops/fit_loop.py", 468, "on_advance_end",
             'call._call_callback_hooks(trainer, "on_train_epoch_end", monitoring_callbacks=False)'),
            (f"{s}/trainer/call.py", 227, "_call_callback_hooks", "fn(trainer, trainer.lightning_module, *args, **kwargs)"),
            (f"{s}/callbacks/model_checkpoint.py", 323, "on_train_epoch_end",
             "self._save_last_checkpoint(trainer, monitor_candidates)"),
            (f"{s}/callbacks/model_checkpoint.py", 696, "_save_last_checkpoint", "self._save_checkpoint(trainer, filepath)"),
            (f"{s}/callbacks/model_checkpoint.py", 390, "_save_checkpoint",
             "trainer.save_checkpoint(filepath, self.save_weights_only)"),
            (f"{s}/trainer/trainer.py", 1365, "save_checkpoint",
             "self.strategy.save_checkpoint(checkpoint, filepath, storage_options=storage_options)"),
            (f"{s}/strategies/strategy.py", 490, "save_checkpoint",
             "self.checkpoint_io.save_checkpoint(checkpoint, filepath, storage_options=storage_options)"),
            (f"{job.site}/lightning/fabric/plugins/io/torch_io.py", 58, "save_checkpoint", "_atomic_save(checkpoint, path)"),
        ]
    else:  # a per-rank state callback on_train_batch_end
        items += [
            (f"{s}/loops/fit_loop.py", 216, "run", "self.advance()"),
            (f"{s}/loops/fit_loop.py", 455, "advance", "self.epoch_loop.run(self._data_fetcher)"),
            (f"{s}/loops/training_epoch_loop.py", 150, "run", "self.advance(data_fetcher)"),
            (f"{s}/loops/training_epoch_loop.py", 320, "advance",
             'call._call_callback_hooks(trainer, "on_train_batch_end", batch_output, batch, batch_idx)'),
            (f"{s}/trainer/call.py", 227, "_call_callback_hooks", "fn(trainer, trainer.lightning_module, *args, **kwargs)"),
            (f"{job.code}/callbacks.py", 88, "on_train_batch_end", "self._save_rank_state(trainer)"),
            (f"{job.code}/callbacks.py", 121, "_save_rank_state", "_atomic_save(state, path)"),
        ]
    return items


def chained(blocks: Sequence[Sequence[str]], joins: Sequence[str]) -> list[str]:
    """Traceback blocks as Python prints a chain: each block's header, the join sentence between blocks."""
    lines: list[str] = []
    for i, blk in enumerate(blocks):
        if i:
            lines += ["", joins[i - 1], ""]
        lines += ["Traceback (most recent call last):", *blk]
    return lines


def print_traceback(job: Job, r: int, t: float, blocks: Sequence[Sequence[str]], joins: Sequence[str] = ()) -> None:
    """Print an uncaught (possibly chained) traceback on rank ``r``."""
    job.print_rank_lines(r, t, chained(blocks, joins), "tb")


def die_of_exception(job: Job, r: int, t: float, blocks: Sequence[Sequence[str]], joins: Sequence[str],
                     step: int, lead: str = "") -> None:
    """A rank dies of an uncaught Python exception (optionally logged first by the script)."""
    n = job.workers[r].node
    if lead:
        job.print_rank(r, t - 0.003, "", lead=lead, kind="raw")
    if job.variant.log_exception:
        tl = t - 0.002
        what = "checkpoint save failed" if job.fault.saves else "training step failed"
        job.print_rank(r, tl, f"{job.log_stamp(n, tl)} - train - ERROR - [rank {r}] {what} at step {step}")
        job.print_rank_lines(r, tl, chained(blocks, joins), "log")
    print_traceback(job, r, t, blocks, joins)
    if job.variant.record and job.has_agent:
        job.workers[r].error_ts = t
        job.workers[r].error_json = error_file_json(job, r, t, blocks, joins)


def error_file_json(job: Job, r: int, t_exc: float, blocks: Sequence[Sequence[str]], joins: Sequence[str]) -> str:
    """The ``error.json`` torchelastic's ``@record`` writes for an exception (message, call stack, stamp)."""
    last = blocks[-1]
    exc_line = next((x for x in reversed(last) if x and not x.startswith(" ")
                     and not x.startswith(("CUDA kernel", "For debugging", "Compile with"))), last[-1])
    lines = chained(blocks, joins)
    cls, _, rest = exc_line.partition(": ")
    data = {"message": {"message": f"{cls.rsplit('.', 1)[-1]}: {rest}",
                        "extraInfo": {"py_callstack": "\n".join(lines) + "\n",
                                      "timestamp": str(job.clock.epoch(job.host_time(job.workers[r].node, t_exc)))}}}
    return json.dumps(data)


def faulthandler_dump(job: Job, r: int, where: str) -> list[str]:
    """faulthandler's thread dump after a fatal error (``where``: "flash" attention kernel, else no Python frame)."""
    rng, site, std = job.rng, job.site, job.stdlib
    tid = lambda: f"0x{rng.randrange(0x7f0000000000, 0x7fffffffffff):016x}"  # noqa: E731
    lines = [f"Thread {tid()} (most recent call first):",
             f'  File "{std}/threading.py", line 324 in wait',
             f'  File "{std}/threading.py", line 607 in wait',
             f'  File "{site}/tqdm/_monitor.py", line 60 in run',
             f'  File "{std}/threading.py", line 1016 in _bootstrap_inner',
             f'  File "{std}/threading.py", line 973 in _bootstrap', "",
             f"Current thread {tid()} (most recent call first):"]
    if where == "flash":
        lines += [f'  File "{site}/flash_attn/flash_attn_interface.py", line 96 in _flash_attn_forward',
                  f'  File "{site}/flash_attn/flash_attn_interface.py", line 507 in forward',
                  f'  File "{site}/torch/autograd/function.py", line 575 in apply',
                  f'  File "{job.code}/model.py", line 142 in forward',
                  f'  File "{site}/torch/nn/modules/module.py", line 1747 in _call_impl']
    else:
        lines += ["  <no Python frame>"]
    lines += [f'  File "{job.code}/{job.script}", line 268 in train',
              f'  File "{job.code}/{job.script}", line 398 in main',
              f'  File "{job.code}/{job.script}", line 412 in <module>', ""]
    if job.profile.python >= "3.11":
        lines += ["Extension modules: numpy.core._multiarray_umath, numpy.core._multiarray_tests, numpy.linalg._umath_linalg, "
                  "torch._C, torch._C._fft, torch._C._linalg, torch._C._nested, torch._C._nn, torch._C._sparse, "
                  "torch._C._special, yaml._yaml (total: 23)", ""]
    return lines
