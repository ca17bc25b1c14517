"""HTTP/REST infer bodies (JSON and the binary extension) through http/tensors.py and
validation.py against real configs."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fuzz_oracles import CONFIGS, Sandbox, check_http_request, tally
from fuzz_strategies import deep_bodies, http_infer_bodies, mutated
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
def test_fuzz_http_request(model: str, box: Sandbox, data: st.DataObject) -> None:
    config = BY_NAME[model]
    body, header_length = data.draw(http_infer_bodies(config))
    if data.draw(st.integers(0, 3)) == 0:
        body = data.draw(mutated(body))
    tally("http_request (hypothesis)", check_http_request(body, header_length, config, box))


@settings(max_examples=10)
@given(body=deep_bodies)
def test_fuzz_http_request_deep_json(box: Sandbox, body: bytes) -> None:
    tally("http_request deep JSON (hypothesis)", check_http_request(body, None, CONFIGS[1], box))
