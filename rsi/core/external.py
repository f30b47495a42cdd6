"""External agent harnesses: a harness config of `kind: external` names a published agent program, its version
and its own config file (the program's prompt surface), all inside the config's digest.

rsi runs the program unmodified; what it supplies is the program's *environment* (commands run in the trial's
sandbox) and its *model endpoint* (the trial's recording gateway, pinned to the generation's adapter). So a few
fields of the program's config are rsi's to set, never the config's (`RESERVED`), and the fields that mean a limit
are read here (`LIMIT_PATHS`) and checked against the contract like a built-in config's: a value above the
contract's ceiling is refused at load, and at run time rsi enforces the effective limits itself (the gateway and
the environment), whatever the program does.

Adding another program: one `ExternalProgram` entry here (its limit and reserved paths) and one runner in
`rsi/harness/external/` registered under the same name (see docs/harnesses.md).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pydantic import ConfigDict, field_validator

from rsi.core.model import RsiModel


@dataclass(frozen=True)
class ExternalProgram:
    """What rsi knows of one external agent program's config file."""

    package: str  # the distribution whose installed version must equal the config's `version`
    # effective-limit name -> dotted path in the program's config; `unlimited` values mean "no limit"
    limit_paths: dict[str, str]
    unlimited: dict[str, Any] = field(default_factory=dict)
    # dotted paths rsi sets (the environment, the model endpoint); a config may not set them
    reserved: tuple[str, ...] = ()
    # model classes that speak OpenAI chat completions to a base URL (the gateway)
    model_classes: tuple[str, ...] = ()


PROGRAMS: dict[str, ExternalProgram] = {
    "mini-swe-agent": ExternalProgram(
        package="mini-swe-agent",
        limit_paths={
            "max_turns": "agent.step_limit",
            "max_tokens_per_turn": "model.model_kwargs.max_tokens",
            "command_timeout_sec": "environment.timeout",
            "agent_timeout_sec": "agent.wall_time_limit_seconds",
        },
        unlimited={"max_turns": 0, "agent_timeout_sec": 0},
        reserved=("environment.environment_class", "model.model_name", "model.model_kwargs.api_base",
                  "model.model_kwargs.api_key", "model.model_kwargs.base_url", "agent.output_path"),
        model_classes=("litellm_textbased", "litellm"),
    ),
}

# effective-limit name -> (the contract's field, as messages name it)
_CEILINGS = {
    "max_turns": "limits.max_turns",
    "max_tokens_per_turn": "limits.max_tokens_per_turn",
    "command_timeout_sec": "limits.command_timeout_sec",
    "agent_timeout_sec": "limits.agent_timeout_sec",
}


class ExternalHarness(RsiModel):
    """`external:` of a harness config: the program, its exact version, its own config (inlined)."""

    model_config = ConfigDict(extra="forbid")

    program: str
    version: str
    config: dict[str, Any]

    @field_validator("program")
    @classmethod
    def _known(cls, v: str) -> str:
        if v not in PROGRAMS:
            raise ValueError(f"unknown external program {v!r} (known: {', '.join(sorted(PROGRAMS))})")
        return v

    @property
    def spec(self) -> ExternalProgram:
        return PROGRAMS[self.program]


def _get(data: Any, path: str) -> Any:
    node = data
    for part in path.split("."):
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node


def external_limits(ext: ExternalHarness) -> dict[str, float | None]:
    """The limits the program's config declares (None: unset or the program's "no limit")."""
    out: dict[str, float | None] = {}
    for name, path in ext.spec.limit_paths.items():
        v = _get(ext.config, path)
        if isinstance(v, bool) or not isinstance(v, int | float) or (
                name in ext.spec.unlimited and v == ext.spec.unlimited[name]):
            out[name] = None
        else:
            out[name] = float(v)
    return out


def external_violations(ext: ExternalHarness, ceilings: dict[str, float]) -> list[str]:
    """Every way the program's config breaks the contract's ceilings or sets a field rsi owns, each
    `external.config.<path>: problem`."""
    out: list[str] = []
    spec = ext.spec
    for name, path in spec.limit_paths.items():
        where = f"external.config.{path}"
        v = _get(ext.config, path)
        if v is None:
            continue
        if isinstance(v, bool) or not isinstance(v, int | float) or v < 0:
            out.append(f"{where}: {v!r} is not a non-negative number")
            continue
        limit = ceilings[name]
        if name == "max_turns" and v == spec.unlimited.get(name):  # the program would never stop by itself
            out.append(f"{where}: {v!r} (no limit) loosens the contract's {_CEILINGS[name]} ({limit:g})")
        elif v > limit:
            out.append(f"{where}: {v:g} loosens the contract's {_CEILINGS[name]} ({limit:g})")
    for path in spec.reserved:
        if _get(ext.config, path) is not None:
            out.append(f"external.config.{path}: set by rsi (the trial's sandbox and recording gateway), "
                       "not by the config")
    cls = _get(ext.config, "model.model_class")
    if cls is not None and cls not in spec.model_classes:
        out.append(f"external.config.model.model_class: {cls!r} does not talk to an OpenAI-compatible base URL "
                   f"(one of: {', '.join(spec.model_classes)})")
    return out


__all__ = ["PROGRAMS", "ExternalHarness", "ExternalProgram", "external_limits", "external_violations"]
