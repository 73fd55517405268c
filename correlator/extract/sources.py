"""Finding and opening inputs, and what a file's name and place say about who wrote it.

Owns: expanding paths (files, folders walked without following link loops, globs, ``-``),
walking folders without recursion to a depth cap (``MAX_DEPTH``) and following a symbolic link
only while it stays inside the folder given (a link to ``/etc`` in a log folder is reported, not
read), skipping what is not a log (with a diagnostic), sniffing compression by magic bytes, and reading
identity from names (``rank-17.out``, ``slurm-1234_17.out``, ``attempt_0/3/stderr.log``). It reads
no log content beyond a few magic bytes.
"""

from __future__ import annotations

import bz2
import fnmatch
import glob
import gzip
import io
import lzma
import os
import re
import stat
import sys
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import BinaryIO

from correlator.model import DiagCode, Diagnostic, SourceInfo

#: file endings that are never logs: reading them would match their prose (a README quoting an error)
NOT_LOGS = frozenset({
    ".md", ".toml", ".yaml", ".yml", ".py", ".ipynb", ".html", ".htm", ".png", ".jpg", ".jpeg",
    ".gif", ".svg", ".pdf", ".parquet", ".pt", ".pth", ".ckpt", ".safetensors", ".bin", ".npy",
    ".npz", ".pkl", ".sh", ".cfg", ".ini", ".whl", ".so", ".tar", ".zip", ".csv",
})
_COMPRESSED = {".gz": "gzip", ".zst": "zstd", ".bz2": "bz2", ".xz": "xz"}
MAX_FILES = 200_000
#: folders more than this many levels below a folder given are not read (log folders are a few
#: levels deep; a deeper one can be passed by name)
MAX_DEPTH = 32

_RANK_WORD = re.compile(r"(?:^|[^a-z])(?:rank|proc|task|worker)[-_.]?(\d{1,6})(?!\d)", re.I)
_SLURM_JOB = re.compile(r"slurm-(\d+)(?:[_.](\d{1,6}))?\.(?:out|err|log)", re.I)
_ATTEMPT = re.compile(r"^attempt_(\d+)$")
_NODE_DIR = re.compile(r"^(?:node|host|nid)[-_]?(\d{1,6})$", re.I)
_DASHED_IP = re.compile(r"(?<!\d)\d{1,3}-\d{1,3}-\d{1,3}-\d{1,3}$")
_LAST_NUMBER = re.compile(r"(\d{1,6})(?=(?:\.[A-Za-z]{1,5}){0,2}$)")


def _last_number(name: str) -> str:
    m = _LAST_NUMBER.search(name)
    return m.group(1) if m else ""


def _compressed_kind(path: str) -> str:
    for ext, kind in _COMPRESSED.items():
        if path.endswith(ext):
            return kind
    return "file"


def _base_name(name: str) -> str:
    for ext in _COMPRESSED:
        if name.endswith(ext):
            return name[: -len(ext)]
    return name


def identity_from_path(path: str, **more: object) -> SourceInfo:
    """A ``SourceInfo`` with what the path alone says (rank, local rank, attempt, node), and the
    fields ``more`` (its size) -- made once: a 4096-file job's names are read on the way to the pool."""
    p = Path(path)
    name = _base_name(p.name)
    fields: dict = {"path": path, "kind": _compressed_kind(path)}
    parts = p.parts
    # torchelastic --log-dir: <dir>/<run_id>/attempt_<n>/<local_rank>/{stdout,stderr}.log|error.json
    attempt = _ATTEMPT.match(parts[-3]) if len(parts) >= 3 else None
    if attempt is not None and parts[-2].isdecimal():
        fields["attempt"] = int(attempt.group(1))
        fields["file_local_rank"] = int(parts[-2])
        fields["stream"] = name.rsplit(".", 1)[0] if name != "error.json" else "error.json"
        for part in parts[:-3]:
            if _NODE_DIR.match(part):
                fields["file_node"] = part
        return SourceInfo(**{**fields, **more})
    for part in parts[:-1]:
        if _NODE_DIR.match(part):
            fields["file_node"] = part
    m = _SLURM_JOB.search(name)
    if m:
        if m.group(2) is not None:
            fields["file_rank"] = int(m.group(2))
        return SourceInfo(**{**fields, **more})
    m = _RANK_WORD.search(name)
    if m:
        fields["file_rank"] = int(m.group(1))
    return SourceInfo(**{**fields, **more})


