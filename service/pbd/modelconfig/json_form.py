"""The Triton-style JSON form of a model config: what a model gets as ``args["model_config"]``
and what the ModelConfig RPC returns.

protobuf's JSON printer writes 64-bit integers as strings and omits defaults; Triton writes
numbers and every field. This walks the descriptor so the conversion is exact.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from google.protobuf import descriptor, json_format

if TYPE_CHECKING:
    from google._upb import _message as upb

from pbd._proto import model_config_pb2 as mc

_F = descriptor.FieldDescriptor
_INT64_TYPES = frozenset(
    {_F.TYPE_INT64, _F.TYPE_UINT64, _F.TYPE_SINT64, _F.TYPE_FIXED64, _F.TYPE_SFIXED64}
)


def config_to_dict(message: mc.ModelConfig) -> dict[str, Any]:
    """Triton's JSON form of ``message``: protobuf JSON with field names as in the .proto,
    fields without presence printed, and 64-bit integers as numbers (protobuf prints strings)."""
    document = json_format.MessageToDict(
        message, preserving_proto_field_name=True, always_print_fields_with_no_presence=True
    )
    return _triton_json(document, message.DESCRIPTOR)


def _triton_json(
    document: dict[str, Any], desc: descriptor.Descriptor | upb.Descriptor
) -> dict[str, Any]:
    """``document`` (MessageToDict of a ``desc`` message) with 64-bit integers as numbers and
    keys in .proto declaration order, as Triton prints it. Map keys stay strings: JSON has no
    other kind of key."""
    fixed: dict[str, Any] = {}
    for field in desc.fields:
        if field.name not in document:
            continue
        value = document[field.name]
        message_type = field.message_type
        if message_type is not None and message_type.GetOptions().map_entry:
            value_field = message_type.fields_by_name["value"]
            fixed[field.name] = {k: _triton_value(value_field, v) for k, v in value.items()}
        elif field.is_repeated:
            fixed[field.name] = [_triton_value(field, v) for v in value]
        else:
            fixed[field.name] = _triton_value(field, value)
    return fixed


def _triton_value(field: descriptor.FieldDescriptor | upb.FieldDescriptor, value: Any) -> Any:
    if field.message_type is not None:
        return _triton_json(value, field.message_type)
    if field.type in _INT64_TYPES:
        return int(value)
    return value
