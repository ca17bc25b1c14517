from __future__ import annotations

import json

import pytest

from pbd.http.openai.logprobs import (
    LogprobsError,
    TokenLogprob,
    chat_logprobs,
    completion_logprobs,
    read_logprobs,
)

TOKENS = [
    {"token": "Hé", "logprob": -0.5, "top_logprobs": [{"token": "Hé", "logprob": -0.5}]},
    {"token": "!", "logprob": -1},
]


def test_read_from_each_element_of_the_output() -> None:
    read = read_logprobs([json.dumps(TOKENS[:1]), json.dumps(TOKENS[1:])])
    assert read == [
        TokenLogprob("Hé", -0.5, (("Hé", -0.5),)),
        TokenLogprob("!", -1.0, ()),
    ]


@pytest.mark.parametrize("value", ["nope", '{"token": "a"}', '[{"token": "a"}]', "[3]"])
def test_a_malformed_output_is_an_error(value: str) -> None:
    with pytest.raises(LogprobsError, match="its output 'logprobs' is not a JSON array"):
        read_logprobs([value])


def test_the_chat_shape() -> None:
    shaped = chat_logprobs(read_logprobs([json.dumps(TOKENS)]))
    assert shaped == {
        "content": [
            {
                "token": "Hé",
                "logprob": -0.5,
                "bytes": [72, 195, 169],
                "top_logprobs": [{"token": "Hé", "logprob": -0.5, "bytes": [72, 195, 169]}],
            },
            {"token": "!", "logprob": -1.0, "bytes": [33], "top_logprobs": []},
        ]
    }


def test_the_completion_shape_counts_offsets_from_where_the_text_starts() -> None:
    shaped = completion_logprobs(read_logprobs([json.dumps(TOKENS)]), 4)
    assert shaped == {
        "tokens": ["Hé", "!"],
        "token_logprobs": [-0.5, -1.0],
        "top_logprobs": [{"Hé": -0.5}, {}],
        "text_offset": [4, 6],
    }
