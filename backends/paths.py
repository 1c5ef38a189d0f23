"""Where compactd keeps assembled models and derived caches."""

from __future__ import annotations

import os
from pathlib import Path


def cache_dir() -> Path:
    """Per-user cache dir; COMPACTD_CACHE_DIR overrides it (tests, read-only homes)."""
    override = os.environ.get("COMPACTD_CACHE_DIR")
    if override:
        d = Path(override).expanduser()
    else:
        from platformdirs import user_cache_dir

        d = Path(user_cache_dir("compactd"))
    d.mkdir(parents=True, exist_ok=True)
    return d
