"""ModelStreamInfer message sequences through a real gRPC channel to a real daemon.

Each sequence mixes good requests, requests drawn for the model's config, mutated ones and
arbitrary bytes on one stream. Every message gets exactly one answer, in band (a response or an
``error_message``), the call ends with OK once the client half-closes, and never hangs (a
deadline would fail the test).
"""

from __future__ import annotations

from collections.abc import Iterator

import grpc
import numpy as np
import pytest
import tritonclient.grpc.service_pb2 as service_pb2
from fuzz_oracles import CONFIGS, MODELS, tally
from fuzz_strategies import infer_request_messages, mutated
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pbd_harness import make_repository, running_daemon

EXAMPLES = 25
MODEL = "identity_all"
CALL_TIMEOUT_S = 60
GOOD = service_pb2.ModelInferRequest(
    model_name=MODEL,
    id="good",
    inputs=[{"name": "IN_INT32", "datatype": "INT32", "shape": [3]}],
    raw_input_contents=[np.arange(3, dtype=np.int32).tobytes()],
).SerializeToString()


@pytest.fixture(scope="module")
def stream_infer(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[grpc.StreamStreamMultiCallable]:
    workdir = tmp_path_factory.mktemp("fuzz-stream")
    repository = make_repository(workdir, {MODEL: MODELS / MODEL})
    with (
        running_daemon(repository, workdir, settle=[MODEL]) as daemon,
        grpc.insecure_channel(daemon.url) as channel,
    ):
        yield channel.stream_stream(
            "/inference.GRPCInferenceService/ModelStreamInfer",
            response_deserializer=service_pb2.ModelStreamInferResponse.FromString,
        )


@st.composite
def messages(draw: st.DrawFn) -> bytes:
    config = next(c for c in CONFIGS if c.name == MODEL)
    kind = draw(st.sampled_from(["good", "drawn", "mutated", "bytes"]))
    if kind == "good":
        return GOOD
    if kind == "bytes":
        return draw(st.binary(max_size=64))
    drawn = draw(infer_request_messages(config)).SerializeToString()
    return drawn if kind == "drawn" else draw(mutated(drawn))


@settings(max_examples=EXAMPLES, suppress_health_check=[HealthCheck.too_slow])
@given(sequence=st.lists(messages(), min_size=1, max_size=6))
def test_fuzz_e2e_stream(
    stream_infer: grpc.StreamStreamMultiCallable, sequence: list[bytes]
) -> None:
    answers = list(stream_infer(iter([*sequence, GOOD]), timeout=CALL_TIMEOUT_S))
    assert len(answers) == len(sequence) + 1, answers
    for answer in answers:
        assert answer.error_message or answer.HasField("infer_response"), answer
        tally("stream end to end (hypothesis)", "error" if answer.error_message else "OK")
    # Answers keep request order for a non-decoupled model: the last is the good request's.
    assert answers[-1].infer_response.id == "good" and not answers[-1].error_message
