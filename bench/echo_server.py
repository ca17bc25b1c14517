"""The ceiling: a bare gRPC server whose only RPC, ModelInfer, echoes its inputs.

It registers ``inference.GRPCInferenceService/ModelInfer`` by hand and parses and builds the
messages with tritonclient's generated classes, as a plain Python KServe v2 server would. Each
input ``INPUTn`` comes back as output ``OUTPUTn`` with the same datatype, shape and raw bytes.
It applies the daemon's allocator tuning (:mod:`pbd.memory.malloc`) unless told not to, so
pbd/echo measures what the daemon adds (validation, scheduling, the worker hop) and nothing else.

    python -m bench.echo_server --port N [--front-end grpcio|pbd] [--no-malloc-tuning]

``--front-end grpcio`` (the default) serves it with grpc.aio's server, ``pbd`` with the
daemon's own HTTP/2 gRPC server (``pbd.h2``, ``pbd.grpc.calls``): the same handler, so the
difference between the two is what the gRPC server costs per call.

SIGTERM or SIGINT stops it with exit code 0.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys

import grpc
from tritonclient.grpc import service_pb2

from pbd.memory.malloc import describe, tune_malloc

SERVICE = "inference.GRPCInferenceService"
SERVER_OPTIONS = [("grpc.max_receive_message_length", -1), ("grpc.max_send_message_length", -1)]


def output_name(input_name: str) -> str:
    """``INPUT0`` -> ``OUTPUT0``; any other name is echoed unchanged."""
    if input_name.startswith("INPUT"):
        return "OUTPUT" + input_name[len("INPUT") :]
    return input_name


def echo(request: service_pb2.ModelInferRequest) -> service_pb2.ModelInferResponse:
    response = service_pb2.ModelInferResponse(
        model_name=request.model_name, model_version=request.model_version or "1", id=request.id
    )
    for tensor in request.inputs:
        response.outputs.add(
            name=output_name(tensor.name), datatype=tensor.datatype, shape=tensor.shape
        )
    response.raw_output_contents.extend(request.raw_input_contents)
    return response


async def _model_infer(
    request: service_pb2.ModelInferRequest, context: grpc.aio.ServicerContext
) -> service_pb2.ModelInferResponse:
    return echo(request)


async def serve_pbd(port: int) -> None:
    from pbd.grpc.calls import Calls, Method
    from pbd.h2.connection import Connection, Shared

    method = Method(
        streaming=False,
        handler=_model_infer,
        deserialize=service_pb2.ModelInferRequest.FromString,
        serialize=service_pb2.ModelInferResponse.SerializeToString,
    )
    calls = Calls({f"/{SERVICE}/ModelInfer".encode(): method}, 2**31 - 1, None)
    loop = asyncio.get_running_loop()
    shared = Shared()
    server = await loop.create_server(
        lambda: Connection(calls, lambda _: None, shared), "127.0.0.1", port, reuse_address=True
    )
    stop = asyncio.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    print(f"echo server (pbd.h2) listening on 127.0.0.1:{port}", flush=True)
    await stop.wait()
    server.close()


async def serve(port: int) -> None:
    server = grpc.aio.server(options=SERVER_OPTIONS)
    handler = grpc.unary_unary_rpc_method_handler(
        _model_infer,
        request_deserializer=service_pb2.ModelInferRequest.FromString,
        response_serializer=service_pb2.ModelInferResponse.SerializeToString,
    )
    server.add_generic_rpc_handlers(
        [grpc.method_handlers_generic_handler(SERVICE, {"ModelInfer": handler})]
    )
    if server.add_insecure_port(f"127.0.0.1:{port}") != port:
        raise OSError(f"echo server: cannot bind 127.0.0.1:{port}")
    await server.start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    print(f"echo server listening on 127.0.0.1:{port}", flush=True)
    await stop.wait()
    await server.stop(grace=0.5)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="KServe v2 ModelInfer echo server (bench ceiling)")
    parser.add_argument("--port", type=int, required=True, help="port on 127.0.0.1")
    parser.add_argument(
        "--front-end", choices=("grpcio", "pbd"), default="grpcio",
        help="grpc.aio's server or pbd's own HTTP/2 gRPC server",
    )  # fmt: skip
    parser.add_argument(
        "--no-malloc-tuning", action="store_true", help="keep glibc's default allocator settings"
    )
    opts = parser.parse_args(argv)
    if opts.no_malloc_tuning:
        print("malloc tuning: off", flush=True)
    else:
        accepted = tune_malloc()
        refused = [name for name, ok in accepted.items() if not ok]
        if not accepted:
            print("malloc tuning: not applied (no glibc mallopt)", flush=True)
        else:
            print(f"malloc tuning: {describe()}; refused: {refused or 'none'}", flush=True)
    asyncio.run(serve_pbd(opts.port) if opts.front_end == "pbd" else serve(opts.port))
    return 0


if __name__ == "__main__":
    sys.exit(main())
