"""`rsi config check`: validate a harness config against its contract."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from rsi.cli.common import WorkspaceOpt, console, errors, print_json, workspace_root

app = typer.Typer(help="Harness configs.", no_args_is_help=True)


@app.command()
def check(
    ctx: typer.Context,
    file: Annotated[Path, typer.Argument(help="A harness config YAML file.")],
    contract: Annotated[
        Path | None, typer.Option("--contract", help="Contract file (default: the workspace's contract).")
    ] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print the verdict as JSON (a refusal is still one line "
                                           "on stderr and exit 2).")] = False,
    _workspace: Annotated[Path | None, WorkspaceOpt] = None,
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
    if json_out:
        print_json({"file": str(file), "ok": True, "name": cfg.name, "digest": cfg.digest(), "hcp": c.hcp})
        return
    console.print(f"[green]ok[/] {file}: '{cfg.name}' digest {cfg.digest()[:12]} satisfies HCP {c.hcp}")


@app.command("list")
def list_configs(
    ctx: typer.Context,
    json_out: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
    _workspace: Annotated[Path | None, WorkspaceOpt] = None,
) -> None:
    """Every harness config a trial or generation used, by digest (content-addressed)."""
    from rich.table import Table

    from rsi.cli.common import open_context

    with errors():
        rows = open_context(ctx).store.list_configs()
    if json_out:
        print_json([{"digest": r.digest, "name": r.name, "origin": r.origin, "source": r.source,
                     "parent": r.parent_digest, "created_at": r.created_at} for r in rows])
        return
    table = Table()
    for c in ("digest", "name", "origin", "parent", "source"):
        table.add_column(c)
    for r in rows:
        table.add_row(r.digest[:12], r.name, r.origin, (r.parent_digest or "-")[:12], r.source or "-")
    console.print(table)


@app.command("show")
def show_config(
    ctx: typer.Context,
    digest: Annotated[str, typer.Argument(help="A config digest (or a unique prefix).")],
    json_out: Annotated[bool, typer.Option("--json", help="Print the config and its provenance as JSON.")] = False,
    _workspace: Annotated[Path | None, WorkspaceOpt] = None,
) -> None:
    """Print a stored harness config as the canonical YAML it ran under."""
    from rsi.cli.common import open_context

    with errors():
        row = open_context(ctx).store.get_config(digest)
    if json_out:
        import yaml

        print_json({"digest": row.digest, "name": row.name, "origin": row.origin, "parent": row.parent_digest,
                    "source": row.source, "config": yaml.safe_load(row.canonical_yaml)})
        return
    typer.echo(f"# {row.name}  digest {row.digest}  origin {row.origin}" + (f"  parent {row.parent_digest}"
                                                                              if row.parent_digest else ""))
    typer.echo(row.canonical_yaml, nl=False)
