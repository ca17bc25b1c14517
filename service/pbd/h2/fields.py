"""Whether a decoded header list is a well-formed HTTP/2 request or trailer section (RFC 9113
sections 8.1-8.3). A malformed one is a stream error (PROTOCOL_ERROR): the application never
sees it, and none of its values reach a handler's metadata.

The connection's HPACK decoder keeps the verdict with the fields it caches per header block,
so a gRPC client's repeated blocks are checked once per connection, not once per call.
"""

from __future__ import annotations

from pbd.h2.header_blocks import Fields

# Bytes a field name may hold (section 8.2.1): visible ASCII but uppercase letters; a colon
# only as a pseudo-header's first character (checked apart).
_NAME_BYTES = bytes(b for b in range(0x21, 0x7F) if not 0x41 <= b <= 0x5A and b != 0x3A)
_REQUEST_PSEUDO = frozenset((b":method", b":scheme", b":authority", b":path"))
# Section 8.2.2: fields of a single hop, meaningless (and dangerous) in HTTP/2.
_CONNECTION_SPECIFIC = frozenset(
    (b"connection", b"proxy-connection", b"keep-alive", b"transfer-encoding", b"upgrade")
)
_WHITESPACE = (0x20, 0x09)

# What a well-formed request carries besides its fields: its content-length, or -1.
Checked = tuple[str | None, int]


def check_request(fields: Fields) -> Checked:
    """(None, content-length or -1) for a well-formed request, else (what is wrong, -1)."""
    pseudo: dict[bytes, bytes] = {}
    regular = False
    length = -1
    for name, value in fields:
        if name[:1] == b":":
            if regular:
                return f"pseudo-header {_show(name)} after a regular field", -1
            if name not in _REQUEST_PSEUDO:
                return f"pseudo-header {_show(name)} is not a request's", -1
            if name in pseudo:
                return f"pseudo-header {_show(name)} twice", -1
            problem = _value_problem(name, value)
            if problem:
                return problem, -1
            pseudo[name] = value
            continue
        regular = True
        problem = _field_problem(name, value)
        if problem:
            return problem, -1
        if name == b"content-length":
            if not value.isdigit() or length >= 0:
                return f"content-length {_show(value)}", -1
            length = int(value)
    method = pseudo.get(b":method")
    if method is None:
        return "no :method", -1
    if method == b"CONNECT":  # section 8.5: only :method and :authority
        if b":scheme" in pseudo or b":path" in pseudo or b":authority" not in pseudo:
            return "CONNECT needs :authority and no :scheme or :path", -1
        return None, length
    if b":scheme" not in pseudo:
        return "no :scheme", -1
    if not pseudo.get(b":path"):
        return "no :path, or an empty one", -1
    return None, length


def check_trailers(fields: Fields) -> str | None:
    """None for a well-formed trailer section (no pseudo-headers), else what is wrong."""
    for name, value in fields:
        if name[:1] == b":":
            return f"pseudo-header {_show(name)} in trailers"
        problem = _field_problem(name, value)
        if problem:
            return problem
    return None


def _field_problem(name: bytes, value: bytes) -> str | None:
    if not name or name.translate(None, _NAME_BYTES):
        return f"field name {_show(name)} is not lowercase visible ASCII without a colon"
    if name in _CONNECTION_SPECIFIC:
        return f"connection-specific field {_show(name)}"
    if name == b"te" and value != b"trailers":
        return f"te {_show(value)} (only 'trailers' is allowed)"
    return _value_problem(name, value)


def _value_problem(name: bytes, value: bytes) -> str | None:
    if b"\0" in value or b"\r" in value or b"\n" in value:
        return f"NUL, CR or LF in the value of {_show(name)}"
    if value and (value[0] in _WHITESPACE or value[-1] in _WHITESPACE):
        return f"the value of {_show(name)} starts or ends with whitespace"
    return None


def _show(text: bytes) -> str:
    return repr(text[:64].decode("latin-1"))
