"""Where compiled things are kept between runs (the Hyperscan databases, validated rule sets).

``$CORRELATE_CACHE`` names the folder, or turns caching off (``off``, ``0``, ``no``, empty);
otherwise ``$XDG_CACHE_HOME/correlate`` or ``~/.cache/correlate``.
"""

from __future__ import annotations

import os

ENV_CACHE = "CORRELATE_CACHE"


def cache_dir() -> str | None:
    where = os.environ.get(ENV_CACHE)
    if where is not None and where.lower() in ("", "0", "off", "no", "false"):
        return None
    if where:
        return where
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "correlate")
