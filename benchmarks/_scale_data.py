"""Synthetic stores for the scale benchmarks: English-like memories with the hash embedder's exact vectors.

Documents are 10-30 words drawn with Zipf's law (exponent 1) from the ~21,700 whole English words of the
MiniLM tokenizer's vocabulary, which lists them by corpus frequency ("the" first): a realistic vocabulary
size and term distribution for BM25. Their vectors are what :class:`DeterministicEmbedder` gives (it embeds
each word on its own, so a document's vector is the normalized sum of its words' raw vectors), computed
with numpy in bulk instead of hashing every document; records are written with ``ws.put(records, vectors=)``
in batches of 5,000.

Everything is a pure function of the sizes and the seed, so a store built once can be reused (see
:func:`cached_store`).
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
from scipy.sparse import csr_matrix  # installed with sentence-transformers (the [local] extra)

from agently_vecmem.embedders.base import normalize_rows
from agently_vecmem.records import MemoryRecord
from agently_vecmem.testing import DeterministicEmbedder

#: Bump when the generated data changes: cached stores of another version are rebuilt.
DATA_VERSION = 1
DIM = 384
BATCH = 5_000
T0 = 1.7e9
_VOCAB = Path(__file__).resolve().parent.parent / "agently_vecmem" / "data" / "minilm-tokenizer.json"


class Corpus:
    """Deterministic English-like documents and their hash-embedder vectors.

    Args:
        seed: every batch ``i`` draws from ``default_rng((seed, i))``, so any batch can be made alone.
    """

    def __init__(self, seed: int = 0) -> None:
        vocab = json.loads(_VOCAB.read_text(encoding="utf-8"))["model"]["vocab"]
        ordered = sorted(vocab.items(), key=lambda kv: kv[1])
        # ids below 1996 are special tokens, punctuation and single characters; after them, words by frequency
        self.words = np.asarray([w for w, i in ordered if i >= 1996 and w.isascii() and w.isalpha() and len(w) > 1])
        ranks = np.arange(1, len(self.words) + 1, dtype=np.float64)
        self.cdf = np.cumsum(1.0 / ranks)
        self.cdf /= self.cdf[-1]
        self.seed = seed
        self.embedder = DeterministicEmbedder(dim=DIM)
        self._raw: np.ndarray | None = None

    def raw_vectors(self) -> np.ndarray:
        """The hash embedder's unnormalized vector of every vocabulary word (its features summed)."""
        if self._raw is None:
            self._raw = self.embedder._embed(list(self.words))
        return self._raw

    def batch(self, index: int, n: int) -> tuple[list[str], np.ndarray]:
        """``n`` documents (10-30 words) and their unit vectors, the ``index``-th batch of the corpus."""
        rng = np.random.default_rng((self.seed, index))
        lengths = rng.integers(10, 31, size=n)
        ids = np.minimum(np.searchsorted(self.cdf, rng.random(int(lengths.sum()))), len(self.words) - 1)
        starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
        counts = csr_matrix((np.ones(ids.shape[0], dtype=np.float32), (np.repeat(np.arange(n), lengths), ids)),
                            shape=(n, len(self.words)))
        vecs = normalize_rows(counts @ self.raw_vectors())
        words = self.words[ids].tolist()
        docs = [" ".join(words[s:s + k]).capitalize() + "." for s, k in zip(starts.tolist(), lengths.tolist(),
                                                                         strict=True)]
        return docs, vecs

    def queries(self, n: int) -> list[str]:
        """Question-like query texts (5-9 words of the same distribution)."""
        docs, _ = self.batch(10_000_000 + n, n)
        return [" ".join(d.rstrip(".").split()[:int(5 + i % 5)]) + "?" for i, d in enumerate(docs)]


