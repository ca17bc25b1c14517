from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class TensorRef(_message.Message):
    __slots__ = ("name", "datatype", "shape", "region", "offset", "nbytes", "cuda")
    NAME_FIELD_NUMBER: _ClassVar[int]
    DATATYPE_FIELD_NUMBER: _ClassVar[int]
    SHAPE_FIELD_NUMBER: _ClassVar[int]
    REGION_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    NBYTES_FIELD_NUMBER: _ClassVar[int]
    CUDA_FIELD_NUMBER: _ClassVar[int]
    name: str
    datatype: str
    shape: _containers.RepeatedScalarFieldContainer[int]
    region: str
    offset: int
    nbytes: int
    cuda: CudaRef
    def __init__(self, name: _Optional[str] = ..., datatype: _Optional[str] = ..., shape: _Optional[_Iterable[int]] = ..., region: _Optional[str] = ..., offset: _Optional[int] = ..., nbytes: _Optional[int] = ..., cuda: _Optional[_Union[CudaRef, _Mapping]] = ...) -> None: ...

class CudaRef(_message.Message):
    __slots__ = ("device_id", "ipc_handle", "generation")
    DEVICE_ID_FIELD_NUMBER: _ClassVar[int]
    IPC_HANDLE_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    device_id: int
    ipc_handle: bytes
    generation: int
    def __init__(self, device_id: _Optional[int] = ..., ipc_handle: _Optional[bytes] = ..., generation: _Optional[int] = ...) -> None: ...

class CudaRegionsClosed(_message.Message):
    __slots__ = ("generations",)
    GENERATIONS_FIELD_NUMBER: _ClassVar[int]
    generations: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, generations: _Optional[_Iterable[int]] = ...) -> None: ...

class PoolAlloc(_message.Message):
    __slots__ = ("query", "device_ids", "nbytes")
    QUERY_FIELD_NUMBER: _ClassVar[int]
    DEVICE_IDS_FIELD_NUMBER: _ClassVar[int]
    NBYTES_FIELD_NUMBER: _ClassVar[int]
    query: int
    device_ids: _containers.RepeatedScalarFieldContainer[int]
    nbytes: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, query: _Optional[int] = ..., device_ids: _Optional[_Iterable[int]] = ..., nbytes: _Optional[_Iterable[int]] = ...) -> None: ...

class PoolGrant(_message.Message):
    __slots__ = ("query", "pools", "offsets", "error")
    QUERY_FIELD_NUMBER: _ClassVar[int]
    POOLS_FIELD_NUMBER: _ClassVar[int]
    OFFSETS_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    query: int
    pools: _containers.RepeatedCompositeFieldContainer[CudaRef]
    offsets: _containers.RepeatedScalarFieldContainer[int]
    error: Error
    def __init__(self, query: _Optional[int] = ..., pools: _Optional[_Iterable[_Union[CudaRef, _Mapping]]] = ..., offsets: _Optional[_Iterable[int]] = ..., error: _Optional[_Union[Error, _Mapping]] = ...) -> None: ...

class Error(_message.Message):
    __slots__ = ("code", "message", "traceback")
    CODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    TRACEBACK_FIELD_NUMBER: _ClassVar[int]
    code: str
    message: str
    traceback: str
    def __init__(self, code: _Optional[str] = ..., message: _Optional[str] = ..., traceback: _Optional[str] = ...) -> None: ...

