"""The generate extension side by side with real Triton 2.51, the same python models served by
both (``.triton/tritonserver``, which ``scripts/triton.sh`` installs; skipped without it).

Each case is sent to both. Where pbd matches Triton, status, content type and the JSON (or
every event) must be equal. Where Triton is worse, the case says what each answers, so the
test shows the difference and fails if either side changes (docs/generate.md lists them).
"""

from __future__ import annotations

import asyncio
import gzip
import json
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from pbd_harness import ROOT, running_daemon
from sse_helpers import (
    LLM_MODELS,
    Answer,
    first_events_then_leave,
    llm_repository,
    metric,
    post,
    send_request,
    wait_for_metric,
)

from bench.servers import ServerProcess, start_triton

TRITON = ROOT / ".triton" / "tritonserver"
pytestmark = pytest.mark.skipif(
    not os.access(TRITON, os.X_OK),
    reason="real Triton is not installed (scripts/triton.sh installs it into .triton/)",
)
ONE_RESPONSE = (
    "generate expects model to produce exactly 1 response, use generate stream for model that "
    "generates various number of responses"
)
RAISED = (
    "Failed to process the request(s) for model 'generate_probe_0_0', message: "
    "TritonModelException: execute failed on purpose"
)


@dataclass
class Servers:
    pbd: str  # base URL
    pbd_metrics: str
    triton: str
    triton_metrics: str

    def both(self) -> list[tuple[str, str]]:
        """(base URL, metrics URL) of pbd, then of Triton."""
        return [(self.pbd, self.pbd_metrics), (self.triton, self.triton_metrics)]


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Servers]:
    workdir = tmp_path_factory.mktemp("vs_triton")
    repository = llm_repository(workdir)
    models = [m for m in LLM_MODELS if m != "tiny_llm"]
    loads = [arg for m in models for arg in ("--load-model", m)]
    triton: ServerProcess = start_triton(str(TRITON), workdir, repository, "tiny_llm", loads)
    try:
        with running_daemon(repository, workdir, settle=list(LLM_MODELS)) as daemon:
            yield Servers(
                f"http://{daemon.http_url}",
                daemon.metrics_url,
                f"http://127.0.0.1:{triton.http_port}",
                f"http://127.0.0.1:{triton.metrics_port}/metrics",
            )
    finally:
        triton.stop()


def observe(answer: Answer) -> tuple[int, str, Any]:
    """Status, content type (exactly: clients compare it whole), and the JSON (a stream: the
    JSON of each event)."""
    if answer.content_type.startswith("text/event-stream"):
        return answer.status, answer.content_type, [json.loads(e) for e in answer.events]
    return answer.status, answer.content_type, json.loads(answer.body)


def both(servers: Servers, path: str, body: str | bytes, **headers: str) -> tuple[Any, Any]:
    pbd = observe(post(f"{servers.pbd}/v2/models/{path}", body, headers))
    triton = observe(post(f"{servers.triton}/v2/models/{path}", body, headers))
    return pbd, triton


SAME = [
    (
        "generate_probe/generate",
        {
            "text_input": "hi", "INTS": [1, 2, 3], "FP": 1.5, "FLAG": True, "WORDS": ["a", "b"],
            "GRID": [1, 2, 3, 4], "id": "abc", "extra": 5,
            "parameters": {"x": 1, "y": "s", "z": 2.5, "w": False},
        },
    ),
    ("generate_probe/generate", {"text_input": "x", "INTS": []}),
    ("generate_probe/generate", {"text_input": "x", "parameters": {"INTS": [4, 5]}}),
    ("generate_probe/generate", {"text_input": "x", "MODE": "one_final"}),
    ("generate_probe/versions/1/generate", {"text_input": "x"}),
    ("generate_probe/generate_stream", {"text_input": "t", "MODE": "three"}),
    ("generate_probe/generate_stream", {"text_input": "t", "MODE": "none"}),
    ("generate_probe/generate_stream", {"text_input": "t", "MODE": "error_mid"}),
    ("generate_probe_sync/generate", {"text_input": ["a", "b"]}),
    ("generate_probe_sync/generate_stream", {"text_input": "q", "INTS": [1]}),
    ("tiny_llm/generate", {"text_input": "hello big world", "stream": False}),
    ("tiny_llm/generate_stream", {"text_input": "héllo wörld ☃", "stream": True}),
    ("nosuch/generate", {"text_input": "x"}),
    ("nosuch/generate_stream", {"text_input": "x"}),
    ("generate_probe/versions/2/generate", {"text_input": "x"}),
    ("generate_probe/generate", {"text_input": "x", "extra": None}),
    ("generate_probe/generate", {"text_input": "x", "extra": [1]}),
    ("generate_probe/generate", {}),
    ("generate_probe/generate_stream", {}),
    ("identity_fp32/generate", {}),
    ("generate_probe/generate", {"text_input": "x", "parameters": {"text_input": "y"}}),
]  # fmt: skip


