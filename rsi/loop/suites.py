"""The contract's regression suites (`promotion.suites`): fixed task sets no generator wrote.

Promote measures parent and candidate on them (a non-inferiority gate); no phase ever trains on them,
so a suite measures what the loop did to skills it was never shown.
"""

from __future__ import annotations

from rsi.core.errors import InputError
from rsi.core.task import Task
from rsi.loop.context import WorkspaceContext
from rsi.store.files import find_task_dirs, load_tasks


def suite_tasks(ctx: WorkspaceContext) -> list[Task]:
    """The tasks of the contract's regression suites (`promotion.suites`, relative to the workspace root);
    InputError naming the contract and the field when a suite is not a directory of tasks."""
    out: list[Task] = []
    for i, rel in enumerate(ctx.contract.promotion.suites):
        d = (ctx.ws.root / rel).resolve()
        dirs = find_task_dirs([d]) if d.is_dir() else []
        if not dirs:
            raise InputError(str(ctx.contract_path), f"promotion.suites[{i}]",
                             f"'{rel}' is not a directory of tasks under {ctx.ws.root}")
        out.extend(load_tasks(dirs))
    return out


def suite_digests(ctx: WorkspaceContext) -> set[str]:
    """Digests of the suites' tasks (never training data); empty when a suite is missing."""
    try:
        return {t.digest for t in suite_tasks(ctx)}
    except InputError:
        return set()


__all__ = ["suite_digests", "suite_tasks"]
