"""Wire compatibility: the same messages built with tritonclient's modules and with ours encode
alike and parse both ways."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import tritonclient.grpc  # noqa: F401  (imported beside ours on purpose)
import tritonclient.grpc.model_config_pb2 as triton_config
import tritonclient.grpc.service_pb2 as triton_service
from google.protobuf import json_format, text_format
from google.protobuf.message import Message

from pbd._proto import grpc_service_pb2 as our_service
from pbd._proto import model_config_pb2 as our_config

# Each case builds one message from a (service module, model-config module) pair, so the
# same code makes tritonclient's message and ours.
Build = Callable[[Any, Any], Message]


def _infer_request(svc: Any, _: Any) -> Message:
    p = svc.InferParameter
    contents = svc.InferTensorContents(
        bool_contents=[True, False],
        int_contents=[-1, 2],
        int64_contents=[-(2**40)],
        uint_contents=[2**32 - 1],
        uint64_contents=[2**64 - 1],
        fp32_contents=[1.5],
        fp64_contents=[-2.25],
        bytes_contents=[b"", b"\x00\xff"],
    )
    return svc.ModelInferRequest(
        model_name="add_sub",
        model_version="3",
        id="req-1",
        parameters={
            "sequence_id": p(int64_param=-7),
            "sequence_start": p(bool_param=True),
            "priority": p(uint64_param=2**63),
            "custom": p(string_param="x"),
            "temperature": p(double_param=0.25),
        },
        inputs=[
            svc.ModelInferRequest.InferInputTensor(
                name="INPUT0",
                datatype="FP32",
                shape=[1, 4],
                parameters={"shared_memory_region": p(string_param="in0")},
            ),
            svc.ModelInferRequest.InferInputTensor(
                name="TYPED", datatype="INT32", shape=[2], contents=contents
            ),
        ],
        outputs=[
            svc.ModelInferRequest.InferRequestedOutputTensor(
                name="OUTPUT0", parameters={"binary_data": p(bool_param=True)}
            )
        ],
        raw_input_contents=[bytes(range(16)), b""],
    )


def _infer_response(svc: Any, _: Any) -> Message:
    return svc.ModelInferResponse(
        model_name="add_sub",
        model_version="1",
        id="req-1",
        parameters={"triton_final_response": svc.InferParameter(bool_param=True)},
        outputs=[
            svc.ModelInferResponse.InferOutputTensor(
                name="OUT",
                datatype="BYTES",
                shape=[2],
                contents=svc.InferTensorContents(bytes_contents=[b"a", b"bc"]),
            ),
            svc.ModelInferResponse.InferOutputTensor(name="RAW", datatype="FP16", shape=[3]),
        ],
        raw_output_contents=[b"\x01\x02" * 3],
    )


def _stream_response(svc: Any, cfg: Any) -> Message:
    return svc.ModelStreamInferResponse(
        error_message="boom", infer_response=_infer_response(svc, cfg)
    )


FULL_CONFIG = """
name: "everything"
platform: "p"
backend: "python"
runtime: "model.py"
version_policy: { specific: { versions: [ 1, 3 ] } }
max_batch_size: 8
input [
  { name: "IN" data_type: TYPE_STRING format: FORMAT_NCHW dims: [ 3, -1, 4 ]
    reshape: { shape: [ 3, -1, 2, 2 ] } is_shape_tensor: true allow_ragged_batch: true
    optional: true is_non_linear_format_io: true }
]
output [
  { name: "OUT" data_type: TYPE_BF16 dims: [ 2 ] reshape: { shape: [ 1, 2 ] }
    label_filename: "labels.txt" is_shape_tensor: true is_non_linear_format_io: true }
]
batch_input [ { kind: BATCH_ITEM_SHAPE target_name: [ "T" ] data_type: TYPE_INT32
                source_input: [ "IN" ] } ]
batch_output [ { target_name: [ "OUT" ] kind: BATCH_SCATTER_WITH_INPUT_SHAPE
                 source_input: [ "IN" ] } ]
