"""pbd.http.openai.restricted: --openai-restricted-api's groups and refusals."""

from __future__ import annotations

import argparse

import pytest

from pbd.http.openai.errors import ApiError
from pbd.http.openai.restricted import OpenAIRestrictions
from pbd.settings import add_arguments, from_args


def _refusal(rules: list[str], method: str, path: str, headers: dict[str, str]) -> ApiError | None:
    try:
        OpenAIRestrictions.parse(rules).check(method, path, headers)
    except ApiError as exc:
        return exc
    return None


@pytest.mark.parametrize(
    ("method", "path", "group"),
    [
        ("POST", "/v1/chat/completions", "inference"),
        ("POST", "/v1/completions", "inference"),
        ("POST", "/v1/embeddings", "embedding"),
        ("GET", "/v1/models", "model-repository"),
        ("GET", "/v1/models/tiny_llm", "model-repository"),
    ],
)
def test_each_route_belongs_to_tritons_group(method: str, path: str, group: str) -> None:
    refused = _refusal([f"{group}:api-key=v"], method, path, {})
    assert refused is not None and refused.status == 401
    assert refused.body()["error"] == {
        "message": "This API is restricted, expecting header 'api-key' with valid value",
        "type": "authentication_error",
        "param": None,
        "code": "invalid_auth",
    }
    assert _refusal([f"{group}:api-key=v"], method, path, {"api-key": "v"}) is None
    assert _refusal([f"{group}:api-key=v"], method, path, {"api-key": "v2"}) is not None
    others = [g for g in ("inference", "embedding", "model-repository") if g != group]
    assert _refusal([f"{','.join(others)}:api-key=v"], method, path, {}) is None


@pytest.mark.parametrize(
    ("rule", "words"),
    [
        ("metrics:k=v", "unknown group 'metrics'"),
        ("inference", "expected <group>[,<group>...]:<key>=<value>"),
        ("inference:k=", "expected"),
    ],
)
def test_a_bad_rule_is_refused_at_the_start(rule: str, words: str) -> None:
    with pytest.raises(ValueError, match="--openai-restricted-api") as info:
        parser = argparse.ArgumentParser()
        add_arguments(parser)
        from_args(parser.parse_args(["--openai-restricted-api", rule]), environ={})
    assert words in str(info.value)


def test_a_group_in_two_rules_is_refused() -> None:
    with pytest.raises(ValueError, match="group 'inference' given twice"):
        OpenAIRestrictions.parse(["inference:a=1", "inference,embedding:b=2"])
