"""A fresh question every demo: `rsi demo` draws its first cycle's seed afresh unless `--seed` pins it, so two demos
ask different held-out questions and one can be asked again. (The cycle itself is stubbed here: what is checked
is the request the demo hands it.)"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

import rsi.cli.cycle as cycle_cli
from rsi.cli.app import app


def _seed_of_a_demo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, *args: str) -> Any:
    seen: list[Any] = []

    def fake_run(wctx: Any, req: Any, *a: Any, **k: Any) -> Any:
        seen.append(req.seed)
        wctx.store.close()
        raise typer.Exit(7)

    monkeypatch.setattr(cycle_cli, "_run", fake_run)
    r = CliRunner().invoke(app, ["demo", "--dir", str(tmp_path / name), "--json", *args])
    assert r.exit_code == 7, r.output
    return seen[0]


def test_each_demo_draws_its_own_seed_and_seed_pins_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    seeds = {_seed_of_a_demo(tmp_path, monkeypatch, f"d{i}") for i in range(4)}
    assert None not in seeds and all(isinstance(s, int) and s > 0 for s in seeds)
    assert len(seeds) >= 3, seeds  # drawn from a million: four demos almost never share one
    assert _seed_of_a_demo(tmp_path, monkeypatch, "pinned", "--seed", "42") == 42


def test_the_demos_budget_leaves_its_main_discover_what_its_candidates_are_planned_at(tmp_path: Path) -> None:
    """The compositions and the holdout top-ups are set aside before the main discover runs; the demo's budget must
    still leave the main discover the trials its DEMO_TRAIN_TASKS candidates are planned at (about 6 each: two
    oracle runs, nop, two known-wrong answers, a probe; it stops at its budget), or the single operations shrink
    whenever compositions are added."""
    from rsi.loop.context import WorkspaceContext
    from rsi.loop.cycle.demo import DEMO_BUDGET, DEMO_COMPOSITIONS, DEMO_TRAIN_TASKS, demo_request, demo_settings
    from rsi.loop.cycle.phase import _Cycle, _open_job
    from rsi.loop.hooks import CycleHooks
    from rsi.loop.init import init_workspace

    root = tmp_path / "demo"
    init_workspace(root, starter_tasks=False)
    demo_settings(root)
    ctx = WorkspaceContext.open(root)
    try:
        req = demo_request(DEMO_BUDGET)
        job_id, gen, split = _open_job(ctx, req)
        run = _Cycle(ctx, req, CycleHooks(), job_id, gen, split)
        reserve = min(int(split["discover"] * 0.6),
                      run._holdout_wanted() * run._holdout_cost() + DEMO_COMPOSITIONS * run._train_cost())
        assert DEMO_COMPOSITIONS > 0 and split["discover"] - reserve >= DEMO_TRAIN_TASKS * 6 + 7, (split, reserve)
    finally:
        ctx.store.close()



def test_the_demo_commands_default_budget_is_the_demos_planned_budget() -> None:
    """`rsi demo --help` shows the budget the demo's plan is sized at (the CLI keeps the literal to stay fast)."""
    import inspect

    from rsi.loop.cycle.demo import DEMO_BUDGET

    assert inspect.signature(cycle_cli.demo).parameters["budget"].default == DEMO_BUDGET
