"""Stage one: each source, read once and in bounded memory, becomes a ``Digest``.

``sources`` finds and opens the inputs; ``scan`` finds candidate lines (Hyperscan or a keyword
scan); ``prefixes`` and ``timestamps`` read who wrote a line and when; ``extractor`` confirms
candidates against the rules and gathers what a digest holds; ``engines`` runs extraction over many
sources (a local process pool, or Dask) and ``digest_io`` ships digests as Arrow. Nothing here looks
at more than one source at a time: that is the correlation stage (``correlator.correlate``).
"""

from __future__ import annotations

from correlator.extract.extractor import Engine, ExtractOptions, extract, warm_up

__all__ = ["Engine", "ExtractOptions", "extract", "warm_up"]
