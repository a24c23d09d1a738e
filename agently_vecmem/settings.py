"""Nested settings with dotted keys and a parent chain, shaped like Agently's ``Settings``.

A :class:`Settings` holds a nested dict. Keys are dotted paths (``"session.max_length"``). Reads fall
through to the parent chain, and dict values are merged key by key, so setting one leaf under
``session.memory.VecMemory.retrieve`` keeps every other default of that subtree::

    base = Settings({"session": {"memory": {"VecMemory": {"retrieve": {"budget": 4000, "top_k": 8}}}}})
    child = Settings(parent=base)
    child.set("session.memory.VecMemory.retrieve.budget", 2000)
    child.get("session.memory.VecMemory.retrieve")   # {"budget": 2000, "top_k": 8}
    base.get("session.memory.VecMemory.retrieve.budget")   # 4000, the parent is untouched

Deliberate differences from Agently (see ``session/DIFFERENCES.md``): lists and scalars *replace* (Agently
unions lists, so ``set("x", ["a"])`` then ``set("x", ["b"])`` gives ``["a", "b"]`` there), dotted keys in
the constructor mapping are expanded, and there are no env placeholders or path mappings. No I/O.
"""

from __future__ import annotations

import copy
from collections.abc import Collection, Iterator, Mapping
from typing import Any

from .errors import ConfigurationError

__all__ = ["Settings", "SettingsNamespace", "global_settings", "deep_merge", "read_path"]

_MISSING: Any = object()


def deep_merge(
    base: Mapping[str, Any], override: Mapping[str, Any], *, replace: Collection[str] = ()
) -> dict[str, Any]:
    """Return a new dict: ``override`` merged over ``base``, dicts key by key, everything else replaced.

    The one merge helper of the package (``Settings`` layers and the plugin's settings resolution).

    Args:
        base: the lower layer (for example parent settings or defaults).
        override: the upper layer; its values win.
        replace: keys (at any depth) whose mapping values replace instead of merging (a user's
            ``body_schema`` is a whole schema, not a patch).

    Returns:
        A deep copy; neither argument is modified.
    """
    result: dict[str, Any] = copy.deepcopy(dict(base))
    for key, value in override.items():
        if isinstance(value, Mapping) and isinstance(result.get(key), Mapping) and key not in replace:
            result[key] = deep_merge(result[key], value, replace=replace)
        else:
            result[key] = copy.deepcopy(value)
    return result


def read_path(data: Any, key: str, default: Any = None) -> Any:
    """The value at a dotted ``key`` inside nested mappings, or ``default`` when a step is missing."""
    value = _walk(data, key.split("."))
    return default if value is _MISSING else value


def _split(key: str) -> list[str]:
    if not isinstance(key, str) or key == "":
        raise ConfigurationError(f"A settings key must be a non-empty string, got {key!r}.")
    return key.split(".")


def _walk(data: Any, parts: list[str]) -> Any:
    current = data
    for part in parts:
        if not isinstance(current, Mapping) or part not in current:
            return _MISSING
        current = current[part]
    return current


class _ForeignParent:
    """Adapter for a parent that is not ours but answers ``get()`` with its merged dict (Agently Settings)."""

    def __init__(self, source: Any) -> None:
        self._source = source

    @property
    def data(self) -> dict[str, Any]:
        view = self._source.get()
        return copy.deepcopy(dict(view)) if isinstance(view, Mapping) else {}


