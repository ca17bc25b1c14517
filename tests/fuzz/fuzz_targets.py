"""Coverage-guided fuzz targets (atheris/libFuzzer) over the same oracles as the hypothesis tests.

    python tests/fuzz/fuzz_targets.py TARGET [CORPUS_DIR ...] [libFuzzer flags, e.g. -runs=N]

Targets: grpc_request, http_request, config_pbtxt, config_json, framing, h2_frames. An input
that breaks
the oracle (an exception other than PbdError, a failed assertion) is a crash: libFuzzer
writes it to ``crash-*`` and exits non-zero; one that runs past ``-timeout`` is a hang.
``--seed DIR`` (instead of fuzzing) writes a small corpus of well-formed inputs to start from.
libFuzzer ends the process without Python's cleanup: the sandbox lives under ``$TMPDIR``,
which the caller (tests, scripts/fuzz.sh) removes.
"""

from __future__ import annotations

import sys
from pathlib import Path

import atheris

with atheris.instrument_imports(include=["pbd", "pbd_worker"]):
    import fuzz_oracles as oracles

    from pbd._proto import grpc_service_pb2 as pb

MODELS = oracles.MODELS
_box: oracles.Sandbox | None = None


def _sandbox() -> oracles.Sandbox:
    global _box
    if _box is None:
        _box = oracles.Sandbox()
    return _box


def _config_and_rest(data: bytes) -> tuple[oracles.ModelConfig, bytes]:
    """The first byte picks the model config; the rest is the input."""
    if not data:
        return oracles.CONFIGS[0], b""
    return oracles.CONFIGS[data[0] % len(oracles.CONFIGS)], data[1:]


def grpc_request(data: bytes) -> None:
    config, rest = _config_and_rest(data)
    oracles.check_grpc_request(rest, config, _sandbox())


def http_request(data: bytes) -> None:
    # After the config byte: a header-length flag byte, then the body.
    config, rest = _config_and_rest(data)
    length = None if not rest or rest[0] & 1 else str(rest[0] >> 1)
    oracles.check_http_request(rest[1:], length, config, _sandbox())


def config_pbtxt(data: bytes) -> None:
    oracles.check_config_pbtxt(data.decode("utf-8", "replace"))


def config_json(data: bytes) -> None:
    oracles.check_config_json(data.decode("utf-8", "replace"))


def framing(data: bytes) -> None:
    oracles.check_framing(data)


def h2_frames(data: bytes) -> None:
    oracles.check_h2_frames(data)


TARGETS = {
    f.__name__: f
    for f in (grpc_request, http_request, config_pbtxt, config_json, framing, h2_frames)
}


def _seeds(target: str) -> list[bytes]:
    if target == "grpc_request":
        out = []
        for index, config in enumerate(oracles.CONFIGS):
            msg = pb.ModelInferRequest(model_name=config.name, id="1")
            for tensor in config.inputs:
                msg.inputs.add(
                    name=tensor.name,
                    datatype=tensor.datatype,
                    shape=[1] * (len(tensor.dims) + (config.max_batch_size > 0)),
                )
                msg.raw_input_contents.append(
                    b"\x01\x00\x00\x00a" if tensor.datatype == "BYTES" else bytes(8)
                )
            out.append(bytes([index]) + msg.SerializeToString())
        return out
    if target == "http_request":
        body = b'{"inputs": [{"name": "A", "datatype": "FP32", "shape": [1], "data": [1.5]}]}'
        return [bytes([1, 1]) + body]
    if target == "config_pbtxt":
        return [
            (MODELS / name / "config.pbtxt").read_bytes()
            for name in ("identity_all", "optional_add")
        ]
    if target == "config_json":
        return [oracles.CONFIGS[1].to_json().encode()]
    if target == "h2_frames":
        from pbd.h2 import frames as f

        block = b"".join(f.literal(n, v) for n, v in [(b":method", b"POST"), (b":path", b"/x")])
        return [
            f.frame(f.HEADERS, f.END_HEADERS, 1, block) + f.frame(f.DATA, f.END_STREAM, 1, b"ab"),
            f.frame(f.PING, 0, 0, bytes(8)) + f.window_update(0, 10) + f.rst_stream(1, 8),
        ]
    return [b"\x03\x00\x00\x00abc\x00\x00\x00\x00"]


def seed(target: str, directory: Path) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    for index, data in enumerate(_seeds(target)):
        (directory / f"seed-{index}").write_bytes(data)


def main() -> None:
    if len(sys.argv) < 2 or sys.argv[1] not in TARGETS:
        sys.exit(f"usage: {sys.argv[0]} {{{','.join(TARGETS)}}} [--seed DIR | libFuzzer args]")
    if sys.argv[2:3] == ["--seed"]:
        seed(sys.argv[1], Path(sys.argv[3]))
        return
    atheris.Setup([sys.argv[0], *sys.argv[2:]], TARGETS[sys.argv[1]])
    atheris.Fuzz()


if __name__ == "__main__":
    main()
