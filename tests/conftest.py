from __future__ import annotations

import io
from dataclasses import replace
from pathlib import Path

import pytest

from correlator.extract import engines as _engines
from correlator.extract.extractor import Engine, ExtractOptions, extract
from correlator.extract.scan import hyperscan_available
from correlator.extract.timestamps import resolve_tz
from correlator.model import Digest, SourceInfo
from correlator.ruleset import load_rules

ROOT = Path(__file__).resolve().parent.parent
SCANNERS = ["hyperscan", "regex"] if hyperscan_available() else ["regex"]


@pytest.fixture(scope="session")
def rules():
    return load_rules()


@pytest.fixture(scope="session", params=SCANNERS)
def engine(request, rules):
    return Engine(rules, request.param)


def findings(d: Digest) -> Digest:
    """``d`` without its scan's report count, the one figure that depends on where a source's ranges
    fall (a range after one dense with narrowed reports is scanned by the whole database:
    ``scan.WHOLE_WHEN_DENSE``): what the tests compare across cuts, buffers and pieces."""
    return replace(d, scan_reports=0)


def digest_of(engine: Engine, text: str | bytes, name: str = "test.log", chunk: int | None = None,
              **src) -> Digest:
    data = text.encode() if isinstance(text, str) else text
    opts = ExtractOptions(tz=resolve_tz("UTC"), **({"chunk_bytes": chunk} if chunk else {}))
    return extract(SourceInfo(path=name, kind="memory", size=len(data), **src), engine, opts, stream=io.BytesIO(data))


def scanned_pieces(engine: Engine, data: bytes, cuts: list[int], src: SourceInfo | None = None,
                   opts: ExtractOptions | None = None, margin: int | None = None):
    """What the pool's workers return for ``data`` cut at the line starts after ``cuts``: with ``src``
    and ``opts``, what their candidate lines say too (each piece read with ``margin`` bytes on either
    side, ``engines.MARGIN_BYTES`` by default)."""
    from correlator.extract.replay import Reader
    from correlator.extract.statements import ONE_WRITER_PROBE

    bounds, pos = [], 0
    for c in sorted(set(cuts)):
        nl = data.find(b"\n", max(c, pos))
        if nl < 0 or nl + 1 >= len(data):
            break
        bounds.append((pos, nl + 1))
        pos = nl + 1
    bounds.append((pos, len(data)))
    if src is None or opts is None:
        return (_engines._scan_bytes(engine, data[a:b], 0, b - a, a, b) for a, b in bounds if b > a)
    reader = Reader(engine, opts, src, data[:ONE_WRITER_PROBE])
    m = _engines.MARGIN_BYTES if margin is None else margin
    return (_engines._scan_bytes(engine, data[max(0, a - m):b + m], a - max(0, a - m), b - a, a, b, reader,
                                 b + m >= len(data))
            for a, b in bounds if b > a)
