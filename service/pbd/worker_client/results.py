"""What a worker's answers mean to whoever sent the requests: a streamed response's item, a
response's parameters, the share of a batch that failed."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from pbd.errors import Code, PbdError, Rescheduled
from pbd.modelconfig.model import ModelConfig
from pbd.responses import StreamResult
from pbd.types import InferResult, PreparedRequest, request_batch_size
from pbd_wire import worker_pb2 as wpb

FINAL = 1  # TRITONSERVER_RESPONSE_COMPLETE_FINAL


def stream_item(
    frame: wpb.StreamedResponse, result: Callable[[wpb.Response], InferResult | None]
) -> StreamResult:
    """What a response sender's frame brings: its final flag, and its error or the result
    ``result`` makes of its outputs (None: none to hand on)."""
    item = StreamResult(final=bool(frame.flags & FINAL))
    if frame.HasField("response"):
        response = frame.response
        if response.HasField("error"):
            item.error = PbdError(Code.parse(response.error.code), response.error.message)
        else:
            item.result = result(response)
    return item


def json_params(text: str) -> dict[str, Any]:
    """A response's parameters, sent as JSON by the worker; {} for none or a non-object."""
    if not text:
        return {}
    value = json.loads(text)
    return value if isinstance(value, dict) else {}


def failed_share(
    batch: list[PreparedRequest], results: list[Any], config: ModelConfig
) -> tuple[int, int]:
    """(requests, batch rows) of ``batch`` that ``results`` answer with an error."""
    requests = rows = 0
    for prepared, result in zip(batch, results, strict=True):
        if isinstance(result, PbdError) and not isinstance(result, Rescheduled):
            requests += 1
            rows += request_batch_size(prepared, config.max_batch_size)
    return requests, rows
