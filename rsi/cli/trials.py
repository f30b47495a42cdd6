"""`rsi trials list|show`: read trial results and trajectories."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from rsi.cli.common import WorkspaceOpt, console, errors, open_context, print_json

app = typer.Typer(help="Trials: results and trajectories.", no_args_is_help=True)


@app.command("list")
def list_trials(
    ctx: typer.Context,
    job: Annotated[str, typer.Argument(help="Job id.")],
    json_out: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
    _workspace: Annotated[Path | None, WorkspaceOpt] = None,
) -> None:
    """List the trials of a job."""
    with errors():
        store = open_context(ctx).store
        rows = store.trials(store.get_job(job).id)
    if json_out:
        from rsi.report.jobs import trial_json

        print_json([trial_json(t) for t in rows])
        return
    nodes = any(t.node for t in rows)  # a node column only for a job that ran on a cluster
    table = Table()
    for c in ("trial", "status", "reward", "passed", "error", *(("node",) if nodes else ())):
        table.add_column(c)
    for t in rows:
        table.add_row(t.id, t.status, "-" if t.reward is None else f"{t.reward:g}", "yes" if t.passed else "no",
                      t.error_type or "", *((node_label(t.node, short=True),) if nodes else ()))
    console.print(table)


def node_label(node: str | None, *, short: bool = False) -> str:
    """Where a trial ran: its Ray node id (`ray` executor; the first 12 characters when `short`), or
    `local` for one the driver ran on its own machine (the `local` executor records no node)."""
    if not node:
        return "local"
    return node[:12] if short else node


@app.command()
def show(
    ctx: typer.Context,
    trial: Annotated[str, typer.Argument(help="Trial id (or a unique prefix).")],
    json_out: Annotated[bool, typer.Option("--json", help="Print the trial's result as JSON.")] = False,
    _workspace: Annotated[Path | None, WorkspaceOpt] = None,
) -> None:
    """Show a trial's result and render its trajectory."""
    with errors():
        row = open_context(ctx).store.get_trial(trial)
    fidelity = _fidelity(Path(row.trial_dir) / "result.json")
    if json_out:
        from rsi.report.jobs import trial_json

        print_json({**trial_json(row), **fidelity})
        return
    console.print(
        f"[bold]{row.id}[/]  status={row.status} reward={row.reward} passed={row.passed} "
        f"error={row.error_type or '-'} integrity={row.integrity or '-'} node={node_label(row.node)}"
    )
    if row.error_message:
        console.print(row.error_message, style="yellow", markup=False, highlight=False)
    if row.tamper_reasons:
        console.print("changes that void the pass (path, rule):", markup=False, highlight=False)
        for reason in row.tamper_reasons:
            console.print(f"  {reason}", style="red", markup=False, highlight=False)
    vouched = fidelity.get("package_manager")
    if vouched:
        console.print(f"installed by a package manager and vouched for: {vouched.get('vouched', 0)} changed paths "
                      f"outside the writable roots", markup=False, highlight=False)
    for base, what in (fidelity.get("base_substitution") or {}).items():
        console.print(f"base image {base} was a local substitute: {what}", markup=False, highlight=False)
    env = fidelity.get("environment") or {}
    if env.get("release") or env.get("apt_installed"):
        pkgs = " ".join(f"{n}={v}" for n, v in (env.get("apt_installed") or {}).items())
        console.print(f"environment: {env.get('release') or '?'} (FROM {env.get('from')}); the Dockerfile installed: "
                      f"{pkgs or 'no Debian package'}", markup=False, highlight=False)
    for key in ("agent_services", "service_unreachable"):
        if fidelity.get(key):
            console.print(f"{key.replace('_', ' ')}: {fidelity[key]}", markup=False, highlight=False)
    shim = fidelity.get("verifier_shim")
    if shim:
        console.print("verifier tool shim:", markup=False, highlight=False)
        for key in ("uv", "installer", "python", "apt", "requirements", "offline", "ca_bundle", "env_passed", "why"):
            if shim.get(key) not in (None, "", []):
                console.print(f"  {key}: {shim[key]}", markup=False, highlight=False)
        wheels = shim.get("wheels")
        if isinstance(wheels, dict):
            files, pythons = wheels.get("wheels") or [], ", ".join(wheels.get("pythons") or [])
            console.print(f"  wheels: {len(files)} for python {pythons}, {wheels.get('source')}: {' '.join(files)}",
                          markup=False, highlight=False)
        elif wheels:
            console.print(f"  wheels: none served ({wheels})", markup=False, highlight=False)
    traj = Path(row.trial_dir) / "trajectory.json"
    if traj.is_file():
        from rsi.report.trajectory import render_trajectory

        render_trajectory(traj, console)
    else:
        console.print(f"(no trajectory at {traj})")


def _fidelity(result: Path) -> dict[str, Any]:
    """What a trial ran with instead of the task's own parts: a substituted base image, the verifier's tool
    shim (both recorded in the trial's result.json `extra`); empty when none or unreadable."""
    try:
        extra = json.loads(result.read_text()).get("extra") or {}
    except (OSError, ValueError):
        return {}
    keys = ("base_substitution", "verifier_shim", "package_manager", "environment", "agent_services",
            "service_unreachable")
    return {k: extra[k] for k in keys if extra.get(k)}
