"""A tiny named registry: providers are chosen by name; an unknown name lists the known ones."""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, TypeVar

from rsi.core.errors import NotFoundError

T = TypeVar("T")


class Registry(Generic[T]):
    """Maps names to factories of one kind of provider (sandbox, agent, training backend...)."""

    instances: list[Registry[object]] = []  # every registry made, so a test harness can undo what a test added

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._factories: dict[str, Callable[..., T]] = {}
        Registry.instances.append(self)  # type: ignore[arg-type]

    def register(self, name: str) -> Callable[[Callable[..., T]], Callable[..., T]]:
        def deco(factory: Callable[..., T]) -> Callable[..., T]:
            self._factories[name] = factory
            return factory

        return deco

    def add(self, name: str, factory: Callable[..., T]) -> None:
        self._factories[name] = factory

    def remove(self, name: str) -> None:
        """Forget `name` (a plugin unloaded, or a test's fake going out of scope); unknown names are ignored."""
        self._factories.pop(name, None)

    def items(self) -> dict[str, Callable[..., T]]:
        """A copy of the name -> factory map."""
        return dict(self._factories)

    def names(self) -> list[str]:
        return sorted(self._factories)

    def get(self, name: str) -> Callable[..., T]:
        try:
            return self._factories[name]
        except KeyError:
            known = ", ".join(self.names()) or "(none)"
            raise NotFoundError(f"unknown {self.kind} '{name}'; known: {known}") from None

    def create(self, name: str, *args: object, **kwargs: object) -> T:
        return self.get(name)(*args, **kwargs)
