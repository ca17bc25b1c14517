"""What every fuzz input must satisfy, shared by the hypothesis tests and the atheris targets.

The oracle: each input yields a result or a :class:`pbd.errors.PbdError` (a status for the
client), never another exception; a request that passes validation can be turned into the
worker's descriptor; a request that fails holds no client shared-memory region. Each
``check_*`` function takes one input, raises (AssertionError or the escaping exception) when
the oracle is broken, and returns a short word for what happened, for statistics.

A :class:`Sandbox` holds the real parts the request path needs besides the config: a client
shared-memory registry with two registered regions and a worker arena, both in a temporary
directory (not /dev/shm: nothing a leak detector would look at).
"""

from __future__ import annotations

import asyncio
import collections
import json
import shutil
import socket
import tempfile
from pathlib import Path

from pbd.errors import PbdError
from pbd.grpc import convert
from pbd.h2 import frames as h2frames
from pbd.h2.core import Core
from pbd.h2.header_blocks import Fields
from pbd.h2.limits import Limits
from pbd.h2.sending import Stream
from pbd.http import tensors
from pbd.instance.memory import InstanceMemory
from pbd.memory.client_shm import ClientShmRegistry
from pbd.modelconfig.model import ModelConfig
from pbd.modelconfig.parse import model_config_from_json, parse_model_config
from pbd.settings import Settings
from pbd.types import InferRequest
from pbd.validation import prepare_request, release_regions
from pbd_wire import framing
from pbd_wire import worker_pb2 as wpb
from pbd_wire.shm import Block

MODELS = Path(__file__).resolve().parents[1] / "integration" / "models"

# Batching, reshape, fixed and variable dims, BYTES and optional inputs in one model.
BATCHED_PBTXT = """
name: "batched"
backend: "python"
max_batch_size: 4
input [
  { name: "X" data_type: TYPE_INT32 dims: [ 2, -1 ] },
  { name: "S" data_type: TYPE_STRING dims: [ 1 ] optional: true },
  { name: "R" data_type: TYPE_FP32 dims: [ 6 ] reshape: { shape: [ 2, 3 ] } optional: true },
  { name: "V" data_type: TYPE_FP16 dims: [ -1 ] reshape: { shape: [ -1, 1 ] } optional: true }
]
output [
  { name: "Y" data_type: TYPE_INT32 dims: [ 2, -1 ] },
  { name: "T" data_type: TYPE_STRING dims: [ 1 ] }
]
dynamic_batching { }
"""

# target -> outcome ("valid", "invalid", ...) -> inputs tried; printed by conftest.py.
TRIED: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)


def tally(target: str, outcome: str, n: int = 1) -> None:
    TRIED[target][outcome] += n


REGION_KEY = "pbdfuzzkey"
REGION_FILE_BYTES = 256
# name -> (offset in the file, byte size)
REGIONS = {"r0": (0, 256), "r1": (64, 64)}


def _load_configs() -> list[ModelConfig]:
    configs = []
    for name in ("identity_all", "optional_add"):
        path = MODELS / name / "config.pbtxt"
        configs.append(parse_model_config(path.read_text(), model_name=name, source=str(path)))
    configs.append(parse_model_config(BATCHED_PBTXT, model_name="batched", source="batched"))
    return configs


CONFIGS: list[ModelConfig] = _load_configs()


class Sandbox:
    """A registry with :data:`REGIONS` registered and an arena, in a temporary directory."""

    def __init__(self) -> None:
        self.dir = tempfile.mkdtemp(prefix="pbd-fuzz-")
        Path(self.dir, REGION_KEY).write_bytes(bytes(REGION_FILE_BYTES))
        self.shm = ClientShmRegistry(enabled=True, key_prefixes=[], shm_dir=self.dir)
        for name, (offset, size) in REGIONS.items():
            self.shm.register(name, REGION_KEY, offset, size)
        settings = Settings(
            shm_dir=Path(self.dir), shm_default_byte_size=1 << 20, shm_growth_byte_size=1 << 20
        )
        self.memory = InstanceMemory("fuzz", settings)

    def close(self) -> None:
        self.memory.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> Sandbox:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def assert_no_region_held(self) -> None:
        """Checks, then resets the registry, so one leak fails one input, not all after it."""
        held = {r.name: r.in_use for r in self.shm.regions.values() if r.in_use}
        for region in self.shm.regions.values():
            region.in_use = 0
        assert not held, f"regions still held after the request ended: {held}"


def check_request(request: InferRequest, config: ModelConfig, box: Sandbox) -> str:
    """Validation against ``config``, then the worker descriptor the instance would send."""
    try:
        prepared = prepare_request(request, config, box.shm)
    except PbdError:
        box.assert_no_region_held()
        return "invalid"
    blocks: list[Block] = []
    try:
        message = wpb.Request()
        box.memory.request_message(0, prepared, blocks, message)
        message.SerializeToString()
    finally:
        box.memory.free(blocks)
        release_regions(prepared, box.shm)
    box.assert_no_region_held()
    return "valid"


def check_grpc_request(data: bytes, config: ModelConfig, box: Sandbox) -> str:
    """A serialized ModelInferRequest, as ModelInfer receives it."""
    try:
        request = convert.infer_request_from_wire(data)
    except PbdError:
        return "undecodable"
    return check_request(request, config, box)


def check_http_request(
    body: bytes, header_length: str | None, config: ModelConfig, box: Sandbox
) -> str:
    """An HTTP/REST infer body (JSON, or JSON + binary tensors when ``header_length``)."""
    try:
        parsed = tensors.parse_infer_request(body, header_length, config.name, "")
    except PbdError:
        return "undecodable"
    return check_request(parsed.request, config, box)


