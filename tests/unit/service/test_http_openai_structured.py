from __future__ import annotations

from typing import Any

import pytest

from pbd.http.openai.errors import ApiError
from pbd.http.openai.structured import Guide, parse_response_format

SCHEMA = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}


def _schema(schema: Any = SCHEMA, **more: Any) -> dict[str, Any]:
    return {"type": "json_schema", "json_schema": {"name": "x", "schema": schema, **more}}


def test_formats() -> None:
    assert parse_response_format(None) is None
    assert parse_response_format({"type": "text"}) is None
    assert parse_response_format({"type": "json_object"}) == Guide(None)
    assert parse_response_format(_schema(strict=True)) == Guide(SCHEMA, True)
    assert parse_response_format(_schema()) == Guide(SCHEMA, False)


def test_how_the_model_is_asked() -> None:
    assert Guide(None).sampling() == {"json_object": True}
    assert Guide(SCHEMA).sampling() == {"json": SCHEMA}
    assert Guide(None).inputs() == {"guided_decoding_guide_type": "json"}
    assert Guide(SCHEMA).inputs()["guided_decoding_guide_type"] == "json_schema"


@pytest.mark.parametrize(
    ("value", "param"),
    [
        ({"type": "xml"}, "response_format"),
        ("json", "response_format"),
        ({"type": "json_schema"}, "response_format.json_schema"),
        (_schema([1]), "response_format.json_schema.schema"),
        (_schema({"type": 5}), "response_format.json_schema.schema"),
        (_schema(strict="yes"), "response_format.json_schema.strict"),
    ],
)
def test_refused(value: Any, param: str) -> None:
    with pytest.raises(ApiError) as info:
        parse_response_format(value)
    assert (info.value.status, info.value.param) == (400, param)


def test_the_answer_is_checked() -> None:
    assert Guide(None).problem('{"a": 1}') is None
    assert Guide(None).problem("[1]") == "it is not a JSON object"
    assert (Guide(None).problem("words") or "").startswith("it is not JSON")
    strict = Guide(SCHEMA, True)
    assert strict.problem('{"n": 3}') is None
    assert strict.problem('{"n": "3"}') == (
        "it does not match the schema at n: '3' is not of type 'integer'"
    )
    assert strict.problem("{}") == "it does not match the schema: 'n' is a required property"
    loose = Guide(SCHEMA, False)
    assert loose.problem("{}") is None  # not strict: JSON is enough
    assert loose.problem("nope") is not None
