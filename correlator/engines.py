"""Running ``extract`` over many sources: a local process pool, or Dask.

Owns parallelism only. Each worker process builds the rule engine once (Hyperscan databases are
compiled per process) and extracts whole sources; results come back as ``Digest`` values (over
Dask, as Arrow IPC bytes, see ``correlator.digest_io``). No home-made scheduler.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from correlator.extract import Engine, ExtractOptions, extract
from correlator.model import Diagnostic, Digest, SourceInfo

ENGINES = ("local", "dask")

_ENGINE: Engine | None = None
_OPTS: ExtractOptions | None = None


@dataclass(frozen=True, slots=True)
class EngineSpec:
    """What a worker needs to rebuild the rule engine: picklable, small."""

    rule_dirs: tuple[str, ...]
    include_builtin: bool
    scanner: str | None
    opts: ExtractOptions


def build_engine(spec: EngineSpec) -> Engine:
    from correlator.ruleset import load_rules

    rules = load_rules([Path(d) for d in spec.rule_dirs], include_builtin=spec.include_builtin)
    return Engine(rules, spec.scanner)


def _init(spec: EngineSpec) -> None:
    global _ENGINE, _OPTS
    _ENGINE = build_engine(spec)
    _OPTS = spec.opts


def _safe_extract(src: SourceInfo, engine: Engine, opts: ExtractOptions) -> Digest:
    try:
        return extract(src, engine, opts)
    except MemoryError:
        return Digest(src, diagnostics=(Diagnostic("error", src.path, "out of memory while reading: skipped"),))
    except Exception as e:  # noqa: BLE001 - one bad source must not sink the job; said in the report
        return Digest(src, diagnostics=(Diagnostic(
            "error", src.path, f"internal error while reading ({type(e).__name__}: {e}); the rest was analysed; "
                               f"please report this"),))


def _work(src: SourceInfo) -> Digest:
    assert _ENGINE is not None and _OPTS is not None
    return _safe_extract(src, _ENGINE, _OPTS)


def run_local(sources: Sequence[SourceInfo], spec: EngineSpec, engine: Engine | None, workers: int | None,
              progress: Callable[[int, int], None] | None = None) -> list[Digest]:
    n = workers or os.cpu_count() or 1
    stdin = [s for s in sources if s.kind == "stdin"]
    files = [s for s in sources if s.kind != "stdin"]
    total_bytes = sum(s.size or 0 for s in files)
    out: list[Digest] = []
    # small jobs: not worth starting processes (each must compile the rules)
    if n <= 1 or len(files) <= 1 or total_bytes < (64 << 20):
        eng = engine or build_engine(spec)
        for i, s in enumerate(sources):
            out.append(_safe_extract(s, eng, spec.opts))
            if progress:
                progress(i + 1, len(sources))
        return out
    if stdin:
        eng = engine or build_engine(spec)
        out.extend(_safe_extract(s, eng, spec.opts) for s in stdin)
    # largest first: the pool stays busy to the end
    order = sorted(files, key=lambda s: -(s.size or 0))
    with ProcessPoolExecutor(max_workers=min(n, len(order)), initializer=_init, initargs=(spec,)) as pool:
        for i, d in enumerate(pool.map(_work, order, chunksize=1)):
            out.append(d)
            if progress:
                progress(i + 1, len(order))
    rank = {s.path: i for i, s in enumerate(sources)}
    out.sort(key=lambda d: rank.get(d.source.path, 0))
    return out


def run_dask(sources: Sequence[SourceInfo], spec: EngineSpec, scheduler: str | None) -> list[Digest]:
    from correlator.digest_io import digest_from_arrow, digest_to_arrow

    try:
        from dask.distributed import Client, LocalCluster
    except ImportError as e:
        raise RuntimeError("--engine dask needs the optional extra: pip install 'correlate[dask]'") from e

    def task(src: SourceInfo, spec: EngineSpec) -> bytes:
        return digest_to_arrow(_safe_extract(src, build_engine(spec), spec.opts))

    cluster = None
    if scheduler:
        client = Client(scheduler)
    else:
        cluster = LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None)
        client = Client(cluster)
    try:
        futures = client.map(task, list(sources), spec=spec, pure=False)
        return [digest_from_arrow(b) for b in client.gather(futures)]
    finally:
        client.close()
        if cluster is not None:
            cluster.close()
