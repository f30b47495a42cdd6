"""Write docs/cli.md from what `rsi ... --help` prints, so the CLI reference is exactly what users see.

    python3 scripts/gen_cli_docs.py          # write docs/cli.md
    python3 scripts/gen_cli_docs.py --check  # exit 1 when docs/cli.md differs from the live --help (test_docs.py)

Each command's section is its `--help` as the shell shows it (Typer's rich layout, no colour, 100 columns),
captured through the same Click objects and the same formatter, so a help text that misleads (`--json <bool>`)
shows up here too, and the check fails on any difference.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import typer
import typer.rich_utils
from typer.testing import CliRunner

from rsi.cli.app import app

OUT = Path(__file__).resolve().parents[1] / "docs" / "cli.md"
WIDTH = 100

# the grammar every command follows (tests/unit/test_cli_grammar.py checks it): spelling, meaning, where
GRAMMAR_ROWS = [
    ("`-w`, `--workspace DIR`", "the workspace root (default: `$RSI_HOME`, else the nearest `rsi.yaml` upwards)",
     "before or after the command name, on every command that reads a workspace; `rsi init DIR` and "
     "`rsi demo --dir DIR` are the same as `-w DIR` there"),
    ("`-n`, `--concurrency N`", "trials at a time", "run, discover, expand, promote, cycle"),
    ("`-k`, `--attempts K`", "attempts per task (discover, cycle: probe attempts per candidate)",
     "run, discover, expand, cycle"),
    ("`--candidates N`", "how many candidate tasks discover generates", "discover, cycle"),
    ("`-c`, `--candidate PATCH`", "a harness-config patch to try", "expand"),
    ("`-a`, `--agent NAME`", "who attempts the tasks; `rsi run` asks for it (or `--harness`)", "run"),
    ("`-g`, `--generator NAME`", "a task generator", "discover, cycle"),
    ("`--json`", "print the listing or the result as JSON (a flag: it takes no value)",
     "every command but `view`, `model serve` and `sandbox build-base`"),
    ("`--report-to NAME`", "send params, metrics and artifacts to trackers",
     "run, discover, expand, update, promote, cycle, demo"),
    ("`--resume JOB`", "finish a stopped job", "run, discover, expand, promote, cycle, demo"),
    ("`--budget X`", "stop when this much is spent (`--unit`: trials, tokens or minutes on run and expand; "
     "trials elsewhere)", "run, discover, expand, cycle, demo"),
]

GRAMMAR = (
    "## The grammar\n\nEvery command spells the same thing the same way (tests/unit/test_cli_grammar.py walks "
    "every command and checks):\n\n| spelling | means | where |\n|---|---|---|\n"
    + "".join(f"| {a} | {b} | {c} |\n" for a, b, c in GRAMMAR_ROWS)
    + """
Counts of things have long names (`--candidates`, `--attempts`, `--proposals`, `--cycles`); a short flag means one
thing everywhere. A boolean that is off by default is a flag, which takes no value (`--json`, `--dry-run`); one
that is on by default is a `--x/--no-x` pair (`--html/--no-html`, `init --tasks/--no-tasks`, `doctor
--start/--no-start`).

Old spellings that still work for one release, each printing one `deprecated:` line on stderr:
`rsi discover --n N` and `rsi cycle --n N` (now `--candidates N`), `rsi expand --no-fewshot` (now
`--fewshot 0`). Gone: `rsi cycle -c N` (`-c` is expand's
`--candidate`; use `-n N`). `rsi run` without `--agent` (or `--harness`, or `--resume`) is refused: it used to
run the reference solutions (`oracle`) when nothing was said.
""")


def _subs(cmd: Any) -> list[tuple[str, Any]]:
    """A group's commands, asked by name as the shell does (Typer vendors its own click, so no isinstance)."""
    if not hasattr(cmd, "list_commands"):
        return []
    ctx = cmd.context_class(cmd, info_name="rsi")
    found = [(n, cmd.get_command(ctx, n)) for n in cmd.list_commands(ctx)]
    return sorted((n, c) for n, c in found if c is not None and not c.hidden)


def walk(cmd: Any = None, path: list[str] | None = None) -> list[tuple[list[str], Any]]:
    """Every command of the app, the root first, as (["rsi", ...], click command)."""
    cmd = typer.main.get_command(app) if cmd is None else cmd
    path = path or ["rsi"]
    out = [(path, cmd)]
    for name, sub in _subs(cmd):
        out += walk(sub, [*path, name])
    return out


def live_help(path: list[str]) -> str:
    """What `rsi ... --help` prints, at WIDTH columns and without colour (trailing spaces dropped)."""
    ru = typer.rich_utils
    saved = ru.MAX_WIDTH, ru.FORCE_TERMINAL, ru.COLOR_SYSTEM
    ru.MAX_WIDTH, ru.FORCE_TERMINAL, ru.COLOR_SYSTEM = WIDTH, False, None
    try:
        res = CliRunner().invoke(app, [*path[1:], "--help"], prog_name="rsi", env={"COLUMNS": str(WIDTH)})
    finally:
        ru.MAX_WIDTH, ru.FORCE_TERMINAL, ru.COLOR_SYSTEM = saved
    if res.exit_code != 0:
        raise SystemExit(f"{' '.join(path)} --help exited {res.exit_code}: {res.output}")
    lines = [line.rstrip() for line in res.output.splitlines()]
    while lines and not lines[0]:
        lines.pop(0)
    return "\n".join(lines).rstrip()


def render() -> str:
    parts = ["# CLI reference\n\n<!-- generated by scripts/gen_cli_docs.py from `rsi ... --help`; do not edit -->\n\n",
             GRAMMAR]
    for path, _cmd in walk():
        title = " ".join(path)
        parts.append(f"\n## `{title}`\n\n```text\n{live_help(path)}\n```\n")
    return "".join(parts)


def main() -> int:
    text = render()
    if "--check" in sys.argv:
        if not OUT.is_file() or OUT.read_text() != text:
            print(f"{OUT} differs from what `rsi ... --help` prints: run python3 scripts/gen_cli_docs.py",
                  file=sys.stderr)
            return 1
        return 0
    OUT.write_text(text)
    print(f"wrote {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
