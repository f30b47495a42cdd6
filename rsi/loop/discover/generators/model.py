"""`model`: a proposer model writes a task from a jinja2 prompt with examples of solved and unsolved
pool tasks; its answer is parsed into a task directory and a known-wrong solution.

The proposer is the current generation's model on its own endpoint unless the workspace names one
(`discover.proposer` in rsi.yaml, e.g. a larger model on vLLM). A small model's proposals mostly
fail to parse or fail the gate: that is expected, and every one is recorded with its reason. The
model only writes candidates; it never decides whether one is admitted.
"""

from __future__ import annotations

import random
import re
from pathlib import Path

import jinja2

from rsi.core.discover import TaskDraft
from rsi.core.errors import RsiError
from rsi.loop.discover.generators import GENERATORS, GeneratorError, GenRequest
from rsi.loop.discover.generators.procedural import DOCKERFILE_HEAD

TEMPLATE = Path(__file__).with_name("propose.md.j2")
SECTIONS = ("instruction", "setup.sh", "test.sh", "solve.sh", "wrong.sh")
_HEADING = re.compile(r"^#{2,4}\s*(instruction|setup\.sh|test\.sh|solve\.sh|wrong\.sh)\s*$", re.M | re.I)
_FENCE = re.compile(r"```[a-z]*\n(.*?)```", re.S)


def render_prompt(req: GenRequest, family: str) -> str:
    rng = random.Random(f"model:{req.seed}")
    solved = [p for p in req.pool if (p.probe_pass_rate or 0) > 0]
    unsolved = [p for p in req.pool if p.probe_pass_rate == 0]
    env = jinja2.Environment(undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True,
                             autoescape=False)  # noqa: S701 - a plain-text prompt, not HTML
    return env.from_string(TEMPLATE.read_text()).render(
        family=family, solved=rng.sample(solved, min(3, len(solved))),
        unsolved=rng.sample(unsolved, min(2, len(unsolved))),
    )


def parse_proposal(text: str) -> dict[str, str]:
    """The five sections of a proposal (code sections unfenced); GeneratorError('unparseable') if any
    is missing or empty."""
    parts: dict[str, str] = {}
    marks = list(_HEADING.finditer(text))
    for i, m in enumerate(marks):
        end = marks[i + 1].start() if i + 1 < len(marks) else len(text)
        body = text[m.end():end].strip()
        key = m.group(1).lower()
        if key != "instruction":
            fenced = _FENCE.search(body + ("\n```" if body.count("```") == 1 else ""))
            body = fenced.group(1).strip() if fenced else body
        parts.setdefault(key, body)
    missing = [s for s in SECTIONS if not parts.get(s)]
    if missing:
        raise GeneratorError(f"the proposal lacks {', '.join(missing)}", reason="unparseable")
    if "/logs/verifier/reward" not in parts["test.sh"]:
        raise GeneratorError("the proposal's test.sh never writes /logs/verifier/reward.txt", reason="unparseable")
    return parts


class ModelGenerator:
    name = "model"
    families = ("*",)
    max_level = 10

    def generate(self, req: GenRequest) -> TaskDraft:
        if req.proposer is None:
            raise GeneratorError("model: no proposer endpoint (the generation has no model endpoint)")
        from rsi.models.client import ChatClient

        family = req.family or random.Random(f"family:{req.seed}").choice(
            sorted({p.family for p in req.pool}) or ["misc"])
        prompt = render_prompt(req, family)
        try:
            p = req.proposer
            with ChatClient(p.base_url, api_key=p.api_key, timeout=p.timeout_sec) as client:
                res = client.chat(p.model, [{"role": "user", "content": prompt}], temperature=p.temperature,
                                  max_tokens=p.max_tokens, seed=req.seed)
        except RsiError as e:
            raise GeneratorError(f"model: the proposer failed: {e}") from e
        try:
            parts = parse_proposal(res.content or "")
        except GeneratorError as e:
            answer = " ".join((res.content or "").split())[:400]
            raise GeneratorError(f"{e}; the model answered: {answer!r}", reason=e.reason) from None
        return TaskDraft(
            generator=self.name, family=family, difficulty=max(1, req.difficulty), seed=req.seed,
            instruction=parts["instruction"],
            dockerfile=DOCKERFILE_HEAD + "COPY setup.sh /tmp/setup.sh\nRUN bash /tmp/setup.sh && rm /tmp/setup.sh\n",
            env_files={"setup.sh": "#!/bin/bash\nset -e\ncd /app\n" + parts["setup.sh"] + "\n"},
            test_sh="#!/bin/bash\ncd /app\n" + parts["test.sh"] + "\n",
            solve_sh="#!/bin/bash\ncd /app\n" + parts["solve.sh"] + "\n",
            known_wrong=["#!/bin/bash\ncd /app\n" + parts["wrong.sh"] + "\n"],
            tags=["model-proposed"],
        )


GENERATORS.add("model", ModelGenerator)