class _DataView:
    """Read-only mapping protocol over a ``data`` property (shared by Settings and SettingsNamespace)."""

    @property
    def data(self) -> dict[str, Any]:  # pragma: no cover - overridden
        raise NotImplementedError

    def get(self, key: str | None = None, default: Any = None) -> Any:  # pragma: no cover - overridden
        raise NotImplementedError

    def __getitem__(self, key: str) -> Any:
        return self.get(key)

    def __iter__(self) -> Iterator[str]:
        return iter(self.data)

    def __len__(self) -> int:
        return len(self.data)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, _DataView):
            return self.data == other.data
        if isinstance(other, Mapping):
            return self.data == dict(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def keys(self) -> list[str]:
        return list(self.data)

    def items(self) -> list[tuple[str, Any]]:
        return list(self.data.items())


class Settings(_DataView):
    """A nested settings store with dotted keys and an optional parent.

    Args:
        data: initial values; nested dicts and dotted keys are both accepted.
        parent: a :class:`Settings`, a plain mapping, or any object whose ``get()`` returns a dict
            (for example an Agently ``Settings``); reads fall through to it.
        name: an optional label for debugging.
    """

    def __init__(
        self,
        data: Mapping[str, Any] | None = None,
        *,
        parent: Settings | Mapping[str, Any] | Any | None = None,
        name: str | None = None,
    ) -> None:
        self._data: dict[str, Any] = {}
        self.name = name
        if parent is None or isinstance(parent, Settings):
            self.parent: Settings | _ForeignParent | None = parent
        elif isinstance(parent, Mapping):
            self.parent = Settings(parent)
        elif callable(getattr(parent, "get", None)):
            self.parent = _ForeignParent(parent)
        else:
            raise ConfigurationError(
                f"Settings parent must be a Settings or a dict, got {type(parent).__name__}."
            )
        if data is not None:
            if not isinstance(data, Mapping):
                raise ConfigurationError(f"Settings data must be a mapping, got {type(data).__name__}.")
            self.update(data)

    def __repr__(self) -> str:
        return f"Settings(name={self.name!r}, data={self.data!r})"

    # -- reading ---------------------------------------------------------------------------------------

    @property
    def data(self) -> dict[str, Any]:
        """The merged view of this object and its parents (a deep copy, safe to modify)."""
        own = copy.deepcopy(self._data)
        if self.parent is None:
            return own
        return deep_merge(self.parent.data, own)

    def get(self, key: str | None = None, default: Any = None, inherit: bool = True) -> Any:
        """Read a value by dotted key.

        Args:
            key: a dotted path; ``None`` returns the whole (merged) dict.
            default: returned when the path does not exist.
            inherit: ``False`` reads only this object's own values.

        Returns:
            A deep copy of the value, or ``default``.
        """
        view = self.data if inherit else copy.deepcopy(self._data)
        if key is None:
            return view
        value = _walk(view, _split(key))
        return default if value is _MISSING else value

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and key != "" and _walk(self.data, key.split(".")) is not _MISSING

    # -- writing ---------------------------------------------------------------------------------------

    def set(self, key: str, value: Any) -> Settings:
        """Write a value at a dotted key on this object (never on the parent).

        A mapping written over an existing mapping is merged key by key; anything else replaces.

        Args:
            key: a dotted path such as ``"session.max_length"``.
            value: the value; it is deep-copied.

        Returns:
            ``self``, so calls can be chained.

        Raises:
            ConfigurationError: the key is empty, or a prefix of the path holds a non-dict value.
        """
        parts = _split(key)
        current = self._data
        for index, part in enumerate(parts[:-1]):
            nxt = current.get(part, _MISSING)
            if nxt is _MISSING or nxt is None:
                nxt = current[part] = {}
            elif not isinstance(nxt, dict):
                walked = ".".join(parts[: index + 1])
                raise ConfigurationError(
                    f"Cannot set '{key}': '{walked}' holds {type(nxt).__name__} {nxt!r}, not a dict. "
                    f"Set '{walked}' to a dict first."
                )
            current = nxt
        leaf = parts[-1]
        if isinstance(value, Mapping) and isinstance(current.get(leaf), dict):
            current[leaf] = deep_merge(current[leaf], _expand(value))
        elif isinstance(value, Mapping):
            current[leaf] = _expand(value)
        else:
            current[leaf] = copy.deepcopy(value)
        return self

    def set_settings(self, key: str, value: Any) -> Settings:
        """Alias of :meth:`set` (Agently's spelling)."""
        return self.set(key, value)

    def __setitem__(self, key: str, value: Any) -> None:
        self.set(key, value)

    def update(self, new: Mapping[str, Any]) -> Settings:
        """Apply every ``key: value`` of ``new`` with :meth:`set` (dotted keys allowed)."""
        for key, value in new.items():
            self.set(key, value)
        return self

    def setdefault(self, key: str, value: Any) -> Any:
        """Set ``key`` only when it reads as ``None`` (missing or null); return the resulting value."""
        if self.get(key) is None:
            self.set(key, value)
        return self.get(key)

    def delete(self, key: str) -> None:
        """Remove ``key`` from this object's own values (parents are untouched); missing keys are ignored."""
        parts = _split(key)
        container = _walk(self._data, parts[:-1]) if len(parts) > 1 else self._data
        if isinstance(container, dict):
            container.pop(parts[-1], None)

    def __delitem__(self, key: str) -> None:
        self.delete(key)

    def namespace(self, prefix: str, *, defaults: Mapping[str, Any] | None = None) -> SettingsNamespace:
        """Return a view of the subtree at ``prefix`` (see :class:`SettingsNamespace`)."""
        return SettingsNamespace(self, prefix, defaults=defaults)


def _expand(mapping: Mapping[str, Any]) -> dict[str, Any]:
    """Copy a mapping, turning dotted keys into nested dicts."""
    out: dict[str, Any] = {}
    for key, value in mapping.items():
        value = _expand(value) if isinstance(value, Mapping) else copy.deepcopy(value)
        if isinstance(key, str) and "." in key:
            head, _, rest = key.partition(".")
            nested = _expand({rest: value})
            existing = out.get(head)
            out[head] = deep_merge(existing, nested) if isinstance(existing, Mapping) else nested
        elif isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = value
    return out


class SettingsNamespace(_DataView):
    """A view of one subtree of a :class:`Settings`, like Agently's ``SettingsNamespace``.

    Writes go to the root settings object under ``prefix``. Optional ``defaults`` sit *under* everything
    (they are never written into the settings), so a parent value set later is still seen.

    Args:
        root: the settings object.
        prefix: a dotted path such as ``"session"``.
        defaults: values shown when neither the root nor its parents define a key.
    """

    def __init__(self, root: Settings, prefix: str, *, defaults: Mapping[str, Any] | None = None) -> None:
        _split(prefix)
        self.root = root
        self.namespace = prefix
        self._defaults: dict[str, Any] = _expand(defaults or {})

    def __repr__(self) -> str:
        return f"SettingsNamespace({self.namespace!r}, data={self.data!r})"

    def _key(self, key: str) -> str:
        return f"{self.namespace}.{key}"

    @property
    def data(self) -> dict[str, Any]:
        """The merged subtree (defaults, parents, own values); a deep copy, always a dict."""
        value = self.root.get(self.namespace)
        if not isinstance(value, Mapping):
            value = {}
        return deep_merge(self._defaults, value)

    def get(self, key: str | None = None, default: Any = None, inherit: bool = True) -> Any:
        """Read ``key`` inside the namespace; ``default`` when missing or ``None`` (as Agently does)."""
        if key is None:
            return self.data if inherit else self.root.get(self.namespace, {}, inherit=False)
        value = self.root.get(self._key(key), _MISSING, inherit=inherit)
        if value is _MISSING and inherit:
            value = _walk(self._defaults, _split(key))
            value = copy.deepcopy(value)
        if value is _MISSING or value is None:
            return default
        return value

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and key in self.data

    def set(self, key: str, value: Any) -> SettingsNamespace:
        """Write ``key`` (dotted allowed) under the namespace on the root settings."""
        self.root.set(self._key(key), value)
        return self

    def __setitem__(self, key: str, value: Any) -> None:
        self.set(key, value)

    def setdefault(self, key: str, value: Any) -> Any:
        """Set ``key`` when it reads as ``None``; return the resulting value."""
        if self.get(key) is None:
            self.set(key, value)
        return self.get(key)

    def update(self, new: Mapping[str, Any]) -> SettingsNamespace:
        """Apply every ``key: value`` of ``new`` under the namespace."""
        for key, value in new.items():
            self.set(key, value)
        return self

    def delete(self, key: str) -> None:
        """Remove ``key`` from the root's own values."""
        self.root.delete(self._key(key))


#: Process-wide root settings. Standalone sessions built from a plain dict inherit from it, and
#: registered memory plugins put their ``DEFAULT_SETTINGS["$global"]`` here.
global_settings = Settings(name="global")