@pytest.mark.parametrize(("path", "body"), SAME)
def test_pbd_answers_as_triton(servers: Servers, path: str, body: dict[str, Any]) -> None:
    pbd, triton = both(servers, path, json.dumps(body))
    assert pbd == triton


# A key given twice (which json.dumps cannot write): an input is refused, a parameter is the
# first one given.
TWICE = [
    '{"text_input": "x", "text_input": "y"}',
    '{"text_input": "x", "p": 1, "p": 2}',
    '{"text_input": "x", "parameters": {"p": 1, "p": 2}}',
    '{"text_input": "x", "parameters": {"FP": 1, "FP": 2}}',
]


@pytest.mark.parametrize("body", TWICE)
def test_a_key_given_twice_as_triton(servers: Servers, body: str) -> None:
    pbd, triton = both(servers, "generate_probe/generate", body)
    assert pbd == triton


# Same status; pbd's message starts with Triton's words and says more, or says it its way.
SAME_STATUS = [
    ("generate_probe/generate", {"text_input": "x", "FP": [1, 2]}, "The schema can not convert"),
    ("generate_probe/generate", {"text_input": ["a", "b"]}, "The schema can not convert"),
    ("generate_probe/generate", {"text_input": "x", "GRID": [1, 2, 3]}, "The schema can not"),
    ("generate_probe/generate", {"text_input": "x", "parameters": {"p": {"q": 1}}}, "'p' has inv"),
]  # fmt: skip


@pytest.mark.parametrize(("path", "body", "words"), SAME_STATUS)
def test_pbd_refuses_as_triton_does(
    servers: Servers, path: str, body: dict[str, Any], words: str
) -> None:
    pbd, triton = both(servers, path, json.dumps(body))
    assert pbd[:2] == triton[:2] == (400, "application/json")
    assert words in pbd[2]["error"] and words in triton[2]["error"]


# Where Triton 2.51 is worse: (path, body, Triton's status, pbd's status, Triton's JSON, pbd's).
BETTER = [
    # More or fewer than one response on /generate: Triton says so with status 200.
    ("generate_probe/generate", {"text_input": "x", "MODE": "three"}, 200, 500,
     {"error": ONE_RESPONSE}, {"error": ONE_RESPONSE}),
    ("generate_probe/generate", {"text_input": "x", "MODE": "none"}, 200, 500,
     {"error": ONE_RESPONSE}, {"error": ONE_RESPONSE}),
    # A model error after a response: Triton hides it behind the count.
    ("generate_probe/generate", {"text_input": "x", "MODE": "error_mid"}, 200, 500,
     {"error": ONE_RESPONSE}, {"error": "then failed"}),
    # An error response: Triton reads its code after freeing it (400 whatever the code);
    # pbd answers the code's status (TritonError's default, INTERNAL: 500).
    ("generate_probe/generate", {"text_input": "x", "MODE": "error_first"}, 400, 500,
     {"error": "first failed"}, {"error": "first failed"}),
    ("generate_probe/generate_stream", {"text_input": "x", "MODE": "error_first"}, 400, 500,
     [{"error": "first failed"}], [{"error": "first failed"}]),
]  # fmt: skip


