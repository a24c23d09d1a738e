"""The memory record contract (pydantic v2), shared with Agently's AgentlyMemory 4.1.4.1.

A :class:`MemoryRecord` carries every field AgentlyMemory writes (``collection="memory"``, ``kind``,
``memory_scope``, ``session_id``, ``summary``, ``body``, ``tags``, ``importance``, ``provenance``,
``vector_index``) plus what we add: a stable id, timestamps, a status for consolidation (``superseded``
records are kept, never silently deleted) and an ``extracted`` flag for raw turns kept after a failed
extraction.

``occurred_at`` is when the remembered turn happened (epoch seconds, UTC), which for an imported history
differs from ``created_at`` (when the record was written). A dated record's lexical text
(:meth:`MemoryRecord.search_text`) carries its date (``date: 2023-05-12 (Friday, 12 May 2023)``), so "what
did I do in May 2023" matches May's turns; a raw turn's vector carries it too, an extracted memory's does
not. :func:`parse_time` is the one validator of user-given times.

Records round-trip through flat Chroma metadata with :meth:`MemoryRecord.to_chroma` /
:meth:`MemoryRecord.from_chroma` without loss.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import sys
import time
import uuid
from datetime import date, datetime, timezone
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from .errors import RecordValidationError

__all__ = [
    "record_ref",
    "path_slug",
    "iso_time",
    "MemoryScopeName",
    "MEMORY_SCOPES",
    "KIND_BY_SCOPE",
    "SCOPE_BY_KIND",
    "MAX_TAGS",
    "MAX_TAG_CHARS",
    "MAX_SUMMARY_CHARS",
    "MAX_BODY_CHARS",
    "Provenance",
    "VectorIndexMeta",
    "MemoryRecord",
    "new_record_id",
    "parse_record",
    "parse_time",
    "turn_time",
    "date_label",
    "DEFAULT_USER",
    "RECORD_STATUSES",
    "scope_key",
    "MAX_USER_ID_CHARS",
    "check_user_id",
    "stored_form",
]

MemoryScopeName = Literal["GLOBAL_MEMORY", "SESSION_MEMORY"]
MEMORY_SCOPES: tuple[str, ...] = ("GLOBAL_MEMORY", "SESSION_MEMORY")
KIND_BY_SCOPE: dict[str, str] = {"GLOBAL_MEMORY": "global_memory", "SESSION_MEMORY": "session_memory"}
SCOPE_BY_KIND: dict[str, str] = {v: k for k, v in KIND_BY_SCOPE.items()}

#: Chroma bricks a collection whose list metadata passes ~5,450 elements; we stay far below.
MAX_TAGS = 64
MAX_TAG_CHARS = 200
MAX_SUMMARY_CHARS = 4_000
#: Serialized body size limit (characters of JSON). Larger payloads belong in a file store, not memory.
MAX_BODY_CHARS = 64_000

RecordStatus = Literal["active", "superseded", "deleted"]
RECORD_STATUSES: tuple[str, ...] = ("active", "superseded", "deleted")


def scope_key(user_id: str, collection: str, memory_scope: str, session_id: str | None, status: str) -> str:
    """The one metadata value naming a record's user, scope and status (``vecmem_scope``): reads of a scope
    match it exactly (:meth:`agently_vecmem.filters.Scope.where`)."""
    return json.dumps([user_id, collection, memory_scope, session_id, status], ensure_ascii=False)

#: The user of every record written without one (and of every record written before users existed): a
#: workspace not bound to a user reads and writes this user's memory.
DEFAULT_USER = "default"
MAX_USER_ID_CHARS = 200


def check_user_id(user_id: Any) -> str:
    """``user_id`` if it names a user: a non-empty string of at most :data:`MAX_USER_ID_CHARS` characters
    without control characters (it is stored as Chroma metadata and shown in diagnostics).

    Raises:
        ConfigurationError: it does not.
    """
    from .errors import ConfigurationError

    if not isinstance(user_id, str):
        raise ConfigurationError(f"a user id must be a string, got {type(user_id).__name__}")
    if not user_id.strip():
        raise ConfigurationError("a user id cannot be empty")
    if len(user_id) > MAX_USER_ID_CHARS:
        raise ConfigurationError(f"a user id is at most {MAX_USER_ID_CHARS} characters, got {len(user_id)}")
    if any(ord(ch) < 32 or ord(ch) == 127 for ch in user_id):
        raise ConfigurationError("a user id cannot contain control characters")
    return user_id


def new_record_id() -> str:
    """Return a fresh, stable record id (``mem_<32 hex>``)."""
    return f"mem_{uuid.uuid4().hex}"


def _check_extras(model: BaseModel, what: str) -> None:
    """Extra keys must survive a JSON round trip unchanged (no NaN/inf, nothing unserializable)."""
    extra = model.model_extra or {}
    if not extra:
        return
    try:
        text = json.dumps(extra, ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError) as e:
        raise RecordValidationError(f"{what} extra keys must be JSON values without NaN/inf: {e}") from None
    if json.loads(text) != extra:
        raise RecordValidationError(f"{what} extra keys must be plain JSON values (str keys, lists not tuples)")


class Provenance(BaseModel):
    """Where a memory came from. Extra keys (e.g. ``dia_id``) are allowed as JSON values.

    Immutable (records read from the store share equal instances); change it with
    ``record.provenance = record.provenance.model_copy(update={...})``.
    """

    model_config = ConfigDict(extra="allow", frozen=True)

    plugin: str = "VecMemory"
    session_id: str | None = None
    turn_index: int | None = None

    @model_validator(mode="after")
    def _check_extra(self) -> Provenance:
        _check_extras(self, "provenance")
        return self


class VectorIndexMeta(BaseModel):
    """How the record's vector was made. ``requested``/``available`` mirror AgentlyMemory's keys.

    Immutable, like :class:`Provenance`: every record of a collection read from the store shares one instance.
    """

    model_config = ConfigDict(extra="allow", frozen=True)

    requested: bool = True
    backend: str | None = "chroma"
    available: bool = True
    model: str | None = None
    dim: int | None = None
    space: str | None = "cosine"

    @model_validator(mode="after")
    def _check_extra(self) -> VectorIndexMeta:
        _check_extras(self, "vector_index")
        return self


class MemoryRecord(BaseModel):
    """One durable memory.

    Example:
        >>> r = MemoryRecord(memory_scope="GLOBAL_MEMORY", summary="User prefers tea", tags=["drink"])
        >>> r.kind
        'global_memory'
    """

    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    id: str = Field(default_factory=new_record_id, min_length=1, max_length=200)
    collection: str = Field(default="memory", min_length=1, max_length=200)
    kind: str = ""
    memory_scope: MemoryScopeName
    session_id: str | None = Field(default=None, max_length=500)
    #: The user the record belongs to: set by the workspace on write (None until then).
    user_id: str | None = Field(default=None, min_length=1, max_length=MAX_USER_ID_CHARS)
    summary: str = Field(max_length=MAX_SUMMARY_CHARS)
    body: dict[str, Any] = Field(default_factory=dict)
    tags: list[str] = Field(default_factory=list, max_length=MAX_TAGS)
    importance: float = Field(default=0.5, ge=0.0, le=1.0, allow_inf_nan=False)
    provenance: Provenance = Field(default_factory=Provenance)
    vector_index: VectorIndexMeta = Field(default_factory=VectorIndexMeta)
    status: RecordStatus = "active"
    superseded_by: str | None = None
    supersedes: str | None = None
    extracted: bool = True
    created_at: float = Field(default_factory=time.time, allow_inf_nan=False)
    updated_at: float = Field(default_factory=time.time, allow_inf_nan=False)
    occurred_at: float | None = Field(default=None, allow_inf_nan=False)

    @field_validator("occurred_at", mode="before")
    @classmethod
    def _check_occurred_at(cls, value: Any) -> Any:
        return None if value is None else parse_time(value, what="occurred_at")

    @field_validator("tags", mode="before")
    @classmethod
    def _check_tags(cls, value: Any) -> Any:
        if value is None:
            return []
        if not isinstance(value, (list, tuple)):
            raise RecordValidationError("tags must be a list of strings")
        for tag in value:
            if not isinstance(tag, str):
                raise RecordValidationError(f"every tag must be a string, got {type(tag).__name__}: {tag!r}")
        return value

    @field_validator("tags")
    @classmethod
    def _normalize_tags(cls, value: list[str]) -> list[str]:
        out: list[str] = []
        for tag in value:
            tag = tag.strip()
            if len(tag) > MAX_TAG_CHARS:
                raise RecordValidationError(f"a tag is longer than {MAX_TAG_CHARS} characters")
            if tag and tag not in out:
                out.append(tag)
        return out

    @field_validator("body")
    @classmethod
    def _check_body(cls, value: dict[str, Any]) -> dict[str, Any]:
        try:
            text = json.dumps(value, ensure_ascii=False, allow_nan=False)
        except (TypeError, ValueError) as e:
            raise RecordValidationError(f"body must be JSON-serializable without NaN/inf: {e}") from None
        if len(text) > MAX_BODY_CHARS:
            raise RecordValidationError(f"body is {len(text)} characters of JSON; the limit is {MAX_BODY_CHARS}")
        # Store exactly what Chroma will give back (tuples become lists, nested keys strings).
        return json.loads(text)

    @model_validator(mode="after")
    def _check_scope(self) -> MemoryRecord:
        expected_kind = KIND_BY_SCOPE[self.memory_scope]
        if not self.kind:
            object.__setattr__(self, "kind", expected_kind)
        elif self.collection == "memory" and self.kind != expected_kind:
            raise RecordValidationError(f"kind {self.kind!r} does not match memory_scope {self.memory_scope!r}")
        if self.memory_scope == "SESSION_MEMORY" and not self.session_id:
            raise RecordValidationError("session_id is required for SESSION_MEMORY records")
        if self.memory_scope == "GLOBAL_MEMORY" and self.session_id is not None:
            raise RecordValidationError("GLOBAL_MEMORY records carry no session_id (it is stored in provenance)")
        return self

    # ------------------------------------------------------------------ text used for search
    def document(self) -> str:
        """The text that is embedded: summary, then body values, then tags; a raw turn's (``extracted=False``)
        starts with its date line (see :meth:`search_text`)."""
        parts = [self._date_line()] if not self.extracted and self.occurred_at is not None else []
        parts.append(self.summary.strip())
        body_text = render_body(self.body)
        if body_text and body_text != parts[-1]:
            parts.append(body_text)
        if self.tags:
            parts.append("tags: " + ", ".join(self.tags))
        return "\n".join(p for p in parts if p)

    def search_text(self) -> str:
        """The text that is stored and searched lexically: :meth:`document`, after the date line
        ``date: 2023-05-12 (Friday, 12 May 2023)`` when ``occurred_at`` is set.

        Only a raw turn (an episode: what was said when) also embeds its date. An extracted memory is a fact
        whose identity does not depend on the day: an embedded date would pull unrelated memories of one
        day together and push a dated memory away from its undated near-duplicate (far enough to miss the
        consolidation threshold; ``agently_vecmem/eval/RESULTS.md``, "Figures behind code choices"), starving
        consolidation.
        """
        text = self.document()
        if self.occurred_at is None or not self.extracted:
            return text
        return f"{self._date_line()}\n{text}"

    def _date_line(self) -> str:
        return f"date: {date_label(self.occurred_at)}" if self.occurred_at is not None else ""

    def content(self) -> str:
        """The body as compact JSON, the ``content`` of an injected memory item."""
        return json.dumps(self.body or {"summary": self.summary}, ensure_ascii=False, sort_keys=False)

    def scope_dict(self) -> dict[str, str]:
        """Agently-style ``scope``: ``memory_scope`` (+ ``session_id`` for session memory)."""
        scope: dict[str, str] = {"memory_scope": self.memory_scope}
        if self.session_id is not None:
            scope["session_id"] = self.session_id
        return scope

    def payload(self) -> dict[str, Any]:
        """The record payload exactly as AgentlyMemory stores it (its ``get_data`` shape)."""
        return {
            "memory_scope": self.memory_scope,
            "summary": self.summary,
            "body": self.body or {"summary": self.summary},
            "tags": list(self.tags),
            "importance": self.importance,
            "provenance": self.provenance.model_dump(),
            "vector_index": self.vector_index.model_dump(),
        }

    # ------------------------------------------------------------------ Chroma round trip
    def to_chroma(self) -> dict[str, Any]:
        """Flat Chroma metadata: scalars, one non-empty string list (``tags``), no ``None``."""
        meta: dict[str, Any] = {
            "collection": self.collection,
            "kind": self.kind,
            "memory_scope": self.memory_scope,
            "summary": self.summary,
            "importance": float(self.importance),
            "status": self.status,
            "extracted": self.extracted,
            "created_at": float(self.created_at),
            "updated_at": float(self.updated_at),
            "body_json": json.dumps(self.body, ensure_ascii=False, allow_nan=False),
            "provenance_json": self.provenance.model_dump_json(),
            "vector_index_json": self.vector_index.model_dump_json(),
            # Chroma keeps only ~16 significant digits of float metadata; the numeric keys above are
            # for filtering and sorting, this string is the exact value (repr round-trips a float).
            "floats_json": json.dumps([self.importance, self.created_at, self.updated_at]
                                      + ([self.occurred_at] if self.occurred_at is not None else [])),
        }
        if self.occurred_at is not None:
            meta["occurred_at"] = float(self.occurred_at)
        if self.session_id is not None:
            meta["session_id"] = self.session_id
        if self.user_id is not None:
            meta["user_id"] = self.user_id
            meta["vecmem_scope"] = scope_key(self.user_id, self.collection, self.memory_scope, self.session_id,
                                             self.status)
        if self.tags:
            meta["tags"] = list(self.tags)
        if self.superseded_by is not None:
            meta["superseded_by"] = self.superseded_by
        if self.supersedes is not None:
            meta["supersedes"] = self.supersedes
        return meta

    @classmethod
    def from_chroma(cls, record_id: str, meta: dict[str, Any]) -> MemoryRecord:
        """Rebuild a record from the metadata written by :meth:`to_chroma` (validated: Chroma's rows may have
        been written by anyone)."""
        return stored_form(cls(**_stored_values(record_id, meta)))

    @classmethod
    def from_trusted(cls, record_id: str, meta: dict[str, Any]) -> MemoryRecord:
        """:meth:`from_chroma` without validation, for metadata this library wrote itself from a valid record
        and kept where nothing else writes (a persisted snapshot, checked by its digest): the same record, ~2x
        cheaper (``benchmarks/bench_snapshot_load.py``, "record decode"; a pooled query decodes a few dozen)."""
        record = cls.__new__(cls)
        object.__setattr__(record, "__dict__", _stored_values(record_id, meta))
        object.__setattr__(record, "__pydantic_extra__", None)
        object.__setattr__(record, "__pydantic_private__", None)
        return stored_form(record)


def _stored_values(record_id: str, meta: dict[str, Any]) -> dict[str, Any]:
    """Every field of a record from its :meth:`MemoryRecord.to_chroma` metadata, in declaration order."""
    importance, created_at, updated_at = meta.get("importance", 0.5), meta.get("created_at", 0.0), meta.get("updated_at", 0.0)
    occurred_at = meta.get("occurred_at")
    if meta.get("floats_json"):
        importance, created_at, updated_at, *rest = json.loads(meta["floats_json"])
        occurred_at = rest[0] if rest else None
    return {
        "id": record_id,
        # Scopes hold many records: repeated values share one string / one frozen model, which keeps a large
        # store's snapshots much smaller (benchmarks/RESULTS.md, "Figures behind implementation choices").
        "collection": _intern(meta["collection"]),
        "kind": _intern(meta["kind"]),
        "memory_scope": _intern(meta["memory_scope"]),
        "session_id": _intern(meta.get("session_id")),
        "user_id": _intern(meta.get("user_id")),
        "summary": meta["summary"],
        "body": json.loads(meta.get("body_json") or "{}"),
        "tags": list(meta.get("tags") or []),
        "importance": importance,
        "provenance": _shared_model(Provenance, meta.get("provenance_json") or "{}"),
        "vector_index": _shared_model(VectorIndexMeta, meta.get("vector_index_json") or "{}"),
        "status": _intern(meta.get("status", "active")),
        "superseded_by": meta.get("superseded_by"),
        "supersedes": meta.get("supersedes"),
        "extracted": bool(meta.get("extracted", True)),
        "created_at": created_at,
        "updated_at": updated_at,
        "occurred_at": occurred_at,
    }


#: The fields-set of every stored record (:func:`stored_form`): all the fields.
_EVERY_FIELD: set[str] = set(MemoryRecord.model_fields)


def stored_form(record: MemoryRecord) -> MemoryRecord:
    """``record`` as the store holds it: every field set, like a record read back with
    :meth:`MemoryRecord.from_chroma`. Returns ``record`` itself.

    Stored records share one fields-set instead of a set each (~2.2 KB per record, what most of a big
    scope's memory went to: ``benchmarks/RESULTS.md``, "Records in a cached scope"). Sharing it
    is safe: pydantic only ever adds a field name to it (on an assignment), which changes nothing in a set
    that holds them all, and a copy (``model_copy``) gets a set of its own.
    """
    object.__setattr__(record, "__pydantic_fields_set__", _EVERY_FIELD)
    return record


def _intern(value: Any) -> Any:
    return sys.intern(value) if type(value) is str else value


@functools.lru_cache(maxsize=4096)
def _shared_model(model: type[BaseModel], text: str) -> Any:
    """One validated frozen instance per distinct stored JSON text (raises like the model would)."""
    return model.model_validate(json.loads(text))


def render_body(body: dict[str, Any]) -> str:
    """Flatten a body dict into readable ``key: value`` lines for embedding and lexical search."""
    lines: list[str] = []
    for key, value in body.items():
        if value is None or value == "" or value == [] or value == {}:
            continue
        if isinstance(value, (dict, list)):
            value = json.dumps(value, ensure_ascii=False)
        elif isinstance(value, float) and not math.isfinite(value):
            continue
        lines.append(f"{key}: {value}")
    return "\n".join(lines)


def parse_record(data: MemoryRecord | dict[str, Any]) -> MemoryRecord:
    """Validate ``data`` into a :class:`MemoryRecord`, raising :class:`RecordValidationError` on bad input.

    The error message names every offending field, e.g. ``tags.3: every tag must be a string``.
    """
    if isinstance(data, MemoryRecord):
        return data
    if not isinstance(data, dict):
        raise RecordValidationError(f"a memory record must be a dict or MemoryRecord, got {type(data).__name__}")
    try:
        return MemoryRecord.model_validate(data)
    except ValidationError as e:
        raise RecordValidationError(format_validation_error(e, "memory record")) from None


def format_validation_error(error: ValidationError, what: str) -> str:
    """One readable line per pydantic error: ``field.path: message``."""
    lines = []
    for item in error.errors():
        loc = ".".join(str(p) for p in item.get("loc", ())) or "(root)"
        lines.append(f"{loc}: {item.get('msg')}")
    return f"invalid {what}: " + "; ".join(lines)


#: Accepted epoch range of :func:`parse_time` (years 1900-2200): a value outside is a unit mistake
#: (milliseconds or microseconds passed as seconds) rather than a date.
_MIN_EPOCH, _MAX_EPOCH = -2_208_988_800.0, 7_258_118_400.0


def parse_time(value: Any, *, what: str = "time") -> float:
    """Validate a user-given time into epoch seconds (UTC).

    Accepts epoch seconds (int/float), a :class:`~datetime.datetime` or :class:`~datetime.date`, or an ISO
    8601 string (``"2023-05-12"``, ``"2023-05-12T14:30:00"``, ``"2023-05-12T14:30:00+08:00"``,
    ``"...Z"``). A time without an offset is taken as UTC, so its date renders as written.

    Raises:
        RecordValidationError: the value is of another type, not a finite number, not ISO 8601, or outside
            the years 1900-2200 (e.g. milliseconds given as seconds). Also a ``ValueError``.

    Example:
        >>> parse_time("2023-05-12")
        1683849600.0
    """
    if isinstance(value, bool):
        raise RecordValidationError(f"{what} must be epoch seconds, a datetime or an ISO 8601 string, got bool")
    if isinstance(value, (int, float)):
        seconds = float(value)
        if not math.isfinite(seconds):
            raise RecordValidationError(f"{what} must be a finite number of epoch seconds, got {value!r}")
    elif isinstance(value, datetime):
        seconds = (value if value.tzinfo else value.replace(tzinfo=timezone.utc)).timestamp()
    elif isinstance(value, date):
        seconds = datetime(value.year, value.month, value.day, tzinfo=timezone.utc).timestamp()
    elif isinstance(value, str):
        text = value.strip()
        try:
            parsed = datetime.fromisoformat(text)
        except ValueError:
            raise RecordValidationError(
                f"{what} {value!r:.80} is not an ISO 8601 date or time (e.g. '2023-05-12' or "
                "'2023-05-12T14:30:00+08:00')"
            ) from None
        seconds = (parsed if parsed.tzinfo else parsed.replace(tzinfo=timezone.utc)).timestamp()
    else:
        raise RecordValidationError(
            f"{what} must be epoch seconds, a datetime or an ISO 8601 string, got {type(value).__name__}"
        )
    if not _MIN_EPOCH <= seconds <= _MAX_EPOCH:
        raise RecordValidationError(
            f"{what} {value!r:.80} is outside the years 1900-2200 (epoch seconds expected, not milliseconds)"
        )
    return seconds


def turn_time(value: Any = None) -> float:
    """A turn's time: :func:`parse_time` of ``value``, or now when it is None."""
    return time.time() if value is None else parse_time(value, what="occurred_at")


def date_label(seconds: float) -> str:
    """The date of epoch ``seconds`` (UTC) as searchable text: ``"2023-05-12 (Friday, 12 May 2023)"``."""
    d = datetime.fromtimestamp(seconds, tz=timezone.utc)
    # Fixed English names: strftime's %A/%B follow the process locale, which would change stored text.
    return f"{d:%Y-%m-%d} ({_WEEKDAYS[d.weekday()]}, {d.day} {_MONTHS[d.month - 1]} {d.year})"


_WEEKDAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
_MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August", "September", "October",
           "November", "December")


