"""Harness config (`harness_configs/<name>.yaml`), its identity, and its check against a contract.

Identity (DESIGN §4.3): a config's digest is the sha256 of the canonical JSON of `identity()`,
which is every field that changes what a trial does or records (prompts with few-shot examples
inlined, sampling, loop, tools, limits, model, action_format, contract range, schema_version and
`name`, which trajectories record), and nothing that does not: `search_space` (the plan for
`rsi expand`, not behaviour), YAML comments, key order, and whether a default was written out
(defaults are filled in before hashing). A generation points at that digest, never at a file.

Fields are addressed by dotted paths into the config's JSON form, list indices included
(`sampling.temperature`, `prompt.few_shot.1.content`, `tools.0`; `tools[0]` is accepted too).
`with_values` sets such paths on a copy and re-validates; variants (rsi/core/variants.py) and the
`search_space` check below are built on it.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping
from typing import Any, Literal
from urllib.parse import urlsplit

import yaml
from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import Version
from pydantic import (
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    ValidationError,
    field_validator,
    model_serializer,
    model_validator,
)

from rsi.core.contract import Contract
from rsi.core.digest import digest_obj
from rsi.core.errors import pydantic_field
from rsi.core.external import ExternalHarness, external_violations
from rsi.core.model import RsiModel
from rsi.core.mol import MolSpec

EMBEDDED_ENDPOINT = "embedded"


class _Strict(RsiModel):
    model_config = ConfigDict(extra="forbid")


def check_endpoint(endpoint: str) -> str:
    """`embedded`, or an OpenAI-compatible base URL (http(s)://host[:port][/path]); anything else is an error."""
    if endpoint == EMBEDDED_ENDPOINT:
        return endpoint
    try:
        parts = urlsplit(endpoint)
        port_ok = parts.port is None or parts.port > 0
    except ValueError:
        parts, port_ok = None, False
    if parts is None or parts.scheme not in ("http", "https") or not parts.hostname or not port_ok:
        raise ValueError(f"'{endpoint}' is not 'embedded' or an http(s) base URL such as http://127.0.0.1:8000/v1")
    return endpoint.rstrip("/")


class ModelRef(_Strict):
    # `embedded` means the localhost server `rsi model serve` starts; otherwise an OpenAI-compatible
    # base URL such as http://127.0.0.1:8000/v1.
    endpoint: str = EMBEDDED_ENDPOINT
    # The `model` every request names. Unset (the usual case): the generation's serve name, i.e. its
    # adapter's name once it has one, else the base model id (rsi.yaml `base_model`). Set it only to pin
    # one served name whatever the generation (`rsi run --model` does, for one job).
    name: str | None = Field(default=None, min_length=1)
    api_key_env: str | None = Field(default=None, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    request_timeout_sec: float = Field(default=120.0, gt=0)

    @field_validator("endpoint")
    @classmethod
    def _endpoint(cls, v: str) -> str:
        return check_endpoint(v)

    @model_serializer(mode="wrap")
    def _drop_unpinned(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        # a config without a pinned name keeps the digest it had before `name` existed
        data: dict[str, Any] = handler(self)
        if data.get("name", 0) is None:
            data.pop("name")
        return data


class FewShotCallFunction(_Strict):
    name: str
    arguments: str = "{}"  # JSON text, as the OpenAI API carries it


class FewShotCall(_Strict):
    id: str
    type: Literal["function"] = "function"
    function: FewShotCallFunction


class FewShot(_Strict):
    """One few-shot message. `text` configs use user/assistant text; `tool_calls` configs may also show
    an assistant's `tool_calls` and the `tool` message answering each (`tool_call_id`), as the OpenAI
    API carries them. The two tool fields are left out of the JSON form when unset, so a config
    without them keeps the digest it had before they existed."""

    role: Literal["user", "assistant", "tool"]
    content: str
    tool_calls: list[FewShotCall] | None = None
    tool_call_id: str | None = None

    @model_validator(mode="after")
    def _shape(self) -> FewShot:
        if self.tool_calls is not None and self.role != "assistant":
            raise ValueError(f"tool_calls only on an assistant message, not on a {self.role} message")
        if (self.role == "tool") != (self.tool_call_id is not None):
            raise ValueError("a tool message needs tool_call_id, and only a tool message has one")
        return self

    @model_serializer(mode="wrap")
    def _drop_unset(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data: dict[str, Any] = handler(self)
        for key in ("tool_calls", "tool_call_id"):
            if data.get(key) is None:
                data.pop(key, None)
        return data


class PromptSpec(_Strict):
    system: str
    instruction: str = "{{ instruction }}"
    few_shot: list[FewShot] = Field(default_factory=list)


class Sampling(_Strict):
    temperature: float = Field(default=0.0, ge=0)
    top_p: float = Field(default=1.0, gt=0, le=1)
    max_tokens: int = Field(default=256, gt=0)
    seed: int | None = None
    stop: list[str] = Field(default_factory=list)


class LoopSpec(_Strict):
    max_turns: int = Field(default=10, gt=0)
    observation_max_chars: int = Field(default=2000, gt=0)
    history: Literal["full", "own_view"] = "full"
    finish_word: str = "DONE"


class ConfigLimits(_Strict):
    """Optional tightenings of the contract's limits; each must not exceed the contract's."""

    agent_timeout_sec: float | None = Field(default=None, gt=0)
    command_timeout_sec: float | None = Field(default=None, gt=0)
    verifier_timeout_sec: float | None = Field(default=None, gt=0)
    cpus: float | None = Field(default=None, gt=0)
    memory_mb: int | None = Field(default=None, gt=0)
    pids: int | None = Field(default=None, gt=0)
    network: bool | None = None


class HarnessConfig(_Strict):
    """One harness config. Prompts hold template text; `file:NAME.j2` is inlined by the loader.

    `kind: builtin` (the default) is rsi's own agent loop, driven by `prompt`, `sampling`, `loop`, `tools`.
    `kind: external` runs a published agent program unmodified (rsi.core.external): `external` names it, its
    version and its own config (inlined by the loader, in the digest); its prompts, sampling and step limit live
    there, so `prompt` stays empty and `loop`/`sampling` are not used."""

    schema_version: int = 1
    name: str
    contract: str = ">=1.0,<2.0"
    kind: Literal["builtin", "external"] = "builtin"
    model: ModelRef = Field(default_factory=ModelRef)
    action_format: Literal["tool_calls", "text"] = "text"
    prompt: PromptSpec = Field(default_factory=lambda: PromptSpec(system=""))
    sampling: Sampling = Field(default_factory=Sampling)
    loop: LoopSpec = Field(default_factory=LoopSpec)
    limits: ConfigLimits = Field(default_factory=ConfigLimits)
    tools: list[str] = Field(default_factory=lambda: ["bash", "submit"])
    search_space: dict[str, list[Any]] = Field(default_factory=dict)
    # Mixture-of-LoRA (rsi.core.mol): the grouping of families into adapters. Left out of the JSON form
    # when unset, so a config without it keeps the digest it had before the field existed.
    mol: MolSpec | None = None
    # an external agent program (kind: external). Left out, with `kind`, of a built-in config's JSON form, so
    # built-in configs keep the digests they had before the fields existed.
    external: ExternalHarness | None = None

    @model_serializer(mode="wrap")
    def _drop_no_mol(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data: dict[str, Any] = handler(self)
        if data.get("mol", 0) is None:
            data.pop("mol")
        if data.get("kind") == "builtin":
            data.pop("kind")
        if data.get("external", 0) is None:
            data.pop("external")
        return data

    @model_validator(mode="after")
    def _kind(self) -> HarnessConfig:
        if self.kind == "external":
            if self.external is None:
                raise ValueError("kind external needs an `external:` section (program, version, config)")
            if self.prompt.system or self.prompt.few_shot or self.prompt.instruction != "{{ instruction }}":
                raise ValueError("prompt: an external harness's prompts live in its own config "
                                 "(external.config), not in prompt")
            if self.mol is not None:
                raise ValueError("mol: Mixture-of-LoRA routing needs rsi's own loop (kind builtin)")
        else:
            if self.external is not None:
                raise ValueError("external: only a config of kind external names an external program")
            if not self.prompt.system:
                raise ValueError("prompt.system: a built-in harness needs a system prompt")
        return self

    @property
    def is_external(self) -> bool:
        return self.external is not None

    @model_validator(mode="after")
    def _few_shot_format(self) -> HarnessConfig:
        shots = self.prompt.few_shot
        if self.action_format == "text" and any(s.tool_calls or s.role == "tool" for s in shots):
            raise ValueError("prompt.few_shot: tool calls and tool messages need action_format tool_calls")
        called = {c.id for s in shots for c in s.tool_calls or []}
        answered = [s.tool_call_id for s in shots if s.role == "tool"]
        stray = [i for i in answered if i not in called]
        if stray:
            raise ValueError(f"prompt.few_shot: tool message {stray[0]!r} answers no tool call")
        return self

    @field_validator("contract")
    @classmethod
    def _valid_range(cls, v: str) -> str:
        try:
            SpecifierSet(v)
        except InvalidSpecifier as e:
            raise ValueError(f"not a version range: {e}") from None
        return v

    def identity(self) -> dict[str, Any]:
        """What the digest covers: the full config in JSON form, defaults filled in, less `search_space`."""
        return self.model_dump(mode="json", exclude=set(NON_IDENTITY_FIELDS))

    def digest(self) -> str:
        """sha256 of the canonical JSON of `identity()`: equal behaviour, equal digest."""
        return digest_obj(self.identity())

    def canonical_yaml(self) -> str:
        """Deterministic YAML of the whole config (search_space included), keys sorted.

        Multi-line strings are written as literal blocks so prompts stay readable; loading the
        text back gives an equal config.
        """
        return yaml.dump(
            self.model_dump(mode="json"),
            Dumper=_CanonicalDumper,
            sort_keys=True,
            allow_unicode=True,
            default_flow_style=False,
            width=120,
        )


# Fields left out of the identity: they do not change what a trial does.
NON_IDENTITY_FIELDS: tuple[str, ...] = ("search_space",)


class _CanonicalDumper(yaml.SafeDumper):
    """SafeDumper writing multi-line strings as `|` blocks (PyYAML falls back to quotes if it must)."""


def _represent_str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_CanonicalDumper.add_representer(str, _represent_str)


# --- dotted paths --------------------------------------------------------------------------------

# The roots `rsi expand` may vary through `search_space`.
EXPANDABLE_ROOTS: tuple[str, ...] = ("prompt", "sampling", "loop", "action_format", "tools", "limits", "external")
# Paths no variant may set: the config's identity-of-record and the expansion plan itself (an external
# harness's program and version: a variant changes its config, never which program runs).
FROZEN_PATHS: tuple[str, ...] = ("schema_version", "name", "contract", "model.endpoint", "model.name",
                                 "search_space", "mol",
                                 "kind", "external.program", "external.version")

_INDEX = re.compile(r"\[(\d+)\]")


class FieldProblem(ValueError):
    """A dotted path that does not resolve, or a value the field refuses. `field: problem`."""

    def __init__(self, field: str, problem: str) -> None:
        super().__init__(f"{field}: {problem}")
        self.field = field
        self.problem = problem


def normalize_path(path: str) -> str:
    """`tools[0]` -> `tools.0`: one spelling per path, so labels and comparisons agree."""
    return _INDEX.sub(r".\1", path.strip())


def _parts(path: str) -> list[str]:
    parts = normalize_path(path).split(".")
    if not path.strip() or any(p == "" for p in parts):
        raise FieldProblem(path, "not a dotted field path")
    return parts


def _step(node: Any, part: str, path: str) -> tuple[Any, str | int]:
    """The container key for `part` inside `node`, or FieldProblem(path, 'no such field')."""
    if isinstance(node, dict) and part in node:
        return node, part
    if isinstance(node, list) and part.isdigit() and int(part) < len(node):
        return node, int(part)
    raise FieldProblem(path, "no such field")


def get_path(data: Mapping[str, Any], path: str) -> Any:
    """The value at a dotted path of a config's JSON form. FieldProblem if it does not resolve."""
    node: Any = data
    for part in _parts(path):
        container, key = _step(node, part, path)
        node = container[key]
    return node


def set_path(data: dict[str, Any], path: str, value: Any) -> None:
    """Set an existing field at a dotted path, in place. Never creates keys or list items."""
    parts = _parts(path)
    node: Any = data
    for part in parts[:-1]:
        container, key = _step(node, part, path)
        node = container[key]
    container, key = _step(node, parts[-1], path)
    container[key] = copy.deepcopy(value)


def _within(path: str, prefix: str) -> bool:
    return path == prefix or path.startswith(prefix + ".")


def is_frozen(path: str) -> bool:
    """True if setting `path` could change a frozen field (the path is one, inside one, or above one)."""
    p = normalize_path(path)
    return any(_within(p, f) or _within(f, p) for f in FROZEN_PATHS)


def show_value(value: Any, limit: int = 60) -> str:
    """A value as messages show it: YAML-ish scalars (true, 40, 'bash'), long text cut short."""
    if isinstance(value, bool):
        text = "true" if value else "false"
    elif value is None:
        text = "null"
    elif isinstance(value, float) and value.is_integer():
        text = str(int(value))  # 900.0 -> 900, as the YAML most likely said
    elif isinstance(value, int | float):
        text = str(value)
    else:
        text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def with_values(config: HarnessConfig, assignments: Mapping[str, Any]) -> HarnessConfig:
    """A new config with each dotted path set, re-validated. The original is never touched.

    Raises FieldProblem naming the path: it does not resolve, or the result fails validation
    (the message shows the new value and the config's current one).
    """
    raw = config.model_dump(mode="json")
    for path, value in assignments.items():
        set_path(raw, path, value)
    try:
        return HarnessConfig.model_validate(raw)
    except ValidationError as e:
        err = e.errors()[0]
        loc = pydantic_field(tuple(err.get("loc", ())))
        path = next((p for p in assignments if _within(loc, normalize_path(p))), next(iter(assignments), loc))
        where = "" if loc == normalize_path(path) else f"{loc}: "
        old = get_path(config.model_dump(mode="json"), path) if path in assignments else None
        raise FieldProblem(
            normalize_path(path),
            f"{show_value(assignments.get(path))} is not valid ({where}{err.get('msg', 'invalid')}); "
            f"the config has {show_value(old)}",
        ) from None


# --- the contract check --------------------------------------------------------------------------


def contract_violations(config: HarnessConfig, contract: Contract) -> list[str]:
    """Every way `config` breaks `contract`, each `field: problem` naming both values. Empty = ok.

    Covers the config's own fields (`config_violations`) and every `search_space` value
    (`search_space_violations`).
    """
    return config_violations(config, contract) + search_space_violations(config, contract)


def config_violations(config: HarnessConfig, contract: Contract) -> list[str]:
    """The ways the config's own fields (search_space aside) break the contract."""
    out: list[str] = []
    if Version(contract.hcp) not in SpecifierSet(config.contract):
        out.append(f"contract: config requires HCP {config.contract} but the contract is {contract.hcp}")
    lim = contract.limits

    def ceiling(field: str, value: float | int | None, limit: float | int, what: str) -> None:
        if value is not None and value > limit:
            out.append(f"{field}: {show_value(value)} loosens the contract's {what} ({show_value(limit)})")

    if config.external is not None:
        out.extend(external_violations(config.external, {
            "max_turns": lim.max_turns, "max_tokens_per_turn": lim.max_tokens_per_turn,
            "command_timeout_sec": lim.command_timeout_sec, "agent_timeout_sec": lim.agent_timeout_sec}))
    ceiling("loop.max_turns", config.loop.max_turns, lim.max_turns, "limits.max_turns")
    ceiling("sampling.max_tokens", config.sampling.max_tokens, lim.max_tokens_per_turn, "limits.max_tokens_per_turn")
    ceiling(
        "loop.observation_max_chars",
        config.loop.observation_max_chars,
        contract.substrate.observation_max_chars,
        "substrate.observation_max_chars",
    )
    cl = config.limits
    ceiling("limits.agent_timeout_sec", cl.agent_timeout_sec, lim.agent_timeout_sec, "limits.agent_timeout_sec")
    ceiling(
        "limits.command_timeout_sec", cl.command_timeout_sec, lim.command_timeout_sec, "limits.command_timeout_sec"
    )
    ceiling(
        "limits.verifier_timeout_sec",
        cl.verifier_timeout_sec,
        lim.verifier_timeout_sec,
        "limits.verifier_timeout_sec",
    )
    ceiling("limits.cpus", cl.cpus, lim.sandbox.cpus, "limits.sandbox.cpus")
    ceiling("limits.memory_mb", cl.memory_mb, lim.sandbox.memory_mb, "limits.sandbox.memory_mb")
    ceiling("limits.pids", cl.pids, lim.sandbox.pids, "limits.sandbox.pids")
    if cl.network and not lim.sandbox.network:
        out.append("limits.network: true loosens the contract's limits.sandbox.network (false)")
    for i, tool in enumerate(config.tools):
        if tool not in contract.substrate.tools:
            known = ", ".join(contract.substrate.tools)
            out.append(f"tools[{i}]: '{tool}' is not in the contract substrate ({known})")
    if config.mol is not None:
        ceiling("mol.summary_tokens", config.mol.summary_tokens, lim.max_tokens_per_turn,
                "limits.max_tokens_per_turn")
    if config.action_format == "text" and "bash" not in config.tools:
        out.append("tools: action_format 'text' needs the 'bash' tool")
    for i, shot in enumerate(config.prompt.few_shot):
        for call in shot.tool_calls or []:
            if call.function.name not in config.tools:
                out.append(f"prompt.few_shot[{i}].tool_calls: '{call.function.name}' is not one of the config's "
                           f"tools ({', '.join(config.tools)})")
    return out


def search_space_violations(config: HarnessConfig, contract: Contract) -> list[str]:
    """Check `search_space` path by path and value by value.

    Each key must lie under a root `rsi expand` may vary and resolve to an existing field; each
    value, set on this config alone, must validate and must not break the contract in a way the
    config itself does not. Messages read `search_space.<path>[<i>]: <problem>`.
    """
    out: list[str] = []
    data = config.model_dump(mode="json")
    base = set(config_violations(config, contract))
    roots = ", ".join(EXPANDABLE_ROOTS)
    for key, values in config.search_space.items():
        where = f"search_space.{key}"
        path = normalize_path(key)
        if path.split(".")[0] not in EXPANDABLE_ROOTS or is_frozen(path):
            out.append(f"{where}: not a field rsi expand may vary ({roots})")
            continue
        try:
            get_path(data, path)
        except FieldProblem as e:
            out.append(f"{where}: {e.problem}")
            continue
        for i, value in enumerate(values):
            try:
                variant = with_values(config, {path: value})
            except FieldProblem as e:
                out.append(f"{where}[{i}]: {e.problem}")
                continue
            for v in config_violations(variant, contract):
                if v in base:
                    continue
                field, _, problem = v.partition(": ")
                out.append(f"{where}[{i}]: {problem}" if field == path else f"{where}[{i}]: {field}: {problem}")
    return out
