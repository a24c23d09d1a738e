"""LoCoMo loader: dialog turns → :class:`~agently_vecmem.records.MemoryRecord`, questions with audited evidence.

LoCoMo (Maharana et al., ACL 2024, ``locomo10.json``) is a list of samples, each one long two-person
conversation split into dated sessions, with questions whose ``evidence`` lists the dialog ids (``"D3:5"``)
that answer them. The data is CC BY-NC 4.0 and is never shipped with this package: pass its path.

Each turn becomes one ``SESSION_MEMORY`` record with ``session_id = sample_id``, so one conversation is one
scope. The record's summary carries the speaker and the session date (questions name the speaker and ask
"when"), plus the caption of a shared image when there is one::

    [8 May 2023] Caroline: I went to a LGBTQ support group yesterday and it was so powerful.

Provenance carries ``dia_id``, ``session`` (1-based session number), ``turn_index`` (0-based position in
the session) and ``position`` (0-based position in the whole conversation), which the retriever uses for
neighbouring-turn context.

**Audit correction.** The public audit (dial481/locomo-audit) names questions
``locomo_<conversation index in locomo10>_qa<0-based qa index>``. A file may hold any subset of the ten
conversations in any order, so the conversation index is *not* the position in the file. It is recovered
from the audit itself: an audit prefix ``locomo_<i>`` is mapped to the sample whose ``qa[idx].question``
equals the audit row's ``question`` for the most rows (ties or no match: falls back to the published
locomo10 order of sample ids, :data:`LOCOMO10_SAMPLE_IDS`). ``WRONG_CITATION`` rows then replace the gold
evidence with ``correct_evidence``; other error types flag a wrong gold *answer* and leave evidence alone.
"""

from __future__ import annotations

import json
import logging
import os
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import DataFileError
from ..records import MemoryRecord, Provenance

__all__ = [
    "LOCOMO10_SAMPLE_IDS",
    "RETRIEVAL_CATEGORIES",
    "CATEGORY_NAMES",
    "Conversation",
    "Question",
    "load_locomo",
    "load_audit",
    "conversation_index_map",
    "conversation_records",
    "short_date",
]

logger = logging.getLogger(__name__)

#: Sample ids of ``locomo10.json`` in file order (the index used by the audit's question ids).
LOCOMO10_SAMPLE_IDS: tuple[str, ...] = (
    "conv-26", "conv-30", "conv-41", "conv-42", "conv-43", "conv-44", "conv-47", "conv-48", "conv-49", "conv-50",
)
#: Official category ids used for retrieval metrics (5 = adversarial, no answer in the conversation).
RETRIEVAL_CATEGORIES: tuple[int, ...] = (1, 2, 3, 4)
CATEGORY_NAMES: dict[int, str] = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop", 5: "adversarial"}

_DIA_RE = re.compile(r"D\d+:\d+")
_DATE_RE = re.compile(r"\bon\s+(.+)$")


@dataclass(frozen=True)
class Turn:
    """One dialog turn."""

    dia_id: str
    speaker: str
    text: str
    session: int
    turn_index: int
    position: int
    date: str
    caption: str | None = None


@dataclass(frozen=True)
class Question:
    """One evaluation question.

    Attributes:
        question_id: ``locomo_<conversation index in locomo10>_qa<qa index>``.
        sample_id: the conversation (= the scope's session id).
        question: the question text.
        category: official category id (1-4 here).
        evidence: gold dialog ids (after the audit correction).
        corrected: True when the audit replaced the evidence.
    """

    question_id: str
    sample_id: str
    question: str
    category: int
    evidence: tuple[str, ...]
    corrected: bool = False


@dataclass(frozen=True)
class Conversation:
    """One LoCoMo sample: its turns and its retrieval questions."""

    sample_id: str
    index: int
    speakers: tuple[str, str]
    turns: tuple[Turn, ...]
    questions: tuple[Question, ...]


def short_date(date_time: str) -> str:
    """``"1:56 pm on 8 May, 2023"`` → ``"8 May 2023"`` (unknown formats are returned stripped)."""
    m = _DATE_RE.search(date_time or "")
    return (m.group(1) if m else (date_time or "")).replace(",", "").strip()


