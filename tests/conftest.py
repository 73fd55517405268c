from __future__ import annotations

import io
from pathlib import Path

import pytest

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


def digest_of(engine: Engine, text: str | bytes, name: str = "test.log", chunk: int | None = None,
              **src) -> Digest:
    data = text.encode() if isinstance(text, str) else text
    opts = ExtractOptions(tz=resolve_tz("UTC"), **({"chunk_bytes": chunk} if chunk else {}))
    return extract(SourceInfo(path=name, kind="memory", size=len(data), **src), engine, opts, stream=io.BytesIO(data))
