"""Rank sets as people write them: ``0-3,5,7-9`` (SLURM and torchrun notation) and back."""

from __future__ import annotations

from collections.abc import Sequence


def compress_ranks(ranks: Sequence[int]) -> str:
    """``[0,1,2,3,5,7,8,9]`` -> ``"0-3,5,7-9"``."""
    vals = sorted(set(ranks))
    if not vals:
        return ""
    out = []
    start = prev = vals[0]
    for v in vals[1:]:
        if v == prev + 1:
            prev = v
            continue
        out.append(f"{start}-{prev}" if prev > start else str(start))
        start = prev = v
    out.append(f"{start}-{prev}" if prev > start else str(start))
    return ",".join(out)


def expand_ranks(text: str) -> list[int]:
    """The inverse of ``compress_ranks`` (also reads SLURM's ``2,4-5``)."""
    out: list[int] = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        if "-" in part:
            a, b = part.split("-", 1)
            out.extend(range(int(a), int(b) + 1))
        else:
            out.append(int(part))
    return out
