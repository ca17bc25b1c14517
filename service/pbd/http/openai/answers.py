"""The JSON objects pbd answers with, in OpenAI's shapes: completions and chat completions,
whole and as stream chunks, the usage object and the model list."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pbd.http.openai.tool_parsers import ToolCall

OWNER = "pbd"


@dataclass(frozen=True)
class Usage:
    prompt_tokens: int
    completion_tokens: int

    def as_dict(self) -> dict[str, int]:
        return {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "total_tokens": self.prompt_tokens + self.completion_tokens,
        }


@dataclass(frozen=True)
class Choice:
    index: int
    text: str | None  # a chat message's content is null when it only calls tools
    finish_reason: str
    tool_calls: tuple[ToolCall, ...] = ()
    logprobs: dict[str, Any] | None = None

    def message(self) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant", "content": self.text}
        if self.tool_calls:
            message["tool_calls"] = [call.as_dict() for call in self.tool_calls]
        return message


@dataclass(frozen=True)
class Header:
    """What every object of one answer repeats."""

    id: str
    created: int
    model: str
    chat: bool

    def _object(self, kind: str, choices: list[dict[str, Any]]) -> dict[str, Any]:
        return {
            "id": self.id,
            "object": kind,
            "created": self.created,
            "model": self.model,
            "choices": choices,
        }

    def whole(self, choices: list[Choice], usage: Usage | None) -> dict[str, Any]:
        if self.chat:
            doc = self._object(
                "chat.completion",
                [
                    {
                        "index": c.index,
                        "message": c.message(),
                        "logprobs": c.logprobs,
                        "finish_reason": c.finish_reason,
                    }
                    for c in choices
                ],
            )
        else:
            doc = self._object(
                "text_completion",
                [
                    {
                        "index": c.index,
                        "text": c.text,
                        "logprobs": c.logprobs,
                        "finish_reason": c.finish_reason,
                    }
                    for c in choices
                ],
            )
        if usage is not None:
            doc["usage"] = usage.as_dict()
        return doc

    def chunk(
        self,
        index: int,
        text: str,
        finish_reason: str | None,
        with_usage: bool = False,
        logprobs: dict[str, Any] | None = None,
        *,
        first: bool = False,
    ) -> dict[str, Any]:
        """One choice's piece of a stream (chat: ``first`` is the role's chunk)."""
        choice: dict[str, Any] = {"index": index}
        if self.chat:
            delta: dict[str, str] = {"role": "assistant", "content": text} if first else {}
            if text and not first:
                delta["content"] = text
            choice["delta"] = delta
        else:
            choice["text"] = text
        choice["logprobs"] = logprobs
        choice["finish_reason"] = finish_reason
        doc = self._object(self._chunk_kind, [choice])
        if with_usage:  # OpenAI: every chunk says usage null until the last one
            doc["usage"] = None
        return doc

    def tool_call_chunk(
        self, index: int, position: int, call: ToolCall, with_usage: bool
    ) -> dict[str, Any]:
        """A chat choice's call number ``position``, whole in one delta."""
        delta = {"tool_calls": [{"index": position, **call.as_dict()}]}
        choice = {"index": index, "delta": delta, "logprobs": None, "finish_reason": None}
        doc = self._object(self._chunk_kind, [choice])
        if with_usage:
            doc["usage"] = None
        return doc

    def usage_chunk(self, usage: Usage) -> dict[str, Any]:
        doc = self._object(self._chunk_kind, [])
        doc["usage"] = usage.as_dict()
        return doc

    @property
    def _chunk_kind(self) -> str:
        return "chat.completion.chunk" if self.chat else "text_completion"


def model_object(name: str, created: int) -> dict[str, Any]:
    return {"id": name, "object": "model", "created": created, "owned_by": OWNER}