class Request(_message.Message):
    __slots__ = ("request_id", "id", "inputs", "requested_outputs", "parameters_json", "correlation_id", "correlation_id_str", "flags", "timeout_us", "traceparent", "output_targets", "bls_call", "priority")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    INPUTS_FIELD_NUMBER: _ClassVar[int]
    REQUESTED_OUTPUTS_FIELD_NUMBER: _ClassVar[int]
    PARAMETERS_JSON_FIELD_NUMBER: _ClassVar[int]
    CORRELATION_ID_FIELD_NUMBER: _ClassVar[int]
    CORRELATION_ID_STR_FIELD_NUMBER: _ClassVar[int]
    FLAGS_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_US_FIELD_NUMBER: _ClassVar[int]
    TRACEPARENT_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_TARGETS_FIELD_NUMBER: _ClassVar[int]
    BLS_CALL_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    request_id: int
    id: str
    inputs: _containers.RepeatedCompositeFieldContainer[TensorRef]
    requested_outputs: _containers.RepeatedScalarFieldContainer[str]
    parameters_json: str
    correlation_id: int
    correlation_id_str: str
    flags: int
    timeout_us: int
    traceparent: str
    output_targets: _containers.RepeatedCompositeFieldContainer[OutputTarget]
    bls_call: int
    priority: int
    def __init__(self, request_id: _Optional[int] = ..., id: _Optional[str] = ..., inputs: _Optional[_Iterable[_Union[TensorRef, _Mapping]]] = ..., requested_outputs: _Optional[_Iterable[str]] = ..., parameters_json: _Optional[str] = ..., correlation_id: _Optional[int] = ..., correlation_id_str: _Optional[str] = ..., flags: _Optional[int] = ..., timeout_us: _Optional[int] = ..., traceparent: _Optional[str] = ..., output_targets: _Optional[_Iterable[_Union[OutputTarget, _Mapping]]] = ..., bls_call: _Optional[int] = ..., priority: _Optional[int] = ...) -> None: ...

class OutputTarget(_message.Message):
    __slots__ = ("name", "region", "offset", "byte_size", "cuda")
    NAME_FIELD_NUMBER: _ClassVar[int]
    REGION_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    BYTE_SIZE_FIELD_NUMBER: _ClassVar[int]
    CUDA_FIELD_NUMBER: _ClassVar[int]
    name: str
    region: str
    offset: int
    byte_size: int
    cuda: CudaRef
    def __init__(self, name: _Optional[str] = ..., region: _Optional[str] = ..., offset: _Optional[int] = ..., byte_size: _Optional[int] = ..., cuda: _Optional[_Union[CudaRef, _Mapping]] = ...) -> None: ...

class Execute(_message.Message):
    __slots__ = ("batch_id", "requests", "release")
    BATCH_ID_FIELD_NUMBER: _ClassVar[int]
    REQUESTS_FIELD_NUMBER: _ClassVar[int]
    RELEASE_FIELD_NUMBER: _ClassVar[int]
    batch_id: int
    requests: _containers.RepeatedCompositeFieldContainer[Request]
    release: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, batch_id: _Optional[int] = ..., requests: _Optional[_Iterable[_Union[Request, _Mapping]]] = ..., release: _Optional[_Iterable[int]] = ...) -> None: ...

class Response(_message.Message):
    __slots__ = ("request_id", "outputs", "error", "parameters_json", "streamed", "rescheduled", "rejected")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    OUTPUTS_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    PARAMETERS_JSON_FIELD_NUMBER: _ClassVar[int]
    STREAMED_FIELD_NUMBER: _ClassVar[int]
    RESCHEDULED_FIELD_NUMBER: _ClassVar[int]
    REJECTED_FIELD_NUMBER: _ClassVar[int]
    request_id: int
    outputs: _containers.RepeatedCompositeFieldContainer[TensorRef]
    error: Error
    parameters_json: str
    streamed: bool
    rescheduled: bool
    rejected: bool
    def __init__(self, request_id: _Optional[int] = ..., outputs: _Optional[_Iterable[_Union[TensorRef, _Mapping]]] = ..., error: _Optional[_Union[Error, _Mapping]] = ..., parameters_json: _Optional[str] = ..., streamed: _Optional[bool] = ..., rescheduled: _Optional[bool] = ..., rejected: _Optional[bool] = ...) -> None: ...