optimization {
  graph { level: 1 }
  priority: PRIORITY_MAX
  cuda {
    graphs: true busy_wait_events: true output_copy_stream: true
    graph_spec [ { batch_size: 4 input { key: "IN" value { dim: [ 3, 5, 4 ] } }
                   graph_lower_bound { batch_size: 1
                                       input { key: "IN" value { dim: [ 3, 1, 4 ] } } } } ]
  }
  execution_accelerators {
    gpu_execution_accelerator [ { name: "tensorrt" parameters { key: "precision_mode"
                                                                 value: "FP16" } } ]
    cpu_execution_accelerator [ { name: "openvino" } ]
  }
  input_pinned_memory { enable: false }
  output_pinned_memory { enable: true }
  gather_kernel_buffer_threshold: 7
  eager_batching: true
}
sequence_batching {
  max_sequence_idle_microseconds: 5000000
  control_input [ { name: "START" control [ { kind: CONTROL_SEQUENCE_START
                                              int32_false_true: [ 0, 1 ] } ] },
                  { name: "CORRID" control [ { kind: CONTROL_SEQUENCE_CORRID
                                               data_type: TYPE_UINT64 } ] },
                  { name: "READY" control [ { kind: CONTROL_SEQUENCE_READY
                                              fp32_false_true: [ 0, 1 ] } ] },
                  { name: "END" control [ { kind: CONTROL_SEQUENCE_END
                                            bool_false_true: [ false, true ] } ] } ]
  oldest { max_candidate_sequences: 4 preferred_batch_size: [ 2, 4 ]
           max_queue_delay_microseconds: 100 preserve_ordering: true }
  state [ { input_name: "S_IN" output_name: "S_OUT" data_type: TYPE_FP32 dims: [ -1 ]
            initial_state [ { data_type: TYPE_FP32 dims: [ 1 ] zero_data: true name: "z" },
                            { data_type: TYPE_FP32 dims: [ 1 ] data_file: "f" name: "d" } ]
            use_same_buffer_for_input_output: true use_growable_memory: true } ]
  iterative_sequence: true
}
instance_group [
  { name: "g" kind: KIND_GPU count: 2 gpus: [ 0, 1 ] profile: [ "0" ] passive: true
    host_policy: "gpu_0"
    rate_limiter { resources [ { name: "R" global: true count: 3 } ] priority: 2 }
    secondary_devices [ { kind: KIND_NVDLA device_id: 1 } ] }
]
default_model_filename: "model.py"
cc_model_filenames { key: "7.5" value: "m75.py" }
metric_tags { key: "team" value: "a" }
parameters { key: "K" value: { string_value: "V" } }
model_warmup [
  { name: "w" batch_size: 2 count: 3
    inputs { key: "IN" value: { data_type: TYPE_FP32 dims: [ 4 ] random_data: true } }
    inputs { key: "IN2" value: { data_type: TYPE_FP32 dims: [ 4 ] input_data_file: "x" } } }
]
model_operations { op_library_filename: [ "libop.so" ] }
model_transaction_policy { decoupled: true }
model_repository_agents { agents [ { name: "checksum" parameters { key: "MD5:x" value: "y" } } ] }
response_cache { enable: true }
model_metrics { metric_control [ { metric_identifier { family: "nv_inference_first_response" }
                                   histogram_options { buckets: [ 1, 10.5 ] } } ] }
