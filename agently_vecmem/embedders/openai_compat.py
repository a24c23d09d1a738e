"""An :class:`Embedder` over any OpenAI-compatible ``/v1/embeddings`` endpoint (sync ``openai.OpenAI``).

Retries are the SDK's own (``max_retries``, which honours ``Retry-After``); every SDK error is translated
into :class:`~agently_vecmem.errors.ModelError` with ``raise ... from e``. Async callers use
``asyncio.to_thread``.
"""

from __future__ import annotations

import logging
import os
import threading
from typing import Any

import numpy as np
import openai

from ..errors import ConfigurationError, ModelError
from .base import Embedder

__all__ = ["OpenAIEmbedder"]

logger = logging.getLogger(__name__)

_PROBE_TEXT = "dimension probe"


class OpenAIEmbedder(Embedder):
    """Embeds texts with an OpenAI-compatible embeddings endpoint.

    Args:
        model: Embedding model name (e.g. ``"text-embedding-3-small"``).
        dim: Vector dimension; when ``None`` it is probed with one request on first use.
        base_url: Endpoint, e.g. ``"http://127.0.0.1:8000/v1"``; ``None`` uses the SDK default.
        api_key: API key; ``OPENAI_API_KEY`` or ``"not-needed"`` when ``None``.
        client: A ready ``openai.OpenAI`` client (``base_url``/``api_key``/``timeout``/``max_retries``
            are then ignored).
        batch_size: Texts per request.
        timeout: Per-request timeout in seconds.
        max_retries: The SDK's retries for 429/5xx/connection errors.

    Raises:
        ConfigurationError: ``batch_size`` < 1 or ``dim`` < 1.

    Example:
        >>> emb = OpenAIEmbedder("text-embedding-3-small", base_url=url, api_key="x")
        >>> emb.embed_query("hello").shape
        (1536,)
    """

    def __init__(
        self,
        model: str,
        *,
        dim: int | None = None,
        base_url: str | None = None,
        api_key: str | None = None,
        client: openai.OpenAI | None = None,
        batch_size: int = 256,
        timeout: float = 60.0,
        max_retries: int = 2,
    ) -> None:
        if batch_size < 1:
            raise ConfigurationError("batch_size must be >= 1")
        if dim is not None and dim < 1:
            raise ConfigurationError("dim must be >= 1")
        self.model = model
        self.model_id = f"openai:{model}"
        self.batch_size = int(batch_size)
        self._dim = dim
        self._dim_lock = threading.Lock()
        if client is None:
            client = openai.OpenAI(
                base_url=base_url,
                api_key=api_key or os.environ.get("OPENAI_API_KEY") or "not-needed",
                timeout=timeout,
                max_retries=max_retries,
            )
        self._client = client

    @property
    def dim(self) -> int:  # type: ignore[override]
        """The vector dimension (probed with one request if it was not given)."""
        if self._dim is None:
            with self._dim_lock:
                if self._dim is None:
                    self._dim = int(self._request([_PROBE_TEXT]).shape[1])
                    logger.info("probed embedding dimension of %s: %d", self.model_id, self._dim)
        return self._dim

    def _embed(self, texts: list[str]) -> np.ndarray:
        parts = [self._request(texts[i : i + self.batch_size]) for i in range(0, len(texts), self.batch_size)]
        out = np.concatenate(parts, axis=0)
        if self._dim is None:
            with self._dim_lock:
                self._dim = int(out.shape[1])
        return out

    def _request(self, texts: list[str]) -> np.ndarray:
        # The API rejects empty strings; a single space embeds as "nothing" without failing the batch.
        inputs = [t if t.strip() else " " for t in texts]
        try:
            response = self._client.embeddings.create(model=self.model, input=inputs, encoding_format="float")
        except openai.OpenAIError as e:
            status = getattr(e, "status_code", None)
            raise ModelError(f"embedding request to {self.model_id} failed: {e}", status=status) from e
        except ValueError as e:  # a 200 with an undecodable body escapes the SDK as JSONDecodeError
            raise ModelError(f"embedding reply from {self.model_id}: malformed response body ({e})") from e
        return _vectors(response, len(inputs), self.model_id)


def _vectors(response: Any, expected: int, model_id: str) -> np.ndarray:
    data = getattr(response, "data", None)
    if not isinstance(data, list) or len(data) != expected:
        got = len(data) if isinstance(data, list) else type(data).__name__
        raise ModelError(f"embedding reply from {model_id}: expected {expected} vectors, got {got}")
    # The API may return items out of order; ``index`` is authoritative when present.
    items = (
        sorted(data, key=lambda d: getattr(d, "index", 0) or 0)
        if all(getattr(d, "index", None) is not None for d in data)
        else data
    )
    try:
        matrix = np.asarray([item.embedding for item in items], dtype=np.float32)
    except (TypeError, ValueError, AttributeError) as e:
        raise ModelError(f"embedding reply from {model_id}: malformed vectors ({e})") from e
    if matrix.ndim != 2 or matrix.shape[1] == 0 or not np.all(np.isfinite(matrix)):
        raise ModelError(f"embedding reply from {model_id}: malformed vectors (shape {matrix.shape})")
    return matrix
