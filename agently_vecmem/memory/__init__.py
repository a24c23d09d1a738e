"""The memory plugin pipeline: plan → candidates → rerank → fallback → package; extract → consolidate → store.

Start reading at :mod:`.pipeline` (one plugin call, top to bottom). The stages and their frozen values are
in :mod:`.retrieval` and :mod:`.remembering`; the pure decisions in :mod:`.retrieve` and :mod:`.consolidate`;
a call's model budget, timer and scope snapshots in :mod:`.budget` and :mod:`.context`; the model requests
in :mod:`.prompts` and the reply models in :mod:`.replies`. :mod:`.lexical` (tokenizer + BM25) and
:mod:`.candidates` (the hybrid candidate retriever shared by the plugin and the evaluation harness) are the
deterministic retrieval core. :mod:`.plugin` adapts it all to the SessionMemory protocol.
"""
