"""Storage faults while saving a checkpoint: EIO, ESTALE, ENOSPC, EDQUOT, a failed stream writer, EXDEV renames."""

from __future__ import annotations

from tools.synth import tracebacks
from tools.synth.job import Job
from tools.synth.tracebacks import RootTraceback


def checkpoint_path(job: Job, step: int, r: int, kind: str = "shard") -> str:
    """Rank ``r``'s checkpoint file at ``step`` (``kind``: "shard" per rank, else Lightning's last checkpoint)."""
    if kind == "shard":
        return f"{job.ckpt}/step-{step:06d}/rank-{r:05d}.pt"
    return f"{job.ckpt}/epoch={step // (job.ckpt_every * 10)}-step={step}.ckpt"


def save_error(job: Job, r: int, step: int) -> RootTraceback:
    """Rank ``r``'s checkpoint save at ``step`` fails in the storage layer (the fault's errno or the stream writer)."""
    f, rng, site, stdlib = job.fault.name, job.rng, job.site, job.stdlib
    joins: list[str] = []
    path = checkpoint_path(job, step, r)
    tmp = f"/tmp/tmp{''.join(rng.choice('abcdefghijklmnopqrstuvwxyz0123456789_') for _ in range(8))}"
    if job.variant.framework == "lightning":
        top = tracebacks.format_frames(tracebacks.lightning_frames(job, "batch_end"))
    else:
        top = tracebacks.format_frames(tracebacks.script_frames(job, "train(cfg, model, optimizer, train_loader)") + [
            (f"{job.code}/{job.script}", 301, "train", "save_checkpoint(cfg, model, optimizer, step)")])
    cio = f"{site}/lightning/fabric/utilities/cloud_io.py"
    if f == "storage-estale":
        d = path.rsplit("/", 1)[0]
        if job.variant.framework == "lightning":
            blk = top[:-2] + tracebacks.format_frames([(f"{job.code}/callbacks.py", 116, "_save_rank_state",
                                                        "os.makedirs(os.path.dirname(path), exist_ok=True)")])
        else:
            blk = top + tracebacks.format_frames([(f"{job.code}/utils/checkpoint.py", 41, "save_checkpoint",
                                                   "os.makedirs(ckpt_dir, exist_ok=True)")])
        blk += tracebacks.format_frames([(f"{stdlib}/os.py", 225, "makedirs", "mkdir(name, mode)")])
        blk.append(f"OSError: [Errno 116] Stale file handle: '{d}'")
        return [blk], joins, "OSError: [Errno 116] Stale file handle"
    if job.variant.framework == "lightning":
        save = top + tracebacks.format_frames([(cio, 92, "_atomic_save", 'with fs.transaction, fs.open(urlpath, "wb") as f:')])
    else:
        save = top + tracebacks.format_frames([(f"{job.code}/utils/checkpoint.py", 63, "save_checkpoint",
                                                "torch.save(state, path)")])
    if f == "stream-writer":
        if job.variant.framework == "lightning":
            save = top + tracebacks.format_frames([(cio, 93, "_atomic_save", "torch.save(checkpoint, f)")])
        b1 = tracebacks.format_frames([(f"{site}/torch/serialization.py", 965, "save",
                                        "_save(obj, opened_zipfile, pickle_module, pickle_protocol, _disable_byteorder_record)"),
                                       (f"{site}/torch/serialization.py", 1253, "_save",
                                        "zip_file.write_record(name, storage, num_bytes)")])
        rec = rng.randrange(3, 400)
        b1.append(f"RuntimeError: [enforce fail at inline_container.cc:778] . PytorchStreamWriter failed "
                  f"writing file data/{rec}: file write failed")
        b2 = save + tracebacks.format_frames([(f"{site}/torch/serialization.py", 964, "save",
                                               "with _open_zipfile_writer(f) as opened_zipfile:"),
                                              (f"{site}/torch/serialization.py", 798, "__exit__",
                                               "self.file_like.write_end_of_file()")])
        pos = rng.randrange(1 << 30, 1 << 34)
        b2.append(f"RuntimeError: [enforce fail at inline_container.cc:603] . unexpected pos {pos} vs {pos - 112}")
        joins = ["During handling of the above exception, another exception occurred:"]
        return [b1, b2], joins, f"PytorchStreamWriter failed writing file data/{rec}: file write failed"
    if f in ("storage-enospc", "storage-edquot"):
        msg = ("OSError: [Errno 28] No space left on device" if f == "storage-enospc"
               else "OSError: [Errno 122] Disk quota exceeded")
        if job.variant.framework == "lightning":
            blk = top + tracebacks.format_frames([(cio, 93, "_atomic_save", "f.write(bytesbuffer.getvalue())")])
        else:
            blk = save + tracebacks.format_frames([(f"{site}/torch/serialization.py", 965, "save",
                                                    "_save(obj, opened_zipfile, pickle_module, pickle_protocol, _disable_byteorder_record)"),
                                                   (f"{site}/torch/serialization.py", 1253, "_save",
                                                    "zip_file.write_record(name, storage, num_bytes)")])
        blk.append(msg)
        return [blk], joins, msg
    # storage-eio
    if job.variant.framework == "lightning" and job.variant.eio_variant == "move":
        b1 = tracebacks.format_frames([(f"{stdlib}/shutil.py", 816, "move", "os.rename(src, real_dst)")])
        b1.append(f"OSError: [Errno 18] Invalid cross-device link: '{tmp}' -> '{path}'")
        b2 = save + tracebacks.format_frames([
            (f"{site}/fsspec/transaction.py", 27, "__exit__", "self.complete(commit=exc_type is None)"),
            (f"{site}/fsspec/transaction.py", 40, "complete", "f.commit()"),
            (f"{site}/fsspec/implementations/local.py", 441, "commit", "shutil.move(self.temp, self.path)"),
            (f"{stdlib}/shutil.py", 836, "move", "copy_function(src, real_dst)"),
            (f"{stdlib}/shutil.py", 434, "copy2", "copyfile(src, dst, follow_symlinks=follow_symlinks)"),
            (f"{stdlib}/shutil.py", 267, "copyfile", "_fastcopy_sendfile(fsrc, fdst)"),
            (f"{stdlib}/shutil.py", 156, "_fastcopy_sendfile", "raise err from None"),
            (f"{stdlib}/shutil.py", 142, "_fastcopy_sendfile", "sent = os.sendfile(outfd, infd, offset, blocksize)"),
        ])
        b2.append(f"OSError: [Errno 5] Input/output error: '{tmp}' -> '{path}'")
        return [b1, b2], ["During handling of the above exception, another exception occurred:"], \
            "OSError: [Errno 5] Input/output error"
    if job.variant.framework == "lightning":
        blk = save + tracebacks.format_frames([
            (f"{site}/fsspec/implementations/local.py", 450, "__exit__", "self.close()"),
            (f"{site}/fsspec/implementations/local.py", 437, "close", "return self.f.close()")])
    else:
        blk = save + tracebacks.format_frames([
            (f"{site}/torch/serialization.py", 963, "save", "with _open_file_like(f, \"wb\") as opened_file:"),
            (f"{site}/torch/serialization.py", 659, "__exit__", "self.file_like.close()")])
    blk.append("OSError: [Errno 5] Input/output error")
    return [blk], joins, "OSError: [Errno 5] Input/output error"


