from pbd._proto import grpc_service_pb2 as _grpc_service_pb2
from pbd_wire import worker_pb2 as _worker_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Input(_message.Message):
    __slots__ = ("name", "datatype", "shape", "parameters", "has_data", "region", "offset", "nbytes")
    class ParametersEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: _grpc_service_pb2.InferParameter
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[_grpc_service_pb2.InferParameter, _Mapping]] = ...) -> None: ...
    NAME_FIELD_NUMBER: _ClassVar[int]
    DATATYPE_FIELD_NUMBER: _ClassVar[int]
    SHAPE_FIELD_NUMBER: _ClassVar[int]
    PARAMETERS_FIELD_NUMBER: _ClassVar[int]
    HAS_DATA_FIELD_NUMBER: _ClassVar[int]
    REGION_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    NBYTES_FIELD_NUMBER: _ClassVar[int]
    name: str
    datatype: str
    shape: _containers.RepeatedScalarFieldContainer[int]
    parameters: _containers.MessageMap[str, _grpc_service_pb2.InferParameter]
    has_data: bool
    region: str
    offset: int
    nbytes: int
    def __init__(self, name: _Optional[str] = ..., datatype: _Optional[str] = ..., shape: _Optional[_Iterable[int]] = ..., parameters: _Optional[_Mapping[str, _grpc_service_pb2.InferParameter]] = ..., has_data: _Optional[bool] = ..., region: _Optional[str] = ..., offset: _Optional[int] = ..., nbytes: _Optional[int] = ...) -> None: ...

class RequestedOutput(_message.Message):
    __slots__ = ("name", "parameters")
    class ParametersEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: _grpc_service_pb2.InferParameter
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[_grpc_service_pb2.InferParameter, _Mapping]] = ...) -> None: ...
    NAME_FIELD_NUMBER: _ClassVar[int]
    PARAMETERS_FIELD_NUMBER: _ClassVar[int]
    name: str
    parameters: _containers.MessageMap[str, _grpc_service_pb2.InferParameter]
    def __init__(self, name: _Optional[str] = ..., parameters: _Optional[_Mapping[str, _grpc_service_pb2.InferParameter]] = ...) -> None: ...

class Infer(_message.Message):
    __slots__ = ("call", "model_name", "model_version", "id", "inputs", "outputs", "parameters", "stream", "method", "system", "start_ns", "traceparent", "release", "first_answer")
    class ParametersEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: _grpc_service_pb2.InferParameter
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[_grpc_service_pb2.InferParameter, _Mapping]] = ...) -> None: ...
    CALL_FIELD_NUMBER: _ClassVar[int]
    MODEL_NAME_FIELD_NUMBER: _ClassVar[int]
    MODEL_VERSION_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    INPUTS_FIELD_NUMBER: _ClassVar[int]
    OUTPUTS_FIELD_NUMBER: _ClassVar[int]
    PARAMETERS_FIELD_NUMBER: _ClassVar[int]
    STREAM_FIELD_NUMBER: _ClassVar[int]
    METHOD_FIELD_NUMBER: _ClassVar[int]
    SYSTEM_FIELD_NUMBER: _ClassVar[int]
    START_NS_FIELD_NUMBER: _ClassVar[int]
    TRACEPARENT_FIELD_NUMBER: _ClassVar[int]
    RELEASE_FIELD_NUMBER: _ClassVar[int]
    FIRST_ANSWER_FIELD_NUMBER: _ClassVar[int]
    call: int
    model_name: str
    model_version: str
    id: str
    inputs: _containers.RepeatedCompositeFieldContainer[Input]
    outputs: _containers.RepeatedCompositeFieldContainer[RequestedOutput]
    parameters: _containers.MessageMap[str, _grpc_service_pb2.InferParameter]
    stream: bool
    method: str
    system: str
    start_ns: int
    traceparent: str
    release: _containers.RepeatedScalarFieldContainer[int]
    first_answer: bool
    def __init__(self, call: _Optional[int] = ..., model_name: _Optional[str] = ..., model_version: _Optional[str] = ..., id: _Optional[str] = ..., inputs: _Optional[_Iterable[_Union[Input, _Mapping]]] = ..., outputs: _Optional[_Iterable[_Union[RequestedOutput, _Mapping]]] = ..., parameters: _Optional[_Mapping[str, _grpc_service_pb2.InferParameter]] = ..., stream: _Optional[bool] = ..., method: _Optional[str] = ..., system: _Optional[str] = ..., start_ns: _Optional[int] = ..., traceparent: _Optional[str] = ..., release: _Optional[_Iterable[int]] = ..., first_answer: _Optional[bool] = ...) -> None: ...