def _number_family(paths: list[str]) -> dict[str, int]:
    """Ranks for ``%t``-style names: files of one folder that differ only in their last number."""
    groups: dict[tuple[str, str], list[tuple[str, int]]] = defaultdict(list)
    for path in paths:
        d, name = os.path.split(path)
        name = _base_name(name)
        sj = _SLURM_JOB.search(name)
        if sj and sj.group(2) is None:  # slurm-<jobid>.out: the number is a job, not a rank
            continue
        m = _LAST_NUMBER.search(name)
        if m:
            if m.group(1)[0] == "0" and len(m.group(1)) > 1 and m.start() > 0 and name[m.start() - 1].isalpha():
                continue  # "gpu-a01": a host name's number, not srun's task id
            if _DASHED_IP.search(name[: m.end()]):
                continue  # "ip-10-0-63-17" (an EC2 host name): an address, not a task id
            shape = name[: m.start()] + "#" + name[m.end():]
            groups[(d, shape)].append((path, int(m.group(1))))
    out: dict[str, int] = {}
    for members in groups.values():
        numbers = {n for _, n in members}
        if len(members) < 2 or len(numbers) != len(members):
            continue
        padded = any(n > 0 and _last_number(_base_name(os.path.basename(p))).startswith("0") for p, n in members)
        if padded and 0 not in numbers:
            continue  # "dgx-h100-03" .. "-10": hosts numbered from 1 (srun's %3t would start at 000)
        out.update(members)
    return out


def _lone_array_tasks(paths: list[str]) -> set[str]:
    """``slurm-<job>_<n>.out`` files that are the only one of their job among the inputs: the
    default name of a SLURM array task (``%A_%a``: array job, task id), whose number is no rank.
    Several of one job read together are its per-task files (``%j_%t``), whose number is the rank."""
    by_job: dict[str, list[str]] = defaultdict(list)
    for path in paths:
        m = _SLURM_JOB.search(_base_name(os.path.basename(path)))
        if m and m.group(2) is not None:
            by_job[m.group(1)].append(path)
    return {group[0] for group in by_job.values() if len(group) == 1}


def _inside(real: str, base: str) -> bool:
    """Whether the resolved path ``real`` is the folder ``base`` (resolved) or below it."""
    return real == base or real.startswith(base.rstrip(os.sep) + os.sep)


