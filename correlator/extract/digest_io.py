"""``Digest`` <-> Arrow IPC bytes: what extraction ships from where the logs are to the correlator.

A Dask worker (or a SLURM array task next to the logs) extracts one source and returns its
digest as an Arrow IPC stream of a few kilobytes; ``digest_from_arrow`` gives back a ``Digest``
equal to the one that was written (``==`` on the frozen dataclasses).

Schema (version 1; the schema's metadata carries ``correlate.digest = "1"``). One record batch
with one row; every column is one field of ``Digest``, nested types follow ``correlator.model``::

    source       struct<path: string, kind: string, size: int64?, file_rank: int64?,
                        file_local_rank: int64?, file_node: string?, attempt: int64?, stream: string>
    matches      list<struct<rule_id: string, path: string, line: int64, offset: int64, text: string,
                             who: Who, time_ns: int64?, lo_ns: int64?, hi_ns: int64?,
                             time_kind: string,                # "own" | "inherited" | "none"
                             captures: list<struct<0: string, 1: string>>,   # (name, value) pairs
                             context: list<string>, attempt: int64?, tz_assumed: bool>>
    streams      list<struct<who: Who, path: string, lines: int64, first_ns: int64?, last_ns: int64?,
                             last_offset: int64, last_step: int64?, last_step_ns: int64?, attempt: int64?,
                             last_step_offset: int64?>>
    anchors      list<struct<kind: string, key: string, who: Who, time_ns: int64, path: string>>
    identities   list<struct<who: Who, origin_task: int64?, origin_path: string, source: string,
                             time_ns: int64?, exitcode: int64?, is_root_entry: bool, comm_size: int64?,
                             bus: int64?>>
    diagnostics  list<struct<level: string, path: string?, message: string, code: string, count: int64>>
    bytes_read, lines, bytes_skipped, lines_capped, scan_reports, candidate_lines, confirmed_matches: int64
    groups       list<struct<rule_id: string, path: string, host: string?, attempt: int64?, count: int64,
                             ranks: string,                    # "0-3,5" notation
                             first_offset: int64, last_offset: int64, first_line: int64, last_line: int64,
                             first_ns: int64?, last_ns: int64?>>

    Who = struct<rank: int64?, local_rank: int64?, task: int64?, host: string?, pid: int64?>

(``?`` marks a nullable field: ``None`` in Python.) The schema is derived from the dataclasses'
type hints, so a field added to the model travels without touching this module (and a test
checks that this description still matches the derived schema). Strings that are not valid
UTF-8 (a file name read with ``surrogateescape``), and the rare string that starts like such an
escape, are stored as ``"\\x00surrogateescape:"`` + the hex of their bytes, and restored.
"""

from __future__ import annotations

import dataclasses
import enum
import types
import typing
from functools import cache
from typing import Any

from correlator.model import Digest

SCHEMA_VERSION = "1"
_SE = "\x00surrogateescape:"


def _pa():
    import pyarrow as pa

    return pa


@cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _unwrap_optional(tp: Any) -> tuple[Any, bool]:
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(args) == 1:
            return args[0], True
    return tp, False


@cache
def _arrow_type(tp: Any) -> Any:
    pa = _pa()
    tp, _ = _unwrap_optional(tp)
    origin = typing.get_origin(tp)
    if tp is bool:
        return pa.bool_()
    if tp is int or (isinstance(tp, type) and issubclass(tp, enum.IntEnum)):
        return pa.int64()
    if tp is float:
        return pa.float64()
    if tp is str or (isinstance(tp, type) and issubclass(tp, enum.Enum)):
        return pa.string()
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        hints = _hints(tp)
        return pa.struct([pa.field(f.name, _arrow_type(hints[f.name]), nullable=_unwrap_optional(hints[f.name])[1])
                          for f in dataclasses.fields(tp)])
    if origin is tuple:
        args = typing.get_args(tp)
        if len(args) == 2 and args[1] is Ellipsis:
            return pa.list_(_arrow_type(args[0]))
        return pa.struct([pa.field(str(i), _arrow_type(a)) for i, a in enumerate(args)])
    if origin is dict:
        k, v = typing.get_args(tp)
        return pa.map_(_arrow_type(k), _arrow_type(v))
    raise TypeError(f"digest_io: no Arrow type for {tp!r}")