class Answer(_message.Message):
    __slots__ = ("call", "error", "outputs", "parameters", "model_name", "model_version", "id", "response", "final", "hold", "inputs_free", "inline", "before_model")
    class ParametersEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: _grpc_service_pb2.InferParameter
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[_grpc_service_pb2.InferParameter, _Mapping]] = ...) -> None: ...
    class InlineEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: int
        value: bytes
        def __init__(self, key: _Optional[int] = ..., value: _Optional[bytes] = ...) -> None: ...
    CALL_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    OUTPUTS_FIELD_NUMBER: _ClassVar[int]
    PARAMETERS_FIELD_NUMBER: _ClassVar[int]
    MODEL_NAME_FIELD_NUMBER: _ClassVar[int]
    MODEL_VERSION_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    RESPONSE_FIELD_NUMBER: _ClassVar[int]
    FINAL_FIELD_NUMBER: _ClassVar[int]
    HOLD_FIELD_NUMBER: _ClassVar[int]
    INPUTS_FREE_FIELD_NUMBER: _ClassVar[int]
    INLINE_FIELD_NUMBER: _ClassVar[int]
    BEFORE_MODEL_FIELD_NUMBER: _ClassVar[int]
    call: int
    error: _worker_pb2.Error
    outputs: _containers.RepeatedCompositeFieldContainer[_worker_pb2.TensorRef]
    parameters: _containers.MessageMap[str, _grpc_service_pb2.InferParameter]
    model_name: str
    model_version: str
    id: str
    response: bool
    final: bool
    hold: int
    inputs_free: bool
    inline: _containers.ScalarMap[int, bytes]
    before_model: bool
    def __init__(self, call: _Optional[int] = ..., error: _Optional[_Union[_worker_pb2.Error, _Mapping]] = ..., outputs: _Optional[_Iterable[_Union[_worker_pb2.TensorRef, _Mapping]]] = ..., parameters: _Optional[_Mapping[str, _grpc_service_pb2.InferParameter]] = ..., model_name: _Optional[str] = ..., model_version: _Optional[str] = ..., id: _Optional[str] = ..., response: _Optional[bool] = ..., final: _Optional[bool] = ..., hold: _Optional[int] = ..., inputs_free: _Optional[bool] = ..., inline: _Optional[_Mapping[int, bytes]] = ..., before_model: _Optional[bool] = ...) -> None: ...

class Release(_message.Message):
    __slots__ = ("holds",)
    HOLDS_FIELD_NUMBER: _ClassVar[int]
    holds: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, holds: _Optional[_Iterable[int]] = ...) -> None: ...

class Cancel(_message.Message):
    __slots__ = ("calls",)
    CALLS_FIELD_NUMBER: _ClassVar[int]
    calls: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, calls: _Optional[_Iterable[int]] = ...) -> None: ...

class InputsFree(_message.Message):
    __slots__ = ("calls",)
    CALLS_FIELD_NUMBER: _ClassVar[int]
    calls: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, calls: _Optional[_Iterable[int]] = ...) -> None: ...

class Metadata(_message.Message):
    __slots__ = ("key", "value")
    KEY_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    key: str
    value: bytes
    def __init__(self, key: _Optional[str] = ..., value: _Optional[bytes] = ...) -> None: ...

