"""Hostile input is refused cheaply: deep nesting, alias bombs, non-UTF-8 bytes, and models answering deep JSON."""

from __future__ import annotations

import json
import time
from pathlib import Path

import httpx
import pytest
import yaml

from nl2sql.config.models import LLMConfig, ModelConfig
from nl2sql.config.reading import MAX_DEPTH, NotUTF8, load_yaml, loads_json, read_text
from nl2sql.llm import LLMClient, LLMParseError, LLMProviderError, Message
from nl2sql.plan.io import PlanFileError, load_plan_file
from nl2sql.plan.model import PlanModel

BOMB = "\n".join(
    [f"l0: &l0 [{', '.join(['lol'] * 9)}]"]
    + [f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 9)}]" for i in range(1, 9)]
) + "\n"
DEEP_ANSWER = '{"select": ' + "[" * 5000 + "]" * 5000 + "}"
PLAN = {"select": [{"expr": {"kind": "column", "table": "Genre", "column": "Name"}, "alias": None}],
        "from": {"table": "Genre", "alias": None}}
MESSAGES = [Message("user", "Genres?")]


@pytest.mark.parametrize(("text", "problem"), [
    ("a: " + "[" * 20_000 + "]" * 20_000, f"nested deeper than {MAX_DEPTH} levels"),
    ("".join("  " * i + "-\n" for i in range(500)), f"nested deeper than {MAX_DEPTH} levels"),
    (BOMB, "aliases expand to more than"),
    ("a: &a [*a]\n", "refers to the node that contains it"),
    ("".join(f"a{i}: &a{i} " + "[" * 60 + (f"*a{i - 1}" if i else "x") + "]" * 60 + "\n" for i in range(3)),
     "aliases nest deeper than"),
    ("when: 2021-02-30\n", "the value cannot be read"),
    ("n: " + "9" * 5000 + "\n", "the value cannot be read"),
], ids=["deep-flow", "deep-block", "billion-laughs", "self-alias", "alias-chain", "bad-date", "huge-int"])
def test_hostile_yaml_is_refused_quickly(text: str, problem: str) -> None:
    started = time.perf_counter()
    with pytest.raises(yaml.YAMLError) as info:
        load_yaml(text)
    assert time.perf_counter() - started < 1.0
    assert problem in str(info.value)
    assert getattr(info.value, "problem_mark", None) is not None


def test_ordinary_aliases_still_load() -> None:
    assert load_yaml("base: &b {x: 1}\nother: *b\nlist: [*b, *b]\n") == {
        "base": {"x": 1}, "other": {"x": 1}, "list": [{"x": 1}, {"x": 1}]}


def test_json_depth_is_bounded_and_strings_do_not_count() -> None:
    assert loads_json('{"a": "[[[[[[[[[[[[[[[[[[\\"]]]"}', max_depth=1) == {"a": '[[[[[[[[[[[[[[[[[[\"]]]'}
    with pytest.raises(json.JSONDecodeError, match="nested deeper than 100 levels"):
        loads_json(DEEP_ANSWER)
    with pytest.raises(json.JSONDecodeError, match="cannot be read"):
        loads_json('{"limit": ' + "1" * 5000 + "}")


def test_non_utf8_names_the_line_and_column(tmp_path: Path) -> None:
    path = tmp_path / "x.yaml"
    path.write_bytes(b"a: 1\nb: caf\xe9\n")
    with pytest.raises(NotUTF8) as info:
        read_text(path)
    assert (info.value.line, info.value.column) == (2, 7)
    assert "0xe9" in str(info.value)
    path.write_bytes(b"\xef\xbb\xbfa: 1\n")
    assert read_text(path) == "a: 1\n"


@pytest.mark.parametrize(("name", "content", "message"), [
    ("deep.json", DEEP_ANSWER.encode(), "nested deeper than 100 levels"),
    ("latin1.json", b'{"select": "\xff"}', "not UTF-8 text"),
    ("deep.yaml", ("select: " + "[" * 3000 + "]" * 3000).encode(), "nested deeper than 100 levels"),
    ("int.json", ('{"limit": ' + "1" * 5000 + "}").encode(), "cannot be read"),
])
def test_plan_files_that_cannot_be_read(tmp_path: Path, name: str, content: bytes, message: str) -> None:
    path = tmp_path / name
    path.write_bytes(content)
    with pytest.raises(PlanFileError) as info:
        load_plan_file(path)
    assert str(path) in str(info.value) and message in str(info.value)
    assert info.value.fix


# --- models answering deep JSON ----------------------------------------------------------------


def _openai_body(content: str) -> str:
    return json.dumps({"choices": [{"message": {"content": content}, "finish_reason": "stop"}],
                       "usage": {"prompt_tokens": 1, "completion_tokens": 1}})


def _client(provider: str, answers: list[str]) -> tuple[LLMClient, list[int]]:
    calls: list[int] = []

    def handle(request: httpx.Request) -> httpx.Response:
        calls.append(1)
        return httpx.Response(200, text=answers[min(len(calls), len(answers)) - 1],
                              headers={"content-type": "application/json"})

    http = httpx.Client(transport=httpx.MockTransport(handle))
    model = ModelConfig(provider=provider, model="m", base_url="http://model.invalid", api_key="k")
    return LLMClient(LLMConfig(models={"main": model}, default="main"), http=http, backoff_s=0.0), calls


def test_a_deep_structured_answer_is_a_parse_retry_not_a_crash() -> None:
    client, calls = _client("openai", [_openai_body(DEEP_ANSWER), _openai_body(json.dumps(PLAN))])
    retries: list[list[str]] = []
    client.on_parse_retry = lambda node, attempt, errors: retries.append(errors)
    assert client.structured("planner", MESSAGES, PlanModel) == PlanModel.model_validate(PLAN)
    assert len(calls) == 2
    assert "nested deeper than 100 levels" in retries[0][0]


def test_deep_structured_answers_end_in_a_parse_error() -> None:
    client, _ = _client("openai", [_openai_body(DEEP_ANSWER)])
    with pytest.raises(LLMParseError, match="nested deeper"):
        client.structured("planner", MESSAGES, PlanModel, max_parse_retries=1)


def test_a_deep_tool_input_is_a_clear_provider_error() -> None:
    body = ('{"content": [{"type": "tool_use", "id": "t", "name": "PlanModel", "input": ' + DEEP_ANSWER + '}], '
            '"stop_reason": "tool_use", "usage": {"input_tokens": 1, "output_tokens": 1}}')
    client, _ = _client("anthropic", [body])
    with pytest.raises(LLMProviderError, match="unexpected format"):
        client.structured("planner", MESSAGES, PlanModel)