"""

DYNAMIC_BATCHING_CONFIG = """
name: "batched"
backend: "python"
max_batch_size: 4
dynamic_batching {
  preferred_batch_size: [ 4 ] max_queue_delay_microseconds: 100 preserve_ordering: true
  priority_levels: 2 default_priority_level: 1
  default_queue_policy { timeout_action: DELAY default_timeout_microseconds: 9
                         allow_timeout_override: true max_queue_size: 5 }
  priority_queue_policy { key: 2 value { max_queue_size: 1 } }
}
"""

ENSEMBLE_CONFIG = """
name: "ens"
platform: "ensemble"
ensemble_scheduling {
  step [ { model_name: "a" model_version: -1 input_map { key: "x" value: "IN" }
           output_map { key: "y" value: "OUT" } model_namespace: "ns" } ]
  max_inflight_requests: 3
}
"""


def _config_case(text: str) -> Build:
    def build(_: Any, cfg: Any) -> Message:
        return text_format.Parse(text, cfg.ModelConfig())

    return build


def _config_response(svc: Any, cfg: Any) -> Message:
    return svc.ModelConfigResponse(config=_config_case(FULL_CONFIG)(svc, cfg))


def _repository_index(svc: Any, _: Any) -> Message:
    index = svc.RepositoryIndexResponse.ModelIndex
    return svc.RepositoryIndexResponse(
        models=[
            index(name="add_sub", version="1", state="READY"),
            index(name="broken", version="2", state="UNAVAILABLE", reason="no model.py"),
        ]
    )


def _load_request(svc: Any, _: Any) -> Message:
    p = svc.ModelRepositoryParameter
    return svc.RepositoryModelLoadRequest(
        repository_name="",
        model_name="m",
        parameters={
            "config": p(string_param="{}"),
            "file:1/model.py": p(bytes_param=b"print()"),
            "flag": p(bool_param=True),
            "n": p(int64_param=-3),
        },
    )


def _statistics(svc: Any, _: Any) -> Message:
    d = svc.StatisticDuration
    return svc.ModelStatisticsResponse(
        model_stats=[
            svc.ModelStatistics(
                name="m",
                version="1",
                last_inference=2**50,
                inference_count=3,
                execution_count=2,
                inference_stats=svc.InferStatistics(
                    success=d(count=3, ns=30),
                    fail=d(count=1, ns=1),
                    queue=d(ns=2),
                    compute_input=d(ns=3),
                    compute_infer=d(ns=4),
                    compute_output=d(ns=5),
                    cache_hit=d(ns=6),
                    cache_miss=d(ns=7),
                ),
                batch_stats=[svc.InferBatchStatistics(batch_size=2, compute_infer=d(count=1))],
                memory_usage=[svc.MemoryUsage(type="CPU", id=0, byte_size=64)],
                response_stats={
                    "0": svc.InferResponseStatistics(
                        compute_infer=d(ns=1),
                        compute_output=d(ns=2),
                        success=d(ns=3),
                        fail=d(ns=4),
                        empty_response=d(ns=5),
                        cancel=d(ns=6),
                    )
                },
            )
        ]
    )


def _metadata(svc: Any, _: Any) -> Message:
    t = svc.ModelMetadataResponse.TensorMetadata
    return svc.ModelMetadataResponse(
        name="m",
        versions=["1", "2"],
        platform="python",
        inputs=[t(name="IN", datatype="FP32", shape=[-1, 4])],
        outputs=[t(name="OUT", datatype="BYTES", shape=[-1])],
    )


def _system_shm(svc: Any, _: Any) -> Message:
    return svc.SystemSharedMemoryRegisterRequest(
        name="r", key="/pbd_shm", offset=4096, byte_size=2**33
    )


def _system_shm_status(svc: Any, _: Any) -> Message:
    region = svc.SystemSharedMemoryStatusResponse.RegionStatus
    return svc.SystemSharedMemoryStatusResponse(
        regions={"r": region(name="r", key="/k", offset=1, byte_size=2)}
    )


def _cuda_shm(svc: Any, _: Any) -> Message:
    return svc.CudaSharedMemoryRegisterRequest(
        name="c", raw_handle=bytes(64), device_id=1, byte_size=1024
    )


def _cuda_shm_status(svc: Any, _: Any) -> Message:
    region = svc.CudaSharedMemoryStatusResponse.RegionStatus
    return svc.CudaSharedMemoryStatusResponse(
        regions={"c": region(name="c", device_id=1, byte_size=2)}
    )


def _trace_setting(svc: Any, _: Any) -> Message:
    value = svc.TraceSettingRequest.SettingValue
    return svc.TraceSettingRequest(
        settings={"trace_rate": value(value=["1000"]), "trace_level": value(value=["TIMESTAMPS"])},
        model_name="m",
    )


def _log_settings(svc: Any, _: Any) -> Message:
    value = svc.LogSettingsRequest.SettingValue
    return svc.LogSettingsRequest(
        settings={
            "log_info": value(bool_param=True),
            "log_verbose_level": value(uint32_param=2),
            "log_format": value(string_param="ISO8601"),
        }
    )


def _server_metadata(svc: Any, _: Any) -> Message:
    return svc.ServerMetadataResponse(
        name="pbd", version="0.1.0", extensions=["model_repository", "system_shared_memory"]
    )


CASES: dict[str, Build] = {
    "ModelInferRequest": _infer_request,
    "ModelInferResponse": _infer_response,
    "ModelStreamInferResponse": _stream_response,
    "ModelConfig": _config_case(FULL_CONFIG),
    "ModelConfig/dynamic_batching": _config_case(DYNAMIC_BATCHING_CONFIG),
    "ModelConfig/ensemble": _config_case(ENSEMBLE_CONFIG),
    "ModelConfigResponse": _config_response,
    "ModelMetadataResponse": _metadata,
    "ModelStatisticsResponse": _statistics,
    "RepositoryIndexResponse": _repository_index,
    "RepositoryModelLoadRequest": _load_request,
    "SystemSharedMemoryRegisterRequest": _system_shm,
    "SystemSharedMemoryStatusResponse": _system_shm_status,
    "CudaSharedMemoryRegisterRequest": _cuda_shm,
    "CudaSharedMemoryStatusResponse": _cuda_shm_status,
    "TraceSettingRequest": _trace_setting,
    "LogSettingsRequest": _log_settings,
    "ServerMetadataResponse": _server_metadata,
    "ModelReadyRequest": lambda svc, _: svc.ModelReadyRequest(name="m", version="2"),
    "ServerLiveResponse": lambda svc, _: svc.ServerLiveResponse(live=True),
}


def _fields(message: Message) -> dict[str, Any]:
    """What a parser understood: unknown fields never reach the dict."""
    return json_format.MessageToDict(message, preserving_proto_field_name=True)


def _wire(message: Message) -> bytes:
    return message.SerializeToString(deterministic=True)


@pytest.mark.parametrize("build", CASES.values(), ids=CASES.keys())
def test_tritonclient_and_pbd_encode_alike(build: Build) -> None:
    theirs = build(triton_service, triton_config)
    ours = build(our_service, our_config)
    assert _fields(theirs), "the case sets no field"
    assert _wire(ours) == _wire(theirs)


@pytest.mark.parametrize("build", CASES.values(), ids=CASES.keys())
def test_tritonclient_bytes_parse_as_pbd(build: Build) -> None:
    theirs = build(triton_service, triton_config)
    parsed = type(build(our_service, our_config)).FromString(_wire(theirs))
    assert _fields(parsed) == _fields(theirs)
    assert _wire(parsed) == _wire(theirs)


@pytest.mark.parametrize("build", CASES.values(), ids=CASES.keys())
def test_pbd_bytes_parse_as_tritonclient(build: Build) -> None:
    ours = build(our_service, our_config)
    parsed = type(build(triton_service, triton_config)).FromString(_wire(ours))
    assert _fields(parsed) == _fields(ours)
    assert _wire(parsed) == _wire(ours)


@pytest.mark.parametrize(
    "text",
    [FULL_CONFIG, DYNAMIC_BATCHING_CONFIG, ENSEMBLE_CONFIG],
    ids=["full", "dynamic_batching", "ensemble"],
)
def test_config_text_and_json_read_alike(text: str) -> None:
    """A config.pbtxt written for Triton, and its JSON form, read the same with our
    ModelConfig."""
    theirs = text_format.Parse(text, triton_config.ModelConfig())
    ours = text_format.Parse(text, our_config.ModelConfig())
    assert text_format.MessageToString(ours) == text_format.MessageToString(theirs)
    from_json = json_format.Parse(json_format.MessageToJson(theirs), our_config.ModelConfig())
    assert from_json == ours
