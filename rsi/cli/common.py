"""What every command shares: consoles, the workspace option, error handling, JSON output."""

from __future__ import annotations

import json
import tempfile
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import typer
import typer.core
from rich.console import Console

from rsi.core.errors import RsiError

console = Console()
err_console = Console(stderr=True)


def _flags_take_no_value() -> None:
    """Typer's rich help prints an option's type beside it, a boolean flag's too (`--json <bool>`, `--help -h
    <bool>`), as if it took a value (`--json true` is refused); its plain help leaves flags bare, and so does
    this. A repeatable option or argument shows the type of one value (`--gen <str>`, not `<list[str]>`, which
    reads as if it took a list)."""
    for cls in (typer.core.TyperOption, typer.core.TyperArgument):
        if getattr(cls.display_type_rich, "_rsi_flags", False):
            continue
        shown = cls.display_type_rich

        def display_type_rich(self: Any, ctx: Any, shown: Any = shown) -> str | None:
            if getattr(self, "is_flag", False) or getattr(self, "count", False):
                return None
            label = shown(self, ctx)
            if label and self.metavar is None and label.startswith("<list[") and label.endswith("]>"):
                label = "<" + label[len("<list["):-len("]>")] + ">"
            return label

        display_type_rich._rsi_flags = True  # type: ignore[attr-defined]
        cls.display_type_rich = display_type_rich  # type: ignore[method-assign]


_flags_take_no_value()


@contextmanager
def errors() -> Iterator[None]:
    """Turn any RsiError into one line on the error console and its exit code."""
    try:
        yield
    except RsiError as e:
        err_console.print(f"[bold red]error:[/] {e}", highlight=False, soft_wrap=True)
        raise typer.Exit(e.exit_code) from None
    except (typer.Exit, typer.Abort, KeyboardInterrupt):
        raise
    except Exception as e:  # noqa: BLE001 - a bug: one line for the user, the traceback in a file
        log = Path(tempfile.gettempdir()) / "rsi-last-error.log"
        log.write_text(traceback.format_exc())
        err_console.print(f"[bold red]error:[/] internal error: {type(e).__name__}: {e} (traceback in {log})",
                          highlight=False, soft_wrap=True)
        raise typer.Exit(1) from None


def _set_workspace(ctx: typer.Context, value: Path | None) -> Path | None:
    """`-w` after the command name: the same as before it (the root context holds the workspace)."""
    if value is not None:
        root = ctx.find_root()
        if not isinstance(root.obj, dict):
            root.obj = {}
        root.obj["workspace"] = value
    return value


WORKSPACE_HELP = "Workspace root (default: $RSI_HOME, else the nearest rsi.yaml upwards)."
# every command that reads a workspace takes `-w/--workspace` after its name too (`rsi jobs list -w DIR`); the
# value lands where the global option's does, so commands read it with workspace_root(ctx) either way
WorkspaceOpt = typer.Option("--workspace", "-w", help=WORKSPACE_HELP, callback=_set_workspace, expose_value=False,
                            show_default=False)


def deprecated(old: str, new: str) -> Any:
    """A hidden option spelled the old way (a flag when the parameter is a bool): it still works for one release and
    says once what replaces it."""
    def warn(value: Any) -> Any:
        if value not in (None, False):
            err_console.print(f"[yellow]deprecated:[/] {old} is now {new}; {old} goes in the next release",
                              highlight=False, soft_wrap=True)
        return value

    return typer.Option(old, hidden=True, callback=warn, help=f"Deprecated: {new}.")


def workspace_root(ctx: typer.Context) -> Path | None:
    root = ctx.find_root()
    obj = root.obj if isinstance(root.obj, dict) else {}
    return obj.get("workspace")


def open_context(ctx: typer.Context) -> Any:
    from rsi.loop.context import WorkspaceContext

    return WorkspaceContext.open(workspace_root(ctx))


TrialsUnitOpt = typer.Option(
    "--unit", help="Budget unit: trials, the only one this command's plan splits across its stages (tokens and "
                   "minutes budgets are for `rsi run` and `rsi expand`).")


def trials_only(unit: str) -> None:
    """`--unit` where a budget counts trials only: anything else is refused, naming where it is taken."""
    from rsi.core.errors import InputError

    if unit != "trials":
        raise InputError("--unit", None, f"'{unit}': this command's budget counts trials (its plan splits them by "
                                         "stage); tokens and minutes budgets are for `rsi run` and `rsi expand`")


ExecutorOpt = typer.Option("--executor", help="Where trials run: local | ray (default: rsi.yaml `executor:`).")
AddressOpt = typer.Option("--address", help="With --executor ray: the cluster (default: RAY_ADDRESS, else the "
                          "cluster this machine joined).")


def use_executor(wctx: Any, name: str | None, address: str | None) -> None:
    """`--executor NAME [--address ADDR]` over the workspace's `executor:` settings (an unknown name
    lists the known ones)."""
    if name is None and address is None:
        return
    from rsi.core.settings import ExecutorSettings
    from rsi.exec.local import EXECUTORS

    cur = wctx.settings.executor
    chosen = ExecutorSettings(name=name or cur.name, address=address or cur.address)
    EXECUTORS.get(chosen.name)
    wctx.settings = wctx.settings.model_copy(update={"executor": chosen})


def print_json(obj: Any) -> None:
    typer.echo(json.dumps(obj, indent=2, default=str))


def harness_config_file(wctx: Any, name: str) -> Path:
    """`--harness NAME`: harness_configs/NAME.yaml of the workspace (a path is taken as it is)."""
    from rsi.core.errors import InputError

    p = Path(name)
    path = p if p.suffix in (".yaml", ".yml") else wctx.harness_config_path(name)
    if not path.is_file():
        known = sorted(f.stem for f in wctx.ws.harness_configs_dir.glob("*.yaml"))
        raise InputError("--harness", None, f"no harness config {path} (known: {', '.join(known) or 'none'})")
    return Path(path)