class StreamedResponse(_message.Message):
    __slots__ = ("request_id", "response", "flags", "held")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    RESPONSE_FIELD_NUMBER: _ClassVar[int]
    FLAGS_FIELD_NUMBER: _ClassVar[int]
    HELD_FIELD_NUMBER: _ClassVar[int]
    request_id: int
    response: Response
    flags: int
    held: int
    def __init__(self, request_id: _Optional[int] = ..., response: _Optional[_Union[Response, _Mapping]] = ..., flags: _Optional[int] = ..., held: _Optional[int] = ...) -> None: ...

class CancelRequests(_message.Message):
    __slots__ = ("request_ids",)
    REQUEST_IDS_FIELD_NUMBER: _ClassVar[int]
    request_ids: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, request_ids: _Optional[_Iterable[int]] = ...) -> None: ...

class ExecuteResult(_message.Message):
    __slots__ = ("batch_id", "responses", "input_ns", "infer_ns", "output_ns", "execute_span", "merged", "batch_rows")
    BATCH_ID_FIELD_NUMBER: _ClassVar[int]
    RESPONSES_FIELD_NUMBER: _ClassVar[int]
    INPUT_NS_FIELD_NUMBER: _ClassVar[int]
    INFER_NS_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_NS_FIELD_NUMBER: _ClassVar[int]
    EXECUTE_SPAN_FIELD_NUMBER: _ClassVar[int]
    MERGED_FIELD_NUMBER: _ClassVar[int]
    BATCH_ROWS_FIELD_NUMBER: _ClassVar[int]
    batch_id: int
    responses: _containers.RepeatedCompositeFieldContainer[Response]
    input_ns: int
    infer_ns: int
    output_ns: int
    execute_span: ExecuteSpan
    merged: bool
    batch_rows: int
    def __init__(self, batch_id: _Optional[int] = ..., responses: _Optional[_Iterable[_Union[Response, _Mapping]]] = ..., input_ns: _Optional[int] = ..., infer_ns: _Optional[int] = ..., output_ns: _Optional[int] = ..., execute_span: _Optional[_Union[ExecuteSpan, _Mapping]] = ..., merged: _Optional[bool] = ..., batch_rows: _Optional[int] = ...) -> None: ...

class ExecuteSpan(_message.Message):
    __slots__ = ("span_id", "start_ns", "end_ns", "exception_type", "exception_message", "exception_stacktrace", "exception_ns")
    SPAN_ID_FIELD_NUMBER: _ClassVar[int]
    START_NS_FIELD_NUMBER: _ClassVar[int]
    END_NS_FIELD_NUMBER: _ClassVar[int]
    EXCEPTION_TYPE_FIELD_NUMBER: _ClassVar[int]
    EXCEPTION_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    EXCEPTION_STACKTRACE_FIELD_NUMBER: _ClassVar[int]
    EXCEPTION_NS_FIELD_NUMBER: _ClassVar[int]
    span_id: int
    start_ns: int
    end_ns: int
    exception_type: str
    exception_message: str
    exception_stacktrace: str
    exception_ns: int
    def __init__(self, span_id: _Optional[int] = ..., start_ns: _Optional[int] = ..., end_ns: _Optional[int] = ..., exception_type: _Optional[str] = ..., exception_message: _Optional[str] = ..., exception_stacktrace: _Optional[str] = ..., exception_ns: _Optional[int] = ...) -> None: ...

class Release(_message.Message):
    __slots__ = ("batch_ids",)
    BATCH_IDS_FIELD_NUMBER: _ClassVar[int]
    batch_ids: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, batch_ids: _Optional[_Iterable[int]] = ...) -> None: ...

class Hello(_message.Message):
    __slots__ = ("instance", "token", "pid", "protocol", "initialized")
    INSTANCE_FIELD_NUMBER: _ClassVar[int]
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    PID_FIELD_NUMBER: _ClassVar[int]
    PROTOCOL_FIELD_NUMBER: _ClassVar[int]
    INITIALIZED_FIELD_NUMBER: _ClassVar[int]
    instance: str
    token: str
    pid: int
    protocol: int
    initialized: bool
    def __init__(self, instance: _Optional[str] = ..., token: _Optional[str] = ..., pid: _Optional[int] = ..., protocol: _Optional[int] = ..., initialized: _Optional[bool] = ...) -> None: ...

