"""Hypothesis strategies for requests that are almost right (configs: ``fuzz_config_strategies``).

Inputs drawn at random from all bytes rarely get past the first check. These start from what a
client would send for a real model config (its input names, datatypes and dims) and then get
one thing wrong, or several: a shape, a datatype, a parameter of the wrong type, raw contents a
few bytes off, BYTES length prefixes that claim more than is there, shared-memory parameters
that point outside a region. The serialized forms are then mutated byte by byte.
"""

from __future__ import annotations

import json
import math
from typing import Any

from fuzz_oracles import REGIONS
from hypothesis import strategies as st

from pbd._proto import grpc_service_pb2 as pb
from pbd.modelconfig.model import ModelConfig, TensorConfig
from pbd_wire import dtypes

INT64 = st.integers(-(2**63), 2**63 - 1)
UINT64 = st.integers(0, 2**64 - 1)
DATATYPES = [d.name for d in dtypes.ALL] + ["", "FP8", "fp32", "STRING"]
PARAM_KEYS = [
    "shared_memory_region",
    "shared_memory_offset",
    "shared_memory_byte_size",
    "sequence_id",
    "sequence_start",
    "sequence_end",
    "priority",
    "timeout",
    "triton_enable_empty_final_response",
    "triton_other",
    "binary_data",
    "classification",
    "custom",
]
REGION_NAMES = [*REGIONS, "missing", ""]
# Offsets and sizes around the edges of the registered regions.
SHM_NUMBERS = st.sampled_from([-1, 0, 1, 8, 63, 64, 65, 128, 255, 256, 257]) | INT64

# A parameter as (oneof field, value), the form both transports can carry.
param_values = st.one_of(
    st.tuples(st.just("bool_param"), st.booleans()),
    st.tuples(st.just("int64_param"), SHM_NUMBERS),
    st.tuples(st.just("uint64_param"), UINT64),
    st.tuples(st.just("double_param"), st.floats(allow_nan=True)),
    st.tuples(st.just("string_param"), st.sampled_from(REGION_NAMES) | st.text(max_size=8)),
)
param_dicts = st.dictionaries(
    st.sampled_from(PARAM_KEYS) | st.text(max_size=6), param_values, max_size=3
)


def _set_params(target: Any, params: dict[str, tuple[str, Any]]) -> None:
    for key, (kind, value) in params.items():
        setattr(target[key], kind, value)


class Slips:
    """Decides, detail by detail, whether a drawn request gets that detail wrong: about one
    time in ``rate + 1``. The right choice comes first, so hypothesis shrinks towards it."""

    def __init__(self, draw: st.DrawFn) -> None:
        self.draw = draw
        self.choices = st.sampled_from([False] * draw(st.sampled_from([30, 8, 2])) + [True])

    def __call__(self) -> bool:
        return self.draw(self.choices)


def _count(shape: list[int], limit: int = 64) -> int:
    if 0 in shape:
        return 0
    fits = all(isinstance(d, int) and 0 <= d <= limit for d in shape)
    return math.prod(shape) if fits else 1


@st.composite
def shapes(
    draw: st.DrawFn,
    cfg: TensorConfig | None,
    config: ModelConfig,
    wrong: bool = False,
    widest: int = 2**63 - 1,
) -> list[int]:
    """A shape the config allows, or (``wrong``) any int64 list. A variable dimension may be
    as large as ``widest`` (a zero elsewhere keeps the tensor empty)."""
    if cfg is None or wrong:
        return draw(st.lists(st.integers(-2, 6) | INT64, max_size=5))
    variable = st.integers(0, 4) | st.just(widest)
    dims = [draw(variable) if d == -1 else d for d in cfg.dims]
    if config.max_batch_size > 0:
        dims.insert(0, draw(st.integers(0, config.max_batch_size)))
    return dims