def walk(top: str, diags: list[Diagnostic]) -> Iterator[tuple[str, bool]]:
    """Every entry below the folder ``top`` as ``(path, is_folder)``: depth first, in name order,
    each folder's files before its folders, without recursion (however deep the tree).

    A symbolic link is followed only when its target is inside ``top``; one that leads out is
    reported (``LINK_OUTSIDE``) and passed over. A folder already entered (a link loop) is not
    entered again (``SYMLINK_LOOP``); folders more than ``MAX_DEPTH`` levels down are not entered
    (one ``TOO_DEEP`` diagnostic for the input, counting them)."""
    base = os.path.realpath(top)
    visited: set[tuple[int, int]] = set()
    too_deep: list[str] = []
    stack: list[tuple[str, int]] = [(top, 0)]
    while stack:
        folder, depth = stack.pop()
        try:
            st = os.stat(folder)
            key = (st.st_dev, st.st_ino)
            if key in visited:
                diags.append(Diagnostic("warning", folder, "symlink loop: folder already read, not descended again",
                                        DiagCode.SYMLINK_LOOP))
                continue
            visited.add(key)
            with os.scandir(folder) as it:
                entries = sorted(it, key=lambda e: e.name)
        except OSError as e:  # unreadable, or vanished or lost its permission while walking
            diags.append(Diagnostic("error", folder, f"cannot read folder: {e.strerror or e}", DiagCode.UNREADABLE))
            continue
        folders: list[str] = []
        for entry in entries:
            path = os.path.join(folder, entry.name)
            if entry.is_symlink():
                target = os.path.realpath(path)
                if not _inside(target, base):
                    diags.append(Diagnostic("warning", path, f"symbolic link to {target}, outside {top}: not followed; "
                                            "pass the target by name to read it", DiagCode.LINK_OUTSIDE))
                    continue
            try:
                is_folder = entry.is_dir()
            except OSError:
                is_folder = False
            if is_folder:
                folders.append(path)
            else:
                yield path, False
        for path in folders:
            yield path, True
        if folders and depth >= MAX_DEPTH:
            too_deep.extend(folders)
            continue
        stack.extend((path, depth + 1) for path in reversed(folders))
    if too_deep:
        more = f" (and {len(too_deep) - 1} more folders as deep)" if len(too_deep) > 1 else ""
        diags.append(Diagnostic("warning", too_deep[0], f"more than {MAX_DEPTH} folder levels below {top}: not "
                                f"read{more}; pass a folder this deep by name to read it", DiagCode.TOO_DEEP,
                                count=len(too_deep)))


def _glob_component(pattern: str, name: str) -> bool:
    if name.startswith(".") and not pattern.startswith("."):  # as glob: wildcards skip hidden names
        return False
    return fnmatch.fnmatchcase(name, pattern)


def _glob_match(parts: list[str], names: list[str]) -> bool:
    """Whether path components ``names`` match pattern components ``parts`` (``**``: any number of
    components, hidden ones excepted), without recursion."""

    def close(states: set[int]) -> set[int]:
        out = set(states)
        for i in sorted(states):
            while i < len(parts) and parts[i] == "**":
                i += 1
                out.add(i)
        return out

    states = close({0})
    for name in names:
        nxt: set[int] = set()
        for i in states:
            if i < len(parts):
                if parts[i] == "**":
                    if not name.startswith("."):
                        nxt.add(i)
                elif _glob_component(parts[i], name):
                    nxt.add(i + 1)
        states = close(nxt)
        if not states:
            return False
    return len(parts) in states


def _glob_recursive(pattern: str, diags: list[Diagnostic]) -> list[str]:
    """What a ``**`` pattern matches, found by ``walk`` (Python's glob recurses once per folder
    level and follows every link): the folder before the first wildcard is walked."""
    parts = pattern.split(os.sep)
    first = next(i for i, p in enumerate(parts) if glob.has_magic(p))
    top = os.sep.join(parts[:first]) or (os.sep if pattern.startswith(os.sep) else "")
    if not os.path.isdir(top or "."):
        return []
    rest = parts[first:]
    hits = []
    for path, _ in walk(top or ".", diags):
        rel = os.path.relpath(path, top or ".")
        if _glob_match(rest, rel.split(os.sep)):
            hits.append(path if top else rel)
    return hits


