"""Log probabilities: what a model reports of its tokens, and OpenAI's two shapes of them.

A model that can report them declares a BYTES output ``logprobs``; asked (``logprobs`` in
``sampling_parameters``: the number of most likely alternatives per token, as vLLM takes it),
each of its responses carries, for the tokens of that response's text, a JSON array of
``{"token": str, "logprob": float, "top_logprobs": [{"token": str, "logprob": float}, ...]}``.
Chat answers say them as ``{"content": [{"token", "logprob", "bytes", "top_logprobs"}]}``,
completions as ``{"tokens", "token_logprobs", "top_logprobs", "text_offset"}``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

OUTPUT = "logprobs"
MAX_TOP = 20  # vLLM's default max_logprobs; OpenAI's chat takes up to 20 too


class LogprobsError(ValueError):
    """A model's ``logprobs`` output that is not what the convention says."""


@dataclass(frozen=True)
class TokenLogprob:
    token: str
    logprob: float
    top: tuple[tuple[str, float], ...]


def read_logprobs(values: Sequence[Any]) -> list[TokenLogprob]:
    """The tokens of one response: each element of the output is a JSON array of them."""
    tokens: list[TokenLogprob] = []
    for value in values:
        try:
            doc = json.loads(value)
            if not isinstance(doc, list):
                raise TypeError("not an array")
            tokens.extend(_token(item) for item in doc)
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            raise LogprobsError(
                f"its output '{OUTPUT}' is not a JSON array of tokens ({exc!r})"
            ) from None
    return tokens


def _token(item: Any) -> TokenLogprob:
    top = item.get("top_logprobs") or []
    return TokenLogprob(
        str(item["token"]),
        float(item["logprob"]),
        tuple((str(t["token"]), float(t["logprob"])) for t in top),
    )


def chat_logprobs(tokens: Sequence[TokenLogprob]) -> dict[str, Any]:
    def entry(token: str, logprob: float) -> dict[str, Any]:
        return {"token": token, "logprob": logprob, "bytes": list(token.encode("utf-8"))}

    return {
        "content": [
            {**entry(t.token, t.logprob), "top_logprobs": [entry(*top) for top in t.top]}
            for t in tokens
        ]
    }


def completion_logprobs(tokens: Sequence[TokenLogprob], offset: int) -> dict[str, Any]:
    """``offset``: where the first token is in the choice's text (after an echoed prompt)."""
    offsets = []
    for token in tokens:
        offsets.append(offset)
        offset += len(token.token)
    return {
        "tokens": [t.token for t in tokens],
        "token_logprobs": [t.logprob for t in tokens],
        "top_logprobs": [dict(t.top) for t in tokens],
        "text_offset": offsets,
    }