def bytes_elements(draw: st.DrawFn, count: int, slip: Slips) -> bytes:
    """``count`` length-prefixed elements; a slip adds or drops one, or lets a prefix lie."""
    out = bytearray()
    for _ in range(max(0, count + (draw(st.sampled_from([-1, 1])) if slip() else 0))):
        value = draw(st.binary(max_size=8))
        lie = draw(st.sampled_from([1, -1, 2**31, 2**32 - 1])) if slip() else 0
        out += ((len(value) + lie) % 2**32).to_bytes(4, "little") + value
    if slip():
        out += draw(st.binary(max_size=3))  # a torn length prefix
    return bytes(out)


def tensor_payload(draw: st.DrawFn, datatype: str, shape: list[int], slip: Slips) -> bytes:
    """Raw bytes for a tensor: the right size, or (a slip) a few bytes off, or anything."""
    dt = dtypes.BY_NAME.get(datatype)
    if dt is None or slip():
        return draw(st.binary(max_size=64))
    if dt.is_bytes:
        return bytes_elements(draw, min(_count(shape), 16), slip)
    off = draw(st.sampled_from([-1, 1, dt.itemsize])) if slip() else 0
    return bytes(max(0, min(_count(shape) * dt.itemsize + off, 4096)))


def _shm_params(draw: st.DrawFn, datatype: str, shape: list[int], slip: Slips) -> Any:
    """Parameters placing a tensor in a registered region: inside it, or (a slip) not."""
    dt = dtypes.BY_NAME.get(datatype)
    size = _count(shape) * (dt.itemsize if dt else 1) or 1
    region, offset = "r0", 0
    if slip():
        region = draw(st.sampled_from(REGION_NAMES))
    if slip():
        size = draw(SHM_NUMBERS)
    if slip():
        offset = draw(SHM_NUMBERS)
    params = {
        "shared_memory_region": ("string_param", region),
        "shared_memory_byte_size": ("int64_param", size),
    }
    if offset or slip():
        params["shared_memory_offset"] = ("int64_param", offset)
    return params


# Parameters a well-behaved client sends.
good_params = st.dictionaries(
    st.sampled_from(["sequence_id", "priority", "timeout", "sequence_start", "custom"]),
    st.tuples(st.just("int64_param"), st.integers(0, 2**63 - 1)),
    max_size=2,
).map(lambda d: {k: ("bool_param", True) if k == "sequence_start" else v for k, v in d.items()})


_CONTENTS_VALUES: dict[str, st.SearchStrategy[Any]] = {
    "bool_contents": st.booleans(),
    "int_contents": st.integers(-(2**31), 2**31 - 1),
    "int64_contents": INT64,
    "uint_contents": st.integers(0, 2**32 - 1),
    "uint64_contents": UINT64,
    "fp32_contents": st.floats(width=32),
    "fp64_contents": st.floats(),
    "bytes_contents": st.binary(max_size=6),
}
_CONTENTS_OF = {
    "BOOL": "bool_contents", "INT8": "int_contents", "INT16": "int_contents",
    "INT32": "int_contents", "INT64": "int64_contents", "UINT8": "uint_contents",
    "UINT16": "uint_contents", "UINT32": "uint_contents", "UINT64": "uint64_contents",
    "FP32": "fp32_contents", "FP64": "fp64_contents", "BYTES": "bytes_contents",
}  # fmt: skip


def _contents(
    draw: st.DrawFn, datatype: str, shape: list[int], slip: Slips
) -> pb.InferTensorContents:
    """Typed contents of the field and count the datatype and shape take, unless a slip."""
    field = _CONTENTS_OF.get(datatype)
    if field is None or slip():
        field = draw(st.sampled_from(sorted(_CONTENTS_VALUES)))
    n = draw(st.integers(0, 6)) if slip() else _count(shape, 16)
    contents = pb.InferTensorContents()
    values = _CONTENTS_VALUES[field]
    getattr(contents, field).extend(draw(st.lists(values, min_size=n, max_size=n)))
    return contents