class Call(_message.Message):
    __slots__ = ("call", "path", "body", "metadata")
    CALL_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    BODY_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    call: int
    path: str
    body: bytes
    metadata: _containers.RepeatedCompositeFieldContainer[Metadata]
    def __init__(self, call: _Optional[int] = ..., path: _Optional[str] = ..., body: _Optional[bytes] = ..., metadata: _Optional[_Iterable[_Union[Metadata, _Mapping]]] = ...) -> None: ...

class CallReply(_message.Message):
    __slots__ = ("call", "code", "details", "body")
    CALL_FIELD_NUMBER: _ClassVar[int]
    CODE_FIELD_NUMBER: _ClassVar[int]
    DETAILS_FIELD_NUMBER: _ClassVar[int]
    BODY_FIELD_NUMBER: _ClassVar[int]
    call: int
    code: int
    details: str
    body: bytes
    def __init__(self, call: _Optional[int] = ..., code: _Optional[int] = ..., details: _Optional[str] = ..., body: _Optional[bytes] = ...) -> None: ...

class Hello(_message.Message):
    __slots__ = ("token", "index", "pid")
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    INDEX_FIELD_NUMBER: _ClassVar[int]
    PID_FIELD_NUMBER: _ClassVar[int]
    token: str
    index: int
    pid: int
    def __init__(self, token: _Optional[str] = ..., index: _Optional[int] = ..., pid: _Optional[int] = ...) -> None: ...

class Models(_message.Message):
    __slots__ = ("decoupled", "barrier", "direct", "stopping")
    DECOUPLED_FIELD_NUMBER: _ClassVar[int]
    BARRIER_FIELD_NUMBER: _ClassVar[int]
    DIRECT_FIELD_NUMBER: _ClassVar[int]
    STOPPING_FIELD_NUMBER: _ClassVar[int]
    decoupled: _containers.RepeatedScalarFieldContainer[str]
    barrier: int
    direct: _containers.RepeatedCompositeFieldContainer[DirectVersion]
    stopping: bool
    def __init__(self, decoupled: _Optional[_Iterable[str]] = ..., barrier: _Optional[int] = ..., direct: _Optional[_Iterable[_Union[DirectVersion, _Mapping]]] = ..., stopping: _Optional[bool] = ...) -> None: ...

class Regions(_message.Message):
    __slots__ = ("all", "added", "removed", "barrier")
    ALL_FIELD_NUMBER: _ClassVar[int]
    ADDED_FIELD_NUMBER: _ClassVar[int]
    REMOVED_FIELD_NUMBER: _ClassVar[int]
    BARRIER_FIELD_NUMBER: _ClassVar[int]
    all: bool
    added: _containers.RepeatedCompositeFieldContainer[SystemRegion]
    removed: _containers.RepeatedScalarFieldContainer[str]
    barrier: int
    def __init__(self, all: _Optional[bool] = ..., added: _Optional[_Iterable[_Union[SystemRegion, _Mapping]]] = ..., removed: _Optional[_Iterable[str]] = ..., barrier: _Optional[int] = ...) -> None: ...

class RegionsLetGo(_message.Message):
    __slots__ = ("barrier",)
    BARRIER_FIELD_NUMBER: _ClassVar[int]
    barrier: int
    def __init__(self, barrier: _Optional[int] = ...) -> None: ...

class SystemRegion(_message.Message):
    __slots__ = ("name", "worker_name", "offset", "byte_size")
    NAME_FIELD_NUMBER: _ClassVar[int]
    WORKER_NAME_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    BYTE_SIZE_FIELD_NUMBER: _ClassVar[int]
    name: str
    worker_name: str
    offset: int
    byte_size: int
    def __init__(self, name: _Optional[str] = ..., worker_name: _Optional[str] = ..., offset: _Optional[int] = ..., byte_size: _Optional[int] = ...) -> None: ...