class Initialize(_message.Message):
    __slots__ = ("args", "model_path", "model_dir", "version", "output_region_prefix", "output_region_bytes", "heartbeat_interval_ms", "log_verbose", "shm_dir", "cancel_region", "backend_dir", "front_socket", "front_token", "execute_timeout_ms")
    class ArgsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    ARGS_FIELD_NUMBER: _ClassVar[int]
    MODEL_PATH_FIELD_NUMBER: _ClassVar[int]
    MODEL_DIR_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_REGION_PREFIX_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_REGION_BYTES_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_INTERVAL_MS_FIELD_NUMBER: _ClassVar[int]
    LOG_VERBOSE_FIELD_NUMBER: _ClassVar[int]
    SHM_DIR_FIELD_NUMBER: _ClassVar[int]
    CANCEL_REGION_FIELD_NUMBER: _ClassVar[int]
    BACKEND_DIR_FIELD_NUMBER: _ClassVar[int]
    FRONT_SOCKET_FIELD_NUMBER: _ClassVar[int]
    FRONT_TOKEN_FIELD_NUMBER: _ClassVar[int]
    EXECUTE_TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    args: _containers.ScalarMap[str, str]
    model_path: str
    model_dir: str
    version: str
    output_region_prefix: str
    output_region_bytes: int
    heartbeat_interval_ms: int
    log_verbose: int
    shm_dir: str
    cancel_region: str
    backend_dir: str
    front_socket: str
    front_token: str
    execute_timeout_ms: int
    def __init__(self, args: _Optional[_Mapping[str, str]] = ..., model_path: _Optional[str] = ..., model_dir: _Optional[str] = ..., version: _Optional[str] = ..., output_region_prefix: _Optional[str] = ..., output_region_bytes: _Optional[int] = ..., heartbeat_interval_ms: _Optional[int] = ..., log_verbose: _Optional[int] = ..., shm_dir: _Optional[str] = ..., cancel_region: _Optional[str] = ..., backend_dir: _Optional[str] = ..., front_socket: _Optional[str] = ..., front_token: _Optional[str] = ..., execute_timeout_ms: _Optional[int] = ...) -> None: ...

class FrontHello(_message.Message):
    __slots__ = ("token", "front")
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    FRONT_FIELD_NUMBER: _ClassVar[int]
    token: str
    front: int
    def __init__(self, token: _Optional[str] = ..., front: _Optional[int] = ...) -> None: ...

class Initialized(_message.Message):
    __slots__ = ("error", "adopted", "warmed_up")
    ERROR_FIELD_NUMBER: _ClassVar[int]
    ADOPTED_FIELD_NUMBER: _ClassVar[int]
    WARMED_UP_FIELD_NUMBER: _ClassVar[int]
    error: Error
    adopted: bool
    warmed_up: bool
    def __init__(self, error: _Optional[_Union[Error, _Mapping]] = ..., adopted: _Optional[bool] = ..., warmed_up: _Optional[bool] = ...) -> None: ...

