"""Malformed ModelInfer requests through a real gRPC channel to a real daemon.

Each gets a gRPC status that names the client's mistake (never UNKNOWN, the status of an
exception the daemon did not expect), and after each the daemon still serves a good request
through tritonclient.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path

import grpc
import numpy as np
import pytest
from fuzz_oracles import CONFIGS, MODELS, REGION_FILE_BYTES, tally
from fuzz_strategies import infer_request_messages, mutated
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pbd_harness import Daemon, infer_input, make_repository, running_daemon

EXAMPLES = 60
MODEL = "identity_all"
# What a malformed request may get; UNKNOWN and INTERNAL would be the daemon's own failures.
CLIENT_ERRORS = {
    grpc.StatusCode.INVALID_ARGUMENT,
    grpc.StatusCode.NOT_FOUND,
    grpc.StatusCode.UNIMPLEMENTED,
}
CALL_TIMEOUT_S = 60


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    workdir = tmp_path_factory.mktemp("fuzz-e2e")
    repository = make_repository(workdir, {MODEL: MODELS / MODEL})
    with running_daemon(repository, workdir, "--allow-client-shm=true", settle=[MODEL]) as d:
        yield d


@pytest.fixture(scope="module")
def model_infer(daemon: Daemon) -> Iterator[grpc.UnaryUnaryMultiCallable]:
    with grpc.insecure_channel(daemon.url) as channel:
        yield channel.unary_unary("/inference.GRPCInferenceService/ModelInfer")


@pytest.fixture(scope="module")
def registered(daemon: Daemon) -> Iterator[None]:
    """Regions named like the sandbox's, so shared-memory parameters reach the region checks."""
    key = f"/fuzzclient{os.getpid()}"  # a client's own name: pbd's prefix is refused
    path = Path("/dev/shm") / key.lstrip("/")
    path.write_bytes(bytes(REGION_FILE_BYTES))
    client = daemon.client()
    try:
        client.register_system_shared_memory("r0", key, REGION_FILE_BYTES)
        client.register_system_shared_memory("r1", key, 64, offset=64)
        yield
    finally:
        client.unregister_system_shared_memory()
        path.unlink()


def _good_request(daemon: Daemon) -> None:
    values = np.arange(3, dtype=np.int32)
    result = daemon.control().infer(
        MODEL, [infer_input("IN_INT32", values, "INT32")], client_timeout=CALL_TIMEOUT_S
    )
    np.testing.assert_array_equal(result.as_numpy("OUT_INT32"), values)


@settings(max_examples=EXAMPLES, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_fuzz_e2e_grpc(
    daemon: Daemon, model_infer: grpc.UnaryUnaryMultiCallable, registered: None, data: st.DataObject
) -> None:
    config = next(c for c in CONFIGS if c.name == MODEL)
    request = data.draw(mutated(data.draw(infer_request_messages(config)).SerializeToString()))
    try:
        model_infer(request, timeout=CALL_TIMEOUT_S)
        outcome = "OK"
    except grpc.RpcError as exc:
        # Triton answers an output too large for the client's shm region with INTERNAL and this
        # message (the model ran; the region is the client's mistake): the one INTERNAL allowed.
        too_small = exc.code() is grpc.StatusCode.INTERNAL and re.fullmatch(
            r"shared memory size specified with the request for output '.+' \(\d+ bytes\) "
            r"should be at least \d+ bytes to hold the results",
            exc.details() or "",
        )
        assert exc.code() in CLIENT_ERRORS or too_small, (exc.code(), exc.details())
        outcome = exc.code().name
    tally("grpc_request end to end (hypothesis)", outcome)
    _good_request(daemon)
