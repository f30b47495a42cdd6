"""`rsi sandbox build-base|gc`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from rsi.cli.common import AddressOpt, ExecutorOpt, WorkspaceOpt, console, errors, print_json, workspace_root

app = typer.Typer(help="Sandbox images and leftovers.", no_args_is_help=True)


@app.command("build-base")
def build_base(
    ctx: typer.Context,
    name: Annotated[
        str | None, typer.Option("--name", help="Image name (default: the workspace's base image).")
    ] = None,
    force: Annotated[bool, typer.Option("--force", help="Rebuild even if the image exists.")] = False,
    as_tags: Annotated[
        list[str] | None,
        typer.Option("--as", help="Also make this public tag (a Dockerfile's FROM) resolve offline; repeatable."),
    ] = None,
    suite: Annotated[
        str | None,
        typer.Option("--suite", help="Release codename: for --as (default: the tag's), or alone: rsi-base:SUITE."),
    ] = None,
    _workspace: Annotated[Path | None, WorkspaceOpt] = None,
) -> None:
    """Build the local base image (Debian minbase + python3) with debootstrap and `docker import`.

    `--as python:3.13-slim-bookworm` stands a local image in for a public one a task's FROM names, of the
    tag's own release (bookworm there, with CPython 3.13 in /usr/local; trixie for python:3.13-slim) and with
    its apt sources, so the Dockerfile's apt-get installs that release's versions; trials record it. A
    python:* stand-in's interpreter makes venvs and has pip, as the official image's. An Ubuntu tag needs
    Ubuntu's archive keyring on the host; without it, `--as ubuntu:24.04 --suite bookworm` makes an explicit
    Debian stand-in. `--suite trixie` builds rsi-base:trixie, from which rsi also assembles the Python 3.13
    it adds to verifiers whose image has none (a TB 2.x test.sh's `uvx -p 3.13` on a python:3.11 image)."""
    from rsi.sandbox.base_image import base_image_present, build_base_image, resolve_base_image, substitute_base
    from rsi.store.paths import Workspace

    if as_tags:
        with errors():
            for tag in as_tags:
                with console.status(f"making {tag} resolve offline (a Debian build takes about a minute)..."):
                    substitute_base(tag, suite=suite, force=force)
                console.print(f"[green]ready[/] {tag}")
        from rsi.sandbox.base_image import suite_for

        _portable_python_if_trixie(suite or ("trixie" if any(suite_for(t) == "trixie" for t in as_tags) else None))
        return
    with errors():
        if name:
            image = name
        elif suite:
            image = f"rsi-base:{suite}"
        else:
            ws = Workspace.locate(workspace_root(ctx))
            image = resolve_base_image(ws.settings().sandbox.base_image if ws.exists() else None)
        if base_image_present(image) and not force:
            console.print(f"{image} already exists (use --force to rebuild)")
        else:
            with console.status(f"building {image} (debootstrap, about a minute)..."):
                build_base_image(image, suite or "bookworm")
            console.print(f"[green]built[/] {image}")
    _portable_python_if_trixie(suite)


def _portable_python_if_trixie(suite: str | None) -> None:
    """After rsi-base:trixie exists, assemble the verifiers' Python 3.13 from it (once per image)."""
    if suite != "trixie":
        return
    from rsi.sandbox.portable_python import portable_python

    with errors(), console.status("assembling python 3.13 for verifiers..."):
        got = portable_python()
    if isinstance(got, str):
        console.print(f"[yellow]no python 3.13 for verifiers:[/] {got}")
    else:
        console.print(f"[green]ready[/] python {got.version} for verifiers whose image has none ({got.root})")


@app.command()
def gc(
    ctx: typer.Context,
    json_out: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
    all_jobs: Annotated[
        bool, typer.Option("--all", help="Also sweep jobs this workspace does not know (other workspaces).")
    ] = False,
    executor: Annotated[str | None, ExecutorOpt] = None,
    address: Annotated[str | None, AddressOpt] = None,
    _workspace: Annotated[Path | None, WorkspaceOpt] = None,
) -> None:
    """Remove the rsi containers and snapshot images of this workspace's jobs that are not running
    (`--executor ray`: on every slot node of the cluster, each through its own Docker daemon)."""
    from rsi.exec.local import driver_provider
    from rsi.store.paths import Workspace
    from rsi.store.repo import Store

    with errors():
        ws = Workspace.locate(workspace_root(ctx))
        store = Store.for_path(ws.db_path) if ws.exists() else None
        live = store.live_job_ids() if store else set()
        # Another workspace's jobs may be running on the same daemon: leave them unless --all.
        scope = None if all_jobs else {j.id for j in store.list_jobs(limit=1_000_000)} if store else set()
        chosen = ws.settings().executor if ws.exists() else None
        name = executor or (chosen.name if chosen else "local")
        provider = driver_provider(name, "docker", address or (chosen.address if chosen else None))
        report = provider.gc(live, scope=scope)
    if json_out:
        print_json({"containers": report.containers, "images": report.images, "live_jobs": sorted(live)})
        return
    console.print(f"removed {len(report.containers)} container(s), {len(report.images)} snapshot image(s)")
