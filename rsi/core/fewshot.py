"""Few-shot demonstrations bootstrapped from the generation's own passing train trajectories (pure).

As DSPy's bootstrapped few-shot does, a `fewshot` candidate of `rsi expand` replaces the config's
`prompt.few_shot` with k demonstrations the model itself produced on train tasks it passed. This
module draws them and renders them; rsi.loop.expand.fewshot reads the trajectories.

- `draw`: k demonstrations, seeded and reproducible (the same demonstrations and seed give the same
  draw, whatever order they came in), diverse across templates: one per template, templates in a
  seeded order, before any template gives a second; never two of one task.
- `render`: the draw as `prompt.few_shot` messages in the config's action format. `text`: the
  instruction as the user said it, each command as an assistant ```bash block, its output as the
  user's next message, then the finish word (`{{ finish_word }}`, so it follows the config). That is
  the shape of harness_configs/default.yaml's own example. `tool_calls`: the assistant calls the tool
  (`tool_calls`, ids `demo<i>_<j>`), a `tool` message answers each call, and the demonstration ends
  with a `submit` call answered `submitted`. Few-shot content is a jinja2 template (rsi.harness.prompts),
  so recorded text that holds template syntax is wrapped in `{% raw %}`.
"""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

MAX_STEPS = 4  # actions in one demonstration; longer passing trajectories are not used
OBS_CHARS = 400  # an observation is cut (middle) to this many characters
_JINJA = ("{{", "{%", "{#")
_RAW_END = "{% endraw %}"


@dataclass(frozen=True)
class Step:
    """One action the model took and what it saw back."""

    tool: str  # bash | read_file | write_file
    arguments: dict[str, Any] = field(hash=False)
    observation: str


@dataclass(frozen=True)
class Demo:
    """A passing train trajectory as a demonstration."""

    task: str
    template: str  # the task's `<family>/<template>`, or its family when it has no template
    instruction: str  # the user message the model saw
    steps: tuple[Step, ...]
    trial_id: str

    def usable(self, action_format: Literal["text", "tool_calls"], tools: Sequence[str]) -> bool:
        """Whether the config can show it: at least one action, at most MAX_STEPS, only tools the
        config has (text: bash alone), and no text that would break out of a raw block."""
        if not self.steps or len(self.steps) > MAX_STEPS:
            return False
        allowed = {"bash"} if action_format == "text" else set(tools) - {"submit"}
        texts = [self.instruction, *(s.observation for s in self.steps),
                 *(json.dumps(s.arguments) for s in self.steps)]
        return all(s.tool in allowed for s in self.steps) and not any(_RAW_END in t for t in texts)


def draw(demos: Sequence[Demo], k: int, seed: int | str) -> list[Demo]:
    """Up to `k` demonstrations: one per template (templates in a seeded order) before a second of
    any, never two of one task; which trajectory of a template is drawn is seeded too."""
    if k <= 0:
        return []
    rng = random.Random(f"fewshot:{seed}")
    by: dict[str, list[Demo]] = {}
    for d in sorted(demos, key=lambda d: (d.template, d.task, d.trial_id)):
        by.setdefault(d.template, []).append(d)
    templates = sorted(by)
    rng.shuffle(templates)
    queues = {t: rng.sample(by[t], len(by[t])) for t in templates}
    out: list[Demo] = []
    tasks: set[str] = set()
    while len(out) < k:
        took = False
        for t in templates:
            q = queues[t]
            while q and q[0].task in tasks:
                q.pop(0)
            if q and len(out) < k:
                d = q.pop(0)
                out.append(d)
                tasks.add(d.task)
                took = True
        if not took:
            break
    return out


def raw(text: str) -> str:
    """`text` as a jinja2 template that renders to itself."""
    return f"{{% raw %}}{text}{_RAW_END}" if any(m in text for m in _JINJA) else text


def cut(text: str, limit: int = OBS_CHARS) -> str:
    if len(text) <= limit:
        return text
    half = (limit - 20) // 2
    return f"{text[:half]}\n[... {len(text) - 2 * half} chars cut ...]\n{text[-half:]}"


def render(demos: Sequence[Demo], action_format: Literal["text", "tool_calls"]) -> list[dict[str, Any]]:
    """The demonstrations as `prompt.few_shot` entries (see the module docstring)."""
    out: list[dict[str, Any]] = []
    for i, d in enumerate(demos):
        out.append({"role": "user", "content": raw(d.instruction)})
        for j, s in enumerate(d.steps):
            if action_format == "text":
                out.append({"role": "assistant", "content": raw(f"```bash\n{s.arguments.get('command', '')}\n```")})
                out.append({"role": "user", "content": raw(cut(s.observation))})
                continue
            cid = f"demo{i}_{j}"
            call = {"id": cid, "type": "function",
                    "function": {"name": s.tool, "arguments": json.dumps(s.arguments, sort_keys=True)}}
            out.append({"role": "assistant", "content": "", "tool_calls": [call]})
            out.append({"role": "tool", "content": raw(cut(s.observation)), "tool_call_id": cid})
        if action_format == "text":
            out.append({"role": "assistant", "content": "{{ finish_word }}"})
        else:
            cid = f"demo{i}_{len(d.steps)}"
            out.append({"role": "assistant", "content": "", "tool_calls": [
                {"id": cid, "type": "function", "function": {"name": "submit", "arguments": "{}"}}]})
            out.append({"role": "tool", "content": "submitted", "tool_call_id": cid})
    return out


__all__ = ["MAX_STEPS", "OBS_CHARS", "Demo", "Step", "cut", "draw", "raw", "render"]
