"""The objects pbd answers with, in OpenAI's shapes."""

from __future__ import annotations

from pbd.http.openai.answers import Choice, Header, Usage, model_object

CHAT = Header("chatcmpl-1", 100, "m", chat=True)
TEXT = Header("cmpl-1", 100, "m", chat=False)


def test_a_whole_chat_completion_with_usage() -> None:
    assert CHAT.whole([Choice(0, "hi", "stop")], Usage(3, 2)) == {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 100,
        "model": "m",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "hi"},
                "logprobs": None,
                "finish_reason": "stop",
            }
        ],
        "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5},
    }


def test_a_whole_completion_without_usage() -> None:
    doc = TEXT.whole([Choice(0, "a", "length"), Choice(1, "b", "stop")], None)
    assert doc["object"] == "text_completion" and "usage" not in doc
    assert [c["text"] for c in doc["choices"]] == ["a", "b"]
    assert doc["choices"][0] == {
        "index": 0,
        "text": "a",
        "logprobs": None,
        "finish_reason": "length",
    }


def test_chat_chunks_role_first_then_content_then_the_finish() -> None:
    first = CHAT.chunk(0, "", None, first=True)
    assert first["object"] == "chat.completion.chunk"
    assert first["choices"] == [
        {"index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": None,
         "finish_reason": None}
    ]  # fmt: skip
    assert CHAT.chunk(0, "x", None)["choices"][0]["delta"] == {"content": "x"}
    last = CHAT.chunk(1, "", "stop", with_usage=True)
    assert last["choices"][0]["delta"] == {} and last["choices"][0]["finish_reason"] == "stop"
    assert last["usage"] is None  # every chunk says so when usage is asked for


def test_completion_chunks_and_the_usage_chunk() -> None:
    assert TEXT.chunk(0, "t", None)["choices"] == [
        {"index": 0, "text": "t", "logprobs": None, "finish_reason": None}
    ]
    usage = TEXT.usage_chunk(Usage(1, 2))
    assert usage["choices"] == [] and usage["usage"]["total_tokens"] == 3


def test_a_model_object() -> None:
    assert model_object("m", 5) == {"id": "m", "object": "model", "created": 5, "owned_by": "pbd"}