def path_slug(text: str) -> str:
    """``text`` as a file-name part (lower case, ``-`` for anything not alphanumeric): Agently's ref paths."""
    return "".join(ch if ch.isalnum() else "-" for ch in text.lower()).strip("-") or "record"


def iso_time(ts: float) -> str:
    """A timestamp (seconds) as an ISO-8601 UTC string, as Agently's refs carry it."""
    return datetime.fromtimestamp(ts, tz=timezone.utc).isoformat()


def record_ref(record: MemoryRecord) -> dict[str, Any]:
    """The Agently record ref of a record (AgentlyMemory's shape): what ``put`` returns to Agently and what
    ``after_turn`` reports as ``refs``."""
    data = json.dumps(record.payload(), ensure_ascii=False).encode("utf-8")
    provenance = record.provenance.model_dump()
    extra_scope = provenance.pop("workspace_scope", None)
    scope = dict(extra_scope) if isinstance(extra_scope, dict) else {}
    scope.update(record.scope_dict())
    return {
        "id": record.id,
        "collection": record.collection,
        "kind": record.kind,
        "path": f"{record.collection}/{record.id}-{path_slug(record.kind)}.json",
        "sha256": hashlib.sha256(data).hexdigest(),
        "size": len(data),
        "summary": record.summary,
        "scope": scope,
        "source": provenance,
        "created_at": iso_time(record.created_at),
        "meta": {
            "tags": list(record.tags),
            "memory_scope": record.memory_scope,
            "session_id": record.session_id,
            "vector_index": record.vector_index.model_dump(),
            "importance": record.importance,
            "extracted": record.extracted,
        },
    }
