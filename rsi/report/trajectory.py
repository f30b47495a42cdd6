"""Terminal rendering of one trajectory (`rsi trials show`): a header, then one panel per step."""

from __future__ import annotations

import json
from pathlib import Path

from rich.console import Console, Group
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from rsi.harness.atif import Step, Trajectory, load_trajectory

_STYLE = {"system": "magenta", "user": "cyan", "agent": "green"}
MAX_CHARS = 4000  # per text block; a terminal view, the file keeps everything


def _clip(text: str, limit: int = MAX_CHARS) -> str:
    if len(text) <= limit:
        return text
    return text[: limit // 2] + f"\n… ({len(text) - limit} characters not shown) …\n" + text[-limit // 2 :]


def _header(t: Trajectory) -> Table:
    r = t.rsi
    fm = t.final_metrics
    table = Table.grid(padding=(0, 2))
    table.add_column(style="bold")
    table.add_column()
    digest = r.get("harness_config_digest")
    rows = [
        ("task", r.get("task")),
        ("trial", r.get("trial_id") or t.session_id),
        ("agent", f"{t.agent.name} {t.agent.version}"),
        ("model", t.agent.model_name or r.get("model_name")),
        ("generation", r.get("generation")),
        ("config", f"{r.get('harness_config_name')} @ {digest[:12]}" if digest else None),
        (
            "format / history",
            f"{r.get('action_format')} / {r.get('history')}" if r.get("action_format") else None,
        ),
        ("stop", r.get("stop_reason")),
        ("steps", str(len(t.steps))),
    ]
    if fm is not None:
        calls = (fm.extra or {}).get("calls")
        rows.append(
            (
                "tokens",
                f"prompt {fm.total_prompt_tokens or 0}, completion {fm.total_completion_tokens or 0}, "
                f"cached {fm.total_cached_tokens or 0}"
                + (f" in {calls} call(s)" if calls is not None else ""),
            )
        )
    for key, value in rows:
        if value:
            table.add_row(key, Text(str(value)))
    return table


def _step_panel(step: Step) -> Panel:
    parts: list[Text] = []
    if step.message:
        parts.append(Text(_clip(step.message)))
    for call in step.tool_calls or []:
        args = call.arguments
        shown = args["command"] if set(args) == {"command"} else json.dumps(args, ensure_ascii=False)
        parts.append(Text(f"→ {call.function_name}: ", style="bold yellow") + Text(_clip(str(shown))))
    if step.observation is not None:
        for res in step.observation.results:
            label = f"← {res.source_call_id}" if res.source_call_id else "← harness"
            parts.append(Text(label, style="bold blue") + Text("\n" + _clip(res.content or "")))
    title = f"[{_STYLE.get(step.source, 'white')}]{step.step_id} · {step.source}[/]"
    if step.metrics is not None:
        m = step.metrics
        title += f" [dim]({m.prompt_tokens or 0}+{m.completion_tokens or 0} tok)[/]"
    return Panel(
        Group(*parts) if parts else Text("(empty)", style="dim"),
        title=title,
        title_align="left",
        border_style=_STYLE.get(step.source, "white"),
    )


def render_trajectory(source: Path | str | Trajectory, console: Console) -> None:
    """Print a trajectory (a path to trajectory.json, or the model) to `console`."""
    t = source if isinstance(source, Trajectory) else load_trajectory(Path(source))
    console.print(Panel(_header(t), title=f"trajectory ({t.schema_version})", title_align="left"))
    for step in t.steps:
        console.print(_step_panel(step))
