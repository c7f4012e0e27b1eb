"""A small registry for pluggable parts (datasets, secret extractors, canary kinds, attacks, ...).

In the style of opacus' accountant registry: a dict, a decorator that refuses duplicates and a
getter that lists the known names on a miss.
"""
from __future__ import annotations

from typing import Callable, Generic, Iterator, TypeVar

from .errors import ConfigError

T = TypeVar("T")


class Registry(Generic[T]):
    def __init__(self, what: str):
        self.what = what
        self._items: dict[str, T] = {}

    def register(self, name: str) -> Callable[[T], T]:
        def deco(obj: T) -> T:
            if name in self._items:
                raise ValueError(f"{self.what} {name!r} is already registered")
            self._items[name] = obj
            return obj

        return deco

    def get(self, name: str, key: str | None = None) -> T:
        try:
            return self._items[name]
        except KeyError:
            where = f"{key}: " if key else ""
            raise ConfigError(
                f"{where}unknown {self.what} {name!r} (known: {', '.join(sorted(self._items))})"
            ) from None

    def names(self) -> list[str]:
        return sorted(self._items)

    def __contains__(self, name: object) -> bool:
        return name in self._items

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(self._items))
