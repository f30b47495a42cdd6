"""`rsi generations list|show`: the lineage of model-harness pairs."""

from __future__ import annotations

from typing import Annotated

import typer
import yaml
from rich.table import Table

from rsi.cli.common import console, errors, open_context, print_json

app = typer.Typer(help="Generations: model-harness pairs and their lineage.", no_args_is_help=True)


@app.command("list")
def list_generations(
    ctx: typer.Context,
    json_out: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """List every registered generation."""
    with errors():
        gens = open_context(ctx).store.list_generations()
    if json_out:
        print_json([g.model_dump(mode="json") for g in gens])
        return
    table = Table()
    for c in ("id", "parent", "state", "contract", "model", "harness config"):
        table.add_column(c)
    for g in gens:
        table.add_row(g.id, g.parent or "-", g.state.value, g.contract, g.serve_name(),
                      f"{g.harness_config.name} ({g.harness_config.digest[:12]})")
    console.print(table)


@app.command()
def show(
    ctx: typer.Context,
    gen: Annotated[str | None, typer.Argument(help="Generation id (default: the current one).")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Show a generation's manifest."""
    with errors():
        m = open_context(ctx).generation(gen)
    if json_out:
        print_json(m.model_dump(mode="json"))
    else:
        console.print(yaml.safe_dump(m.model_dump(mode="json"), sort_keys=False), markup=False, highlight=False)