class WarmedUp(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class Finalize(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class Finalized(_message.Message):
    __slots__ = ("error",)
    ERROR_FIELD_NUMBER: _ClassVar[int]
    error: Error
    def __init__(self, error: _Optional[_Union[Error, _Mapping]] = ...) -> None: ...

class Heartbeat(_message.Message):
    __slots__ = ("executed", "overdue_ms")
    EXECUTED_FIELD_NUMBER: _ClassVar[int]
    OVERDUE_MS_FIELD_NUMBER: _ClassVar[int]
    executed: int
    overdue_ms: int
    def __init__(self, executed: _Optional[int] = ..., overdue_ms: _Optional[int] = ...) -> None: ...

class MetricOp(_message.Message):
    __slots__ = ("id", "family_new", "metric_new", "increment", "set", "observe", "remove", "family_remove")
    ID_FIELD_NUMBER: _ClassVar[int]
    FAMILY_NEW_FIELD_NUMBER: _ClassVar[int]
    METRIC_NEW_FIELD_NUMBER: _ClassVar[int]
    INCREMENT_FIELD_NUMBER: _ClassVar[int]
    SET_FIELD_NUMBER: _ClassVar[int]
    OBSERVE_FIELD_NUMBER: _ClassVar[int]
    REMOVE_FIELD_NUMBER: _ClassVar[int]
    FAMILY_REMOVE_FIELD_NUMBER: _ClassVar[int]
    id: int
    family_new: MetricFamilyNew
    metric_new: MetricNew
    increment: float
    set: float
    observe: MetricObservations
    remove: bool
    family_remove: bool
    def __init__(self, id: _Optional[int] = ..., family_new: _Optional[_Union[MetricFamilyNew, _Mapping]] = ..., metric_new: _Optional[_Union[MetricNew, _Mapping]] = ..., increment: _Optional[float] = ..., set: _Optional[float] = ..., observe: _Optional[_Union[MetricObservations, _Mapping]] = ..., remove: _Optional[bool] = ..., family_remove: _Optional[bool] = ...) -> None: ...

class MetricFamilyNew(_message.Message):
    __slots__ = ("name", "description", "kind")
    NAME_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    name: str
    description: str
    kind: str
    def __init__(self, name: _Optional[str] = ..., description: _Optional[str] = ..., kind: _Optional[str] = ...) -> None: ...

class MetricNew(_message.Message):
    __slots__ = ("family", "labels", "buckets")
    class LabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    FAMILY_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    BUCKETS_FIELD_NUMBER: _ClassVar[int]
    family: int
    labels: _containers.ScalarMap[str, str]
    buckets: _containers.RepeatedScalarFieldContainer[float]
    def __init__(self, family: _Optional[int] = ..., labels: _Optional[_Mapping[str, str]] = ..., buckets: _Optional[_Iterable[float]] = ...) -> None: ...

class MetricObservations(_message.Message):
    __slots__ = ("values",)
    VALUES_FIELD_NUMBER: _ClassVar[int]
    values: _containers.RepeatedScalarFieldContainer[float]
    def __init__(self, values: _Optional[_Iterable[float]] = ...) -> None: ...

class MetricUpdates(_message.Message):
    __slots__ = ("ops", "query", "value_of")
    OPS_FIELD_NUMBER: _ClassVar[int]
    QUERY_FIELD_NUMBER: _ClassVar[int]
    VALUE_OF_FIELD_NUMBER: _ClassVar[int]
    ops: _containers.RepeatedCompositeFieldContainer[MetricOp]
    query: int
    value_of: int
    def __init__(self, ops: _Optional[_Iterable[_Union[MetricOp, _Mapping]]] = ..., query: _Optional[int] = ..., value_of: _Optional[int] = ...) -> None: ...

class MetricReply(_message.Message):
    __slots__ = ("query", "value", "error")
    QUERY_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    query: int
    value: float
    error: Error
    def __init__(self, query: _Optional[int] = ..., value: _Optional[float] = ..., error: _Optional[_Union[Error, _Mapping]] = ...) -> None: ...

class RuntimeSettings(_message.Message):
    __slots__ = ("log_info", "log_warning", "log_error", "log_verbose", "log_format")
    LOG_INFO_FIELD_NUMBER: _ClassVar[int]
    LOG_WARNING_FIELD_NUMBER: _ClassVar[int]
    LOG_ERROR_FIELD_NUMBER: _ClassVar[int]
    LOG_VERBOSE_FIELD_NUMBER: _ClassVar[int]
    LOG_FORMAT_FIELD_NUMBER: _ClassVar[int]
    log_info: bool
    log_warning: bool
    log_error: bool
    log_verbose: int
    log_format: str
    def __init__(self, log_info: _Optional[bool] = ..., log_warning: _Optional[bool] = ..., log_error: _Optional[bool] = ..., log_verbose: _Optional[int] = ..., log_format: _Optional[str] = ...) -> None: ...

class SpanBatch(_message.Message):
    __slots__ = ("otlp",)
    OTLP_FIELD_NUMBER: _ClassVar[int]
    otlp: bytes
    def __init__(self, otlp: _Optional[bytes] = ...) -> None: ...

class Exiting(_message.Message):
    __slots__ = ("error",)
    ERROR_FIELD_NUMBER: _ClassVar[int]
    error: Error
    def __init__(self, error: _Optional[_Union[Error, _Mapping]] = ...) -> None: ...

class AutoComplete(_message.Message):
    __slots__ = ("model_path", "model_dir", "version", "config_json", "backend_dir")
    MODEL_PATH_FIELD_NUMBER: _ClassVar[int]
    MODEL_DIR_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    CONFIG_JSON_FIELD_NUMBER: _ClassVar[int]
    BACKEND_DIR_FIELD_NUMBER: _ClassVar[int]
    model_path: str
    model_dir: str
    version: str
    config_json: str
    backend_dir: str
    def __init__(self, model_path: _Optional[str] = ..., model_dir: _Optional[str] = ..., version: _Optional[str] = ..., config_json: _Optional[str] = ..., backend_dir: _Optional[str] = ...) -> None: ...

class AutoCompleted(_message.Message):
    __slots__ = ("config_json", "error")
    CONFIG_JSON_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    config_json: str
    error: Error
    def __init__(self, config_json: _Optional[str] = ..., error: _Optional[_Union[Error, _Mapping]] = ...) -> None: ...

class ReadyQuery(_message.Message):
    __slots__ = ("query",)
    QUERY_FIELD_NUMBER: _ClassVar[int]
    query: int
    def __init__(self, query: _Optional[int] = ...) -> None: ...

class ReadyReply(_message.Message):
    __slots__ = ("query", "ready", "error", "hooked")
    QUERY_FIELD_NUMBER: _ClassVar[int]
    READY_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    HOOKED_FIELD_NUMBER: _ClassVar[int]
    query: int
    ready: bool
    error: Error
    hooked: bool
    def __init__(self, query: _Optional[int] = ..., ready: _Optional[bool] = ..., error: _Optional[_Union[Error, _Mapping]] = ..., hooked: _Optional[bool] = ...) -> None: ...

class BlsCall(_message.Message):
    __slots__ = ("call_id", "model_name", "model_version", "request", "decoupled", "parents")
    CALL_ID_FIELD_NUMBER: _ClassVar[int]
    MODEL_NAME_FIELD_NUMBER: _ClassVar[int]
    MODEL_VERSION_FIELD_NUMBER: _ClassVar[int]
    REQUEST_FIELD_NUMBER: _ClassVar[int]
    DECOUPLED_FIELD_NUMBER: _ClassVar[int]
    PARENTS_FIELD_NUMBER: _ClassVar[int]
    call_id: int
    model_name: str
    model_version: int
    request: Request
    decoupled: bool
    parents: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, call_id: _Optional[int] = ..., model_name: _Optional[str] = ..., model_version: _Optional[int] = ..., request: _Optional[_Union[Request, _Mapping]] = ..., decoupled: _Optional[bool] = ..., parents: _Optional[_Iterable[int]] = ...) -> None: ...

class BlsReply(_message.Message):
    __slots__ = ("call_id", "response", "final", "ready")
    CALL_ID_FIELD_NUMBER: _ClassVar[int]
    RESPONSE_FIELD_NUMBER: _ClassVar[int]
    FINAL_FIELD_NUMBER: _ClassVar[int]
    READY_FIELD_NUMBER: _ClassVar[int]
    call_id: int
    response: Response
    final: bool
    ready: bool
    def __init__(self, call_id: _Optional[int] = ..., response: _Optional[_Union[Response, _Mapping]] = ..., final: _Optional[bool] = ..., ready: _Optional[bool] = ...) -> None: ...

class BlsDone(_message.Message):
    __slots__ = ("call_ids",)
    CALL_IDS_FIELD_NUMBER: _ClassVar[int]
    call_ids: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, call_ids: _Optional[_Iterable[int]] = ...) -> None: ...

