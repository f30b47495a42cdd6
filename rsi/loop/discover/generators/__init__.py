"""Task generators for `rsi discover`, chosen by name from `GENERATORS` (an unknown name lists the
known ones).

A generator turns a `GenRequest` (seed, difficulty, family, the pool, a proposer endpoint) into a
`TaskDraft` (rsi.core.discover): a Harbor task plus known-wrong solutions. Procedural generators are
pure functions of (seed, difficulty, template, phrasing side, instance side, cycle): the seed draws one of the
level's templates (or the request names one, `template`), the instance's names and data come from a stream keyed
by (template, side, cycle, seed, level) (rsi.core.discover.instance_seed: a train task and a held-out one never
share them), and one of its phrasings is drawn on the requested phrasing side, so a draft reproduces byte for
byte; `mutate` moves a pool
task's difficulty knob; `model` asks an LLM to write a task. A generator that cannot produce a task
raises `GeneratorError` (the candidate is recorded as rejected, the run goes on).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from rsi.core.discover import PhrasingSide, TaskDraft
from rsi.core.errors import RsiError
from rsi.core.registry import Registry
from rsi.core.task import InstanceSide


class GeneratorError(RsiError):
    """The generator could not produce a task (recorded as the candidate's rejection reason)."""

    def __init__(self, message: str, reason: str = "generator_error") -> None:
        super().__init__(message)
        self.reason = reason


@dataclass(frozen=True)
class PoolTask:
    """What a generator may know of a pool task: identity, provenance, instruction and probe rate."""

    name: str
    family: str
    difficulty: int
    instruction: str
    generator: str | None = None
    seed: int | None = None
    probe_pass_rate: float | None = None
    test_sh: str = ""
    solve_sh: str = ""


@dataclass(frozen=True)
class Proposer:
    """An OpenAI-compatible endpoint and model name that writes tasks (the `model` generator)."""

    base_url: str
    model: str
    api_key: str | None = None
    temperature: float = 0.8
    max_tokens: int = 768
    timeout_sec: float = 120.0


@dataclass
class GenRequest:
    seed: int
    difficulty: int
    family: str | None = None
    pool: list[PoolTask] = field(default_factory=list)
    proposer: Proposer | None = None
    # `<family>/<template>`: that template instead of the one the seed draws (procedural generators only;
    # holdout-only discovery asks for holdout templates this way)
    template: str | None = None
    # which of the template's phrasings to draw (procedural generators): `train` for train tasks, `holdout`
    # (the last `holdout_phrasings`) for the in-skill holdout, `any` for a template never trained on
    phrasing_side: PhrasingSide = "any"
    holdout_phrasings: int = 1
    # which side the instance is drawn for (`train`, a holdout part, `suite`) and in which cycle: both key the
    # stream its names, data and reference come from, so the sides never share an instance
    side: InstanceSide = "train"
    cycle: int = 0


class Generator(Protocol):
    @property
    def name(self) -> str: ...

    @property
    def families(self) -> tuple[str, ...]:
        """The families it writes ("*": any, decided by the request or the pool)."""
        ...

    @property
    def max_level(self) -> int: ...

    def generate(self, req: GenRequest) -> TaskDraft: ...


GENERATORS: Registry[Generator] = Registry("generator")


def load_generators() -> list[str]:
    """Register every built-in generator; return their names."""
    from rsi.loop.discover.generators import (  # noqa: F401  (register on import)
        compose,
        family_data,
        family_files,
        family_logs,
        family_pipeline,
        family_pyfix,
        family_shell,
        family_text,
        model,
        mutate,
    )

    return GENERATORS.names()
