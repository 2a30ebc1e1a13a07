"""Read-only, SQL-backed mappings: calute's dict attributes as views of the database.

calute keeps ``EntityMemory.entities`` / ``relationships`` / ``entity_mentions`` and
``UserMemory.user_preferences`` as in-process dicts. Here they are :class:`SqlMapping` views:
every read (``m[key]``, ``in``, ``len``, iteration, ``keys()``, ``items()``) runs SQL, so it
sees what any process stored; nothing is cached. Values are :class:`ReadOnlyDict` /
:class:`ReadOnlyList` snapshots. Every write (``m[k] = v``, ``del``, ``update``, ``pop``,
``clear``, ... on the view or on a value) raises :class:`~cortex_pg.errors.ReadOnlyError`
naming the method that writes. Copies (``dict(v)``, ``copy.copy``, ``copy.deepcopy``,
pickling) are plain, writable dicts and lists, detached from the database.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any, NoReturn

from cortex_pg.errors import ReadOnlyError


class ReadOnlyDict(dict):
    """A dict snapshot whose mutators raise :class:`ReadOnlyError` (JSON-serialisable as a dict)."""

    def __init__(self, data: Mapping[str, Any], view: str, use: str) -> None:
        super().__init__(data)
        self._view, self._use = view, use

    def _refuse(self, *args: Any, **kwargs: Any) -> NoReturn:
        raise ReadOnlyError(self._view, self._use)

    __setitem__ = __delitem__ = __ior__ = _refuse  # type: ignore[assignment]
    update = pop = popitem = clear = setdefault = _refuse  # type: ignore[assignment]

    def copy(self) -> dict[str, Any]:  # type: ignore[override]
        return dict(self)

    def __reduce__(self) -> tuple[type, tuple[dict[str, Any]]]:
        return dict, (dict(self),)


class ReadOnlyList(list):
    """A list snapshot whose mutators raise :class:`ReadOnlyError`."""

    def __init__(self, data: Any, view: str, use: str) -> None:
        super().__init__(data)
        self._view, self._use = view, use

    def _refuse(self, *args: Any, **kwargs: Any) -> NoReturn:
        raise ReadOnlyError(self._view, self._use)

    __setitem__ = __delitem__ = __iadd__ = __imul__ = _refuse  # type: ignore[assignment]
    append = extend = insert = pop = remove = clear = sort = reverse = _refuse  # type: ignore[assignment]

    def copy(self) -> list[Any]:  # type: ignore[override]
        return list(self)

    def __reduce__(self) -> tuple[type, tuple[list[Any]]]:
        return list, (list(self),)


class SqlMapping(Mapping[str, Any]):
    """A read-only mapping whose keys and values come from SQL on every access.

    Args:
        view: the attribute's name for error messages (``"EntityMemory.entities"``).
        use: the method that writes (``"EntityMemory.save / update / delete"``).
        keys: returns the current keys, in order.
        get: returns the value of a key, or None when there is none.
        load: returns every key's value at once (one query, for ``items()`` / ``values()``);
            default: ``get`` per key.
    """

    def __init__(
        self,
        view: str,
        use: str,
        keys: Callable[[], list[str]],
        get: Callable[[str], Any | None],
        load: Callable[[], dict[str, Any]] | None = None,
    ) -> None:
        self._view, self._use = view, use
        self._keys, self._get, self._load = keys, get, load

    def snapshot(self) -> dict[str, Any]:
        """Every key and value now, as a plain dict (read in one query when possible)."""
        if self._load is not None:
            return dict(self._load())
        return {k: v for k in self._keys() if (v := self._get(k)) is not None}

    def items(self) -> Any:
        return self.snapshot().items()

    def values(self) -> Any:
        return self.snapshot().values()

    def __getitem__(self, key: str) -> Any:
        value = self._get(key) if isinstance(key, str) and key.strip() else None
        if value is None:
            raise KeyError(key)
        return value

    def __iter__(self) -> Iterator[str]:
        return iter(self._keys())

    def __len__(self) -> int:
        return len(self._keys())

    def _refuse(self, *args: Any, **kwargs: Any) -> NoReturn:
        raise ReadOnlyError(self._view, self._use)

    __setitem__ = __delitem__ = __ior__ = _refuse
    update = pop = popitem = clear = setdefault = _refuse

    def __repr__(self) -> str:
        return f"<{self._view}: {self.snapshot()!r}>"