class DirectVersion(_message.Message):
    __slots__ = ("model", "version", "latest", "config_json", "instances", "directories")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    LATEST_FIELD_NUMBER: _ClassVar[int]
    CONFIG_JSON_FIELD_NUMBER: _ClassVar[int]
    INSTANCES_FIELD_NUMBER: _ClassVar[int]
    DIRECTORIES_FIELD_NUMBER: _ClassVar[int]
    model: str
    version: str
    latest: bool
    config_json: str
    instances: _containers.RepeatedCompositeFieldContainer[DirectInstance]
    directories: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, model: _Optional[str] = ..., version: _Optional[str] = ..., latest: _Optional[bool] = ..., config_json: _Optional[str] = ..., instances: _Optional[_Iterable[_Union[DirectInstance, _Mapping]]] = ..., directories: _Optional[_Iterable[str]] = ...) -> None: ...

class DirectInstance(_message.Message):
    __slots__ = ("name", "socket", "token", "cancel_region", "load_slot")
    NAME_FIELD_NUMBER: _ClassVar[int]
    SOCKET_FIELD_NUMBER: _ClassVar[int]
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    CANCEL_REGION_FIELD_NUMBER: _ClassVar[int]
    LOAD_SLOT_FIELD_NUMBER: _ClassVar[int]
    name: str
    socket: str
    token: str
    cancel_region: str
    load_slot: int
    def __init__(self, name: _Optional[str] = ..., socket: _Optional[str] = ..., token: _Optional[str] = ..., cancel_region: _Optional[str] = ..., load_slot: _Optional[int] = ...) -> None: ...

class InstanceGone(_message.Message):
    __slots__ = ("socket", "message")
    SOCKET_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    socket: str
    message: str
    def __init__(self, socket: _Optional[str] = ..., message: _Optional[str] = ...) -> None: ...

class StatsAsk(_message.Message):
    __slots__ = ("ask",)
    ASK_FIELD_NUMBER: _ClassVar[int]
    ask: int
    def __init__(self, ask: _Optional[int] = ...) -> None: ...

class VersionStats(_message.Message):
    __slots__ = ("model", "version", "record")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    RECORD_FIELD_NUMBER: _ClassVar[int]
    model: str
    version: str
    record: str
    def __init__(self, model: _Optional[str] = ..., version: _Optional[str] = ..., record: _Optional[str] = ...) -> None: ...

class StatsReport(_message.Message):
    __slots__ = ("ask", "versions", "loads")
    ASK_FIELD_NUMBER: _ClassVar[int]
    VERSIONS_FIELD_NUMBER: _ClassVar[int]
    LOADS_FIELD_NUMBER: _ClassVar[int]
    ask: int
    versions: _containers.RepeatedCompositeFieldContainer[VersionStats]
    loads: _containers.RepeatedCompositeFieldContainer[LinkLoad]
    def __init__(self, ask: _Optional[int] = ..., versions: _Optional[_Iterable[_Union[VersionStats, _Mapping]]] = ..., loads: _Optional[_Iterable[_Union[LinkLoad, _Mapping]]] = ...) -> None: ...

class LinkLoad(_message.Message):
    __slots__ = ("socket", "inflight")
    SOCKET_FIELD_NUMBER: _ClassVar[int]
    INFLIGHT_FIELD_NUMBER: _ClassVar[int]
    socket: str
    inflight: int
    def __init__(self, socket: _Optional[str] = ..., inflight: _Optional[int] = ...) -> None: ...

class Synced(_message.Message):
    __slots__ = ("barrier",)
    BARRIER_FIELD_NUMBER: _ClassVar[int]
    barrier: int
    def __init__(self, barrier: _Optional[int] = ...) -> None: ...

class LogLevels(_message.Message):
    __slots__ = ("verbose", "info", "warning", "error", "format")
    VERBOSE_FIELD_NUMBER: _ClassVar[int]
    INFO_FIELD_NUMBER: _ClassVar[int]
    WARNING_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    FORMAT_FIELD_NUMBER: _ClassVar[int]
    verbose: int
    info: bool
    warning: bool
    error: bool
    format: str
    def __init__(self, verbose: _Optional[int] = ..., info: _Optional[bool] = ..., warning: _Optional[bool] = ..., error: _Optional[bool] = ..., format: _Optional[str] = ...) -> None: ...

