"""Lexical terms of Chinese, Japanese and Korean text (used by :func:`.lexical.tokenize`).

CJK scripts do not separate words with spaces, so splitting on non-letters (as for English) turns a whole
clause into one token that matches nothing. A run of CJK characters is instead turned into overlapping
character **bigrams** (what Lucene's ``CJKAnalyzer`` does) plus the run's single characters
(**unigrams**), minus a small list of function characters and question words:

>>> cjk_terms("我对花生过敏")
('对花', '花生', '生过', '过敏', '对', '花', '生', '过', '敏')

Bigrams carry most of the meaning of Chinese words (most are two characters) without a dictionary;
unigrams let a paraphrase that shares one morpheme (``过敏`` / ``敏感``, ``宠物`` / ``动物``) still score.
A word segmenter (``jieba``, mode ``"jieba"``) was measured against this on the shipped bilingual probe
(``agently_vecmem/data/probe_bilingual.json``, see ``agently_vecmem/eval/RESULTS.md``) and is kept as an
option of :func:`cjk_terms`; it is imported only when asked for (its dictionary is slow to load).

Japanese (kana + kanji) and Korean (hangul) runs use the same bigrams + unigrams in every mode (``jieba``
segments Chinese only).
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Iterable
from typing import Any, Literal

from ..errors import ConfigurationError

__all__ = ["CJK_CHARS", "CJK_RUN_RE", "CjkMode", "CJK_MODES", "DEFAULT_CJK_MODE", "cjk_terms", "has_cjk"]

logger = logging.getLogger(__name__)

#: Character class (inside ``[...]``) of the scripts handled here: CJK ideographs (+ extension A, the
#: compatibility block and the supplementary planes), hiragana, katakana (+ phonetic extensions) and
#: hangul (syllables and jamo). Text is NFKC-normalized first, so half-width katakana arrives full-width.
CJK_CHARS = (
    "\u1100-\u11ff\u3040-\u30ff\u3130-\u318f\u31f0-\u31ff\u3400-\u4dbf\u4e00-\u9fff"
    "\ua960-\ua97f\uac00-\ud7af\ud7b0-\ud7ff\uf900-\ufaff\U00020000-\U0003134f"
)
CJK_RUN_RE = re.compile(f"[{CJK_CHARS}]+")
_HAN_ONLY_RE = re.compile("[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\U00020000-\U0003134f]+")

CjkMode = Literal["bigram", "bigram+unigram", "jieba", "jieba+bigram"]
CJK_MODES: tuple[str, ...] = ("bigram", "bigram+unigram", "jieba", "jieba+bigram")
#: The mode :func:`.lexical.tokenize` uses (chosen on the probe's tune half, see the module docstring).
DEFAULT_CJK_MODE: CjkMode = "bigram+unigram"

#: Chinese function characters: dropped as unigrams, and a bigram made only of them is dropped too.
STOP_CHARS: frozenset[str] = frozenset(
    "的了是在我你他她它们吗呢吧啊呀么和与及也都就很还又这那个有没不把被给让对从向到于而且或之其"
    "哪啥谁几怎么什嘛哦哈喔呗得地着过来去上下中里一"
)
#: Question words and other high-frequency bigrams that carry no topic.
STOP_BIGRAMS: frozenset[str] = frozenset(
    "什么 怎么 怎样 哪里 哪儿 哪个 哪些 哪种 哪家 哪位 为什 多少 如何 是不 是否 可以 能不 一个 一下 一些 一直 "
    "这个 那个 这些 那些 我们 你们 他们 她们 自己 现在 时候 平时 一般 通常 最近 比较 还是 就是 但是 因为 所以 "
    "如果 已经 知道 觉得 喜欢 告诉 记得 请问".split()
)


def has_cjk(text: str) -> bool:
    """Whether ``text`` contains any character handled by :func:`cjk_terms`."""
    return CJK_RUN_RE.search(text) is not None


def _bigrams(run: str) -> Iterable[str]:
    if len(run) == 1:
        if run not in STOP_CHARS:
            yield run
        return
    for i in range(len(run) - 1):
        gram = run[i : i + 2]
        if gram in STOP_BIGRAMS or (gram[0] in STOP_CHARS and gram[1] in STOP_CHARS):
            continue
        yield gram


def _unigrams(run: str) -> Iterable[str]:
    if len(run) == 1:  # already emitted as the run's only "bigram"
        return
    for ch in run:
        # single kana/hangul are syllables, not morphemes: only ideographs are worth a unigram
        if ch not in STOP_CHARS and _HAN_ONLY_RE.match(ch):
            yield ch


_jieba: Any = None
_jieba_lock = threading.Lock()


def _load_jieba() -> Any:
    """``jieba`` with its dictionary loaded (once per process, only when a mode needs it)."""
    global _jieba
    if _jieba is None:
        with _jieba_lock:
            if _jieba is None:
                import jieba

                jieba.setLogLevel(logging.WARNING)
                jieba.initialize()
                _jieba = jieba
    return _jieba


def _words(run: str) -> Iterable[str]:
    for word in _load_jieba().lcut_for_search(run):
        if len(word) == 1:
            if word not in STOP_CHARS:
                yield word
        elif word not in STOP_BIGRAMS and not all(ch in STOP_CHARS for ch in word):
            yield word


def cjk_terms(run: str, mode: CjkMode = DEFAULT_CJK_MODE) -> tuple[str, ...]:
    """The index terms of one run of CJK characters (no spaces, punctuation or Latin letters inside).

    Args:
        run: consecutive CJK characters (as matched by :data:`CJK_RUN_RE`), lowercased and NFKC-normalized.
        mode: ``"bigram"`` (overlapping character bigrams), ``"bigram+unigram"`` (the default: bigrams
            then single characters), ``"jieba"`` (dictionary words of Chinese runs, search mode),
            ``"jieba+bigram"`` (words and bigrams). Runs with kana or hangul always use bigrams + unigrams.

    Returns:
        The terms in text order (bigrams first, then unigrams).

    Raises:
        ConfigurationError: unknown mode (also a ValueError).
    """
    if mode not in CJK_MODES:
        raise ConfigurationError(f"unknown CJK mode {mode!r}; use one of {', '.join(CJK_MODES)}")
    han_only = _HAN_ONLY_RE.fullmatch(run) is not None
    if not han_only or mode == "bigram+unigram":
        return (*_bigrams(run), *_unigrams(run))
    if mode == "bigram":
        return tuple(_bigrams(run))
    if mode == "jieba":
        return tuple(_words(run))
    return (*_words(run), *_bigrams(run))