@st.composite
def infer_request_messages(draw: st.DrawFn, config: ModelConfig) -> pb.ModelInferRequest:
    slip = Slips(draw)
    msg = pb.ModelInferRequest(
        model_name=config.name,
        model_version=draw(st.sampled_from(["", "1", "x"])) if slip() else "",
        id=draw(st.text(max_size=6)),
    )
    # The required inputs, some optional ones; a slip drops one or adds a stranger.
    names = [t.name for t in config.inputs if not t.optional or draw(st.booleans())]
    if names and slip():
        names.pop(draw(st.integers(0, len(names) - 1)))
    if slip():
        names.append(draw(st.text(max_size=4) | st.sampled_from(names or ["A"])))
    # Typed contents and raw entries do not mix (convert refuses it): one or the other.
    with_contents = draw(st.booleans())
    raws: list[bytes] = []
    for name in names:
        cfg = config.input(name)
        datatype = draw(st.sampled_from(DATATYPES)) if cfg is None or slip() else cfg.datatype
        shape = draw(shapes(cfg, config, slip()))
        tensor = msg.inputs.add(name=name, datatype=datatype, shape=shape)
        kind = draw(st.sampled_from(["contents" if with_contents else "raw", "shm"]))
        if slip():
            kind = draw(st.sampled_from(["raw", "contents", "shm", "none"]))
        if kind == "raw":
            raws.append(tensor_payload(draw, datatype, shape, slip))
        elif kind == "contents":
            tensor.contents.CopyFrom(_contents(draw, datatype, shape, slip))
        elif kind == "shm":
            _set_params(tensor.parameters, _shm_params(draw, datatype, shape, slip))
        if slip():
            _set_params(tensor.parameters, draw(param_dicts))
    if slip():
        raws += draw(st.lists(st.binary(max_size=16), min_size=1, max_size=2))  # unclaimed
    msg.raw_input_contents.extend(raws)
    outputs = [t.name for t in config.outputs if draw(st.booleans())]
    if slip():
        outputs.append(draw(st.text(max_size=4)))
    for name in outputs:
        output = msg.outputs.add(name=name)
        if slip():
            _set_params(output.parameters, draw(param_dicts))
        elif draw(st.booleans()):
            _set_params(output.parameters, _shm_params(draw, "BYTES", [16], slip))
    _set_params(msg.parameters, draw(param_dicts) if slip() else draw(good_params))
    return msg


@st.composite
def mutated(draw: st.DrawFn, data: bytes) -> bytes:
    """``data``, or (one time in three) it with a few byte-level edits: flips, cuts,
    insertions, repeats."""
    buf = bytearray(data)
    edits = draw(st.sampled_from([0, 0, 1, 2, 3]))
    for _ in range(edits if draw(st.integers(0, 2)) == 0 else 0):
        op = draw(st.sampled_from(["flip", "cut", "insert", "repeat"]))
        at = draw(st.integers(0, len(buf)))
        if op == "flip" and at < len(buf):
            buf[at] ^= 1 << draw(st.integers(0, 7))
        elif op == "cut":
            del buf[at : at + draw(st.integers(1, 8))]
        elif op == "insert":
            buf[at:at] = draw(st.binary(min_size=1, max_size=6))
        else:
            buf[at:at] = buf[at : at + draw(st.integers(1, 12))]
    return bytes(buf)


# -- HTTP/REST ----------------------------------------------------------------------------------

json_scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.floats(), st.text(max_size=4)
)
_JSON_ELEMENT: dict[str, st.SearchStrategy[Any]] = {
    "BOOL": st.booleans(),
    # JSON can spell lone surrogates ("\ud800"), which are not UTF-8 text.
    "BYTES": st.text(max_size=4) | st.sampled_from(["\ud800", "a\udfff"]),
    "FP16": st.floats(width=16),
    "FP32": st.floats(width=32),
    "FP64": st.floats(),
    **{f"INT{b}": st.integers(-(2 ** (b - 1)), 2 ** (b - 1) - 1) for b in (8, 16, 32, 64)},
    **{f"UINT{b}": st.integers(0, 2**b - 1) for b in (8, 16, 32, 64)},
}
json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=3), inner),
    max_leaves=12,
)