@pytest.mark.parametrize(("path", "body", "t_status", "p_status", "t_json", "p_json"), BETTER)
def test_where_triton_is_worse_pbd_answers_better(
    servers: Servers,
    path: str,
    body: dict[str, Any],
    t_status: int,
    p_status: int,
    t_json: Any,
    p_json: Any,
) -> None:
    pbd, triton = both(servers, path, json.dumps(body))
    assert (triton[0], triton[2]) == (t_status, t_json)
    assert (pbd[0], pbd[2]) == (p_status, p_json)
    assert pbd[1] == triton[1]


def test_an_exception_in_execute_is_500_not_400(servers: Servers) -> None:
    for kind in ("generate", "generate_stream"):
        pbd, triton = both(
            servers, f"generate_probe/{kind}", '{"text_input": "x", "MODE": "raise"}'
        )
        assert (triton[0], pbd[0]) == (400, 500)
        assert pbd[1] == triton[1]
        errors = [pbd[2], triton[2]] if kind == "generate" else [pbd[2][0], triton[2][0]]
        assert all(e["error"].startswith(RAISED) for e in errors)


@pytest.mark.parametrize(
    ("body", "t_status", "p_status"),
    [
        (b'{"text_input": "x"', 500, 400),  # bad JSON: the client's error, not the server's
        (b"[1, 2]", 500, 400),
        (b'{"text_input": 5}', 500, 400),
        (b'{"text_input": "x", "id": 5}', 500, 400),
        (b'{"text_input": "x", "INTS": 99999999999}', 200, 400),  # Triton truncates it
    ],
)
def test_a_clients_mistake_is_400(
    servers: Servers, body: bytes, t_status: int, p_status: int
) -> None:
    pbd, triton = both(servers, "generate_probe/generate", body)
    assert (triton[0], pbd[0]) == (t_status, p_status)
    assert "error" in pbd[2]


def test_a_compressed_request(servers: Servers) -> None:
    body = gzip.compress(b'{"text_input": "zip"}')
    pbd, triton = both(servers, "generate_probe/generate", body, **{"Content-Encoding": "gzip"})
    assert triton == (
        400,
        "application/json",
        {"error": "Unsupported content-encoding, only 'identity' is supported."},
    )
    assert pbd[0] == 200 and pbd[2]["text_output"] == "zip"


LONG = json.dumps({"text_input": " ".join(f"w{i}" for i in range(100)), "max_tokens": 100})
CANCELLED = "tiny_llm_cancelled_total"


def test_a_client_leaving_a_stream_cancels_the_model_in_both(servers: Servers) -> None:
    body = json.dumps({**json.loads(LONG), "stream": True})
    for base, metrics in (
        (servers.pbd, servers.pbd_metrics),
        (servers.triton, servers.triton_metrics),
    ):
        before = metric(metrics, CANCELLED) or 0.0
        url = f"{base}/v2/models/tiny_llm/generate_stream"
        assert len(asyncio.run(first_events_then_leave(url, body, 2))) >= 2
        assert wait_for_metric(metrics, CANCELLED, before + 1) == before + 1


def test_a_client_leaving_generate_cancels_the_model_in_pbd_only(servers: Servers) -> None:
    """Triton 2.51 computes the whole answer for nobody (100 tokens, 2 s)."""
    before = {}
    for base, metrics in (
        (servers.pbd, servers.pbd_metrics),
        (servers.triton, servers.triton_metrics),
    ):
        before[metrics] = metric(metrics, CANCELLED) or 0.0
        with send_request(base.removeprefix("http://"), "/v2/models/tiny_llm/generate", LONG):
            time.sleep(0.5)  # the model is working
    time.sleep(3)  # both requests are long over by now, cancelled or not
    assert metric(servers.pbd_metrics, CANCELLED) == before[servers.pbd_metrics] + 1
    assert (metric(servers.triton_metrics, CANCELLED) or 0.0) == before[servers.triton_metrics]
