"""JSON-schema subset -> grammar (grammar.py), for `response_format` and forced tool calls (pure; no torch).

Served: `type` (string, integer, number, boolean, null, object, array, or a list of them), `enum`,
`const`, `anyOf`, a one-item `allOf`, local `$ref` (`#/$defs/...`, `#/definitions/...`, not
recursive), object `properties` (every property is written, in the schema's order, so `required` and
`additionalProperties` always hold), `additionalProperties` as a schema when there are no properties
(a map), array `items` / `minItems` / `maxItems`, string `minLength` / `maxLength`, and annotations
(`title`, `description`, `default`, `examples`, ...). Anything else (`pattern`, `format`, `minimum`,
`oneOf`, `prefixItems`, ...) changes what is valid in a way the grammar would not enforce, so it raises
`SchemaUnsupported` naming the keyword and where it is: the server answers 400, never an answer that
ignores part of the schema.
"""

from __future__ import annotations

import json
from typing import Any

from rsi.models.server.grammar import EMPTY, SP, Alt, Lazy, Lit, Node, Num, Rep, Seq, Str

ANY_DEPTH = 6  # nesting allowed in a free JSON value (json_object, an object without properties)
ANNOTATIONS = frozenset({"title", "description", "default", "examples", "$schema", "$id", "$comment", "deprecated",
                         "readOnly", "writeOnly", "$defs", "definitions"})
_TYPE_KEYS = {
    "string": {"minLength", "maxLength"},
    "object": {"properties", "required", "additionalProperties"},
    "array": {"items", "minItems", "maxItems"},
    "integer": set(),
    "number": set(),
    "boolean": set(),
    "null": set(),
}
_COMMON = {"type", "enum", "const", "anyOf", "allOf", "$ref"}


class SchemaUnsupported(ValueError):
    """A schema (or part of one) this server cannot enforce; the message names where."""


def _lits(values: list[Any]) -> Node:
    return Alt(tuple(Lit(json.dumps(v, ensure_ascii=False)) for v in values))


def _free_object(value: Node) -> Node:
    pair = Seq((Str(), Lit(":"), SP, value))
    more = Rep(Seq((Lit(","), SP, pair)))
    return Seq((Lit("{"), Alt((Lit("}"), Seq((pair, more, Lit("}")))))))


def _array(item: Node, lo: int = 0, hi: int | None = None) -> Node:
    more = Rep(Seq((Lit(","), SP, item)), max(lo - 1, 0), None if hi is None else hi - 1)
    body = Seq((item, more, Lit("]")))
    if hi == 0:
        return Lit("[]")
    return Seq((Lit("["), Alt((Lit("]"), body)) if lo == 0 else body))


def any_value(depth: int = ANY_DEPTH) -> Node:
    """Any JSON value nested at most `depth` deep."""
    scalars: tuple[Node, ...] = (Str(), Num(), Lit("true"), Lit("false"), Lit("null"))
    if depth <= 0:
        return Alt(scalars)
    inner = Lazy(lambda: any_value(depth - 1))
    return Alt((_free_object(inner), _array(inner), *scalars))


def any_object(depth: int = ANY_DEPTH) -> Node:
    """Any JSON object (`response_format: {"type": "json_object"}`)."""
    return _free_object(Lazy(lambda: any_value(depth - 1)))


