"""Where the library keeps files of its own outside a store: the user's cache directory."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["cache_root"]


def cache_root() -> Path:
    """``$XDG_CACHE_HOME/agently-vecmem`` (a blank value counts as unset), else ``~/.cache/agently-vecmem``."""
    cache = os.environ.get("XDG_CACHE_HOME", "").strip() or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(cache) / "agently-vecmem"
