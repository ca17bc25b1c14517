"""The logging and trace extensions over HTTP: ``GET|POST /v2/logging`` and
``GET|POST /v2[/models/<name>]/trace/setting``, on the settings the gRPC RPCs change.

Only the JSON is this module's: it turns a body into the ``{key: (oneof, value)}`` and
``{key: [values]}`` forms the gRPC converters make, and the dataplane does the rest (the same
checks, the same workers told). What differs is Triton's HTTP front end, matched here: a value
of the wrong JSON type is TritonJson's error (500), ``null`` leaves a log setting alone and
clears a trace setting, a body that is not an object changes nothing, and a trace setting's
value is answered as a string (``trace_level`` alone as a list).
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from aiohttp import web

from pbd.errors import Code, PbdError
from pbd.logsettings import HTTP

if TYPE_CHECKING:
    from pbd.control_plane import ControlPlane

Respond = Callable[[Any, web.Request], web.Response]
_UINT32 = 2**32
# The trace settings Triton's HTTP front end reads; it ignores any other key.
_TRACE_KEYS = ("trace_level", "trace_rate", "trace_count", "log_frequency", "trace_file")


def add_routes(app: web.Application, dp: ControlPlane, respond: Respond) -> None:
    """GET answers the settings; POST changes them first (Triton serves no other method)."""

    async def logging_(request: web.Request) -> web.Response:
        values = log_values(await _settings_body(request)) if request.method == "POST" else {}
        return respond(dp.log_settings(values, HTTP), request)

    async def trace(request: web.Request) -> web.Response:
        body = await _settings_body(request) if request.method == "POST" else {}
        answer = await dp.trace_setting(request.match_info.get("model", ""), trace_values(body))
        return respond(trace_answer(answer), request)

    handlers: dict[str, Callable[[web.Request], Awaitable[web.Response]]] = {
        "/v2/logging": logging_,
        "/v2/trace/setting": trace,
        "/v2/models/{model}/trace/setting": trace,
    }
    for path, handler in handlers.items():
        app.router.add_get(path, handler)
        app.router.add_post(path, handler)


async def _settings_body(request: web.Request) -> dict[str, Any]:
    raw = await request.read()
    try:
        doc = json.loads(raw)
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        # Triton answers 500 here too (its message is RapidJSON's, after the same words).
        raise PbdError(Code.INTERNAL, f"failed to parse the request JSON buffer: {exc}") from None
    return doc if isinstance(doc, dict) else {}


def log_values(body: dict[str, Any]) -> dict[str, tuple[str | None, Any]]:
    """A log setting request's JSON as ``{key: (oneof, value)}``: the oneof a gRPC client
    would have used for that JSON type (none for types no oneof holds)."""
    out: dict[str, tuple[str | None, Any]] = {}
    for key, value in body.items():
        if value is None:
            continue
        if isinstance(value, bool):
            out[key] = ("bool_param", value)
        elif isinstance(value, int) and value >= 0:
            # Triton keeps the level in 32 bits: a larger number wraps as it does there.
            out[key] = ("uint32_param", value % _UINT32)
        elif isinstance(value, str):
            out[key] = ("string_param", value)
        else:
            out[key] = (None, value)
    return out


def trace_values(body: dict[str, Any]) -> dict[str, list[str]]:
    """A trace setting request's JSON as ``{key: [values]}``; ``null`` clears (``[]``)."""
    out: dict[str, list[str]] = {}
    for key in _TRACE_KEYS:
        if key not in body:
            continue
        value = body[key]
        if value is None:
            out[key] = []
        elif key == "trace_level":
            if not isinstance(value, list):
                raise _json_type("array")
            if not all(isinstance(v, str) for v in value):
                raise _json_type("string")
            out[key] = value
        elif isinstance(value, str):
            out[key] = [value]
        else:
            raise _json_type("string")
    return out


def trace_answer(settings: dict[str, list[str]]) -> dict[str, str | list[str]]:
    """As Triton's HTTP front end answers: ``trace_level`` a list, a single value a string."""
    return {
        key: values[0] if key != "trace_level" and len(values) == 1 else values
        for key, values in settings.items()
    }


def _json_type(word: str) -> PbdError:
    return PbdError(Code.INTERNAL, f"attempt to access JSON non-{word} as {word}")
