"""The generated protobuf code: fresh, importable beside tritonclient, and wire compatible.

Our messages live in package ``pbd.kserve`` (so they can share a process with tritonclient's
``inference.*``) but must encode exactly as Triton's. Each wire case builds the same message
with tritonclient's modules and with ours: the bytes must be equal, and each side must parse
the other's bytes with no field left over as unknown.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import tritonclient.grpc  # noqa: F401  (imported beside ours on purpose)
import tritonclient.grpc.model_config_pb2 as triton_config
import tritonclient.grpc.service_pb2 as triton_service
from google.protobuf import descriptor, descriptor_pool

from pbd._proto import grpc_service_pb2 as our_service
from pbd._proto import health_pb2
from pbd._proto import model_config_pb2 as our_config

ROOT = Path(__file__).resolve().parents[2]
GENERATED_DIRS = (ROOT / "service/pbd/_proto", ROOT / "workers/pbd_wire")


# --- (a) the checked-in code is what the script generates -------------------------------


def _checked_in() -> dict[str, bytes]:
    return {
        str(path.relative_to(ROOT)): path.read_bytes()
        for directory in GENERATED_DIRS
        for path in sorted(directory.glob("*_pb2.py*"))
    }


def test_generated_code_is_fresh(tmp_path: Path) -> None:
    if importlib.util.find_spec("grpc_tools") is None:
        pytest.skip("grpc_tools (grpcio-tools, test extra) is not installed: cannot regenerate")
    if shutil.which("bash") is None:
        pytest.skip("bash is needed to run scripts/gen_protos.sh")
    subprocess.run(
        ["bash", str(ROOT / "scripts/gen_protos.sh"), str(tmp_path)],
        check=True,
        cwd=tmp_path,  # the script must not depend on the caller's directory
        env={**os.environ, "PYTHON": sys.executable},
    )
    generated = {
        str(path.relative_to(tmp_path)): path.read_bytes()
        for path in sorted(tmp_path.rglob("*_pb2.py*"))
    }
    checked_in = _checked_in()
    assert sorted(generated) == sorted(checked_in)
    stale = [name for name in checked_in if generated[name] != checked_in[name]]
    assert not stale, f"run scripts/gen_protos.sh: stale generated files {stale}"


def test_generated_imports_follow_the_package_layout() -> None:
    source = (ROOT / "service/pbd/_proto/grpc_service_pb2.py").read_text()
    assert "from pbd._proto import model_config_pb2" in source


# --- (b) one process, two sets of descriptors -------------------------------------------


def test_imports_beside_tritonclient() -> None:
    pool = descriptor_pool.Default()
    for name in ("ModelInferRequest", "ModelConfigResponse", "RepositoryIndexResponse"):
        assert pool.FindMessageTypeByName(f"inference.{name}") is not None
        assert pool.FindMessageTypeByName(f"pbd.kserve.{name}") is not None
    assert (
        pool.FindMessageTypeByName("inference.ModelConfig") is triton_config.ModelConfig.DESCRIPTOR
    )
    assert pool.FindMessageTypeByName("pbd.kserve.ModelConfig") is our_config.ModelConfig.DESCRIPTOR
    assert health_pb2.HealthCheckResponse.DESCRIPTOR.full_name == "pbd.health.HealthCheckResponse"


# --- (c) wire compatibility ---------------------------------------------------------------


def _local_name(desc: descriptor.Descriptor | descriptor.EnumDescriptor) -> str:
    return desc.full_name.removeprefix(desc.file.package + ".")


def _enum_shape(enum: descriptor.EnumDescriptor) -> tuple[Any, ...]:
    return (enum.name, tuple((v.name, v.number) for v in enum.values))


def _message_shape(message: descriptor.Descriptor) -> tuple[Any, ...]:
    """Everything about a message that reaches the wire or JSON, packages left out."""
    fields = sorted(
        (
            f.number,
            f.name,
            f.json_name,
            f.type,
            f.is_repeated,
            f.containing_oneof.name if f.containing_oneof else None,
            _local_name(f.message_type) if f.message_type else None,
            _local_name(f.enum_type) if f.enum_type else None,
        )
        for f in message.fields
    )
    return (
        message.name,
        message.GetOptions().map_entry,
        tuple(fields),
        tuple(sorted(_message_shape(m) for m in message.nested_types)),
        tuple(sorted(_enum_shape(e) for e in message.enum_types)),
    )


def _file_shape(file: descriptor.FileDescriptor) -> dict[str, Any]:
    shape: dict[str, Any] = {m.name: _message_shape(m) for m in file.message_types_by_name.values()}
    shape.update({e.name: _enum_shape(e) for e in file.enum_types_by_name.values()})
    return shape


@pytest.mark.parametrize(
    ("theirs", "ours"),
    [(triton_config, our_config), (triton_service, our_service)],
    ids=["model_config", "grpc_service"],
)
def test_every_message_matches_tritonclient(theirs: ModuleType, ours: ModuleType) -> None:
    expected, actual = _file_shape(theirs.DESCRIPTOR), _file_shape(ours.DESCRIPTOR)
    assert sorted(actual) == sorted(expected)
    for name in expected:
        assert actual[name] == expected[name], name


def test_service_methods_match_tritonclient() -> None:
    def methods(service: descriptor.ServiceDescriptor) -> list[tuple[Any, ...]]:
        return [
            (m.name, m.input_type.name, m.output_type.name, m.client_streaming, m.server_streaming)
            for m in service.methods
        ]

    theirs = triton_service.DESCRIPTOR.services_by_name["GRPCInferenceService"]
    ours = our_service.DESCRIPTOR.services_by_name["GRPCInferenceService"]
    assert len(methods(ours)) == 20
    assert methods(ours) == methods(theirs)
