"""Which embedding models a store runs: the fields every command's and evaluation's result JSON records.

Example:
    >>> embedding_models(ws)                                            # doctest: +SKIP
    {'embedder': 'sentence-transformers/all-MiniLM-L6-v2', 'spaces': {}}
"""

from __future__ import annotations

from typing import Any

__all__ = ["embedding_models", "NO_MODELS"]

#: What a result records when no store was opened (nothing was embedded).
NO_MODELS: dict[str, Any] = {"embedder": None, "spaces": {}}


def embedding_models(ws: Any) -> dict[str, Any]:
    """``{"embedder": model id of the store's embedder, "spaces": {extra vector space name: model id}}``.

    Args:
        ws: an open workspace (anything with ``embedder.model_id``; ``vector_spaces`` is read when the store
            has named vector spaces, ``{}`` otherwise).
    """
    spaces = getattr(ws, "vector_spaces", None) or {}
    return {"embedder": ws.embedder.model_id, "spaces": {str(k): str(v) for k, v in dict(spaces).items()}}
