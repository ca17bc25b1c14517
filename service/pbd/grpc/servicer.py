"""``inference.GRPCInferenceService`` and ``grpc.health.v1.Health``, registered by wire name.

Our messages live in package ``pbd.kserve`` (so they can share a process with tritonclient's
``inference.*``); the wire does not carry package names, only the service path. Each RPC
converts, calls the dataplane, converts back. ModelInfer works on raw bytes both ways (see
``pbd.grpc.wire``).
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

import grpc

from pbd._proto import grpc_service_pb2 as pb
from pbd._proto import health_pb2
from pbd.answer import answer_request
from pbd.control_plane import ControlPlane
from pbd.errors import PbdError
from pbd.grpc import convert
from pbd.grpc.calls import Method
from pbd.grpc.protocol import Buffer, Context
from pbd.grpc.restricted import guard_stream, guard_unary
from pbd.grpc.status import GRPC_STATUS, finishing
from pbd.grpc.stream_infer import StreamSession
from pbd.inference_plane import InferencePlane
from pbd.restrictions import Restriction

log = logging.getLogger("pbd.grpc")
SERVICE = "inference.GRPCInferenceService"
# ModelStreamInfer metadata (Triton 24.08+): "true" makes a model's error end the stream.
GRPC_ERROR_KEY = "triton_grpc_error"
HEALTH_SERVICE = "grpc.health.v1.Health"
# What a front-end process serves itself (``InferenceRpcs``); it passes the rest on.
INFERENCE_RPCS = frozenset({"ModelInfer", "ModelStreamInfer"})
Handler = Callable[[Any, Context], Awaitable[Any]]
_T = TypeVar("_T")


def _errors_to_status(fn: Handler) -> Handler:
    @functools.wraps(fn)
    async def wrapper(request: Any, context: Context) -> Any:
        try:
            return await fn(request, context)
        except PbdError as exc:
            await context.abort(GRPC_STATUS[exc.code], exc.message)
        except (ValueError, TypeError) as exc:
            # Undecodable messages and similar client mistakes.
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"malformed request: {exc}")

    return wrapper


class InferenceRpcs:
    """ModelInfer and ModelStreamInfer: what a front-end process serves itself."""

    def __init__(self, plane: InferencePlane, stream_buffer_bytes: int = 0) -> None:
        self.plane = plane
        self.stream_buffer_bytes = stream_buffer_bytes  # per ModelStreamInfer call (0: no limit)

    async def ModelInfer(self, request: Buffer, context: Context) -> bytes | None:
        """The answer, or None when it went out already (``Context.answer``: as soon as the
        worker's result was read)."""
        began = time.time_ns()
        infer_request = convert.infer_request_from_wire(request)
        return await self._answer(
            infer_request, "ModelInfer", began, context, self.plane.infer,
            convert.infer_response_to_wire, context.answer,
        )  # fmt: skip

    async def _answer(
        self,
        request: Any,
        method: str,
        began: int,
        context: Any,
        infer: Callable[[Any], Awaitable[Any]],
        to_wire: Callable[[Any], bytes],
        answer: Callable[[bytes], None] | None = None,
    ) -> bytes | None:
        """Run ``request`` and encode its result; traced when the trace settings pick it."""
        trace = self.plane.start_trace(request, method, began, lambda: _traceparent(context))
        return await answer_request(request, trace, infer, to_wire, finishing, answer)

    async def ModelStreamInfer(
        self, requests: AsyncIterator[bytes], context: Any
    ) -> AsyncIterator[bytes]:
        """See ``pbd.grpc.stream_infer``: in-band errors (or, with ``triton_grpc_error: true``, a
        model's error ends the call with its status), request order for non-decoupled models,
        decoupled responses as produced, OK once all is answered after the half-close."""
        grpc_error = _metadata(context, GRPC_ERROR_KEY) == "true"
        session = StreamSession(
            self.plane,
            lambda raw: self._stream_one(raw, context, grpc_error),
            lambda request, began: self.plane.start_trace(
                request, "ModelStreamInfer", began, lambda: _traceparent(context)
            ),
            grpc_error,
            self.stream_buffer_bytes,
            context.send_now,
        )
        try:
            async for data in session.run(requests):
                yield data
        except PbdError as exc:
            await context.abort(GRPC_STATUS[exc.code], exc.message)

    async def _stream_one(self, raw: bytes, context: Any, grpc_error: bool = False) -> bytes:
        began = time.time_ns()
        request = None
        try:
            request = convert.infer_request_from_wire(raw)
            request.first_answer = True
            response = await self._answer(
                request, "ModelStreamInfer", began, context, self.plane.infer,
                convert.stream_response_to_wire,
            )  # fmt: skip
            assert response is not None  # only an edge that answers itself gets None
            return response
        except PbdError as exc:
            if grpc_error and not exc.before_model:
                raise  # ends the call with its status (pbd.grpc.stream_infer)
            return convert.stream_error_to_wire(request, exc.message)
        except (ValueError, TypeError) as exc:
            return convert.stream_error_to_wire(request, f"malformed request: {exc}")


class InferenceServicer(InferenceRpcs):
    """Every RPC, over the daemon's dataplane."""

    def __init__(self, dataplane: ControlPlane, stream_buffer_bytes: int = 0) -> None:
        super().__init__(dataplane, stream_buffer_bytes)
        self.dp = dataplane

    async def ServerLive(
        self, request: pb.ServerLiveRequest, context: Any
    ) -> pb.ServerLiveResponse:
        return pb.ServerLiveResponse(live=self.dp.server_live())

    async def ServerReady(self, request: Any, context: Any) -> pb.ServerReadyResponse:
        return pb.ServerReadyResponse(ready=self.dp.server_ready())

    async def ServerMetadata(self, request: Any, context: Any) -> pb.ServerMetadataResponse:
        name, version, extensions = self.dp.server_metadata()
        return pb.ServerMetadataResponse(name=name, version=version, extensions=extensions)

    async def ModelReady(
        self, request: pb.ModelReadyRequest, context: Any
    ) -> pb.ModelReadyResponse:
        ready = await self.dp.model_ready_checked(request.name, request.version)
        return pb.ModelReadyResponse(ready=ready)

    async def ModelMetadata(self, request: pb.ModelMetadataRequest, context: Any) -> Any:
        config, versions = self.dp.model_metadata(request.name, request.version)
        return pb.ModelMetadataResponse(
            name=config.name,
            versions=versions,
            platform=config.platform or config.backend,
            inputs=convert.tensor_metadata_to_pb(config.inputs, config.max_batch_size),
            outputs=convert.tensor_metadata_to_pb(config.outputs, config.max_batch_size),
        )

    async def ModelConfig(self, request: pb.ModelConfigRequest, context: Any) -> Any:
        config = self.dp.model_config(request.name, request.version)
        return pb.ModelConfigResponse(config=convert.model_config_to_pb(config.as_dict))

    async def RepositoryIndex(self, request: pb.RepositoryIndexRequest, context: Any) -> Any:
        entries = self.dp.repository_index(request.repository_name, request.ready)
        return convert.repository_index_to_pb(entries)

    async def RepositoryModelLoad(
        self, request: pb.RepositoryModelLoadRequest, context: Any
    ) -> Any:
        params = convert.repository_params_from_pb(request.parameters)
        await self.dp.load_model(request.repository_name, request.model_name, params)
        return pb.RepositoryModelLoadResponse()

    async def RepositoryModelUnload(
        self, request: pb.RepositoryModelUnloadRequest, context: Any
    ) -> Any:
        params = convert.repository_params_from_pb(request.parameters)
        await self.dp.unload_model(request.repository_name, request.model_name, params)
        return pb.RepositoryModelUnloadResponse()

    async def SystemSharedMemoryRegister(self, request: Any, context: Any) -> Any:
        await self.dp.shm_register(request.name, request.key, request.offset, request.byte_size)
        return pb.SystemSharedMemoryRegisterResponse()

    async def SystemSharedMemoryStatus(self, request: Any, context: Any) -> Any:
        response = pb.SystemSharedMemoryStatusResponse()
        for r in self.dp.shm_status(request.name):
            response.regions[r.name].CopyFrom(
                pb.SystemSharedMemoryStatusResponse.RegionStatus(
                    name=r.name, key=r.key, offset=r.offset, byte_size=r.byte_size
                )
            )
        return response

    async def SystemSharedMemoryUnregister(self, request: Any, context: Any) -> Any:
        await self.dp.shm_unregister(request.name)
        return pb.SystemSharedMemoryUnregisterResponse()

    async def CudaSharedMemoryRegister(self, request: Any, context: Any) -> Any:
        await self.dp.cuda_shm_register(
            request.name, request.raw_handle, request.device_id, request.byte_size
        )
        return pb.CudaSharedMemoryRegisterResponse()

    async def CudaSharedMemoryStatus(self, request: Any, context: Any) -> Any:
        response = pb.CudaSharedMemoryStatusResponse()
        for r in self.dp.cuda_shm_status(request.name):
            response.regions[r.name].CopyFrom(
                pb.CudaSharedMemoryStatusResponse.RegionStatus(
                    name=r.name, device_id=r.device_id, byte_size=r.byte_size
                )
            )
        return response

    async def CudaSharedMemoryUnregister(self, request: Any, context: Any) -> Any:
        self.dp.cuda_shm_unregister(request.name)
        return pb.CudaSharedMemoryUnregisterResponse()

    async def ModelStatistics(self, request: pb.ModelStatisticsRequest, context: Any) -> Any:
        rows = await self.dp.model_statistics(request.name, request.version)
        return convert.statistics_to_pb(rows)

    async def TraceSetting(self, request: pb.TraceSettingRequest, context: Any) -> Any:
        values = convert.trace_setting_from_pb(request)
        answer = await self.dp.trace_setting(request.model_name, values)
        return convert.trace_setting_to_pb(answer)

    async def LogSettings(self, request: pb.LogSettingsRequest, context: Any) -> Any:
        values = convert.log_settings_from_pb(request)
        return convert.log_settings_to_pb(self.dp.log_settings(values))

    async def Check(self, request: Any, context: Any) -> health_pb2.HealthCheckResponse:
        status = health_pb2.HealthCheckResponse
        serving = status.SERVING if self.dp.server_ready() else status.NOT_SERVING
        return status(status=serving)


def _traceparent(context: Any) -> str | None:
    """The client's W3C ``traceparent`` metadata, if it sent one."""
    return _metadata(context, "traceparent")


def _metadata(context: Any, name: str) -> str | None:
    """The call's metadata ``name``, if the client sent it."""
    for key, value in context.invocation_metadata() or ():
        if key == name:
            return str(value)
    return None


def _identity(data: _T) -> _T:
    return data


# rpc name -> (request message, response message); None: raw bytes (see pbd.grpc.wire).
_UNARY: dict[str, tuple[Any, Any]] = {
    "ServerLive": (pb.ServerLiveRequest, pb.ServerLiveResponse),
    "ServerReady": (pb.ServerReadyRequest, pb.ServerReadyResponse),
    "ServerMetadata": (pb.ServerMetadataRequest, pb.ServerMetadataResponse),
    "ModelReady": (pb.ModelReadyRequest, pb.ModelReadyResponse),
    "ModelMetadata": (pb.ModelMetadataRequest, pb.ModelMetadataResponse),
    "ModelConfig": (pb.ModelConfigRequest, pb.ModelConfigResponse),
    "ModelInfer": (None, None),
    "RepositoryIndex": (pb.RepositoryIndexRequest, pb.RepositoryIndexResponse),
    "RepositoryModelLoad": (pb.RepositoryModelLoadRequest, pb.RepositoryModelLoadResponse),
    "RepositoryModelUnload": (pb.RepositoryModelUnloadRequest, pb.RepositoryModelUnloadResponse),
    "SystemSharedMemoryStatus": (
        pb.SystemSharedMemoryStatusRequest,
        pb.SystemSharedMemoryStatusResponse,
    ),
    "SystemSharedMemoryRegister": (
        pb.SystemSharedMemoryRegisterRequest,
        pb.SystemSharedMemoryRegisterResponse,
    ),
    "SystemSharedMemoryUnregister": (
        pb.SystemSharedMemoryUnregisterRequest,
        pb.SystemSharedMemoryUnregisterResponse,
    ),
    "CudaSharedMemoryStatus": (pb.CudaSharedMemoryStatusRequest, pb.CudaSharedMemoryStatusResponse),
    "CudaSharedMemoryRegister": (
        pb.CudaSharedMemoryRegisterRequest,
        pb.CudaSharedMemoryRegisterResponse,
    ),
    "ModelStatistics": (pb.ModelStatisticsRequest, pb.ModelStatisticsResponse),
    "TraceSetting": (pb.TraceSettingRequest, pb.TraceSettingResponse),
    "LogSettings": (pb.LogSettingsRequest, pb.LogSettingsResponse),
    "CudaSharedMemoryUnregister": (
        pb.CudaSharedMemoryUnregisterRequest,
        pb.CudaSharedMemoryUnregisterResponse,
    ),
}


def _method(handler: Handler, request_type: Any, response_type: Any) -> Method:
    return Method(
        streaming=False,
        handler=_errors_to_status(handler),
        deserialize=request_type.FromString if request_type else _identity,
        serialize=(lambda m: m.SerializeToString()) if response_type else _identity,
    )


def methods(
    servicer: InferenceRpcs,
    restrictions: dict[str, Restriction] | None = None,
    proxy: Callable[[str, Buffer, Context], Awaitable[bytes]] | None = None,
) -> dict[bytes, Method]:
    """Every RPC pbd serves, by its HTTP/2 ``:path``. With ``proxy`` (a front-end process,
    whose servicer runs only the inference RPCs), every other RPC is handed to ``proxy`` as
    its :path, request bytes and context: the daemon runs it (and its restrictions) itself."""
    rules = restrictions or {}

    def unary(name: str) -> Handler:
        method = getattr(servicer, name)
        return guard_unary(method, rules[name]) if name in rules else method

    def passed_on(path: str) -> Method:
        assert proxy is not None

        async def handler(request: Buffer, context: Context) -> bytes:
            return await proxy(path, request, context)

        return Method(streaming=False, handler=handler, deserialize=_identity, serialize=_identity)

    types = {**_UNARY, "Check": (health_pb2.HealthCheckRequest, health_pb2.HealthCheckResponse)}
    table: dict[bytes, Method] = {}
    for name, (req, resp) in types.items():
        service = HEALTH_SERVICE if name == "Check" else SERVICE
        path = f"/{service}/{name}"
        if proxy is not None and name not in INFERENCE_RPCS:
            table[path.encode()] = passed_on(path)
        else:
            table[path.encode()] = _method(unary(name), req, resp)
    stream = servicer.ModelStreamInfer
    if "ModelStreamInfer" in rules:
        stream = guard_stream(stream, rules["ModelStreamInfer"])
    table[f"/{SERVICE}/ModelStreamInfer".encode()] = Method(
        streaming=True, handler=stream, deserialize=_identity, serialize=_identity
    )
    return table
