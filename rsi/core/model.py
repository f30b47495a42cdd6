"""The base of rsi's own pydantic models.

Every model builds its validator on first use rather than at import (`defer_build`): a command imports
dozens of models and uses a few (`rsi diff` none of the task or search ones), and building them all cost a
fifth of its start-up. Validation itself is the same.

Pydantic's lazy build is not thread-safe (pydantic issues 11849 and 13419): two threads that first use a model at
once both rebuild it, and the second deletes the validator the first just set, so a third thread validating in
that instant gets the *parent* class's validator (a trial once wrote its trajectory as a bare `_Open` and the job
stopped). Trials run on threads, so every rebuild of an rsi model takes one process-wide lock: the first thread
builds, the others wait and then find the model complete.
"""

from __future__ import annotations

import threading
from typing import Any

from pydantic import BaseModel, ConfigDict

_REBUILD = threading.RLock()  # re-entrant: building one model builds the models its fields name


class RsiModel(BaseModel):
    model_config = ConfigDict(defer_build=True)

    @classmethod
    def model_rebuild(cls, *, force: bool = False, raise_errors: bool = True, _parent_namespace_depth: int = 2,
                      _types_namespace: Any = None) -> bool | None:
        """`BaseModel.model_rebuild` under the process-wide lock (a deferred build on first use comes here too)."""
        with _REBUILD:
            # this frame sits between the caller and pydantic's: the caller's namespace is one frame further up
            depth = _parent_namespace_depth + 1 if _parent_namespace_depth > 0 else _parent_namespace_depth
            return super().model_rebuild(force=force, raise_errors=raise_errors, _parent_namespace_depth=depth,
                                         _types_namespace=_types_namespace)