def exdev_rename(job: Job, r: int, step: int) -> RootTraceback:
    """Rank 0 renames its checkpoint from /tmp onto another filesystem: EXDEV."""
    rng = job.rng
    joins: list[str] = []
    path = checkpoint_path(job, step, r, "last")
    tmp = f"/tmp/tmp{''.join(rng.choice('abcdefghijklmnopqrstuvwxyz0123456789_') for _ in range(8))}.pt"
    blk = tracebacks.format_frames(tracebacks.script_frames(job, "train(cfg, model, optimizer, train_loader)") + [
        (f"{job.code}/{job.script}", 301, "train", "save_checkpoint(cfg, model, optimizer, step)"),
        (f"{job.code}/utils/checkpoint.py", 71, "save_checkpoint", "os.replace(tmp_path, path)")])
    blk.append(f"OSError: [Errno 18] Invalid cross-device link: '{tmp}' -> '{path}'")
    return [blk], joins, "OSError: [Errno 18] Invalid cross-device link"


def lightning_exdev(job: Job, r: int, step: int) -> RootTraceback:
    """Lightning's ``_atomic_save`` cannot move its fsspec temp file across devices."""
    rng, site, stdlib = job.rng, job.site, job.stdlib
    path = checkpoint_path(job, step, r, "last")
    tmp = f"/tmp/tmp{''.join(rng.choice('abcdefghijklmnopqrstuvwxyz0123456789_') for _ in range(8))}"
    b1 = tracebacks.format_frames([(f"{stdlib}/shutil.py", 816, "move", "os.rename(src, real_dst)")])
    b1.append(f"OSError: [Errno 18] Invalid cross-device link: '{tmp}' -> '{path}'")
    cio = f"{site}/lightning/fabric/utilities/cloud_io.py"
    b2 = tracebacks.format_frames([
        (cio, 94, "_atomic_save", 'with fs.open(urlpath, "wb") as f:'),
        (f"{site}/fsspec/transaction.py", 27, "__exit__", "self.complete(commit=exc_type is None)"),
        (f"{site}/fsspec/transaction.py", 40, "complete", "f.commit()"),
        (f"{site}/fsspec/implementations/local.py", 441, "commit", "shutil.move(self.temp, self.path)"),
        (f"{stdlib}/shutil.py", 836, "move", "copy_function(src, real_dst)"),
        (f"{stdlib}/shutil.py", 435, "copy2", "copystat(src, dst, follow_symlinks=follow_symlinks)"),
        (f"{stdlib}/shutil.py", 374, "copystat", "lookup(\"chmod\")(dst, mode, follow_symlinks=follow)"),
    ])
    b2.append(f"PermissionError: [Errno 1] Operation not permitted: '{path}'")
    b3 = tracebacks.format_frames(tracebacks.lightning_frames(job, "epoch_end") + [(cio, 104, "_atomic_save", "raise RuntimeError(")])
    b3.append('RuntimeError: Upgrade fsspec to enable cross-device local checkpoints: pip install "fsspec[http]>=2025.5.0"')
    joins = ["During handling of the above exception, another exception occurred:",
             "The above exception was the direct cause of the following exception:"]
    return [b1, b2, b3], joins, "RuntimeError: Upgrade fsspec to enable cross-device local checkpoints"
