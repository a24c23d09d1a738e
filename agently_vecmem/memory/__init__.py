"""The memory plugin pipeline: plan → candidates → rerank → fallback → package; extract → consolidate → store.

Each stage is a small module. :mod:`.lexical` (tokenizer + BM25) and :mod:`.candidates` (the hybrid
candidate retriever shared by the plugin and the evaluation harness) are the deterministic retrieval core.
"""
