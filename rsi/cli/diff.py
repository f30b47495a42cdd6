"""`rsi diff A B`: what changed between two generations (terminal, Markdown, HTML or JSON)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from rsi.cli.common import WorkspaceOpt, console, errors, open_context, print_json
from rsi.core.errors import InputError

FORMATS = ("term", "md", "html", "json")


def register(app: typer.Typer) -> None:
    app.command("diff")(diff)


def diff(
    ctx: typer.Context,
    a: Annotated[str, typer.Argument(help="The older generation (e.g. the parent).")],
    b: Annotated[str, typer.Argument(help="The newer generation (e.g. the candidate).")],
    fmt: Annotated[str | None, typer.Option("--format", "-f", help="term | md | html | json (default: term; "
                                             "json: the same as --json).", show_default=False)] = None,
    out: Annotated[Path | None, typer.Option("--out", "-o", help="Write the report here (html default: "
                                             ".rsi/reports/diff-A-B.html).")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print the report as JSON (--format json).")] = False,
    _workspace: Annotated[Path | None, WorkspaceOpt] = None,
) -> None:
    """Config, adapter, contract, per-task flips, family rates, attribution shift and spend between A and B."""
    from rsi.report.diff import build_diff, default_out
    from rsi.store.files import write_atomic

    with errors():
        if json_out and fmt not in (None, "json"):
            raise InputError("--format", None, f"'{fmt}' and --json ask for two formats; give one")
        fmt = "json" if json_out else fmt or "term"
        if fmt not in FORMATS:
            raise InputError("--format", None, f"'{fmt}' is not one of {', '.join(FORMATS)}")
        wctx = open_context(ctx)
        report = build_diff(wctx, a, b)
        if fmt == "term" and out is None:
            from rsi.report.diff_render import term

            console.print(term(report))
            return
        if fmt == "json" and out is None:
            print_json(report.as_json())
            return
        if fmt == "html":
            from rsi.report.diff_html import html

            text = html(report)
        elif fmt == "md":
            from rsi.report.diff_render import markdown

            text = markdown(report)
        elif fmt == "json":
            import json

            text = json.dumps(report.as_json(), indent=2, default=str)
        else:  # term, to a file: rendered into a buffer (a capture() records nothing to export)
            import io

            from rich.console import Console

            from rsi.report.diff_render import term

            rec = Console(record=True, width=120, file=io.StringIO())
            rec.print(term(report))
            text = rec.export_text()
        if out is None and fmt == "md":
            typer.echo(text)
            return
        path = out or default_out(wctx, report.a, report.b, fmt)
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, text)
        console.print(f"wrote {path.resolve()}", highlight=False, soft_wrap=True)
