"""The store contract: what the memory pipeline needs from durable storage.

:class:`MemoryStore` lists exactly the operations the plugin's pipeline (:mod:`agently_vecmem.memory`) and
the Agently context source call. :class:`~agently_vecmem.workspace.ChromaWorkspace` implements it; a test
double or another backend only has to provide these.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import numpy as np

    from ..embedders.base import Embedder
    from ..filters import Scope
    from ..records import MemoryRecord
    from ..search.view import ScopeView

__all__ = ["MemoryStore"]


class MemoryStore(Protocol):
    """Durable memory records with hard scopes, as the memory pipeline uses them.

    Attributes:
        embedder: embeds the documents of records the pipeline writes with precomputed vectors.
    """

    embedder: Embedder

    def put(self, records: MemoryRecord | Mapping[str, Any] | Sequence[MemoryRecord | Mapping[str, Any]], *,
            vectors: Any | None = None, progress: bool = False) -> list[MemoryRecord]:
        """Insert or replace records, all or nothing."""
        ...

    def get_vectors(self, ids: Sequence[str]) -> np.ndarray:
        """The stored vectors of ``ids`` (all must exist), shape ``(len(ids), dim)``."""
        ...

    def scan(self, *, scope: Scope, where: Mapping[str, Any] | None = None, limit: int | None = None,
             offset: int = 0) -> list[MemoryRecord]:
        """The records of a scope, oldest first."""
        ...

    def embed_query(self, query: str | np.ndarray) -> np.ndarray:
        """A query as a unit vector."""
        ...

    def view(self, scope: Scope) -> ScopeView:
        """An exact, current snapshot of one scope."""
        ...

    def views(self, *scopes: Scope) -> dict[tuple[Any, ...], ScopeView]:
        """Snapshots of several scopes from one freshness check (``scope.key -> view``)."""
        ...

    def consistent(self) -> AbstractContextManager[Any]:
        """A block whose reads share one freshness check."""
        ...

    def forget(self, *, ids: str | Sequence[str] | None = None, session: str | None = None,
               everything: bool = False, dry_run: bool = False) -> Any:
        """Erase records of the store's user (a report with ``ids``; see :meth:`ChromaWorkspace.forget`)."""
        ...
