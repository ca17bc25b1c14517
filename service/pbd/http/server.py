"""KServe v2 HTTP/REST routes, as Triton serves them, over the same dataplane as gRPC.

aiohttp runs on the daemon's event loop (no second thread or process), parses HTTP in C,
decompresses gzip/deflate request bodies itself and compresses responses on request. Each
connection starts at pbd's edge (:mod:`pbd.http.edge`), which answers infer, the health
checks and a model's metadata and config itself (``edge_route``) and hands the connection to
aiohttp at any other request.
Errors are ``{"error": "<message>"}`` with Triton's HTTP codes and the same messages as gRPC.
Inference requests are traced as gRPC ones are (the ``traceparent`` header honoured), under an
HTTP server span. The generate extension (:mod:`pbd.http.generate`) and the OpenAI API
(:mod:`pbd.http.openai.routes`) are routes of the same app. A client that goes away cancels its
handler and so its request.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import functools
import json
import socket
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from aiohttp import web
from aiohttp.web_protocol import RequestPayloadError

from pbd.answer import answer_request
from pbd.errors import Code, PbdError
from pbd.http import extensions, generate
from pbd.http.edge import Edge, Head, Reply, Route, json_reply
from pbd.http.elsewhere import Elsewhere
from pbd.http.encoding import check_content_encoding, compress
from pbd.http.openai import routes as openai_routes
from pbd.http.restricted import FORBIDDEN, HttpRestrictions
from pbd.http.status import JSON_CONTENT_TYPE, error_response, finishing, http_status
from pbd.http.tensors import (
    HEADER_LENGTH,
    build_infer_response,
    json_object,
    parse_infer_request,
)
from pbd.inference_plane import ModelPlane
from pbd.listeners import OneByOne, Sharing, http_sockets, tcp_port
from pbd.settings import Settings
from pbd.types import FILE_PREFIX

if TYPE_CHECKING:
    from pbd.control_plane import ControlPlane

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
SHUTDOWN_S = 60.0  # aiohttp's shutdown_timeout: a request being answered at stop gets it
INFER_ROUTE = "/v2/models/{model}/infer"
INFER_VERSION_ROUTE = "/v2/models/{model}/versions/{version}/infer"


def _json(value: Any, request: web.Request) -> web.Response:
    response = web.Response(body=json.dumps(value).encode(), content_type=JSON_CONTENT_TYPE)
    compress(request, response)
    return response


class HttpFrontend:
    """The routes over the daemon's dataplane; or, in a front-end process (``front``), the
    inference routes over its ``ModelPlane`` (infer; generate and the OpenAI API for the
    models it runs itself) and every other request passed to ``proxy`` (which has the daemon
    answer it)."""

    def __init__(
        self,
        dataplane: ControlPlane | None,
        settings: Settings,
        plane: ModelPlane | None = None,
        proxy: Elsewhere | None = None,
    ) -> None:
        self._control = dataplane
        plane = plane or dataplane
        assert plane is not None, "an HttpFrontend needs a dataplane or an inference plane"
        self.plane: ModelPlane = plane
        self.settings = settings
        self.restrictions = HttpRestrictions.parse(settings.http_restricted_api)
        middlewares = [self._restricted, self._errors] if self.restrictions else [self._errors]
        self.app = web.Application(
            client_max_size=settings.http_max_body_bytes, middlewares=middlewares
        )
        self._routes(proxy)
        self.runner: web.AppRunner | None = None
        self.port = 0
        self.acceptors: list[OneByOne] = []  # front end: its shared sockets
        self.servers: list[asyncio.Server] = []  # the daemon: its own sockets
        self.edges: set[Edge] = set()  # connections the edge holds

    @classmethod
    def front(cls, plane: ModelPlane, settings: Settings, proxy: Elsewhere) -> HttpFrontend:
        return cls(None, settings, plane, proxy)

    @property
    def dp(self) -> ControlPlane:
        """The daemon's dataplane: only the routes that need it are served where it is."""
        assert self._control is not None, "a control route was served by a front end"
        return self._control

    @web.middleware
    async def _restricted(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        """--http-restricted-api, before the route reads anything (pbd.http.restricted)."""
        refused = self.restrictions.refusal(request.path, request.headers.get)
        if refused is not None:
            return error_response(FORBIDDEN, refused)
        return await handler(request)

    @web.middleware
    async def _errors(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        try:
            check_content_encoding(request)
            return await handler(request)
        except PbdError as exc:
            return error_response(http_status(exc.code), exc.message)
        except RequestPayloadError:
            # The rest of the body cannot be decoded either: end it here (aiohttp would read
            # on and log the error again), and close the connection after the answer.
            request.content.feed_eof()
            encoding = request.headers.get("Content-Encoding", "")
            response = error_response(
                400, f"the request body does not decode as Content-Encoding '{encoding}'"
            )
            response.force_close()
            return response
        except web.HTTPRequestEntityTooLarge:
            return error_response(
                413,
                f"request body exceeds the limit of {self.settings.http_max_body_bytes} bytes "
                "(--http-max-body-bytes)",
            )
        except web.HTTPException as exc:
            if exc.status >= 400:
                return error_response(exc.status, f"{exc.reason}: {request.method} {request.path}")
            raise

    def _routes(self, proxy: Elsewhere | None) -> None:
        r = self.app.router
        buffer_bytes = self.settings.http_stream_buffer_bytes
        if proxy is not None:
            for route in (INFER_ROUTE, INFER_VERSION_ROUTE):
                r.add_post(route, self.infer)
            # The models this front end runs itself; the daemon answers the others.
            generate.add_routes(self.app, self.plane, buffer_bytes, proxy)
            openai_routes.add_routes(
                self.app,
                self.plane,
                buffer_bytes,
                self.settings.openai_api_key,
                elsewhere=proxy,
                restricted=self.settings.openai_restricted_api,
            )
            r.add_route("*", "/{tail:.*}", proxy.handler)
            return
        # aiohttp tries the routes under one prefix in the order they were added: infer,
        # the one called per request, first.
        for route in (INFER_ROUTE, INFER_VERSION_ROUTE):
            r.add_post(route, self.infer)
        r.add_get("/v2/health/live", self.live)
        r.add_get("/v2/health/ready", self.ready)
        r.add_get("/v2", self.server_metadata)
        for base in ("/v2/models/{model}", "/v2/models/{model}/versions/{version}"):
            r.add_get(base, self.model_metadata)
            r.add_get(base + "/ready", self.model_ready)
            r.add_get(base + "/config", self.model_config)
            r.add_get(base + "/stats", self.statistics)
        r.add_get("/v2/models/stats", self.statistics)
        extensions.add_routes(self.app, self.dp, _json)
        generate.add_routes(self.app, self.dp, buffer_bytes)
        openai_routes.add_routes(
            self.app,
            self.dp,
            buffer_bytes,
            self.settings.openai_api_key,
            self.dp.repository_index,
            restricted=self.settings.openai_restricted_api,
        )
        r.add_post("/v2/repository/index", self.repository_index)
        r.add_post("/v2/repository/models/{model}/load", self.load)
        r.add_post("/v2/repository/models/{model}/unload", self.unload)
        for kind in ("systemsharedmemory", "cudasharedmemory"):
            r.add_get(f"/v2/{kind}/status", self.shm_status)
            r.add_get(f"/v2/{kind}/region/{{region}}/status", self.shm_status)
            r.add_post(f"/v2/{kind}/region/{{region}}/register", self.shm_register)
            r.add_post(f"/v2/{kind}/unregister", self.shm_unregister)
            r.add_post(f"/v2/{kind}/region/{{region}}/unregister", self.shm_unregister)

    async def start(
        self, sockets: list[socket.socket] | None = None, sharing: Sharing | None = None
    ) -> None:
        """Listen, on ``sockets`` or on sockets bound now as the settings say (OSError when
        they cannot be bound). ``sharing``: the sockets are shared with other processes
        (front ends; ``pbd.listeners.OneByOne``)."""
        # A client that goes away cancels its handler, and with it its request (the model
        # sees is_cancelled(), as over gRPC); handlers whose work must finish shield it.
        self.runner = web.AppRunner(
            self.app, access_log=None, handle_signals=False, handler_cancellation=True
        )
        if sockets is None:
            sockets = http_sockets(self.settings)
        await self.runner.setup()
        server = self.runner.server
        assert server is not None  # made by setup()
        max_body = self.settings.http_max_body_bytes

        def edge() -> Edge:  # each connection starts at the edge (pbd.http.edge)
            return Edge(self.edge_route, server, max_body, self.edges)

        loop = asyncio.get_running_loop()
        for sock in sockets:
            if sharing is not None:
                self.acceptors.append(OneByOne(sock, edge, sharing))
            else:
                self.servers.append(await loop.create_server(edge, sock=sock))
        self.port = tcp_port(sockets)

    def connection_count(self) -> int:
        """HTTP connections open now (the edge's and aiohttp's)."""
        server = self.runner.server if self.runner is not None else None
        return len(self.edges) + (len(server.connections) if server is not None else 0)

    async def stop(self) -> None:
        for acceptor in self.acceptors:
            acceptor.close()
        for server in self.servers:
            server.close()
        # As aiohttp's own shutdown: what is being answered gets its time, then it closes.
        await asyncio.gather(*(edge.stop(SHUTDOWN_S) for edge in list(self.edges)))
        if self.runner is not None:
            await self.runner.cleanup()

    # -- health and metadata -------------------------------------------------------------------

    async def live(self, request: web.Request) -> web.Response:
        return web.Response(status=200 if self.dp.server_live() else 400)

    async def ready(self, request: web.Request) -> web.Response:
        return web.Response(status=200 if self.dp.server_ready() else 400)

    async def server_metadata(self, request: web.Request) -> web.Response:
        name, version, extensions = self.dp.server_metadata()
        return _json({"name": name, "version": version, "extensions": list(extensions)}, request)

    @staticmethod
    def _target(request: web.Request) -> tuple[str, str]:
        return request.match_info["model"], request.match_info.get("version", "")

    async def model_ready(self, request: web.Request) -> web.Response:
        ready = await self.dp.model_ready_checked(*self._target(request))
        return web.Response(status=200 if ready else 400)

    async def model_metadata(self, request: web.Request) -> web.Response:
        return _json(self.model_metadata_value(*self._target(request)), request)

    def model_metadata_value(self, model: str, version: str) -> dict[str, Any]:
        config, versions = self.dp.model_metadata(model, version)
        batch = [-1] if config.max_batch_size > 0 else []

        def tensors(items: Any) -> list[dict[str, Any]]:
            return [
                {"name": t.name, "datatype": t.datatype, "shape": batch + list(t.dims)}
                for t in items
            ]

        return {
            "name": config.name,
            "versions": versions,
            "platform": config.platform or config.backend,
            "inputs": tensors(config.inputs),
            "outputs": tensors(config.outputs),
        }

    async def model_config(self, request: web.Request) -> web.Response:
        return _json(self.model_config_value(*self._target(request)), request)

    def model_config_value(self, model: str, version: str) -> dict[str, Any]:
        return dict(self.dp.model_config(model, version).as_dict)

    # -- inference -----------------------------------------------------------------------------

    async def infer(self, request: web.Request) -> web.Response:
        began = time.time_ns()
        body = await request.read()
        resource = request.match_info.route.resource
        route = resource.canonical if resource is not None else request.path
        reply = await self.infer_reply(
            *self._target(request), request.headers.get, body, route, began
        )
        response = web.Response(
            body=reply.body, content_type=reply.content_type, headers=dict(reply.headers)
        )
        compress(request, response)
        return response

    async def infer_reply(
        self,
        model: str,
        version: str,
        header: Callable[[str], str | None],
        body: bytes,
        route: str,
        began: int,
    ) -> Reply:
        """An infer request's answer, for aiohttp's route and the edge's alike."""
        parsed = parse_infer_request(body, header(HEADER_LENGTH), model, version)
        if self.plane.is_decoupled(parsed.request):
            # Triton's HTTP words; the dataplane's refusal names the gRPC RPC.
            raise PbdError(
                Code.UNSUPPORTED,
                "HTTP end point doesn't support models with decoupled transaction policy",
            )
        trace = self.plane.start_trace(
            parsed.request, route, began, lambda: header("traceparent"), "http"
        )
        answer = await answer_request(
            parsed.request,
            trace,
            self.plane.infer,
            lambda result: build_infer_response(result, parsed),
            finishing,
        )
        assert answer is not None  # None only for an edge that sends its answer itself
        payload, json_length = answer
        if json_length is None:
            return Reply(200, payload, "application/json")
        return Reply(200, payload, "application/octet-stream", ((HEADER_LENGTH, str(json_length)),))

    # -- the edge's routes (pbd.http.edge) ----------------------------------------------------

    def edge_route(self, head: Head) -> Route | None:
        """The edge's answer to ``head``'s route, when it is one the edge answers."""
        if self.restrictions:
            refused = self.restrictions.refusal(head.path, head.raw_header)
            if refused is not None:
                return functools.partial(self._edge_refused, refused)
        parts = head.path.split("/")  # "", "v2", ...
        if len(parts) < 4 or parts[1] != "v2" or not all(parts[2:]):
            return None
        daemon = self._control is not None  # a front end's routes but infer are the daemon's
        if parts[2] == "health":
            if head.method == b"GET" and daemon and parts[3:] in (["live"], ["ready"]):
                return self._edge_live if parts[3] == "live" else self._edge_ready
            return None
        if parts[2] != "models":
            return None
        # /v2/models/M[/versions/V][/infer|/ready|/config]
        model, rest = parts[3], parts[4:]
        version = ""
        if len(rest) >= 2 and rest[0] == "versions":
            version, rest = rest[1], rest[2:]
        if head.method == b"POST" and rest == ["infer"]:
            route = INFER_VERSION_ROUTE if version else INFER_ROUTE
            return functools.partial(self._edge_infer, model, version, route)
        if head.method != b"GET" or not daemon:
            return None
        if not rest:
            if model == "stats" and not version:
                return None  # GET /v2/models/stats: every model's statistics (aiohttp's)
            return functools.partial(self._edge_json, self.model_metadata_value, model, version)
        if rest == ["config"]:
            return functools.partial(self._edge_json, self.model_config_value, model, version)
        if rest == ["ready"]:
            return functools.partial(self._edge_model_ready, model, version)
        return None

    async def _edge_infer(
        self, model: str, version: str, route: str, head: Head, body: bytes
    ) -> Reply:
        began = time.time_ns()
        return await self.infer_reply(model, version, head.header, body, route, began)

    async def _edge_refused(self, message: str, head: Head, body: bytes) -> Reply:
        return json_reply({"error": message}, FORBIDDEN)

    async def _edge_live(self, head: Head, body: bytes) -> Reply:
        return Reply(200 if self.dp.server_live() else 400)

    async def _edge_ready(self, head: Head, body: bytes) -> Reply:
        return Reply(200 if self.dp.server_ready() else 400)

    async def _edge_json(
        self,
        value: Callable[[str, str], dict[str, Any]],
        model: str,
        version: str,
        head: Head,
        body: bytes,
    ) -> Reply:
        return json_reply(value(model, version))

    async def _edge_model_ready(self, model: str, version: str, head: Head, body: bytes) -> Reply:
        return Reply(200 if await self.dp.model_ready_checked(model, version) else 400)

    async def statistics(self, request: web.Request) -> web.Response:
        name = request.match_info.get("model", "")
        rows = await self.dp.model_statistics(name, request.match_info.get("version", ""))
        stats = [
            {
                "name": model,
                "version": str(version),
                "last_inference": st.last_inference_ms,
                "inference_count": st.inference_count,
                "execution_count": st.execution_count,
                "inference_stats": {
                    key: {"count": d.count, "ns": d.ns}
                    for key, d in (
                        ("success", st.success),
                        ("fail", st.fail),
                        ("queue", st.queue),
                        ("compute_input", st.compute_input),
                        ("compute_infer", st.compute_infer),
                        ("compute_output", st.compute_output),
                        ("cache_hit", st.cache_hit),
                        ("cache_miss", st.cache_miss),
                    )
                },  # fmt: skip
                "batch_stats": [
                    {
                        "batch_size": size,
                        **{
                            key: {"count": d.count, "ns": d.ns}
                            for key, d in (
                                ("compute_input", b.compute_input),
                                ("compute_infer", b.compute_infer),
                                ("compute_output", b.compute_output),
                            )
                        },
                    }
                    for size, b in sorted(st.batches.items())
                ],
            }
            for model, version, st in rows
        ]
        return _json({"model_stats": stats}, request)

    # -- repository ----------------------------------------------------------------------------

    async def repository_index(self, request: web.Request) -> web.Response:
        body = await _json_body(request)
        entries = self.dp.repository_index("", bool(body.get("ready", False)))
        rows = []
        for e in entries:
            row = {"name": e.name}
            if e.version:
                row["version"] = e.version
            if e.state:
                row["state"] = e.state
            if e.reason:
                row["reason"] = e.reason
            rows.append(row)
        return _json(rows, request)

    async def load(self, request: web.Request) -> web.Response:
        params = _repository_params(await _json_body(request))
        await self.dp.load_model("", request.match_info["model"], params)
        return web.Response(status=200)

    async def unload(self, request: web.Request) -> web.Response:
        params = _repository_params(await _json_body(request))
        await self.dp.unload_model("", request.match_info["model"], params)
        return web.Response(status=200)

    # -- shared memory (system and CUDA) ------------------------------------------------------

    @staticmethod
    def _cuda(request: web.Request) -> bool:
        return request.path.startswith("/v2/cudasharedmemory")

    async def shm_status(self, request: web.Request) -> web.Response:
        name = request.match_info.get("region", "")
        if self._cuda(request):
            cuda = [
                {"name": r.name, "device_id": r.device_id, "byte_size": r.byte_size}
                for r in self.dp.cuda_shm_status(name)
            ]
            return _json(cuda, request)
        rows = [
            {"name": r.name, "key": r.key, "offset": r.offset, "byte_size": r.byte_size}
            for r in self.dp.shm_status(name)
        ]
        return _json(rows, request)

    async def shm_register(self, request: web.Request) -> web.Response:
        name = request.match_info["region"]
        body = await _json_body(request)
        if self._cuda(request):
            try:
                handle = base64.b64decode(body["raw_handle"]["b64"], validate=True)
                device, size = int(body["device_id"]), int(body["byte_size"])
            except (KeyError, TypeError, ValueError, binascii.Error):
                raise PbdError(
                    Code.INVALID_ARG,
                    "register needs 'raw_handle' ({\"b64\": <base64>}), 'device_id' and "
                    "'byte_size'",
                ) from None
            await asyncio.shield(self.dp.cuda_shm_register(name, handle, device, size))
            return web.Response(status=200)
        try:
            key, offset, size = str(body["key"]), int(body.get("offset", 0)), int(body["byte_size"])
        except (KeyError, TypeError, ValueError):
            raise PbdError(Code.INVALID_ARG, "register needs 'key' and 'byte_size'") from None
        await self.dp.shm_register(name, key, offset, size)
        return web.Response(status=200)

    async def shm_unregister(self, request: web.Request) -> web.Response:
        name = request.match_info.get("region", "")
        if self._cuda(request):
            self.dp.cuda_shm_unregister(name)
        else:
            await self.dp.shm_unregister(name)
        return web.Response(status=200)


async def _json_body(request: web.Request) -> dict[str, Any]:
    raw = await request.read()
    if not raw:
        return {}
    return json_object(raw)


def _repository_params(body: dict[str, Any]) -> dict[str, tuple[str | None, Any]]:
    """JSON parameters in the (kind, value) form the dataplane shares with gRPC."""
    params = body.get("parameters") or {}
    if not isinstance(params, dict):
        raise PbdError(Code.INVALID_ARG, "'parameters' must be a JSON object")
    out: dict[str, tuple[str | None, Any]] = {}
    for key, value in params.items():
        if key.startswith(FILE_PREFIX):
            out[key] = ("bytes_param", _file_content(key, value))
        elif isinstance(value, bool):
            out[key] = ("bool_param", value)
        elif isinstance(value, int):
            out[key] = ("int64_param", value)
        elif isinstance(value, str):
            out[key] = ("string_param", value)
        else:
            out[key] = (None, value)
    return out


def _file_content(key: str, value: Any) -> bytes:
    """A ``file:`` load parameter's content: base64 in the JSON, as Triton's HTTP front end."""
    if not isinstance(value, str):
        raise PbdError(Code.INTERNAL, "attempt to access JSON non-string as string")
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise PbdError(
            Code.INVALID_ARG, f"load parameter '{key}' is not valid base64: {exc}"
        ) from None
