"""Digest <-> Arrow IPC: exact round trips, and the documented schema is the real one."""

from __future__ import annotations

import copy
import dataclasses
import os
import pickle
from dataclasses import replace
from pathlib import Path

import pytest
from conftest import ROOT, digest_of
from hypothesis import given, settings
from hypothesis import strategies as st
from jobs import combined_srun, rank_lines

from correlator.extract import digest_io
from correlator.extract.digest_io import digest_from_arrow, digest_schema, digest_to_arrow
from correlator.extract.extractor import ExtractOptions, extract
from correlator.extract.sources import identity_from_path
from correlator.extract.timestamps import resolve_tz
from correlator.model import (
    Anchor,
    DiagCode,
    Diagnostic,
    Digest,
    FactSource,
    IdentityFact,
    Match,
    MatchGroup,
    SourceInfo,
    StreamFacts,
    TimeKind,
    Who,
)

I64 = st.integers(min_value=-(2**63), max_value=2**63 - 1)
OPT_I64 = st.none() | I64
# ordinary text, plus what a non-UTF-8 file name looks like after surrogateescape decoding
TEXT = st.text(max_size=40) | st.binary(max_size=20).map(lambda b: b.decode("utf-8", "surrogateescape"))
OPT_TEXT = st.none() | TEXT

WHO = st.builds(Who, rank=OPT_I64, local_rank=OPT_I64, task=OPT_I64, host=OPT_TEXT, pid=OPT_I64)
MATCH = st.builds(
    Match, rule_id=TEXT, path=TEXT, line=I64, offset=I64, text=TEXT, who=WHO, time_ns=OPT_I64, lo_ns=OPT_I64,
    hi_ns=OPT_I64, time_kind=st.sampled_from(list(TimeKind)),
    captures=st.lists(st.tuples(TEXT, TEXT), max_size=4).map(tuple),
    context=st.lists(TEXT, max_size=5).map(tuple), attempt=OPT_I64, tz_assumed=st.booleans())
STREAM = st.builds(StreamFacts, who=WHO, path=TEXT, lines=I64, first_ns=OPT_I64, last_ns=OPT_I64, last_offset=I64,
                   last_step=OPT_I64, last_step_ns=OPT_I64, attempt=OPT_I64)
ANCHOR = st.builds(Anchor, kind=TEXT, key=TEXT, who=WHO, time_ns=I64, path=TEXT)
IDENT = st.builds(IdentityFact, who=WHO, origin_task=OPT_I64, origin_path=TEXT, source=st.sampled_from(FactSource),
                  time_ns=OPT_I64, exitcode=OPT_I64, is_root_entry=st.booleans(), comm_size=OPT_I64, bus=OPT_I64)
DIAG = st.builds(Diagnostic, level=st.sampled_from(["info", "warning", "error"]), path=OPT_TEXT, message=TEXT,
                 code=st.sampled_from(DiagCode), count=I64)
SOURCE = st.builds(SourceInfo, path=TEXT, kind=TEXT, size=OPT_I64, file_rank=OPT_I64, file_local_rank=OPT_I64,
                   file_node=OPT_TEXT, attempt=OPT_I64, stream=TEXT)
GROUP = st.builds(MatchGroup, rule_id=TEXT, path=TEXT, host=OPT_TEXT, attempt=OPT_I64, count=I64, ranks=TEXT,
                  first_offset=I64, last_offset=I64, first_line=I64, last_line=I64, first_ns=OPT_I64, last_ns=OPT_I64)
DIGEST = st.builds(
    Digest, source=SOURCE, matches=st.lists(MATCH, max_size=4).map(tuple),
    streams=st.lists(STREAM, max_size=3).map(tuple), anchors=st.lists(ANCHOR, max_size=3).map(tuple),
    identities=st.lists(IDENT, max_size=3).map(tuple), diagnostics=st.lists(DIAG, max_size=3).map(tuple),
    bytes_read=I64, lines=I64, bytes_skipped=I64, lines_capped=I64, scan_reports=I64, candidate_lines=I64,
    confirmed_matches=I64, groups=st.lists(GROUP, max_size=2).map(tuple))


