"""Reports of every committed case, for byte-identity checks of a change (not a test: it writes files).

Writes the JSON and Markdown report of each case (``sample_logs``, ``tests/recorded``,
``tests/real_logs``, ``tests/classes``: each folder with an ``expected.toml``) under OUT, one pair per
variant: ``d`` read whole (default options), ``c`` with ``chunk_bytes=3000`` (every buffer cut),
``k`` with the regex scanner, ``s`` as ``d`` but with two workers and every file that is a big share of
its case split into pieces of 4 KiB, each read with 2 KiB on either side (``engines.extract_split``
and the workers' reading of candidate lines: its reports must equal ``d``'s). Timing fields are masked. Compare two trees with ``cmp``/``diff -r``:

    python tools/report_snapshot.py /tmp/snap-before /path/to/old/checkout dc
    python tools/report_snapshot.py /tmp/snap-after . dc
    diff -rq /tmp/snap-before /tmp/snap-after
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

TIMING = re.compile(r'"(elapsed_s|analyzed_at|seconds|wall_s|duration_s|elapsed)": [^,\n}]+')
BASES = ("sample_logs", "tests/recorded", "tests/real_logs", "tests/classes")


@contextmanager
def _split(on: bool) -> Iterator[None]:
    """Every file of a case that is a big share of it split into pieces of 4 KiB (variant ``s``)."""
    from correlator.extract import engines

    names = ("SPLIT_MIN_BYTES", "POOL_MIN_BYTES", "PIECE_BYTES", "MARGIN_BYTES")
    was = [getattr(engines, n) for n in names]
    if on:
        for n, value in zip(names, (1, 0, 4096, 2048), strict=True):
            setattr(engines, n, value)
    try:
        yield
    finally:
        for n, value in zip(names, was, strict=True):
            setattr(engines, n, value)


def main() -> None:
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    out, root = Path(sys.argv[1]).resolve(), Path(sys.argv[2]).resolve()
    variants = sys.argv[3] if len(sys.argv) > 3 else "dc"
    sys.path.insert(0, str(root))  # the tree under test, not the installed one
    os.chdir(root)
    from correlator.pipeline import Options, analyze
    from correlator.report import render

    cases = sorted({p.parent for base in BASES for p in (root / base).glob("*/expected.toml")})
    out.mkdir(parents=True, exist_ok=True)
    for case in cases:
        rel = case.relative_to(root)
        for v in variants:
            kw: dict[str, object] = {"tz": "UTC", "workers": 1}
            if v == "c":
                kw["chunk_bytes"] = 3000
            if v == "k":
                kw["scanner"] = "regex"
            if v == "s":
                kw["workers"] = 2
            with _split(v == "s"):
                rep = analyze([str(rel)], Options(**kw))  # type: ignore[arg-type]
            name = str(rel).replace("/", "__") + f".{v}"
            (out / f"{name}.json").write_text(TIMING.sub(r'"\1": X', render(rep, "json")))
            (out / f"{name}.md").write_text(re.sub(r"\d+(\.\d+)? ?(ms|s) ", "T ", render(rep, "markdown")))
    print(f"{len(cases)} cases x {len(variants)} variants -> {out}")


if __name__ == "__main__":
    main()
