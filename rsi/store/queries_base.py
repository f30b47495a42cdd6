"""What every group of store queries stands on: the engine and a session per unit of work.

`Store` (rsi/store/repo.py) is the single entry class; it is assembled from mixins, one module per
group of tables, each deriving from `StoreBase` so it can open sessions. Each write opens one
session and commits once: one transaction per call.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from sqlalchemy.engine import Engine
from sqlmodel import Session


class StoreBase:
    """The engine and its sessions; set up by `Store.__init__`."""

    url: str
    engine: Engine

    @contextmanager
    def session(self) -> Iterator[Session]:
        """A session whose objects stay readable after commit (rows are handed back to callers)."""
        with Session(self.engine, expire_on_commit=False) as s:
            yield s


def check_choice(what: str, value: Any, allowed: tuple[str, ...]) -> None:
    """Refuse a value outside a fixed vocabulary with a message naming the choices."""
    if value not in allowed:
        raise ValueError(f"{what} must be one of {', '.join(allowed)}; got {value!r}")