def _check_config(config: ModelConfig) -> None:
    """What the daemon does with a config it accepted: the JSON a worker gets, the
    ModelConfig RPC's message."""
    json.dumps(config.as_dict)
    convert.model_config_to_pb(config.as_dict).SerializeToString()


def check_config_pbtxt(text: str) -> str:
    try:
        config = parse_model_config(text, model_name="m", source="m/config.pbtxt")
    except PbdError:
        return "invalid"
    _check_config(config)
    return "valid"


def check_config_json(text: str) -> str:
    """RepositoryModelLoad's ``config`` parameter."""
    try:
        config = model_config_from_json(text, model_name="m", source="m ('config' parameter)")
    except PbdError:
        return "invalid"
    _check_config(config)
    return "valid"


# The blocking reader gets the bytes through a real socket pair; more than a socket buffer
# would need a writer thread, and framing has nothing size-dependent below this.
MAX_FRAMING_INPUT = 32 * 1024


def _frames_from_socket(data: bytes) -> tuple[list[bytes], str]:
    left, right = socket.socketpair()
    with left, right:
        left.sendall(data)
        left.shutdown(socket.SHUT_WR)
        reader = framing.SocketFrameReader(right)
        frames: list[bytes] = []
        try:
            while (frame := reader.read()) is not None:
                frames.append(frame)
        except framing.FrameError:
            return frames, "error"
    return frames, "eof"


async def _frames_from_stream(data: bytes) -> tuple[list[bytes], str]:
    reader = asyncio.StreamReader()
    reader.feed_data(data)
    reader.feed_eof()
    frames: list[bytes] = []
    try:
        while (frame := await framing.read_frame(reader)) is not None:
            frames.append(frame)
    except framing.FrameError:
        return frames, "error"
    return frames, "eof"


def check_framing(data: bytes) -> str:
    """Both readers agree, end in a frame boundary or a FrameError, and the frames they return
    re-encode to the start of the input."""
    data = data[:MAX_FRAMING_INPUT]
    by_socket = _frames_from_socket(data)
    by_stream = asyncio.run(_frames_from_stream(data))
    assert by_socket == by_stream, (by_socket, by_stream)
    frames, end = by_socket
    encoded = b"".join(framing.encode_frame(f) for f in frames)
    assert data.startswith(encoded)
    assert (end == "eof") == (encoded == data)
    return end


# -- pbd.h2: the HTTP/2 server core ----------------------------------------------------------

MAX_H2_INPUT = 64 * 1024


class _H2Handler:
    def __init__(self, events: list[object], stream: int) -> None:
        self.events = events
        self.stream = stream

    def on_data(self, chunk: memoryview, end: bool) -> None:
        self.events.append(("data", self.stream, bytes(chunk), end))

    def room(self) -> memoryview | None:
        return None

    def wrote(self, n: int, end: bool) -> None:
        raise AssertionError("no room was offered")

    def on_reset(self) -> None:
        self.events.append(("reset", self.stream))


class _H2App:
    def __init__(self) -> None:
        self.events: list[object] = []

    def open(self, stream: Stream, headers: Fields) -> _H2Handler:
        self.events.append(("open", stream.id, headers))
        return _H2Handler(self.events, stream.id)

    def oversized(self, stream: Stream, size: int, limit: int) -> None:
        self.events.append(("oversized", stream.id, size))
        stream.reset()


def _h2_run(data: bytes, cuts: list[int]) -> tuple[int | None, list[object], list[bytes], int]:
    """The core fed ``data`` in pieces ending at ``cuts``: its error code, the application's
    events, the frames it wrote, and the streams left open. The frames are sorted, and PING
    acks are only counted when no error came: an ack is written at the end of its PING's
    read, so where a read ends moves it, and a connection error in the same read drops it."""
    app = _H2App()
    core = Core(app, Limits(max_ping_strikes=0))
    out = bytearray(core.data_to_send())
    start = 0
    for end in [*cuts, len(data)]:
        core.receive(data[start:end])
        out += core.data_to_send()
        start = end
    frames, pos = [], 0
    while pos + 9 <= len(out):
        length = int.from_bytes(out[pos : pos + 3], "big")
        frames.append(bytes(out[pos : pos + 9 + length]))
        pos += 9 + length
    assert pos == len(out), "the core wrote a partial frame"
    if core.error is not None:
        assert frames[-1][3] == h2frames.GOAWAY, "a connection error ends with GOAWAY"
        assert int.from_bytes(frames[-1][13:17], "big") == core.error.code
        assert not core.streams, "a connection error resets every stream"
    code = core.error.code if core.error is not None else None
    acks = [x for x in frames if x[3] == h2frames.PING]
    frames = [x for x in frames if x[3] != h2frames.PING]
    if code is None:
        frames.append(b"%d PING acks" % len(acks))
    return code, app.events, sorted(frames), len(core.streams)


def check_h2_frames(data: bytes) -> str:
    """``pbd.h2.core`` on a client's bytes (the preface and SETTINGS, then ``data``): nothing
    escapes but a connection error (written as GOAWAY, every stream reset), and the bytes
    fed in one piece, byte by byte or cut at a few places give the same verdict, the same
    events to the application and the same frames back."""
    data = h2frames.PREFACE + h2frames.settings({}) + data[:MAX_H2_INPUT]
    whole = _h2_run(data, [])
    if len(data) <= 4096:
        assert _h2_run(data, list(range(1, len(data)))) == whole
    step = max(1, len(data) // 5)
    assert _h2_run(data, list(range(7, len(data), step))) == whole
    return "error" if whole[0] is not None else "taken"
