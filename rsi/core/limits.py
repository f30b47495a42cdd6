"""The limits one trial runs under: the tightest of the task's, the contract's and the config's.

The contract holds ceilings nobody may loosen (DESIGN §4.2); a task asks for what it needs
(`task.toml` `[agent]`, `[verifier]`, `[environment]`); a harness config may only tighten
(`limits:`, `loop:`, `sampling.max_tokens`). Each effective value is the minimum of those that
are set, so a trial never gets more than any of the three allows. Network is on only if all
three agree: the task asks for a network, the contract allows one, and the config does not
turn it off.
"""

from __future__ import annotations

from typing import TypeVar

from pydantic import ConfigDict, Field

from rsi.core.contract import Contract
from rsi.core.external import external_limits
from rsi.core.harness_config import HarnessConfig
from rsi.core.model import RsiModel
from rsi.core.task import TaskSpec

# task.toml network modes that mean "no network at all"
NO_NETWORK_MODES = frozenset({"none", "no-network"})


class EffectiveLimits(RsiModel):
    """What the runner and the harness enforce for one trial. Frozen: computed once, then read."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    agent_timeout_sec: float = Field(gt=0)
    command_timeout_sec: float = Field(gt=0)
    verifier_timeout_sec: float = Field(gt=0)
    cpus: float = Field(gt=0)
    memory_mb: int = Field(gt=0)
    pids: int = Field(gt=0)
    network: bool
    max_turns: int = Field(gt=0)
    max_tokens_per_turn: int = Field(gt=0)
    observation_max_chars: int = Field(gt=0)


N = TypeVar("N", int, float)


def _tightest(*values: N | None) -> N:
    """The smallest of the values that are set (the contract's ceiling always is)."""
    return min(v for v in values if v is not None)


def effective_limits(task: TaskSpec | None, contract: Contract, config: HarnessConfig | None) -> EffectiveLimits:
    """The limits of a trial of `task` under `contract` with `config`: the minimum of each.

    `task=None` means no task-side request (the contract and the config decide, network
    included); `config=None` means no config-side tightening. The command timeout has no task
    side: Harbor tasks do not set one.
    """
    lim = contract.limits
    box = lim.sandbox
    cl = config.limits if config is not None else None
    env = task.environment if task is not None else None
    network = box.network
    if task is not None and task.network("agent") == "no-network":
        network = False
    if cl is not None and cl.network is False:
        network = False
    # an external program's own limits (its step limit, max_tokens, timeouts) tighten like a config's; its
    # `loop` and `sampling` are not used, so they do not
    ext = external_limits(config.external) if config is not None and config.external is not None else None
    loop_turns = None if config is None or ext is not None else config.loop.max_turns
    loop_tokens = None if config is None or ext is not None else config.sampling.max_tokens
    loop_chars = None if config is None or ext is not None else config.loop.observation_max_chars
    x = ext or {}
    return EffectiveLimits(
        agent_timeout_sec=_tightest(
            task.agent.timeout_sec if task else None,
            lim.agent_timeout_sec,
            cl.agent_timeout_sec if cl else None,
            x.get("agent_timeout_sec"),
        ),
        command_timeout_sec=_tightest(lim.command_timeout_sec, cl.command_timeout_sec if cl else None,
                                      x.get("command_timeout_sec")),
        verifier_timeout_sec=_tightest(
            task.verifier.timeout_sec if task else None,
            lim.verifier_timeout_sec,
            cl.verifier_timeout_sec if cl else None,
        ),
        cpus=_tightest(env.cpus if env else None, box.cpus, cl.cpus if cl else None),
        memory_mb=_tightest(env.memory_mb if env else None, box.memory_mb, cl.memory_mb if cl else None),
        pids=_tightest(env.pids if env else None, box.pids, cl.pids if cl else None),
        network=network,
        max_turns=int(_tightest(lim.max_turns, loop_turns, x.get("max_turns"))),
        max_tokens_per_turn=int(_tightest(lim.max_tokens_per_turn, loop_tokens, x.get("max_tokens_per_turn"))),
        observation_max_chars=_tightest(contract.substrate.observation_max_chars, loop_chars),
    )
