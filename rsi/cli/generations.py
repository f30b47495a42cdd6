"""`rsi generations list|show`: the lineage of model-harness pairs."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
import yaml

from rsi.cli.common import WorkspaceOpt, console, errors, open_context, print_json

app = typer.Typer(help="Generations: model-harness pairs and their lineage.", no_args_is_help=True)


@app.command("list")
def list_generations(
    ctx: typer.Context,
    json_out: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
    _workspace: Annotated[Path | None, WorkspaceOpt] = None,
) -> None:
    """List every registered generation."""
    with errors():
        gens = open_context(ctx).store.list_generations()
    if json_out:
        print_json([g.model_dump(mode="json") for g in gens])
        return
    from rich.tree import Tree

    by_parent: dict[str | None, list] = {}
    ids = {g.id for g in gens}
    for g in gens:
        by_parent.setdefault(g.parent if g.parent in ids else None, []).append(g)
    colour = {"promoted": "green", "candidate": "yellow", "rejected": "red", "superseded": "dim"}
    root = Tree("[bold]generations[/] (lineage: parent -> child)")

    def add(node: Tree, parent: str | None) -> None:
        for g in by_parent.get(parent, []):
            m = g.metrics
            figures = []
            if "holdout_pass_rate" in m:
                figures.append(f"holdout {m['holdout_pass_rate']:.3f} on {int(m.get('holdout_tasks', 0))} tasks")
            if "holdout_p" in m:
                figures.append(f"p {m['holdout_p']:.3g}")
            if "train_accepted" in m:
                figures.append(f"trained on {int(m['train_accepted'])} accepted")
            c = colour.get(g.state.value, "white")
            label = (f"[bold]{g.id}[/] [{c}]{g.state.value}[/]  hcp {g.contract}  model {g.serve_name()}  "
                     f"config {g.harness_config.name} ({g.harness_config.digest[:12]})"
                     + (f"  [cyan]{', '.join(figures)}[/]" if figures else ""))
            add(node.add(label), g.id)

    add(root, None)
    console.print(root)


@app.command()
def show(
    ctx: typer.Context,
    gen: Annotated[str | None, typer.Argument(help="Generation id (default: the current one).")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
    _workspace: Annotated[Path | None, WorkspaceOpt] = None,
) -> None:
    """Show a generation's manifest."""
    with errors():
        m = open_context(ctx).generation(gen)
    if json_out:
        print_json(m.model_dump(mode="json"))
    else:
        console.print(yaml.safe_dump(m.model_dump(mode="json"), sort_keys=False), markup=False, highlight=False)
