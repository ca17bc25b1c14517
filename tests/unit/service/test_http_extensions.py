"""JSON of the HTTP logging and trace routes into the dataplane's forms, Triton's HTTP way."""

from __future__ import annotations

import pytest

from pbd.errors import Code, PbdError
from pbd.http.extensions import log_values, trace_answer, trace_values


def test_log_values_take_the_oneof_of_their_json_type() -> None:
    body = {
        "log_info": False,
        "log_verbose_level": 2**32 + 3,
        "log_format": "ISO8601",
        "log_warning": None,
        "log_error": 1.5,
        "negative": -1,
    }
    assert log_values(body) == {
        "log_info": ("bool_param", False),
        "log_verbose_level": ("uint32_param", 3),
        "log_format": ("string_param", "ISO8601"),
        "log_error": (None, 1.5),
        "negative": (None, -1),
    }


def test_trace_values_null_clears_and_unknown_keys_are_dropped() -> None:
    body = {"trace_rate": "5", "trace_count": None, "trace_level": ["TENSORS"], "other": 1}
    assert trace_values(body) == {
        "trace_rate": ["5"],
        "trace_count": [],
        "trace_level": ["TENSORS"],
    }


@pytest.mark.parametrize(
    ("body", "word"),
    [
        ({"trace_level": "OFF"}, "array"),
        ({"trace_level": [1]}, "string"),
        ({"trace_rate": 5}, "string"),
        ({"log_frequency": ["1"]}, "string"),
    ],
)
def test_trace_values_of_the_wrong_json_type(body: dict, word: str) -> None:
    with pytest.raises(PbdError) as info:
        trace_values(body)
    assert info.value.code is Code.INTERNAL
    assert info.value.message == f"attempt to access JSON non-{word} as {word}"


def test_trace_answer_single_values_are_strings() -> None:
    answer = trace_answer({"trace_level": ["OFF"], "trace_rate": ["1"], "resource": ["a", "b"]})
    assert answer == {"trace_level": ["OFF"], "trace_rate": "1", "resource": ["a", "b"]}