def digest_schema() -> Any:
    """The Arrow schema of a serialized ``Digest`` (derived from ``correlator.model``)."""
    pa = _pa()
    hints = _hints(Digest)
    fields = [pa.field(f.name, _arrow_type(hints[f.name]), nullable=_unwrap_optional(hints[f.name])[1])
              for f in dataclasses.fields(Digest)]
    return pa.schema(fields, metadata={"correlate.digest": SCHEMA_VERSION})


def _enc_str(s: str) -> str:
    if not s.startswith(_SE):  # (a string that looks escaped is escaped itself)
        try:
            s.encode("utf-8")
            return s
        except UnicodeEncodeError:
            pass
    return _SE + s.encode("utf-8", "surrogateescape").hex()


def _dec_str(s: str) -> str:
    if s.startswith(_SE):
        return bytes.fromhex(s[len(_SE):]).decode("utf-8", "surrogateescape")
    return s


def _to_py(value: Any, tp: Any) -> Any:
    if value is None:
        return None
    tp, _ = _unwrap_optional(tp)
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, str):
        return _enc_str(value)
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        hints = _hints(tp)
        return {f.name: _to_py(getattr(value, f.name), hints[f.name]) for f in dataclasses.fields(tp)}
    origin = typing.get_origin(tp)
    if origin is tuple:
        args = typing.get_args(tp)
        if len(args) == 2 and args[1] is Ellipsis:
            return [_to_py(v, args[0]) for v in value]
        return {str(i): _to_py(v, a) for i, (v, a) in enumerate(zip(value, args))}
    if origin is dict:
        k, v = typing.get_args(tp)
        return [(_to_py(a, k), _to_py(b, v)) for a, b in value.items()]
    return value


def _from_py(value: Any, tp: Any) -> Any:
    if value is None:
        return None
    tp, _ = _unwrap_optional(tp)
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return tp(value)
    if tp is str:
        return _dec_str(value)
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        hints = _hints(tp)
        return tp(**{f.name: _from_py(value[f.name], hints[f.name]) for f in dataclasses.fields(tp)})
    origin = typing.get_origin(tp)
    if origin is tuple:
        args = typing.get_args(tp)
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(_from_py(v, args[0]) for v in value)
        return tuple(_from_py(value[str(i)], a) for i, a in enumerate(args))
    if origin is dict:
        k, v = typing.get_args(tp)
        return {_from_py(a, k): _from_py(b, v) for a, b in value}
    return value


def digest_to_arrow(d: Digest) -> bytes:
    """One digest as Arrow IPC stream bytes (schema above)."""
    pa = _pa()
    schema = digest_schema()
    row = _to_py(d, Digest)
    batch = pa.RecordBatch.from_pylist([row], schema=schema)
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, schema) as writer:
        writer.write_batch(batch)
    return sink.getvalue().to_pybytes()


def digest_from_arrow(data: bytes) -> Digest:
    """The ``Digest`` that ``digest_to_arrow`` wrote."""
    pa = _pa()
    reader = pa.ipc.open_stream(pa.py_buffer(data))
    meta = reader.schema.metadata or {}
    version = meta.get(b"correlate.digest", b"").decode()
    if version != SCHEMA_VERSION:
        raise ValueError(f"not a correlate digest of schema version {SCHEMA_VERSION} (got {version or 'none'!r})")
    rows = reader.read_all().to_pylist()
    if len(rows) != 1:
        raise ValueError(f"a digest stream holds one row, this one {len(rows)}")
    return _from_py(rows[0], Digest)
