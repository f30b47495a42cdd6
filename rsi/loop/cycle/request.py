"""What `rsi cycle` is asked to do: the budget, each phase's knobs and the seams tests use (its own module so
the cycle's job bookkeeping and its phases both read it without importing each other)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from rsi.core.replay import HINT_LEVELS
from rsi.exec.trial import TrialEnv
from rsi.loop.cycle.split import DISCOVER_SHARE
from rsi.loop.expand.candidates import Reflector
from rsi.loop.expand.sources import SourcesPlan
from rsi.sandbox.base import SandboxProvider


@dataclass
class CycleRequest:
    budget: float = 200.0  # trials, all phases together
    discover_share: float = DISCOVER_SHARE  # of what promote leaves; expand gets the rest
    # holdout units (templates, by the contract's holdout_unit) to top the split up to (default: the test's minimum + 1)
    holdout_target: int | None = None
    # train templates to top the in-skill holdout up to (their held-out phrasings; default: no top-up)
    in_skill_target: int | None = None
    resume: str | None = None
    generation: str | None = None
    concurrency: int = 2
    # discover
    n: int = 6
    attempts: int | None = None  # probe attempts (default: the contract's)
    probe_per_template: int | None = None  # probe at most this many train candidates per template (None: all)
    train_templates: bool = False  # aim discover's candidates at the train templates in turn
    generators: list[str] = field(default_factory=list)
    levels: list[int] = field(default_factory=list)  # discover's levels, in turn (default: each family's curriculum)
    seed: int | None = None  # default: above every earlier discover / cycle seed here, so each draws new candidates
    # train compositions of level 3 (combinations of trained operations the split trains on) discover aims at in
    # turn after its main candidates: what the in-skill part's held-out combinations are learned from
    compositions: int = 0
    # expand
    expand_attempts: int = 1
    proposals: int = 1
    round_size: int = 4
    reflector: Reflector | None = None
    # expand's training-data sources: an oracle replay of every train task and the hint ladder on failed ones
    sources: SourcesPlan = field(default_factory=lambda: SourcesPlan(replays=1, hints=HINT_LEVELS))
    fewshot: int | None = None  # few-shot demonstrations per candidate (None: expand's default)
    baseline_per_template: int | None = None  # expand's baseline on at most this many tasks per template
    search: bool = True  # expand's config search
    # update
    backend: str = "local"
    command: str | None = None
    steps: int | None = None
    load: bool = True
    # seams for tests: scripted agents, the fake provider, fast retries
    probe_agent: str = "harness"
    promote_agent: str = "harness"
    provider: SandboxProvider | None = None
    trial_env_hook: Callable[[TrialEnv], None] | None = None
