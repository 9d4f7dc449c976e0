"""Pydantic model → JSON schema that providers accept for structured output.

OpenAI's strict structured outputs accept a subset of JSON Schema: an object at the root, every
object closed (`additionalProperties: false`) with every property required (optional ones are
nullable), `anyOf` but no `oneOf`/`allOf`/`not`, no `default` or numeric/string bounds, and
recursion only through `$defs`. Anthropic's tool input takes an object schema with local `$ref`s.
`strict_json_schema` produces one schema for both; the two `*_violations` functions check the rules,
so a change to a model that breaks them fails a test rather than a provider call.
"""

from __future__ import annotations

import copy
import json
import typing
from collections.abc import Iterator
from functools import cache
from typing import Any

from pydantic import BaseModel

#: Keywords OpenAI strict mode refuses (or that strict output does not need); removed or rewritten.
DROPPED_KEYWORDS = frozenset({
    "title", "default", "examples", "discriminator", "minLength", "maxLength", "pattern", "format",
    "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf", "minItems", "maxItems",
    "uniqueItems", "minProperties", "maxProperties",
})  # fmt: skip
OPENAI_FORBIDDEN = frozenset({
    "oneOf", "allOf", "not", "if", "then", "else", "patternProperties", "propertyNames", "dependentRequired",
    "dependentSchemas", "contains", "prefixItems", "unevaluatedProperties", "const", *DROPPED_KEYWORDS,
}) - {"title"}  # fmt: skip
ANTHROPIC_ALLOWED = frozenset({
    "type", "properties", "required", "additionalProperties", "items", "enum", "const", "anyOf", "$ref",
    "$defs", "description", "title",
})  # fmt: skip
OPENAI_MAX_DEPTH = 10
OPENAI_MAX_PROPERTIES = 5000
OPENAI_MAX_ENUM_VALUES = 1000


@cache
def strict_json_schema(model: type[BaseModel]) -> dict:
    """The model's JSON schema, rewritten to the strict subset (see the module docstring).

    A model may name its repeated unions in a class attribute `json_schema_unions` (name → the union's type,
    e.g. an `Annotated[A | B, Field(discriminator=…)]` alias): each is then written once, as a named `$defs`
    entry, instead of at every place it is used.
    """
    union_names = {_members(union): name for name, union in getattr(model, "json_schema_unions", {}).items()}
    raw = model.model_json_schema(by_alias=True, ref_template="#/$defs/{model}")
    defs = {name: _rewrite(node) for name, node in raw.pop("$defs", {}).items()}
    root = _rewrite(raw)
    if "$ref" in root:  # a recursive model is emitted as a $ref: the root must be the object itself
        root = copy.deepcopy(defs[_ref_name(root["$ref"])])
    if union_names:
        for members, name in union_names.items():
            union = {"anyOf": [{"$ref": f"#/$defs/{m}"} for m in sorted(members)]}
            target = {"$ref": f"#/$defs/{name}"}
            defs = {k: _hoist(v, members, target) for k, v in defs.items()}
            root = _hoist(root, members, target)
            defs[name] = union
    if defs:
        root["$defs"] = dict(sorted(defs.items()))
    return root


def with_enums(schema: dict, enums: dict[tuple[str, str], list[str]]) -> dict:
    """A copy of a strict schema with some string properties of its `$defs` made enums: (definition, property) →
    the values a constrained decoder may write there (a definition the schema lacks is left alone)."""
    out = copy.deepcopy(schema)
    for (definition, prop), values in enums.items():
        node = out.get("$defs", {}).get(definition, {}).get("properties", {}).get(prop)
        if node is not None and values:
            node.pop("anyOf", None)
            node.update({"type": "string", "enum": list(dict.fromkeys(values))})
    return out


def _members(union: object) -> frozenset[str]:
    """The class names a union type holds (through an Annotated wrapper)."""
    inner = typing.get_args(union)[0] if typing.get_origin(union) is typing.Annotated else union
    return frozenset(t.__name__ for t in typing.get_args(inner))


def _ref_name(ref: str) -> str:
    return ref.rsplit("/", 1)[-1]


def _rewrite(node: Any) -> Any:
    if isinstance(node, list):
        return [_rewrite(n) for n in node]
    if not isinstance(node, dict):
        return node
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in DROPPED_KEYWORDS:
            continue
        if key == "oneOf":
            key = "anyOf"
        if key == "const":
            out["enum"] = [value]
            continue
        if key in ("properties", "$defs"):
            out[key] = {name: _rewrite(sub) for name, sub in value.items()}
        else:
            out[key] = _rewrite(value)
    if "properties" in out:
        out["type"] = "object"
        out["additionalProperties"] = False
        out["required"] = list(out["properties"])
    return out


