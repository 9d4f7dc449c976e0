"""PlanModel's JSON schema: accepted by OpenAI strict mode and Anthropic tools, recursive through `$defs`,
and agreeing with the model on every golden plan; plus the rule checkers catching what they must."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
from jsonschema import Draft202012Validator
from jsonschema.exceptions import ValidationError as SchemaError

from nl2sql.llm.json_schema import anthropic_tool_violations, openai_strict_violations, strict_json_schema
from nl2sql.plan import PlanModel
from tests.unit.test_plan_golden import GOLDEN_FILES, load


def obj(**properties: dict) -> dict:
    """A closed object schema with every property required (valid in strict mode)."""
    return {"type": "object", "properties": properties, "required": list(properties), "additionalProperties": False}


GOOD = obj(name={"type": "string"}, size={"anyOf": [{"type": "integer"}, {"type": "null"}]})


def nested(depth: int) -> dict:
    """Objects nested `depth` deep (the root counts as one)."""
    schema = obj(leaf={"type": "string"})
    for _ in range(depth - 1):
        schema = obj(child=schema)
    return schema


# --- the plan schema --------------------------------------------------------------------------


def test_plan_schema_passes_both_providers_rules() -> None:
    schema = strict_json_schema(PlanModel)
    assert openai_strict_violations(schema) == []
    assert anthropic_tool_violations(schema) == []
    Draft202012Validator.check_schema(schema)


def test_plan_schema_root_is_the_plan_object() -> None:
    schema = strict_json_schema(PlanModel)
    assert schema["type"] == "object" and schema["additionalProperties"] is False
    assert set(schema["properties"]) == {"with", "select", "from", "joins", "where", "group_by", "having", "order_by",
                                         "limit", "offset", "distinct", "set_operations"}
    assert sorted(schema["required"]) == sorted(schema["properties"])
    assert "$ref" not in schema and "anyOf" not in schema


def test_plan_schema_recursion_goes_through_defs() -> None:
    schema = strict_json_schema(PlanModel)
    defs = schema["$defs"]
    assert "PlanModel" in defs
    for name in ("ScalarSubquery", "Exists", "InSubquery", "CommonTable", "SetOperation"):
        assert defs[name]["properties"]["plan"] == {"$ref": "#/$defs/PlanModel"}, name
    # the tagged unions are written once and referenced everywhere
    assert {r["$ref"].rsplit("/", 1)[-1] for r in defs["Expr"]["anyOf"]} == {
        "Aggregate", "Arithmetic", "Case", "Cast", "ColumnRef", "DatePartOf", "DateTrunc", "Function", "ScalarSubquery",
        "Star", "Value", "Window"}
    assert {r["$ref"].rsplit("/", 1)[-1] for r in defs["Condition"]["anyOf"]} == {
        "And", "Between", "Comparison", "Exists", "InList", "InSubquery", "IsNull", "Like", "Not", "Or", "Truth"}
    assert defs["Aggregate"]["properties"]["arg"] == {"anyOf": [{"$ref": "#/$defs/Expr"}, {"type": "null"}]}
    assert defs["Not"]["properties"]["condition"] == {"$ref": "#/$defs/Condition"}


def test_every_def_is_used() -> None:
    schema = strict_json_schema(PlanModel)
    text = repr({k: v for k, v in schema.items() if k != "$defs"}) + repr(schema["$defs"])
    unused = [name for name in schema["$defs"] if f"#/$defs/{name}'" not in text]
    assert unused == []


# --- golden plans round-trip through the model and the schema --------------------------------------


@pytest.mark.parametrize("path", GOLDEN_FILES, ids=[p.stem for p in GOLDEN_FILES])
def test_golden_plan_round_trips(path: Path) -> None:
    plan = PlanModel.model_validate(load(path)["plan"])
    dumped = plan.model_dump(by_alias=True, mode="json")
    assert "from" in dumped and "from_" not in dumped
    again = PlanModel.model_validate(dumped)
    assert again == plan
    assert again.model_dump(by_alias=True, mode="json") == dumped
    errors = sorted(Draft202012Validator(strict_json_schema(PlanModel)).iter_errors(dumped), key=lambda e: list(e.path))
    assert not errors, "\n".join(f"{list(e.path)}: {e.message}" for e in errors)


def test_schema_refuses_what_the_model_refuses() -> None:
    validator = Draft202012Validator(strict_json_schema(PlanModel))
    dumped = PlanModel.model_validate(load(GOLDEN_FILES[0])["plan"]).model_dump(by_alias=True, mode="json")
    stray = copy.deepcopy(dumped)
    stray["select"][0]["expr"]["stray"] = 1
    missing = copy.deepcopy(dumped)
    del missing["limit"]
    wrong_kind = copy.deepcopy(dumped)
    wrong_kind["select"][0]["expr"]["kind"] = "columns"
    for bad in (stray, missing, wrong_kind):
        with pytest.raises(SchemaError):
            validator.validate(bad)


# --- the rule checkers catch problems -------------------------------------------------------------


def test_a_good_schema_has_no_violations() -> None:
    assert openai_strict_violations(GOOD) == []
    assert anthropic_tool_violations(GOOD) == []
    assert openai_strict_violations(nested(10)) == []


@pytest.mark.parametrize(
    ("schema", "openai", "anthropic"),
    [
        pytest.param(obj(x={"oneOf": [{"type": "string"}, {"type": "integer"}]}), "'oneOf'", "'oneOf'", id="oneOf"),
        pytest.param({**GOOD, "additionalProperties": True}, "additionalProperties: false", None,
                     id="open-object"),
        pytest.param({k: v for k, v in GOOD.items() if k != "additionalProperties"}, "additionalProperties: false",
                     None, id="missing-additionalProperties"),
        pytest.param({**GOOD, "required": ["name"]}, "every property must be required", None,
                     id="optional-not-required"),
        pytest.param(obj(x={"type": "string", "default": "a"}), "'default'", "'default'", id="default"),
        pytest.param(obj(x={"type": "string", "minLength": 1}), "'minLength'", "'minLength'", id="minLength"),
        pytest.param({"$ref": "#/$defs/Thing", "$defs": {"Thing": GOOD}}, "root must be an object",
                     "object schema with properties at the root", id="root-ref"),
        pytest.param(obj(x={"$ref": "#/$defs/Missing"}), "does not resolve", "does not resolve",
                     id="unresolved-ref"),
        pytest.param(obj(x={"$ref": "other.json#/Thing"}), "does not resolve", "does not resolve",
                     id="remote-ref"),
        pytest.param(nested(11), "nest 11 deep", None, id="depth-11"),
        pytest.param({"anyOf": [GOOD, obj(y={"type": "string"})]}, "root must be an object",
                     "object schema with properties at the root", id="root-union"),
    ],
)
def test_checkers_catch_problems(schema: dict, openai: str, anthropic: str | None) -> None:
    problems = openai_strict_violations(schema)
    assert any(openai in p for p in problems), problems
    if anthropic is not None:
        found = anthropic_tool_violations(schema)
        assert any(anthropic in p for p in found), found


def test_depth_counts_through_refs_without_looping() -> None:
    schema = obj(a={"$ref": "#/$defs/Deep"}, b={"$ref": "#/$defs/Deep"})
    schema["$defs"] = {"Deep": nested(6)}
    assert openai_strict_violations(schema) == []  # 1 + 6
    schema["$defs"]["Deep"] = obj(inner=nested(10))
    assert any("deep" in p for p in openai_strict_violations(schema))
    recursive = obj(child={"anyOf": [{"$ref": "#/$defs/Node"}, {"type": "null"}]})
    recursive["$defs"] = {"Node": obj(child={"anyOf": [{"$ref": "#/$defs/Node"}, {"type": "null"}]})}
    assert openai_strict_violations(recursive) == []


def test_strict_json_schema_rewrites_a_model() -> None:
    from typing import Literal

    from pydantic import BaseModel, Field

    class Leaf(BaseModel):
        kind: Literal["leaf"] = "leaf"
        name: str = Field(default="x", min_length=1, max_length=5)

    class Tree(BaseModel):
        kind: Literal["tree"] = "tree"
        children: list[Tree | Leaf] = Field(default_factory=list)
        note: str | None = None

    schema = strict_json_schema(Tree)
    assert openai_strict_violations(schema) == []
    assert anthropic_tool_violations(schema) == []
    assert schema["type"] == "object" and sorted(schema["required"]) == ["children", "kind", "note"]
    assert schema["$defs"]["Leaf"]["properties"]["name"] == {"type": "string"}
    assert schema["properties"]["kind"] == {"enum": ["tree"], "type": "string"}
    Draft202012Validator(schema).validate({"kind": "tree", "note": None,
                                           "children": [{"kind": "leaf", "name": "a"},
                                                        {"kind": "tree", "note": "n", "children": []}]})
