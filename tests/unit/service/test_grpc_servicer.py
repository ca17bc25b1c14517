"""pbd.grpc.servicer: each RPC converts, calls the dataplane, converts back; a PbdError becomes
its gRPC status. The real server and tritonclient's asyncio client, over a dataplane with one
model (dataplane_samples)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from dataplane_samples import EchoPlane
from tritonclient.grpc.aio import InferenceServerClient
from tritonclient.utils import InferenceServerException

from pbd.grpc.server import build_server
from pbd.settings import Settings

WAIT_S = 10.0  # a bound on a test that went wrong, never reached when it passes


def run(test: Callable[[InferenceServerClient, EchoPlane], Awaitable[None]]) -> None:
    async def main() -> None:
        plane = EchoPlane()
        server = build_server(plane, Settings(grpc_address="127.0.0.1", grpc_port=0))  # type: ignore[arg-type]
        port = await server.start()
        client = InferenceServerClient(f"127.0.0.1:{port}")
        try:
            await asyncio.wait_for(test(client, plane), WAIT_S)
        finally:
            await client.close()
            await server.stop(grace=0)

    asyncio.run(main())


def echo_inputs(values: list[float]) -> list[grpcclient.InferInput]:
    tensor = grpcclient.InferInput("INPUT0", [4], "FP32")
    tensor.set_data_from_numpy(np.array(values, np.float32))
    return [tensor]


def test_health_and_metadata_are_the_dataplanes() -> None:
    async def test(client: InferenceServerClient, plane: EchoPlane) -> None:
        assert await client.is_server_live() and await client.is_server_ready()
        plane.ready = False
        assert not await client.is_server_ready()
        metadata = await client.get_server_metadata()
        assert (metadata.name, list(metadata.extensions)) == (
            "pbd",
            ["model_repository", "statistics"],
        )
        assert await client.is_model_ready("echo") and not await client.is_model_ready("nope")
        model = await client.get_model_metadata("echo")
        assert (model.name, list(model.versions), model.platform) == ("echo", ["1"], "python")
        assert [(t.name, t.datatype, list(t.shape)) for t in model.inputs] == [
            ("INPUT0", "FP32", [4])
        ]
        config = (await client.get_model_config("echo")).config
        assert config.name == "echo" and config.output[0].name == "OUTPUT0"

    run(test)


@pytest.mark.parametrize("early", [False, True])
def test_model_infer_answers_with_the_results_outputs_then_releases_them(early: bool) -> None:
    """Answered after ``infer`` returns, or (``early``) from where the instance reads the
    worker's result, before it returns: the same bytes either way, the memory handed back."""

    async def test(client: InferenceServerClient, plane: EchoPlane) -> None:
        plane.answer_early = early
        result = await client.infer("echo", echo_inputs([1, 2, 3, 4]), request_id="r1")
        assert result.as_numpy("OUTPUT0").tolist() == [1, 2, 3, 4]
        assert result.get_response().id == "r1" and plane.released == ["r1"]
        (request,) = plane.requests
        assert request.model_name == "echo" and request.respond is not None  # untraced

    run(test)


def test_a_dataplane_error_is_its_grpc_status() -> None:
    async def test(client: InferenceServerClient, plane: EchoPlane) -> None:
        with pytest.raises(InferenceServerException) as caught:
            await client.infer("nope", echo_inputs([1, 2, 3, 4]))
        assert caught.value.status() == str(grpc.StatusCode.UNAVAILABLE)
        assert caught.value.message() == "Request for unknown model: 'nope' is not found"
        with pytest.raises(InferenceServerException) as caught:
            await client.get_model_metadata("nope")
        assert caught.value.status() == str(grpc.StatusCode.UNAVAILABLE)

    run(test)