@st.composite
def http_infer_bodies(draw: st.DrawFn, config: ModelConfig) -> tuple[bytes, str | None]:
    """``(body, Inference-Header-Content-Length)`` for POST .../infer."""
    slip = Slips(draw)
    names = [t.name for t in config.inputs if not t.optional or draw(st.booleans())]
    if slip():
        names.append(draw(st.text(max_size=4) | st.sampled_from(names or ["A"])))
    inputs, binary = [], bytearray()
    for name in names:
        cfg = config.input(name)
        datatype: Any = cfg.datatype if cfg is not None else "FP32"
        if slip():
            datatype = draw(st.sampled_from(DATATYPES) | json_values)
        # JSON numbers have no width: a dimension past int64 is the client's mistake.
        shape: Any = draw(shapes(cfg, config, slip(), widest=2**64))
        if slip():
            shape = draw(st.lists(st.integers(-(2**70), 2**70), max_size=3) | json_values)
        item: dict[str, Any] = {"name": name, "datatype": datatype, "shape": shape}
        # What the payload is built for, when the item's own values are not a type or shape.
        typed = datatype if isinstance(datatype, str) else ""
        dims = shape if isinstance(shape, list) else []
        params: dict[str, Any] = {}
        how = draw(st.sampled_from(["data", "binary"]))
        if slip():
            how = draw(st.sampled_from(["shm", "none", "junk"]))
        if how == "data":
            count = _count(dims, 16)
            element = json_values if slip() else _JSON_ELEMENT.get(typed, json_scalars)
            item["data"] = draw(st.lists(element, min_size=count, max_size=count))
        elif how == "binary":
            payload = tensor_payload(draw, typed, dims, slip)
            binary += payload
            lie = draw(st.sampled_from([1, -1])) if slip() else 0
            params["binary_data_size"] = len(payload) + lie
        elif how == "shm":
            params.update({k: v for k, (_, v) in _shm_params(draw, typed, dims, slip).items()})
        elif how == "junk":
            item[draw(st.sampled_from(["parameters", "shape", "name", "data"]))] = draw(json_values)
        if slip():
            params.update({k: v for k, (_, v) in draw(param_dicts).items()})
        if params and "parameters" not in item:
            item["parameters"] = params
        inputs.append(item)
    doc: dict[str, Any] = {"inputs": inputs}
    outputs = [t.name for t in config.outputs if draw(st.booleans())]
    if outputs:
        doc["outputs"] = [
            {"name": n, "parameters": {"binary_data": draw(st.booleans())}} for n in outputs
        ]
    if slip():
        doc["parameters"] = {k: v for k, (_, v) in draw(param_dicts).items()}
    if slip():
        doc[draw(st.sampled_from(["id", "inputs", "outputs", "parameters"]))] = draw(json_values)
    header = json.dumps(doc).encode()
    if not binary and draw(st.booleans()):
        return header, None
    length = str(len(header))
    if slip():
        length = draw(st.sampled_from(["", "-1", "0", "1e3", str(len(header) + 1), " 7"]))
    return header + bytes(binary), length


def nested_json(depth: int) -> bytes:
    """An infer body whose ``data`` is ``depth`` lists deep (past json's recursion limit)."""
    data = "[" * depth + "1" + "]" * depth
    name = '{"name": "A", "datatype": "FP32", "shape": [1], "data": '
    return ('{"inputs": [' + name + data + "}]}").encode()


deep_bodies = st.sampled_from([10, 900, 5000, 100_000]).map(nested_json)
