"""Stage one: each source, read once and in bounded memory, becomes a ``Digest``.

``sources`` finds and opens the inputs; ``scan`` finds candidate lines (Hyperscan or a keyword
scan); ``prefixes`` and ``timestamps`` read who wrote a line and when, ``dialects`` is their one
registry of formats; ``extractor`` turns one source into its digest, composed of ``reader`` (bytes
into regions), ``confirmer`` (candidates into matches), ``statements`` (identity facts) and
``windows`` (head and tail facts), which read lines through ``lines``; ``engines`` runs extraction over many
sources (a local process pool, or Dask) and ``digest_io`` ships digests as Arrow. Nothing here looks
at more than one source at a time: that is the correlation stage (``correlator.correlate``).
"""

from __future__ import annotations

from correlator.extract.extractor import Engine, ExtractOptions, extract, warm_up

__all__ = ["Engine", "ExtractOptions", "extract", "warm_up"]
