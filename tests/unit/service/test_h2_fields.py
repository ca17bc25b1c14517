"""pbd.h2.fields: which header lists are well-formed requests and trailers (RFC 9113 8.1-8.3);
the wire-level cases are in tests/conformance/test_rfc9113.py."""

from __future__ import annotations

import pytest

from pbd.h2.fields import check_request, check_trailers

REQUEST = (
    (b":method", b"POST"),
    (b":scheme", b"https"),
    (b":path", b"/inference.GRPCInferenceService/ModelInfer"),
    (b":authority", b"pbd:8001"),
    (b"content-type", b"application/grpc"),
    (b"te", b"trailers"),
    (b"grpc-timeout", b"5S"),
    (b"x-key-bin", b"AAEC"),
)


def test_a_grpc_request_is_well_formed() -> None:
    assert check_request(REQUEST) == (None, -1)


def test_content_length_is_returned() -> None:
    assert check_request((*REQUEST, (b"content-length", b"120"))) == (None, 120)


@pytest.mark.parametrize(
    "fields, problem",
    [
        ((*REQUEST, (b"X-Key", b"v")), "field name 'X-Key'"),
        ((*REQUEST, (b"x key", b"v")), "field name 'x key'"),
        ((*REQUEST, (b"x:key", b"v")), "field name 'x:key'"),
        ((*REQUEST, (b"", b"v")), "field name ''"),
        ((*REQUEST, (b"x-key", b"a\rb")), "NUL, CR or LF"),
        ((*REQUEST, (b"x-key", b"a\x00")), "NUL, CR or LF"),
        ((*REQUEST, (b"x-key", b" a")), "whitespace"),
        ((*REQUEST, (b"x-key", b"a\t")), "whitespace"),
        ((*REQUEST, (b"keep-alive", b"1")), "connection-specific field 'keep-alive'"),
        ((*REQUEST, (b"te", b"gzip")), "te 'gzip'"),
        ((*REQUEST, (b":path", b"/x")), "pseudo-header ':path' after a regular field"),
        (((b":status", b"200"), *REQUEST), "pseudo-header ':status' is not a request's"),
        (((b":method", b"GET"), *REQUEST), "pseudo-header ':method' twice"),
        (REQUEST[1:], "no :method"),
        ((REQUEST[0], *REQUEST[2:]), "no :scheme"),
        (REQUEST[:2] + REQUEST[3:], "no :path, or an empty one"),
        ((*REQUEST[:2], (b":path", b""), *REQUEST[3:]), "no :path, or an empty one"),
        ((*REQUEST, (b"content-length", b"-1")), "content-length '-1'"),
        ((*REQUEST, (b"content-length", b"1"), (b"content-length", b"1")), "content-length"),
    ],
)
def test_malformed_requests_say_what_is_wrong(fields: tuple, problem: str) -> None:
    found, length = check_request(fields)
    assert found is not None and problem in found and length == -1


def test_connect_needs_authority_and_no_scheme_or_path() -> None:
    assert check_request(((b":method", b"CONNECT"), (b":authority", b"h:1"))) == (None, -1)
    assert check_request(((b":method", b"CONNECT"), (b":path", b"/")))[0] is not None


def test_trailers() -> None:
    assert check_trailers(((b"x-trailer", b"v"), (b"grpc-status", b"0"))) is None
    assert "in trailers" in (check_trailers(((b":path", b"/x"),)) or "")
    assert "field name" in (check_trailers(((b"X", b"v"),)) or "")
