"""`rsi config check`: validate a harness config against its contract."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from rsi.cli.common import console, errors, workspace_root

app = typer.Typer(help="Harness configs.", no_args_is_help=True)


@app.command()
def check(
    ctx: typer.Context,
    file: Annotated[Path, typer.Argument(help="A harness config YAML file.")],
    contract: Annotated[
        Path | None, typer.Option("--contract", help="Contract file (default: the workspace's contract).")
    ] = None,
) -> None:
    """Refuse a config that loosens any contract limit or names a tool the substrate lacks."""
    from rsi.core.errors import InputError
    from rsi.core.harness_config import contract_violations
    from rsi.store.files import load_contract, load_harness_config
    from rsi.store.paths import Workspace

    with errors():
        cfg = load_harness_config(file)
        if contract is None:
            ws = Workspace.locate(workspace_root(ctx))
            contract = ws.resolve(ws.settings().contract)
        c = load_contract(contract)
        problems = contract_violations(cfg, c)
        if problems:
            field, _, msg = problems[0].partition(": ")
            extra = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
            raise InputError(str(file), field, msg + extra)
    console.print(f"[green]ok[/] {file}: '{cfg.name}' digest {cfg.digest()[:12]} satisfies HCP {c.hcp}")
