"""The where-filter grammar: memory scopes and their compilation to Chroma ``where`` clauses.

Scope filters are mandatory arguments of every Workspace read. They are compiled fresh on every call
(never cached or mutated) into a Chroma ``$and`` clause, and the same clause can be evaluated in Python
with :func:`matches` (used by the in-memory exact index and by tests as an oracle).

Grammar of a condition mapping (``{field: condition}``), a subset of Chroma's:
``value`` (equality), ``{"$eq"|"$ne": scalar}``, ``{"$in"|"$nin": [scalars]}``,
``{"$gt"|"$gte"|"$lt"|"$lte": number}``, ``{"$contains"|"$not_contains": scalar}`` (list fields), and a list
of operator dicts for several conditions on one field (``{"created_at": [{"$gte": a}, {"$lt": b}]}``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from .errors import ScopeError
from .records import KIND_BY_SCOPE, MEMORY_SCOPES, RECORD_STATUSES, scope_key

__all__ = ["Scope", "ALL_SCOPES", "compile_where", "matches", "MemoryScopeFilter"]

_SCALAR = (str, int, float, bool)
_OPERATORS = {"$eq", "$ne", "$in", "$nin", "$gt", "$gte", "$lt", "$lte", "$contains", "$not_contains"}


@dataclass(frozen=True)
class Scope:
    """A hard memory scope: which records a read may ever see.

    Use the constructors: :meth:`global_memory`, :meth:`session_memory`, or :data:`ALL_SCOPES` for
    administrative reads (inspect, export) that deliberately span every scope.

    Attributes:
        memory_scope: ``GLOBAL_MEMORY`` or ``SESSION_MEMORY``; None only for :data:`ALL_SCOPES`.
        session_id: required for ``SESSION_MEMORY``, forbidden otherwise.
        collection: the record collection (``"memory"``).
        include_inactive: also return superseded/deleted records (history views, export).
        user_id: the user whose records the scope holds. Callers leave it None: a workspace binds every
            scope it is given to its own user (:meth:`for_user`) before reading, so the user filter is as
            hard as the scope's.
    """

    memory_scope: str | None
    session_id: str | None = None
    collection: str | None = "memory"
    include_inactive: bool = False
    user_id: str | None = None

    def __post_init__(self) -> None:
        if self.memory_scope is not None and self.memory_scope not in MEMORY_SCOPES:
            raise ScopeError(
                f"unknown memory scope {self.memory_scope!r}; use one of {', '.join(MEMORY_SCOPES)}"
            )
        if self.memory_scope == "SESSION_MEMORY":
            if not isinstance(self.session_id, str) or not self.session_id:
                raise ScopeError("SESSION_MEMORY scope needs a non-empty session_id string")
        elif self.session_id is not None:
            # Without a memory_scope the session_id would be silently ignored (a widened read).
            raise ScopeError(f"{self.memory_scope or 'an all-scopes'} scope takes no session_id")

    @classmethod
    def global_memory(cls, *, include_inactive: bool = False) -> Scope:
        """Workspace-wide memory shared by every session."""
        return cls("GLOBAL_MEMORY", include_inactive=include_inactive)

    @classmethod
    def session_memory(cls, session_id: str, *, include_inactive: bool = False) -> Scope:
        """Memory of one session only."""
        return cls("SESSION_MEMORY", session_id, include_inactive=include_inactive)

    @classmethod
    def of(cls, memory_scope: str, session_id: str | None = None) -> Scope:
        """Scope by name; ``session_id`` is used only for ``SESSION_MEMORY``."""
        if memory_scope == "SESSION_MEMORY":
            return cls.session_memory(session_id or "")
        return cls(memory_scope)

    def for_user(self, user_id: str | None) -> Scope:
        """This scope restricted to ``user_id``'s records (None: not restricted by user)."""
        return replace(self, user_id=user_id)

    @property
    def kind(self) -> str | None:
        return KIND_BY_SCOPE.get(self.memory_scope or "")

    @property
    def key(self) -> tuple[Any, ...]:
        """A hashable identity of the scope (cache key)."""
        return (self.collection, self.memory_scope, self.session_id, self.include_inactive, self.user_id)

    def conditions(self) -> dict[str, Any]:
        """The scope as a condition mapping (fresh dict on every call): the fields it fixes and their values."""
        cond: dict[str, Any] = {}
        if self.user_id is not None:
            cond["user_id"] = self.user_id
        if self.collection is not None:
            cond["collection"] = self.collection
        if self.memory_scope is not None:
            cond["memory_scope"] = self.memory_scope
        if self.memory_scope == "SESSION_MEMORY":
            cond["session_id"] = self.session_id
        if not self.include_inactive:
            cond["status"] = "active"
        return cond

    def _physical(self) -> dict[str, Any]:
        """:meth:`conditions` as stored metadata is queried. A user's scope is one key of its own
        (:func:`~agently_vecmem.records.scope_key`): a read of a small scope then costs an index lookup,
        while a conjunction of broad conditions (``status``, ``memory_scope``, which most records match)
        costs a pass over the whole collection."""
        if self.user_id is None or self.memory_scope is None or self.collection is None:
            return self.conditions()
        statuses = RECORD_STATUSES if self.include_inactive else ("active",)
        keys = [scope_key(self.user_id, self.collection, self.memory_scope, self.session_id, st) for st in statuses]
        return {"vecmem_scope": keys[0] if len(keys) == 1 else {"$in": keys}}

    def where(self, extra: Mapping[str, Any] | None = None) -> dict[str, Any] | None:
        """Compile the scope plus optional extra conditions into a Chroma ``where`` clause.

        Extra conditions can narrow the scope but never widen it: a key that the scope fixes
        may not be overridden.
        """
        fixed = self.conditions()
        cond = self._physical()
        for key, value in (extra or {}).items():
            if key in fixed or key in cond:
                raise ScopeError(f"filter key {key!r} is fixed by the scope and cannot be overridden")
            cond[key] = value
        return compile_where(cond)