class _Compiler:
    def __init__(self, root: Any, where: str) -> None:
        self.root = root
        self.where = where
        self.resolving: list[str] = []

    def fail(self, path: str, what: str) -> SchemaUnsupported:
        return SchemaUnsupported(f"{path}: {what}")

    def node(self, schema: Any, path: str) -> Node:
        if schema is True or schema == {}:
            return any_value()
        if not isinstance(schema, dict):
            raise self.fail(path, "a schema must be an object (or true)")
        keys = set(schema) - ANNOTATIONS
        if "$ref" in schema:
            return self.ref(schema, keys, path)
        if "const" in schema:
            return self.only(keys, {"const", "type"}, path, _lits([schema["const"]]))
        if "enum" in schema:
            values = schema["enum"]
            if not isinstance(values, list) or not values:
                raise self.fail(f"{path}.enum", "a non-empty list")
            return self.only(keys, {"enum", "type"}, path, _lits(values))
        if "anyOf" in schema or "allOf" in schema:
            return self.combined(schema, keys, path)
        types = schema.get("type")
        if types is None:
            if keys - {"properties", "required", "additionalProperties"}:
                raise self.fail(path, f"unsupported JSON-schema keyword(s) {', '.join(sorted(keys))} without a type")
            if keys:
                return self.typed("object", schema, path)
            return any_value()
        names = types if isinstance(types, list) else [types]
        if not names or not all(isinstance(t, str) and t in _TYPE_KEYS for t in names):
            raise self.fail(f"{path}.type", f"unsupported type {types!r}")
        allowed = set().union(*(_TYPE_KEYS[t] for t in names)) | _COMMON
        extra = keys - allowed
        if extra:
            raise self.fail(path, f"unsupported JSON-schema keyword(s) {', '.join(sorted(extra))}")
        nodes = [self.typed(t, schema, path) for t in names]
        return nodes[0] if len(nodes) == 1 else Alt(tuple(nodes))

    def only(self, keys: set[str], allowed: set[str], path: str, node: Node) -> Node:
        extra = keys - allowed
        if extra:
            raise self.fail(path, f"unsupported JSON-schema keyword(s) {', '.join(sorted(extra))} beside "
                                  f"{'/'.join(sorted(allowed - {'type'}))}")
        return node

    def ref(self, schema: dict[str, Any], keys: set[str], path: str) -> Node:
        ref = schema["$ref"]
        if keys - {"$ref"}:
            raise self.fail(path, f"keyword(s) {', '.join(sorted(keys - {'$ref'}))} beside $ref")
        parts = ref.split("/") if isinstance(ref, str) else []
        if len(parts) != 3 or parts[0] != "#" or parts[1] not in ("$defs", "definitions"):
            raise self.fail(f"{path}.$ref", f"only local #/$defs/NAME references are served, not {ref!r}")
        target = (self.root.get(parts[1]) or {}).get(parts[2]) if isinstance(self.root, dict) else None
        if target is None:
            raise self.fail(f"{path}.$ref", f"{ref!r} names no definition")
        if ref in self.resolving:
            raise self.fail(f"{path}.$ref", f"recursive reference {ref!r} is not served")
        self.resolving.append(ref)
        try:
            return self.node(target, f"{self.where}.{parts[1]}.{parts[2]}")
        finally:
            self.resolving.pop()

    def combined(self, schema: dict[str, Any], keys: set[str], path: str) -> Node:
        if "allOf" in schema:
            subs = schema["allOf"]
            if not isinstance(subs, list) or len(subs) != 1 or keys - {"allOf"}:
                raise self.fail(f"{path}.allOf", "only a one-schema allOf is served")
            return self.node(subs[0], f"{path}.allOf[0]")
        subs = schema["anyOf"]
        if not isinstance(subs, list) or not subs:
            raise self.fail(f"{path}.anyOf", "a non-empty list of schemas")
        if keys - {"anyOf"}:
            raise self.fail(path, f"keyword(s) {', '.join(sorted(keys - {'anyOf'}))} beside anyOf")
        return Alt(tuple(self.node(s, f"{path}.anyOf[{i}]") for i, s in enumerate(subs)))

    def typed(self, t: str, schema: dict[str, Any], path: str) -> Node:
        if t == "string":
            lo, hi = _bound(schema, "minLength", path), _bound(schema, "maxLength", path)
            return Str(lo or 0, hi)
        if t in ("integer", "number"):
            return Num(integer=t == "integer")
        if t == "boolean":
            return Alt((Lit("true"), Lit("false")))
        if t == "null":
            return Lit("null")
        if t == "array":
            items = schema.get("items", True)
            if isinstance(items, list):
                raise self.fail(f"{path}.items", "a list of item schemas (tuple validation) is not served")
            lo, hi = _bound(schema, "minItems", path), _bound(schema, "maxItems", path)
            if lo is not None and hi is not None and lo > hi:
                raise self.fail(path, "minItems > maxItems")
            return _array(self.node(items, f"{path}.items"), lo or 0, hi)
        return self.object(schema, path)

    def object(self, schema: dict[str, Any], path: str) -> Node:
        props = schema.get("properties") or {}
        if not isinstance(props, dict):
            raise self.fail(f"{path}.properties", "an object of schemas")
        required = schema.get("required") or []
        missing = [r for r in required if r not in props]
        if missing:
            raise self.fail(f"{path}.required", f"names {', '.join(map(str, missing))}, not among the properties")
        extra = schema.get("additionalProperties", True)
        if not props:
            if extra is False:
                return Lit("{}")
            return _free_object(self.node(extra, f"{path}.additionalProperties")) if isinstance(extra, dict) \
                else any_object()
        parts: list[Node] = [Lit("{")]
        for i, (name, sub) in enumerate(props.items()):
            if i:
                parts += [Lit(","), SP]
            parts += [Lit(json.dumps(name, ensure_ascii=False) + ":"), SP, self.node(sub, f"{path}.properties.{name}")]
        parts.append(Lit("}"))
        return Seq(tuple(parts))


def _bound(schema: dict[str, Any], key: str, path: str) -> int | None:
    v = schema.get(key)
    if v is None:
        return None
    if not isinstance(v, int) or isinstance(v, bool) or v < 0:
        raise SchemaUnsupported(f"{path}.{key}: a non-negative integer")
    return v


def schema_node(schema: Any, where: str) -> Node:
    """The grammar of `schema`; `where` is the request field it came from (named in errors)."""
    return _Compiler(schema, where).node(schema, where)


def tool_call_node(tools: list[tuple[str, Any]], where: str) -> Node:
    """One tool call as the embedded server's prompt asks for it: `<tool_call>{"name": N, "arguments": A}
    </tool_call>`, N one of `tools`' names and A valid for that tool's parameters schema."""
    calls = []
    for i, (name, params) in enumerate(tools):
        args = schema_node(params, f"{where}[{i}].function.parameters") if params is not None else any_object()
        calls.append(Seq((Lit('{"name":'), SP, Lit(json.dumps(name, ensure_ascii=False) + ","), SP,
                          Lit('"arguments":'), SP, args, Lit("}"))))
    nl = Alt((Lit("\n"), EMPTY))
    return Seq((Lit("<tool_call>"), nl, Alt(tuple(calls)), nl, Lit("</tool_call>")))


__all__ = ["SchemaUnsupported", "any_object", "any_value", "schema_node", "tool_call_node"]