class BlsCancel(_message.Message):
    __slots__ = ("call_id",)
    CALL_ID_FIELD_NUMBER: _ClassVar[int]
    call_id: int
    def __init__(self, call_id: _Optional[int] = ...) -> None: ...

class BlsControl(_message.Message):
    __slots__ = ("call_id", "op", "model_name", "config", "files", "version", "unload_dependents")
    class FilesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: bytes
        def __init__(self, key: _Optional[str] = ..., value: _Optional[bytes] = ...) -> None: ...
    CALL_ID_FIELD_NUMBER: _ClassVar[int]
    OP_FIELD_NUMBER: _ClassVar[int]
    MODEL_NAME_FIELD_NUMBER: _ClassVar[int]
    CONFIG_FIELD_NUMBER: _ClassVar[int]
    FILES_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    UNLOAD_DEPENDENTS_FIELD_NUMBER: _ClassVar[int]
    call_id: int
    op: str
    model_name: str
    config: str
    files: _containers.ScalarMap[str, bytes]
    version: str
    unload_dependents: bool
    def __init__(self, call_id: _Optional[int] = ..., op: _Optional[str] = ..., model_name: _Optional[str] = ..., config: _Optional[str] = ..., files: _Optional[_Mapping[str, bytes]] = ..., version: _Optional[str] = ..., unload_dependents: _Optional[bool] = ...) -> None: ...