#: Explicitly every record of every scope, active or not (inspect/export/admin).
ALL_SCOPES = Scope(None, None, None, include_inactive=True)
MemoryScopeFilter = Scope


def _check_condition(key: str, cond: Any) -> dict[str, Any]:
    if not isinstance(key, str) or not key or key.startswith("$"):
        raise ScopeError(f"invalid filter field {key!r}")
    if isinstance(cond, Mapping):
        if len(cond) != 1:
            raise ScopeError(f"filter for {key!r} must have exactly one operator, got {list(cond)}")
        (op, value), = cond.items()
        if op not in _OPERATORS:
            raise ScopeError(f"unsupported filter operator {op!r} for {key!r}")
        if op in ("$in", "$nin"):
            if not isinstance(value, Sequence) or isinstance(value, str) or not value:
                raise ScopeError(f"{op} for {key!r} needs a non-empty list")
            if not all(_is_scalar(v) for v in value):
                raise ScopeError(f"{op} for {key!r} takes finite scalar values only")
            if len({type(v) for v in value}) > 1:  # Chroma rejects mixed lists (and ints among floats)
                raise ScopeError(f"{op} for {key!r} needs values of one type, got {list(value)!r}")
            return {key: {op: list(value)}}
        if not _is_scalar(value):
            raise ScopeError(f"{op} for {key!r} takes a finite scalar, got {value!r}")
        if op in ("$gt", "$gte", "$lt", "$lte") and not _is_number(value):
            raise ScopeError(f"{op} for {key!r} takes a number, got {value!r}")
        return {key: {op: value}}
    if cond is None:
        raise ScopeError(f"filter for {key!r} is None; Chroma cannot match missing values, omit the key")
    if not _is_scalar(cond):
        raise ScopeError(f"filter for {key!r} must be a finite scalar or operator dict, got {cond!r}")
    return {key: {"$eq": cond}}


def _is_scalar(value: Any) -> bool:
    return isinstance(value, _SCALAR) and not (isinstance(value, float) and not math.isfinite(value))


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _same(a: Any, b: Any) -> bool:
    """Chroma's typed equality: a bool never equals a number (Python says ``True == 1``)."""
    if a is None or b is None or isinstance(a, bool) != isinstance(b, bool):
        return False
    return bool(a == b)


def compile_where(conditions: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """Compile ``{field: condition}`` into a Chroma ``where``; several fields are wrapped in ``$and``.

    Returns None for no conditions (Chroma rejects an empty ``{}``).
    """
    if not conditions:
        return None
    clauses = []
    for key, cond in conditions.items():
        if isinstance(cond, (list, tuple)) and cond and all(isinstance(c, Mapping) for c in cond):
            clauses += [_check_condition(key, c) for c in cond]  # several conditions on one field: all hold
        else:
            clauses.append(_check_condition(key, cond))
    return clauses[0] if len(clauses) == 1 else {"$and": clauses}


def _match_op(op: str, want: Any, have: Any) -> bool:
    if op == "$eq":
        return _same(have, want)
    if op == "$ne":
        return not _same(have, want)
    if op == "$in":
        return any(_same(have, w) for w in want)
    if op == "$nin":
        return not any(_same(have, w) for w in want)
    if op in ("$contains", "$not_contains"):
        found = isinstance(have, list) and any(_same(h, want) for h in have)
        return found if op == "$contains" else not found
    if not _is_number(have):
        return False
    return {"$gt": have > want, "$gte": have >= want, "$lt": have < want, "$lte": have <= want}[op]


def matches(where: Mapping[str, Any] | None, metadata: Mapping[str, Any]) -> bool:
    """Evaluate a compiled ``where`` clause against one record's Chroma metadata, as Chroma would."""
    if not where:
        return True
    if "$and" in where:
        return all(matches(c, metadata) for c in where["$and"])
    if "$or" in where:
        return any(matches(c, metadata) for c in where["$or"])
    (key, cond), = where.items()
    (op, want), = cond.items()
    return _match_op(op, want, metadata.get(key))
