"""Harness-config variants: a base config with some fields set to other values.

`rsi expand` tries each value its config's `search_space` lists (`single_field_variants`); any
caller can build a variant with `apply_variant`, which refuses what the contract forbids, so a
variant that exists is always one the contract allows. A variant is a new config with its own
digest; its `search_space` is the base's, unchanged, because variants never edit the plan that
produced them.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Mapping
from typing import Any

from rsi.core.contract import Contract
from rsi.core.digest import digest_obj
from rsi.core.errors import ConfigError
from rsi.core.harness_config import (
    FieldProblem,
    HarnessConfig,
    config_violations,
    get_path,
    is_frozen,
    normalize_path,
    show_value,
    with_values,
)

# Label values that may appear as they are; anything else is shown as `#` + 8 hex digits.
_PLAIN = re.compile(r"^[A-Za-z0-9_.:/+-]{1,24}$")
BASE_LABEL = "base"
_MISSING = object()


def apply_variant(config: HarnessConfig, assignments: Mapping[str, Any], contract: Contract) -> HarnessConfig:
    """`config` with each dotted path in `assignments` set, re-validated and checked against `contract`.

    Raises ConfigError (exit 2) naming the field and both values when a path is unknown or
    frozen (`search_space`, `name`, `schema_version`, `contract`, `model.endpoint`), a value fails
    validation, or the result breaks the contract (`loop.max_turns: 40 loosens the contract's
    limits.max_turns (30)`). Only the variant's own fields are checked against the contract:
    its `search_space` is the base's, whose values were checked against the base at load.
    """
    for path in assignments:
        if is_frozen(path):
            raise ConfigError(f"{normalize_path(path)}: a variant may not change this field")
    try:
        variant = with_values(config, assignments)
    except FieldProblem as e:
        raise ConfigError(str(e)) from None
    problems = config_violations(variant, contract)
    if problems:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise ConfigError(problems[0] + more)
    return variant


def _label_value(value: Any) -> str:
    if isinstance(value, bool) or value is None or isinstance(value, int | float):
        return show_value(value)
    if isinstance(value, str) and _PLAIN.match(value):
        return value
    return "#" + digest_obj(value)[:8]


def variant_label(assignments: Mapping[str, Any]) -> str:
    """A short, stable name for a variant: `loop.max_turns=4,sampling.temperature=0.2`.

    Paths are sorted; numbers, booleans and short plain words appear as they are, anything else
    (prompts, lists) as `#` and 8 hex digits of its digest, e.g. `prompt.system=#ab12cd34`.
    No assignments at all is the base config: `base`.
    """
    if not assignments:
        return BASE_LABEL
    items = sorted((normalize_path(k), v) for k, v in assignments.items())
    return ",".join(f"{k}={_label_value(v)}" for k, v in items)


def _same(a: Any, b: Any) -> bool:
    """Equal values (1 == 1.0, as the validated config would make them); a missing field equals nothing."""
    return a is not _MISSING and b is not _MISSING and bool(a == b)


def single_field_variants(config: HarnessConfig) -> list[dict[str, Any]]:
    """One assignment per (path, value) in `search_space` whose value differs from the config's.

    Ordered by path, then by the value's place in its list; duplicate values appear once. A value
    the config already has is left out (it would be the base again). Values are not checked
    here: `apply_variant` refuses a bad one with a message naming it.
    """
    data = config.model_dump(mode="json")
    out: list[dict[str, Any]] = []
    for key in sorted(config.search_space, key=normalize_path):
        path = normalize_path(key)
        current: Any = _MISSING
        with contextlib.suppress(FieldProblem):  # a bad key: apply_variant will name it
            current = get_path(data, path)
        seen: list[Any] = []
        for value in config.search_space[key]:
            normalized = _normalized(config, path, value)
            if _same(normalized, current) or any(_same(normalized, s) for s in seen):
                continue
            seen.append(normalized)
            out.append({path: value})
    return out


def _normalized(config: HarnessConfig, path: str, value: Any) -> Any:
    """The value as the validated config would hold it (defaults filled in, ints as floats)."""
    try:
        return get_path(with_values(config, {path: value}).model_dump(mode="json"), path)
    except FieldProblem:
        return value
