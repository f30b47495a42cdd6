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
