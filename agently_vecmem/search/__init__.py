"""The search engine: deterministic, model-free retrieval over exact scope snapshots.

Used by the memory plugin's candidate stage and by the evaluation harness, so what is measured is what
runs. It depends on the vocabulary (``records``, ``filters``) and the embedders, never on ``memory/`` or a
store: a :class:`~agently_vecmem.search.view.ScopeView` is all it reads.

* :mod:`.view` — :class:`ScopeView`, an immutable snapshot of one scope (records, unit vectors, documents)
  with derived structures cached per snapshot, and :class:`Hit`;
* :mod:`.scoring` — the dense product, z-scores and stable top-k every signal shares;
* :mod:`.lexical` — the tokenizer (stemmed words, CJK terms) and BM25; :mod:`.cjk` — CJK terms;
* :mod:`.spaces` — named vector spaces (a store's multilingual vectors, computed at write time) and their
  metadata form; :mod:`.multilingual` — the dense signal of CJK queries over English-only stores;
* :mod:`.dates` — calendar periods named in a query;
* :mod:`.params` — :class:`RetrievalParams`; :mod:`.candidates` — the fusion and
  :func:`retrieve_candidates`, the one retrieval entry point.
"""