class DaemonToWorker(_message.Message):
    __slots__ = ("initialize", "execute", "release", "finalize", "settings", "metric_reply", "cancel", "auto_complete", "ready_query", "bls_reply", "cuda_closed", "pool_grant", "front_hello", "warmed_up")
    INITIALIZE_FIELD_NUMBER: _ClassVar[int]
    EXECUTE_FIELD_NUMBER: _ClassVar[int]
    RELEASE_FIELD_NUMBER: _ClassVar[int]
    FINALIZE_FIELD_NUMBER: _ClassVar[int]
    SETTINGS_FIELD_NUMBER: _ClassVar[int]
    METRIC_REPLY_FIELD_NUMBER: _ClassVar[int]
    CANCEL_FIELD_NUMBER: _ClassVar[int]
    AUTO_COMPLETE_FIELD_NUMBER: _ClassVar[int]
    READY_QUERY_FIELD_NUMBER: _ClassVar[int]
    BLS_REPLY_FIELD_NUMBER: _ClassVar[int]
    CUDA_CLOSED_FIELD_NUMBER: _ClassVar[int]
    POOL_GRANT_FIELD_NUMBER: _ClassVar[int]
    FRONT_HELLO_FIELD_NUMBER: _ClassVar[int]
    WARMED_UP_FIELD_NUMBER: _ClassVar[int]
    initialize: Initialize
    execute: Execute
    release: Release
    finalize: Finalize
    settings: RuntimeSettings
    metric_reply: MetricReply
    cancel: CancelRequests
    auto_complete: AutoComplete
    ready_query: ReadyQuery
    bls_reply: BlsReply
    cuda_closed: CudaRegionsClosed
    pool_grant: PoolGrant
    front_hello: FrontHello
    warmed_up: WarmedUp
    def __init__(self, initialize: _Optional[_Union[Initialize, _Mapping]] = ..., execute: _Optional[_Union[Execute, _Mapping]] = ..., release: _Optional[_Union[Release, _Mapping]] = ..., finalize: _Optional[_Union[Finalize, _Mapping]] = ..., settings: _Optional[_Union[RuntimeSettings, _Mapping]] = ..., metric_reply: _Optional[_Union[MetricReply, _Mapping]] = ..., cancel: _Optional[_Union[CancelRequests, _Mapping]] = ..., auto_complete: _Optional[_Union[AutoComplete, _Mapping]] = ..., ready_query: _Optional[_Union[ReadyQuery, _Mapping]] = ..., bls_reply: _Optional[_Union[BlsReply, _Mapping]] = ..., cuda_closed: _Optional[_Union[CudaRegionsClosed, _Mapping]] = ..., pool_grant: _Optional[_Union[PoolGrant, _Mapping]] = ..., front_hello: _Optional[_Union[FrontHello, _Mapping]] = ..., warmed_up: _Optional[_Union[WarmedUp, _Mapping]] = ...) -> None: ...

