"""ModelInferRequest bytes through wire.py, convert.py and validation.py against real configs."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fuzz_oracles import CONFIGS, Sandbox, check_grpc_request, tally
from fuzz_strategies import infer_request_messages, mutated
from hypothesis import given, settings
from hypothesis import strategies as st

EXAMPLES = 150
BY_NAME = {c.name: c for c in CONFIGS}


@pytest.fixture(scope="module")
def box() -> Iterator[Sandbox]:
    with Sandbox() as sandbox:
        yield sandbox


@pytest.mark.parametrize("model", [c.name for c in CONFIGS])
@settings(max_examples=EXAMPLES)
@given(data=st.data())
def test_fuzz_grpc_request(model: str, box: Sandbox, data: st.DataObject) -> None:
    config = BY_NAME[model]
    message = data.draw(infer_request_messages(config))
    serialized = data.draw(mutated(message.SerializeToString()))
    tally("grpc_request (hypothesis)", check_grpc_request(serialized, config, box))


@settings(max_examples=EXAMPLES)
@given(raw=st.binary(max_size=256))
def test_fuzz_grpc_request_any_bytes(box: Sandbox, raw: bytes) -> None:
    tally("grpc_request any bytes (hypothesis)", check_grpc_request(raw, CONFIGS[0], box))