def discover(inputs: list[str], *, all_files: bool = False) -> tuple[list[SourceInfo], list[Diagnostic]]:
    """Expand the user's inputs into sources, with a diagnostic for each thing passed over."""
    diags: list[Diagnostic] = []
    found: list[str] = []
    seen: set[str] = set()
    #: paths the user did not name (found in a folder or by a pattern): FIFOs and devices there are skipped
    unnamed: set[str] = set()

    real_folders: dict[str, str] = {}

    def add(path: str, in_folder: bool = False) -> None:
        if in_folder and not os.path.islink(path):
            # (a folder's own entry, not a link: its folder resolved once, not each of its files)
            folder, name = os.path.split(path)
            real_folder = real_folders.get(folder)
            if real_folder is None:
                real_folder = real_folders[folder] = os.path.realpath(folder)
            real = os.path.join(real_folder, name)
        else:
            real = os.path.realpath(path)
        if real in seen:
            return
        seen.add(real)
        found.append(path)

    for item in inputs:
        if item == "-":
            found.append("-")
            continue
        if os.path.isdir(item):
            for path, is_folder in walk(item, diags):
                if is_folder:
                    continue
                add(path, in_folder=True)
                unnamed.add(path)
                if len(found) > MAX_FILES:
                    diags.append(Diagnostic("error", item, f"more than {MAX_FILES} files: stopped walking",
                                           DiagCode.TOO_MANY_FILES))
                    break
        elif os.path.exists(item) or os.path.islink(item):
            add(item)
        elif any(c in item for c in "*?["):
            hits = sorted(_glob_recursive(item, diags) if "**" in item else glob.glob(item))
            if not hits:
                diags.append(Diagnostic("warning", item, "no file matches this pattern", DiagCode.PATTERN_MATCHED_NOTHING))
            for h in hits:
                if os.path.isdir(h):
                    diags.append(Diagnostic("info", h, "folder matched by a pattern: pass it by name to read it",
                                           DiagCode.FOLDER_BY_PATTERN))
                else:
                    add(h)
                    unnamed.add(h)
        else:
            diags.append(Diagnostic("error", item, "no such file or folder", DiagCode.MISSING))

    sources: list[SourceInfo] = []
    ranks_by_family = _number_family([p for p in found if p != "-"])
    lone_tasks = _lone_array_tasks([p for p in found if p != "-"])
    for path in found:
        if path == "-":
            sources.append(SourceInfo(path="<stdin>", kind="stdin"))
            continue
        name = Path(path).name
        suffix = _base_name(name.lower())
        ext = os.path.splitext(suffix)[1]
        if not all_files and ext in NOT_LOGS:
            diags.append(Diagnostic("info", path, f"not a log ({ext} file): skipped; pass --all-files to read it",
                                   DiagCode.NOT_A_LOG))
            continue
        if ext == ".json" and not name.startswith("error"):
            if not all_files:
                diags.append(Diagnostic("info", path, "not a log (.json file): skipped; pass --all-files to read it",
                                       DiagCode.NOT_A_LOG))
                continue
        try:
            st = os.stat(path)
        except OSError as e:
            if os.path.islink(path):  # (the link is there, what it points to is not: os.path.exists says so)
                diags.append(Diagnostic("error", path, "broken symbolic link: its target does not exist",
                                        DiagCode.MISSING))
            else:
                diags.append(Diagnostic("error", path, f"cannot read: {e.strerror or e}", DiagCode.UNREADABLE))
            continue
        if stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode):  # /dev/zero never ends, even when named
            diags.append(Diagnostic("warning", path, "not a regular file (a device): skipped; pipe it in with - if meant",
                                   DiagCode.NOT_A_REGULAR_FILE))
            continue
        if path in unnamed and not stat.S_ISREG(st.st_mode):
            # a FIFO would block the run until someone writes to it (named ones are read: <(...) is one)
            what = "a FIFO" if stat.S_ISFIFO(st.st_mode) else "a socket"
            diags.append(Diagnostic("warning", path, f"not a regular file ({what}): skipped; pass it by name to read it",
                                   DiagCode.NOT_A_REGULAR_FILE))
            continue
        info = identity_from_path(path, size=st.st_size)
        if path in lone_tasks:  # slurm-%A_%a.out: an array task's whole output, not one rank's
            info = replace(info, file_rank=None)
        if info.file_rank is None and info.file_local_rank is None and path in ranks_by_family:
            info = replace(info, file_rank=ranks_by_family[path])
        sources.append(info)
    return sources, diags


def _sniff(head: bytes) -> str:
    if head[:2] == b"\x1f\x8b":
        return "gzip"
    if head[:4] == b"\x28\xb5\x2f\xfd":
        return "zstd"
    if head[:3] == b"BZh":
        return "bz2"
    if head[:6] == b"\xfd7zXZ\x00":
        return "xz"
    return "file"