class WorkerToDaemon(_message.Message):
    __slots__ = ("hello", "initialized", "result", "heartbeat", "finalized", "spans", "metrics", "exiting", "streamed", "auto_completed", "ready_reply", "bls_call", "bls_done", "bls_control", "bls_cancel", "pool_alloc")
    HELLO_FIELD_NUMBER: _ClassVar[int]
    INITIALIZED_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_FIELD_NUMBER: _ClassVar[int]
    FINALIZED_FIELD_NUMBER: _ClassVar[int]
    SPANS_FIELD_NUMBER: _ClassVar[int]
    METRICS_FIELD_NUMBER: _ClassVar[int]
    EXITING_FIELD_NUMBER: _ClassVar[int]
    STREAMED_FIELD_NUMBER: _ClassVar[int]
    AUTO_COMPLETED_FIELD_NUMBER: _ClassVar[int]
    READY_REPLY_FIELD_NUMBER: _ClassVar[int]
    BLS_CALL_FIELD_NUMBER: _ClassVar[int]
    BLS_DONE_FIELD_NUMBER: _ClassVar[int]
    BLS_CONTROL_FIELD_NUMBER: _ClassVar[int]
    BLS_CANCEL_FIELD_NUMBER: _ClassVar[int]
    POOL_ALLOC_FIELD_NUMBER: _ClassVar[int]
    hello: Hello
    initialized: Initialized
    result: ExecuteResult
    heartbeat: Heartbeat
    finalized: Finalized
    spans: SpanBatch
    metrics: MetricUpdates
    exiting: Exiting
    streamed: StreamedResponse
    auto_completed: AutoCompleted
    ready_reply: ReadyReply
    bls_call: BlsCall
    bls_done: BlsDone
    bls_control: BlsControl
    bls_cancel: BlsCancel
    pool_alloc: PoolAlloc
    def __init__(self, hello: _Optional[_Union[Hello, _Mapping]] = ..., initialized: _Optional[_Union[Initialized, _Mapping]] = ..., result: _Optional[_Union[ExecuteResult, _Mapping]] = ..., heartbeat: _Optional[_Union[Heartbeat, _Mapping]] = ..., finalized: _Optional[_Union[Finalized, _Mapping]] = ..., spans: _Optional[_Union[SpanBatch, _Mapping]] = ..., metrics: _Optional[_Union[MetricUpdates, _Mapping]] = ..., exiting: _Optional[_Union[Exiting, _Mapping]] = ..., streamed: _Optional[_Union[StreamedResponse, _Mapping]] = ..., auto_completed: _Optional[_Union[AutoCompleted, _Mapping]] = ..., ready_reply: _Optional[_Union[ReadyReply, _Mapping]] = ..., bls_call: _Optional[_Union[BlsCall, _Mapping]] = ..., bls_done: _Optional[_Union[BlsDone, _Mapping]] = ..., bls_control: _Optional[_Union[BlsControl, _Mapping]] = ..., bls_cancel: _Optional[_Union[BlsCancel, _Mapping]] = ..., pool_alloc: _Optional[_Union[PoolAlloc, _Mapping]] = ...) -> None: ...