def _parse_evidence(raw: Any) -> tuple[str, ...]:
    """Gold evidence as dialog ids; tolerant of ``"D1:3; D1:4"`` strings and stray spaces."""
    items = raw if isinstance(raw, (list, tuple)) else [raw]
    out: list[str] = []
    for item in items:
        for dia in _DIA_RE.findall(str(item).replace(" ", "")):
            if dia not in out:
                out.append(dia)
    return tuple(out)


def _turns(sample: Mapping[str, Any]) -> list[Turn]:
    conv = sample["conversation"]
    sessions = sorted(
        int(k.split("_")[1]) for k in conv if re.fullmatch(r"session_\d+", k) and isinstance(conv[k], list)
    )
    turns: list[Turn] = []
    for s in sessions:
        date = short_date(str(conv.get(f"session_{s}_date_time", "")))
        for j, t in enumerate(conv[f"session_{s}"]):
            caption = t.get("blip_caption") or None
            turns.append(
                Turn(str(t["dia_id"]), str(t["speaker"]), str(t.get("text", "")), s, j, len(turns), date, caption)
            )
    return turns


def _read_json_list(path: str | os.PathLike[str], what: str) -> list[Any]:
    """A JSON file holding a list; every way it can fail is a :class:`DataFileError` naming the file."""
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
    except OSError as e:
        raise DataFileError(f"cannot read {what} file {os.fspath(path)!r}: {e.strerror or e}") from e
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise DataFileError(f"{what} file {os.fspath(path)!r} is not valid JSON: {e}") from e
    if not isinstance(data, list):
        raise DataFileError(
            f"{what} file {os.fspath(path)!r} holds a JSON {type(data).__name__}; expected a JSON list"
        )
    return data


def load_audit(path: str | os.PathLike[str] | None) -> list[dict[str, Any]]:
    """The audit rows (an empty list when ``path`` is None).

    Raises:
        DataFileError: the file is missing, unreadable, not JSON, or not a list of objects.
    """
    if path is None:
        return []
    rows = _read_json_list(path, "audit")
    if not all(isinstance(row, Mapping) for row in rows):
        raise DataFileError(f"audit file {os.fspath(path)!r}: every row must be a JSON object")
    return rows


def _split_qid(qid: str) -> tuple[int, int] | None:
    m = re.fullmatch(r"locomo_(\d+)_qa(\d+)", qid or "")
    return (int(m.group(1)), int(m.group(2))) if m else None


def conversation_index_map(samples: Sequence[Mapping[str, Any]], audit: Iterable[Mapping[str, Any]]) -> dict[str, int]:
    """Map each sample id to its conversation index in locomo10, learned from the audit's questions.

    For every audit conversation index, the sample that matches the most audit questions (same text at
    the same qa index) wins. Samples the audit does not mention fall back to
    :data:`LOCOMO10_SAMPLE_IDS`, then to their position in the file.
    """
    votes: dict[int, Counter[str]] = {}
    for row in audit:
        parsed = _split_qid(str(row.get("question_id", "")))
        if parsed is None:
            continue
        conv_i, qa_i = parsed
        for s in samples:
            qa = s.get("qa", [])
            if qa_i < len(qa) and str(qa[qa_i].get("question", "")).strip() == str(row.get("question", "")).strip():
                votes.setdefault(conv_i, Counter())[str(s["sample_id"])] += 1
    mapping: dict[str, int] = {}
    for conv_i, counter in sorted(votes.items()):
        ranked = counter.most_common(2)
        if len(ranked) == 2 and ranked[0][1] == ranked[1][1]:
            logger.warning("audit conversation %d matches several samples equally; skipped", conv_i)
            continue
        mapping.setdefault(ranked[0][0], conv_i)
    for pos, s in enumerate(samples):
        sid = str(s["sample_id"])
        if sid not in mapping:
            mapping[sid] = LOCOMO10_SAMPLE_IDS.index(sid) if sid in LOCOMO10_SAMPLE_IDS else pos
    return mapping


