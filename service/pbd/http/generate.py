"""Triton's generate extension on the HTTP binding:
``POST /v2/models/<m>[/versions/<v>]/generate`` and ``.../generate_stream``.

Both take the same JSON (:mod:`pbd.http.generate_json`) and run the request through the
plane's ``infer_stream``, so any model serves them, decoupled or not: in the daemon its
``DataPlane``; in a front end (``pbd serve --frontends``) its ``RemotePlane`` for the versions
on its direct path (the worker's responses go from the front end to the client, the daemon out
of the way), the daemon's own routes for every other model (``pbd.http.elsewhere``).

- ``generate`` answers one JSON object: the model must send exactly one response. An error
  response is answered with its own status; a second response (or none at all) is Triton's
  error with status 500, and the request is cancelled at the second response. (Triton 2.51
  collects every response first and answers that error with status 200.)
- ``generate_stream`` answers ``text/event-stream``: a ``data:`` event per response, an error
  as ``data: {"error": ...}``; a final flag sent alone (the empty final response) sends
  nothing. The status is the first response's (an error first: its status), as in Triton; a
  request refused before it runs is answered as JSON. Events go at the client's pace with a
  bound on what waits (:mod:`pbd.http.sse`).
- A client that disconnects cancels the request (the model sees ``is_cancelled()``); Triton
  2.51 does so for ``generate_stream`` only.
- Traced as ``infer`` is, under the route's server span, with a response span per event.
"""

from __future__ import annotations

import contextlib
import logging
import time
from typing import Any

from aiohttp import web

from pbd.errors import Code, PbdError
from pbd.http.elsewhere import Elsewhere, Handler, path_target
from pbd.http.encoding import compress
from pbd.http.generate_json import encode, generate_answer, parse_generate_request
from pbd.http.sse import CONTENT_TYPE, EventStream, event, send_events
from pbd.http.status import finish_failed, finishing, http_status
from pbd.inference_plane import ModelPlane
from pbd.responses import BacklogFull, StreamResult
from pbd.tracing.request import RequestTrace
from pbd.types import InferRequest

log = logging.getLogger("pbd.http")

ONE_RESPONSE = (
    "generate expects model to produce exactly 1 response, use generate stream for model that "
    "generates various number of responses"
)


def add_routes(
    app: web.Application,
    plane: ModelPlane,
    stream_buffer_bytes: int,
    elsewhere: Elsewhere | None = None,
) -> None:
    """The routes over ``plane``; in a front end, ``elsewhere`` answers the models it does not
    run itself (``pbd.http.elsewhere``)."""
    endpoints = Generate(plane, stream_buffer_bytes)
    routes: dict[str, Handler] = {
        "/generate": endpoints.generate,
        "/generate_stream": endpoints.generate_stream,
    }
    for base in ("/v2/models/{model}", "/v2/models/{model}/versions/{version}"):
        for path, handler in routes.items():
            if elsewhere is not None:
                handler = elsewhere.unless_here(handler, path_target)
            app.router.add_post(base + path, handler)


class Generate:
    def __init__(self, plane: ModelPlane, stream_buffer_bytes: int) -> None:
        self.plane = plane
        self.stream_buffer_bytes = stream_buffer_bytes

    async def _request(self, request: web.Request) -> tuple[InferRequest, RequestTrace | None]:
        began = time.time_ns()
        model, version = request.match_info["model"], request.match_info.get("version", "")
        config = self.plane.model_config(model, version)
        infer_request = parse_generate_request(await request.read(), config, model, version)
        resource = request.match_info.route.resource
        route = resource.canonical if resource is not None else request.path
        trace = self.plane.start_trace(
            infer_request, route, began, lambda: request.headers.get("traceparent"), "http"
        )
        if trace is not None:  # else the plane keeps what it needs on the request
            infer_request.trace = trace
        return infer_request, trace

    async def generate(self, request: web.Request) -> web.Response:
        infer_request, trace = await self._request(request)
        if trace is None:
            doc = await self._one_answer(infer_request, None)
        else:
            with finishing(trace):
                doc = await self._one_answer(infer_request, trace)
        response = web.Response(body=encode(doc), content_type="application/json")
        compress(request, response)
        return response

    async def _one_answer(
        self, request: InferRequest, trace: RequestTrace | None
    ) -> dict[str, Any]:
        answer: dict[str, Any] | None = None
        async with contextlib.aclosing(self.plane.infer_stream(request)) as items:
            async for item in items:
                if item.error is not None:
                    raise item.error  # leaving the stream cancels what the model still does
                if item.result is None:
                    continue
                replying = time.time_ns()
                with item.result as result:
                    doc = generate_answer(result)
                if trace is not None:
                    trace.responded(replying)
                if answer is not None:
                    raise PbdError(Code.INTERNAL, ONE_RESPONSE)
                answer = doc
        if answer is None:
            raise PbdError(Code.INTERNAL, ONE_RESPONSE)
        return answer

    async def generate_stream(self, request: web.Request) -> web.StreamResponse:
        infer_request, trace = await self._request(request)
        items = self.plane.infer_stream(infer_request)
        async with contextlib.aclosing(items):
            try:
                first = await anext(items, StreamResult(final=True))
            except BaseException as exc:  # refused before it ran: a JSON error, as Triton
                if trace is not None:
                    finish_failed(trace, exc)
                raise
            status = 200 if first.error is None else http_status(first.error.code)
            answer = _Events(infer_request.model_name, trace)
            try:
                response = web.StreamResponse(status=status, headers={"Content-Type": CONTENT_TYPE})
                await response.prepare(request)

                events = EventStream(self.stream_buffer_bytes)
                going = answer.put(events, first)  # the pump writes it first, at once

                async def produce(events: EventStream) -> None:
                    # Leaving this block (stream ended, client too slow, producer cancelled)
                    # cancels what the model still does.
                    async with contextlib.aclosing(items):
                        if going:
                            async for item in items:
                                if not answer.put(events, item):
                                    return

                await send_events(response, events, produce)
                await response.write_eof()
            finally:
                if trace is not None:
                    trace.finish(status, answer.errors[0] if answer.errors else None)
        return response


class _Events:
    """The events of one generate_stream answer, and the errors it sent."""

    def __init__(self, model: str, trace: RequestTrace | None) -> None:
        self.model = model
        self.trace = trace
        self.errors: list[str] = []

    def put(self, events: EventStream, item: StreamResult) -> bool:
        """Put ``item``'s event (if it has one); False when the stream must end here."""
        replying = time.time_ns()
        if item.error is not None:
            self.errors.append(item.error.message)
            data = encode({"error": item.error.message})
        elif item.result is not None:
            with item.result as result:
                data = encode(generate_answer(result))
        else:
            return True
        try:
            events.put(event(data))
        except BacklogFull as exc:
            log.warning("generate_stream of model '%s': %s", self.model, exc)
            self.errors.append(str(exc))
            events.end(event(encode({"error": str(exc)})))
            return False
        if self.trace is not None:
            self.trace.responded(replying)
        return True