def _hoist(node: Any, members: frozenset[str], target: dict) -> Any:
    if isinstance(node, list):
        return [_hoist(n, members, target) for n in node]
    if not isinstance(node, dict):
        return node
    options = node.get("anyOf")
    if (options and all(isinstance(o, dict) and set(o) == {"$ref"} for o in options)
            and {_ref_name(o["$ref"]) for o in options} == members):
        rest = {k: v for k, v in node.items() if k != "anyOf"}
        return {**target, **rest} if rest else dict(target)
    return {key: _hoist(value, members, target) for key, value in node.items()}


# --- rule checks -------------------------------------------------------------------------------


def _walk(node: Any, path: str = "#") -> Iterator[tuple[str, dict]]:
    if isinstance(node, dict):
        yield path, node
        for key, value in node.items():
            if key in ("properties", "$defs"):
                for name, sub in value.items():
                    yield from _walk(sub, f"{path}/{key}/{name}")
            elif isinstance(value, dict | list):
                yield from _walk(value, f"{path}/{key}")
    elif isinstance(node, list):
        for i, sub in enumerate(node):
            yield from _walk(sub, f"{path}/{i}")


def _depth(node: Any, defs: dict, seen: frozenset[str] = frozenset()) -> int:
    """Object nesting depth through properties and items (a `$ref` seen before ends the count)."""
    if not isinstance(node, dict):
        return 0
    if "$ref" in node:
        name = _ref_name(node["$ref"])
        return 0 if name in seen or name not in defs else _depth(defs[name], defs, seen | {name})
    children = list(node.get("properties", {}).values())
    if "items" in node:
        children.append(node["items"])
    nested = max((_depth(c, defs, seen) for c in children), default=0)
    alternatives = max((_depth(o, defs, seen) for o in node.get("anyOf", [])), default=0)
    return max(nested + (1 if "properties" in node else 0), alternatives)


def _ref_problems(schema: dict) -> list[str]:
    defs = schema.get("$defs", {})
    problems = []
    for path, node in _walk(schema):
        ref = node.get("$ref")
        if ref is not None and ref != "#" and not (ref.startswith("#/$defs/") and _ref_name(ref) in defs):
            problems.append(f"{path}: $ref {ref!r} does not resolve to a local $defs entry")
    return problems


def openai_strict_violations(schema: dict) -> list[str]:
    """Every way `schema` breaks OpenAI's strict structured-output rules (empty when it is accepted)."""
    problems = _ref_problems(schema)
    if schema.get("type") != "object" or "anyOf" in schema or "$ref" in schema:
        problems.append("#: the root must be an object schema, not a union or a $ref")
    properties = enum_values = 0
    for path, node in _walk(schema):
        for key in node:
            if key in OPENAI_FORBIDDEN:
                problems.append(f"{path}: keyword {key!r} is not supported in strict mode")
        if "properties" in node:
            properties += len(node["properties"])
            if node.get("additionalProperties") is not False:
                problems.append(f"{path}: objects must set additionalProperties: false")
            if sorted(node.get("required", [])) != sorted(node["properties"]):
                problems.append(f"{path}: every property must be required (make optional ones nullable)")
        if node.get("type") == "object" and "properties" not in node:
            problems.append(f"{path}: an object must list its properties")
        enum_values += len(node.get("enum", []))
    depth = _depth(schema, schema.get("$defs", {}))
    if depth > OPENAI_MAX_DEPTH:
        problems.append(f"#: objects nest {depth} deep (at most {OPENAI_MAX_DEPTH})")
    if properties > OPENAI_MAX_PROPERTIES:
        problems.append(f"#: {properties} properties (at most {OPENAI_MAX_PROPERTIES})")
    if enum_values > OPENAI_MAX_ENUM_VALUES:
        problems.append(f"#: {enum_values} enum values (at most {OPENAI_MAX_ENUM_VALUES})")
    return problems


def anthropic_tool_violations(schema: dict) -> list[str]:
    """Every way `schema` breaks the rules for an Anthropic tool's `input_schema`."""
    problems = _ref_problems(schema)
    if schema.get("type") != "object" or "properties" not in schema:
        problems.append("#: input_schema must be an object schema with properties at the root")
    for path, node in _walk(schema):
        for key in node:
            if key not in ANTHROPIC_ALLOWED:
                problems.append(f"{path}: keyword {key!r} is not in the supported subset")
    try:
        json.dumps(schema)
    except (TypeError, ValueError) as exc:
        problems.append(f"#: not JSON-serialisable ({exc})")
    return problems