def load_locomo(
    data_path: str | os.PathLike[str],
    *,
    audit_path: str | os.PathLike[str] | None = None,
    categories: Sequence[int] = RETRIEVAL_CATEGORIES,
    limit_conversations: int | None = None,
) -> list[Conversation]:
    """Load LoCoMo-shaped conversations with their retrieval questions.

    Args:
        data_path: a ``locomo10.json``-schema file.
        audit_path: optional audit file; ``WRONG_CITATION`` rows correct the gold evidence.
        categories: question categories to keep (default 1-4; questions without evidence are dropped).
        limit_conversations: keep only the first N conversations.

    Returns:
        The conversations, in file order.

    Raises:
        DataFileError: a file is missing, unreadable, not JSON, or not LoCoMo-shaped.
    """
    samples = _read_json_list(data_path, "LoCoMo data")
    if not samples:
        raise DataFileError(f"LoCoMo data file {os.fspath(data_path)!r} holds no conversations (an empty list)")
    audit = load_audit(audit_path)
    try:
        return _conversations(samples, audit, categories, limit_conversations)
    except (KeyError, TypeError, AttributeError, IndexError, ValueError) as e:
        raise DataFileError(
            f"LoCoMo data file {os.fspath(data_path)!r} is not shaped like locomo10.json "
            f"(samples with sample_id, conversation, qa): {type(e).__name__}: {e}"
        ) from e


def _conversations(
    samples: list[Any], audit: list[dict[str, Any]], categories: Sequence[int], limit_conversations: int | None
) -> list[Conversation]:
    index_of = conversation_index_map(samples, audit)
    fixes: dict[str, tuple[str, ...]] = {}
    for row in audit:
        if row.get("error_type") == "WRONG_CITATION" and row.get("correct_evidence"):
            fixes[str(row["question_id"])] = _parse_evidence(row["correct_evidence"])
    out: list[Conversation] = []
    n_fixed = 0
    for s in samples[:limit_conversations]:
        sid = str(s["sample_id"])
        conv_i = index_of[sid]
        turns = _turns(s)
        known = {t.dia_id for t in turns}
        questions = []
        for qa_i, qa in enumerate(s.get("qa", [])):
            cat = int(qa.get("category", 0))
            if cat not in categories:
                continue
            qid = f"locomo_{conv_i}_qa{qa_i}"
            evidence = fixes.get(qid)
            corrected = evidence is not None
            n_fixed += corrected
            if evidence is None:
                evidence = _parse_evidence(qa.get("evidence", []))
            evidence = tuple(e for e in evidence if e in known)
            if not evidence:
                continue
            questions.append(Question(qid, sid, str(qa["question"]), cat, evidence, corrected))
        c = s["conversation"]
        out.append(Conversation(sid, conv_i, (str(c.get("speaker_a", "")), str(c.get("speaker_b", ""))),
                                tuple(turns), tuple(questions)))
    logger.info("loaded %d conversations, %d questions (%d evidence lists corrected by the audit)",
                len(out), sum(len(c.questions) for c in out), n_fixed)
    return out


def turn_summary(turn: Turn) -> str:
    """The searchable text of a turn: ``[date] Speaker: text [shares an image: caption]``."""
    text = f"[{turn.date}] {turn.speaker}: {turn.text}" if turn.date else f"{turn.speaker}: {turn.text}"
    if turn.caption:
        text += f" [shares an image: {turn.caption}]"
    return text


def conversation_records(conv: Conversation, *, base_time: float = 1_700_000_000.0) -> list[MemoryRecord]:
    """One ``SESSION_MEMORY`` record per turn (scope ``session_id = sample_id``), ids ``<sample>:<dia_id>``.

    ``created_at`` increases with the turn position so that snapshots list turns in conversation order.
    """
    records = []
    for t in conv.turns:
        records.append(
            MemoryRecord(
                id=f"{conv.sample_id}:{t.dia_id}",
                memory_scope="SESSION_MEMORY",
                session_id=conv.sample_id,
                summary=turn_summary(t)[:4000],
                provenance=Provenance.model_validate({
                    "plugin": "locomo-eval",
                    "session_id": conv.sample_id,
                    "turn_index": t.turn_index,
                    "dia_id": t.dia_id,
                    "session": t.session,
                    "position": t.position,
                    "speaker": t.speaker,
                    "date": t.date,
                }),
                created_at=base_time + t.position,
                updated_at=base_time + t.position,
            )
        )
    return records