def global_records(corpus: Corpus, n: int) -> Iterator[tuple[list[MemoryRecord], np.ndarray]]:
    """``n`` GLOBAL_MEMORY records (ids ``g0000000``...) with their vectors, in batches of :data:`BATCH`."""
    for b, start in enumerate(range(0, n, BATCH)):
        k = min(BATCH, n - start)
        docs, vecs = corpus.batch(b, k)
        yield [MemoryRecord(id=f"g{start + j:07d}", memory_scope="GLOBAL_MEMORY", summary=doc,
                            created_at=T0 + start + j, updated_at=T0 + start + j)
               for j, doc in enumerate(docs)], vecs


def session_id(i: int) -> str:
    return f"sess{i:07d}"


def session_records(corpus: Corpus, sessions: int, globals_: int) -> Iterator[tuple[list[MemoryRecord], np.ndarray]]:
    """``globals_`` GLOBAL records, then ``sessions`` sessions of 3-5 SESSION_MEMORY records each (turns
    numbered in provenance), in batches of about :data:`BATCH` / 2 records."""
    yield from global_records(corpus, globals_)
    rng = np.random.default_rng((corpus.seed, 99))
    sizes = rng.integers(3, 6, size=sessions)
    first = 1_000_000 + (globals_ + BATCH - 1) // BATCH  # batch numbers of the corpus no global batch uses
    pending: list[tuple[str, int, int]] = []  # (session, turn, creation order)
    n = 0
    b = first
    for s, size in enumerate(sizes.tolist()):
        for j in range(size):
            pending.append((session_id(s), j, n))
            n += 1
        if len(pending) >= BATCH or s == sessions - 1:
            docs, vecs = corpus.batch(b, len(pending))
            b += 1
            records = [MemoryRecord(id=f"{sid}-{j}", memory_scope="SESSION_MEMORY", session_id=sid, summary=doc,
                                    provenance={"session_id": sid, "turn_index": j}, created_at=T0 + 1e7 + k,
                                    updated_at=T0 + 1e7 + k)
                       for (sid, j, k), doc in zip(pending, docs, strict=True)]
            # Two puts per block: a put of new records adds one directory entry per scope in the same Chroma
            # call, and 5,000 records of ~1,250 sessions (6,250 rows) can exceed Chroma's 5,461-row batch limit.
            half = (len(records) + 1) // 2
            yield records[:half], vecs[:half]
            if records[half:]:
                yield records[half:], vecs[half:]
            pending = []


def fill(ws: Any, batches: Iterator[tuple[list[MemoryRecord], np.ndarray]],
         progress: Callable[[int], None] | None = None) -> int:
    """Put every batch with its vectors (no embedding); returns the number of records."""
    total = 0
    for records, vecs in batches:
        ws.put(records, vectors=vecs)
        total += len(records)
        if progress is not None:
            progress(total)
    return total


def cached_store(root: Path | None, name: str, build: Callable[[Path], None]) -> tuple[Path, bool]:
    """A store directory ``root/<name>-v<DATA_VERSION>`` built once by ``build(path)`` (in a temporary
    directory renamed when complete, so an interrupted build is never reused). Returns (path, reused)."""
    assert root is not None
    path = root / f"{name}-v{DATA_VERSION}"
    if (path / "complete").exists():
        return path, True
    tmp = root / f"{name}-v{DATA_VERSION}.building"
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.rmtree(path, ignore_errors=True)
    tmp.mkdir(parents=True)
    t = time.perf_counter()
    build(tmp)
    (tmp / "complete").write_text(f"built in {time.perf_counter() - t:.0f} s\n", encoding="utf-8")
    tmp.rename(path)
    return path, False


def build_store(path: Path, batches: Iterator[tuple[list[MemoryRecord], np.ndarray]], label: str) -> None:
    """An embedded store at ``path`` (the Chroma directory a ``chroma run --path`` can serve too) holding
    ``batches``, with progress on stdout."""
    from agently_vecmem.workspace import ChromaWorkspace

    t = time.perf_counter()

    def show(total: int) -> None:
        if total % 50_000 < BATCH:
            print(f"    building {label}: {total:,} records, {time.perf_counter() - t:.0f} s", flush=True)

    with ChromaWorkspace(path, embedder=DeterministicEmbedder(dim=DIM)) as ws:
        fill(ws, batches, show)