class _Rejoined(io.RawIOBase):
    """A stream's first bytes (read to sniff its kind) put back in front of the rest of it."""

    def __init__(self, head: bytes, rest: BinaryIO) -> None:
        self.head, self.rest = head, rest

    def readable(self) -> bool:
        return True

    def readinto(self, b: bytearray | memoryview) -> int:  # type: ignore[override]
        if self.head:
            n = min(len(b), len(self.head))
            b[:n], self.head = self.head[:n], self.head[n:]
            return n
        data = self.rest.read1(len(b)) if hasattr(self.rest, "read1") else self.rest.read(len(b))
        b[: len(data)] = data
        return len(data)


def _stdin() -> tuple[BinaryIO, str]:
    """Standard input, decompressed when its first bytes are a compressed stream's magic (``gzip -c
    job.out | correlate -``), as a compressed file would be."""
    stream: BinaryIO = sys.stdin.buffer
    head = b""
    while len(head) < 6:  # a pipe may hand over its first bytes in pieces
        piece = stream.read(6 - len(head))
        if not piece:
            break
        head += piece
    raw = io.BufferedReader(_Rejoined(head, stream))
    kind = _sniff(head)
    if kind == "file":
        return raw, "stdin"
    return _decompress(raw, kind), kind


def _decompress(raw: BinaryIO, kind: str) -> BinaryIO:
    if kind == "gzip":
        return gzip.GzipFile(fileobj=raw, mode="rb")  # type: ignore[return-value]
    if kind == "zstd":
        import zstandard

        return zstandard.ZstdDecompressor().stream_reader(raw, read_across_frames=True)
    if kind == "bz2":
        return bz2.BZ2File(raw, "rb")  # type: ignore[return-value]
    return lzma.LZMAFile(raw, "rb")  # type: ignore[return-value]


def open_source(src: SourceInfo) -> tuple[BinaryIO, str]:
    """A binary stream of the source's (decompressed) bytes, and the kind detected from its magic."""
    if src.kind == "stdin":
        return _stdin()
    raw = open(src.path, "rb")  # noqa: SIM115 - returned to the caller, who closes it
    head = raw.peek(8)[:8] if hasattr(raw, "peek") else b""
    kind = _sniff(head)
    if kind == "file" and raw.seekable():
        # plain bytes are read straight from the file, each read one system call into the buffer
        # that is handed on (through the BufferedReader, a big read is its 8 KiB peek plus the
        # rest, joined: one more copy of every byte)
        plain = raw.detach()
        plain.seek(0)
        # (typeshed types the raw file and the decompressors as io classes, not typing.BinaryIO; all
        # are binary streams, and the reader only reads and closes them)
        return plain, kind  # type: ignore[return-value]
    if kind == "file":
        return raw, kind
    return _decompress(raw, kind), kind


def read_chunks(stream: BinaryIO, size: int) -> Iterator[bytes]:
    while True:
        buf = stream.read(size)
        if not buf:
            return
        yield buf


#: bytes that text logs are made of (tab..CR, ESC, printable ASCII and every byte of UTF-8 sequences)
_TEXT_BYTES = bytes([9, 10, 11, 12, 13, 27, *range(32, 256)])
_NUL_RUN = re.compile(rb"\x00{8,}")


def text_probe(stream_head: bytes) -> bool:
    """Whether the first bytes look like text (a binary file would only give garbage matches).

    Runs of NULs are left out of the judgement: a log with a hole (a file truncated under a writer
    that kept its offset, blocks never flushed before a crash) is still a log. Text logs have next
    to no other control bytes; binary formats have many, and random bytes are mostly invalid UTF-8."""
    sample = stream_head[:8192]
    if b"\x00" in sample:  # (``re`` tries the run at every byte: 50 us a file without a NUL to find)
        sample = _NUL_RUN.sub(b"", sample)
    if not sample:
        return True
    bad = len(sample.translate(None, _TEXT_BYTES))
    if bad / len(sample) >= 0.05:
        return False
    if sample.isascii():
        return True
    text = sample.decode("utf-8", "replace")  # random bytes are mostly invalid UTF-8
    return text.count("\ufffd") / len(text) < 0.2