class Stop(_message.Message):
    __slots__ = ("grace_s",)
    GRACE_S_FIELD_NUMBER: _ClassVar[int]
    grace_s: float
    def __init__(self, grace_s: _Optional[float] = ...) -> None: ...

class Heartbeat(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class FrontToDaemon(_message.Message):
    __slots__ = ("hello", "infer", "release", "cancel", "call", "synced", "stats", "heartbeat")
    HELLO_FIELD_NUMBER: _ClassVar[int]
    INFER_FIELD_NUMBER: _ClassVar[int]
    RELEASE_FIELD_NUMBER: _ClassVar[int]
    CANCEL_FIELD_NUMBER: _ClassVar[int]
    CALL_FIELD_NUMBER: _ClassVar[int]
    SYNCED_FIELD_NUMBER: _ClassVar[int]
    STATS_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_FIELD_NUMBER: _ClassVar[int]
    hello: Hello
    infer: Infer
    release: Release
    cancel: Cancel
    call: Call
    synced: Synced
    stats: StatsReport
    heartbeat: Heartbeat
    def __init__(self, hello: _Optional[_Union[Hello, _Mapping]] = ..., infer: _Optional[_Union[Infer, _Mapping]] = ..., release: _Optional[_Union[Release, _Mapping]] = ..., cancel: _Optional[_Union[Cancel, _Mapping]] = ..., call: _Optional[_Union[Call, _Mapping]] = ..., synced: _Optional[_Union[Synced, _Mapping]] = ..., stats: _Optional[_Union[StatsReport, _Mapping]] = ..., heartbeat: _Optional[_Union[Heartbeat, _Mapping]] = ...) -> None: ...

class DaemonToFront(_message.Message):
    __slots__ = ("answer", "reply", "models", "log_levels", "stop", "inputs_free", "stats_ask", "instance_gone", "regions", "regions_let_go")
    ANSWER_FIELD_NUMBER: _ClassVar[int]
    REPLY_FIELD_NUMBER: _ClassVar[int]
    MODELS_FIELD_NUMBER: _ClassVar[int]
    LOG_LEVELS_FIELD_NUMBER: _ClassVar[int]
    STOP_FIELD_NUMBER: _ClassVar[int]
    INPUTS_FREE_FIELD_NUMBER: _ClassVar[int]
    STATS_ASK_FIELD_NUMBER: _ClassVar[int]
    INSTANCE_GONE_FIELD_NUMBER: _ClassVar[int]
    REGIONS_FIELD_NUMBER: _ClassVar[int]
    REGIONS_LET_GO_FIELD_NUMBER: _ClassVar[int]
    answer: Answer
    reply: CallReply
    models: Models
    log_levels: LogLevels
    stop: Stop
    inputs_free: InputsFree
    stats_ask: StatsAsk
    instance_gone: InstanceGone
    regions: Regions
    regions_let_go: RegionsLetGo
    def __init__(self, answer: _Optional[_Union[Answer, _Mapping]] = ..., reply: _Optional[_Union[CallReply, _Mapping]] = ..., models: _Optional[_Union[Models, _Mapping]] = ..., log_levels: _Optional[_Union[LogLevels, _Mapping]] = ..., stop: _Optional[_Union[Stop, _Mapping]] = ..., inputs_free: _Optional[_Union[InputsFree, _Mapping]] = ..., stats_ask: _Optional[_Union[StatsAsk, _Mapping]] = ..., instance_gone: _Optional[_Union[InstanceGone, _Mapping]] = ..., regions: _Optional[_Union[Regions, _Mapping]] = ..., regions_let_go: _Optional[_Union[RegionsLetGo, _Mapping]] = ...) -> None: ...