@pytest.mark.slow
@settings(max_examples=200, deadline=None)
@given(DIGEST)
def test_any_digest_round_trips_exactly(d):
    assert digest_from_arrow(digest_to_arrow(d)) == d


def test_extracted_digests_round_trip(engine):
    text = "\n".join(combined_srun(rank_lines(8, 4, 5), 4)) + "\n"
    d = digest_of(engine, text, name="job.out")
    assert d.matches and d.streams
    assert digest_from_arrow(digest_to_arrow(d)) == d


def test_sample_job_digests_round_trip(engine):
    paths = sorted(p for p in (ROOT / "sample_logs").glob("*/*") if p.is_file())[:60]
    assert paths, "the bundled sample_logs/ are part of the repository"
    opts = ExtractOptions(tz=resolve_tz("UTC"))
    for p in paths:
        src = replace(identity_from_path(str(p)), size=os.path.getsize(p))
        d = extract(src, engine, opts)
        assert digest_from_arrow(digest_to_arrow(d)) == d, p


@settings(max_examples=100, deadline=None)
@given(DIGEST)
def test_any_digest_pickles_exactly(d):
    # (how the local pool ships a digest from a worker to the parent)
    assert pickle.loads(pickle.dumps(d, pickle.HIGHEST_PROTOCOL)) == d
    assert copy.deepcopy(d) == d
    # a deep copy of a value type is the instance itself: right only while all it holds is immutable
    _assert_immutable(d)


def _assert_immutable(v, depth=0):
    import enum

    assert depth < 20
    if v is None or isinstance(v, (bool, int, float, str, bytes, enum.Enum)):
        return
    if isinstance(v, (tuple, frozenset)):
        for x in v:
            _assert_immutable(x, depth + 1)
        return
    assert dataclasses.is_dataclass(v) and type(v).__dataclass_params__.frozen, type(v)  # type: ignore[union-attr]
    if "__deepcopy__" in vars(type(v)):
        assert copy.deepcopy(v) is v
    for f in dataclasses.fields(v):
        _assert_immutable(getattr(v, f.name), depth + 1)


def test_every_digest_type_pickles_by_its_fields():
    """Each frozen value type of ``model.digest`` (and the prefix and stamp a split file's workers
    ship) pickles as its field values (``pickled_by_fields``), not by the slow generated state."""
    from correlator.extract.prefixes import Prefix
    from correlator.extract.timestamps import Parsed
    from correlator.model import digest as model_digest

    types = [t for t in vars(model_digest).values()
             if isinstance(t, type) and dataclasses.is_dataclass(t) and t.__module__ == model_digest.__name__]
    assert len(types) >= 8
    for t in [*types, Prefix, Parsed]:
        assert "__reduce__" in vars(t), t.__name__
    p = Prefix(3, 1, 25, 12, "gpu-a01", 77, "12:00:01")
    assert pickle.loads(pickle.dumps(p)) == p and type(pickle.loads(pickle.dumps(p))) is Prefix


def test_the_docstring_documents_every_field():
    doc = digest_io.__doc__ or ""

    def names(t, out):
        import pyarrow as pa

        if pa.types.is_struct(t):
            for f in t:
                out.add(f.name)
                names(f.type, out)
        elif pa.types.is_list(t):
            names(t.value_type, out)
        return out

    schema = digest_schema()
    found = set()
    for f in schema:
        found.add(f.name)
        names(f.type, found)
    missing = sorted(n for n in found if n not in doc and n not in ("0", "1", "item"))
    assert not missing, f"digest_io's docstring does not describe: {missing}"
    assert schema.metadata[b"correlate.digest"] == digest_io.SCHEMA_VERSION.encode()


def test_not_a_digest_is_refused():
    import pyarrow as pa

    sink = pa.BufferOutputStream()
    t = pa.table({"x": [1]})
    with pa.ipc.new_stream(sink, t.schema) as w:
        w.write_table(t)
    with pytest.raises(ValueError):
        digest_from_arrow(sink.getvalue().to_pybytes())


def test_every_model_field_is_in_the_schema():
    schema = digest_schema()
    assert [f.name for f in schema] == [f.name for f in dataclasses.fields(Digest)]


_ = Path
