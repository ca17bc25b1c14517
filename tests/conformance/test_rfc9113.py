"""RFC 9113 (HTTP/2) conformance of pbd's server: one case per requirement, named by its section
(``test_<section>_...``), checked on the wire against the real server (h2_wire)."""

from __future__ import annotations

import struct

import pytest
from h2_wire import ECHO, HOLD, WAIT, Client, message, request, run

from pbd.h2 import frames as f

PING = f.frame(f.PING, 0, 0, b"12345678")


def _priority(depends_on: int, weight: int = 15) -> bytes:
    return struct.pack(">IB", depends_on, weight)


# -- 3.4 HTTP/2 connection preface -------------------------------------------------------------


def test_3_4_a_preface_that_is_not_http2s_is_a_connection_error() -> None:
    async def case(c: Client) -> None:
        await c.connection_error(f.PROTOCOL_ERROR)

    run(case, preface=b"PRI * HTTP/2.0\r\n\r\nXX\r\n\r\n" + f.settings({}))


def test_3_4_the_server_preface_is_a_settings_frame() -> None:
    async def case(c: Client) -> None:
        first = await c.frame()
        assert (first.kind, first.flags, first.stream) == (f.SETTINGS, 0, 0)

    run(case, preface=f.PREFACE + f.settings({}))


def test_3_4_a_client_preface_not_followed_by_settings_is_a_connection_error() -> None:
    async def case(c: Client) -> None:
        await c.connection_error(f.PROTOCOL_ERROR)

    run(case, preface=f.PREFACE + PING)


def test_3_4_a_settings_ack_is_not_the_client_preface() -> None:
    async def case(c: Client) -> None:
        await c.connection_error(f.PROTOCOL_ERROR)

    run(case, preface=f.PREFACE + f.SETTINGS_ACK)


# -- 4.1 frame format, 4.2 frame size, 4.3 field section compression ------------------------


def test_4_1_a_frame_of_unknown_type_is_ignored() -> None:
    async def case(c: Client) -> None:
        c.send(f.frame(0x42, 0xFF, 0, b"anything"), f.frame(0x42, 0, 1, b"x"))
        await c.no_error()
        await c.serves()

    run(case)


def test_4_1_unknown_flags_are_ignored() -> None:
    async def case(c: Client) -> None:
        c.send(f.frame(f.PING, 0xF0, 0, b"abcdefgh"))
        frames = await c.no_error()
        assert any(x.kind == f.PING and x.payload == b"abcdefgh" for x in frames)

    run(case)


def test_4_1_the_reserved_bit_of_a_stream_id_is_ignored() -> None:
    async def case(c: Client) -> None:
        block = c.block_of(request())
        c.send(
            f.frame(f.HEADERS, f.END_HEADERS, 1 | 0x80000000, block),
            f.frame(f.DATA, f.END_STREAM, 1, message()),
        )
        await c.answered(1)

    run(case)


def test_4_2_data_larger_than_max_frame_size_is_a_frame_size_error() -> None:
    async def case(c: Client) -> None:
        limit = c.server_settings[f.MAX_FRAME_SIZE]
        c.send(c.headers(1), f.frame(f.DATA, 0, 1, bytes(limit + 1)))
        await c.connection_error(f.FRAME_SIZE_ERROR)

    run(case)


def test_4_2_headers_larger_than_max_frame_size_is_a_connection_error() -> None:
    async def case(c: Client) -> None:
        limit = c.server_settings[f.MAX_FRAME_SIZE]
        c.send(f.frame(f.HEADERS, f.END_HEADERS, 1, bytes(limit + 1)))
        await c.connection_error(f.FRAME_SIZE_ERROR)

    run(case)


def test_4_3_an_undecodable_field_block_is_a_compression_error() -> None:
    async def case(c: Client) -> None:
        c.send(f.frame(f.HEADERS, f.END_HEADERS, 1, b"\xff\xff\xff\xff"))
        await c.connection_error(f.COMPRESSION_ERROR)

    run(case)


def test_4_3_a_field_block_interrupted_by_another_frame_is_a_connection_error() -> None:
    async def case(c: Client) -> None:
        block = c.block_of(request())
        c.send(f.frame(f.HEADERS, 0, 1, block[:10]), f.frame(f.DATA, 0, 1, b"x"))
        await c.connection_error(f.PROTOCOL_ERROR)

    run(case)


def test_4_3_a_continuation_of_another_stream_is_a_connection_error() -> None:
    async def case(c: Client) -> None:
        block = c.block_of(request())
        c.send(
            f.frame(f.HEADERS, 0, 1, block[:10]),
            f.frame(f.CONTINUATION, f.END_HEADERS, 3, block[10:]),
        )
        await c.connection_error(f.PROTOCOL_ERROR)

    run(case)


# -- 5.1 stream states ---------------------------------------------------------------------------


def test_5_1_data_on_an_idle_stream_is_a_connection_error() -> None:
    async def case(c: Client) -> None:
        c.send(f.frame(f.DATA, 0, 1, b"x"))
        await c.connection_error(f.PROTOCOL_ERROR)

    run(case)


def test_5_1_rst_stream_on_an_idle_stream_is_a_connection_error() -> None:
    async def case(c: Client) -> None:
        c.send(f.rst_stream(1, f.CANCEL))
        await c.connection_error(f.PROTOCOL_ERROR)

    run(case)


def test_5_1_window_update_on_an_idle_stream_is_a_connection_error() -> None:
    async def case(c: Client) -> None:
        c.send(f.window_update(1, 100))
        await c.connection_error(f.PROTOCOL_ERROR)

    run(case)


def test_5_1_continuation_on_an_idle_stream_is_a_connection_error() -> None:
    async def case(c: Client) -> None:
        c.send(f.frame(f.CONTINUATION, f.END_HEADERS, 1, c.block_of(request())))
        await c.connection_error(f.PROTOCOL_ERROR)

    run(case)


def test_5_1_priority_on_an_idle_stream_is_allowed() -> None:
    async def case(c: Client) -> None:
        c.send(f.frame(f.PRIORITY, 0, 3, _priority(0)))
        await c.no_error()
        c.send(c.call(3))
        await c.answered(3)

    run(case)


def _half_closed(c: Client, stream: int) -> bytes:
    """A call whose request ended and whose answer never comes: half-closed (remote)."""
    return c.headers(stream, request(WAIT)) + f.frame(f.DATA, f.END_STREAM, stream, message())


def test_5_1_data_on_a_half_closed_remote_stream_is_stream_closed() -> None:
    async def case(c: Client) -> None:
        c.send(_half_closed(c, 1), f.frame(f.DATA, 0, 1, b"late"))
        await c.stream_error(1, f.STREAM_CLOSED)

    run(case)


def test_5_1_headers_on_a_half_closed_remote_stream_is_stream_closed() -> None:
    async def case(c: Client) -> None:
        c.send(_half_closed(c, 1), c.headers(1, [(b"x-trailer", b"v")], end_stream=True))
        await c.stream_error(1, f.STREAM_CLOSED)

    run(case)


def test_5_1_window_update_and_rst_stream_on_a_half_closed_remote_stream_are_allowed() -> None:
    async def case(c: Client) -> None:
        c.send(_half_closed(c, 1), f.window_update(1, 1000))
        await c.no_error()
        c.send(f.rst_stream(1, f.CANCEL))
        await c.no_error()
        await c.serves()

    run(case)


def test_5_1_data_after_the_client_reset_a_stream_is_stream_closed() -> None:
    async def case(c: Client) -> None:
        c.send(c.headers(1), f.rst_stream(1, f.CANCEL), f.frame(f.DATA, 0, 1, b"x"))
        await c.stream_error(1, f.STREAM_CLOSED)

    run(case)


def test_5_1_headers_after_the_client_reset_a_stream_is_stream_closed() -> None:
    async def case(c: Client) -> None:
        c.send(c.headers(1), f.rst_stream(1, f.CANCEL))
        c.send(c.headers(1, [(b"x-trailer", b"v")], end_stream=True))
        await c.stream_error(1, f.STREAM_CLOSED)

    run(case)


def test_5_1_data_on_a_closed_stream_is_stream_closed() -> None:
    async def case(c: Client) -> None:
        c.send(c.call(1))
        await c.answered(1)
        c.send(f.frame(f.DATA, 0, 1, b"x"))
        await c.stream_error(1, f.STREAM_CLOSED)

    run(case)


def test_5_1_window_update_and_priority_on_a_closed_stream_are_ignored() -> None:
    async def case(c: Client) -> None:
        c.send(c.call(1))
        await c.answered(1)
        c.send(f.window_update(1, 10), f.frame(f.PRIORITY, 0, 1, _priority(0)))
        await c.no_error()
        await c.serves()

    run(case)


def test_5_1_late_frames_on_a_stream_the_server_reset_are_ignored() -> None:
    """The server answered before the request ended, and reset the rest (NO_ERROR): the
    client's DATA already on its way must not be an error."""

    async def case(c: Client) -> None:
        c.send(c.headers(1, request(b"/t/Absent")))
        frames = await c.until_ping()
        assert [(x.kind, x.code) for x in frames if x.kind == f.RST_STREAM] == [
            (f.RST_STREAM, f.NO_ERROR)
        ]
        c.send(f.frame(f.DATA, f.END_STREAM, 1, b"late"))
        await c.no_error()
        await c.serves()

    run(case)


def test_5_1_1_headers_on_an_even_stream_is_a_connection_error() -> None:
    async def case(c: Client) -> None:
        c.send(c.headers(2, end_stream=True))
        await c.connection_error(f.PROTOCOL_ERROR)

    run(case)


def test_5_1_1_a_new_stream_below_an_opened_one_is_a_connection_error() -> None:
    async def case(c: Client) -> None:
        c.send(c.call(5))
        await c.answered(5)
        c.send(c.call(3))
        await c.connection_error(f.PROTOCOL_ERROR)

    run(case)


def test_5_1_2_streams_past_max_concurrent_streams_are_refused() -> None:
    async def case(c: Client) -> None:
        limit = c.server_settings[f.MAX_CONCURRENT_STREAMS]
        c.send(*(c.headers(1 + 2 * i) for i in range(limit + 1)))
        frames = await c.no_error_but_resets()
        assert [(x.stream, x.code) for x in frames] == [(1 + 2 * limit, f.REFUSED_STREAM)]
        c.send(f.rst_stream(1, f.CANCEL))  # one place free again
        await c.serves()

    run(case)


def test_5_3_1_headers_depending_on_its_own_stream_is_a_stream_error() -> None:
    async def case(c: Client) -> None:
        block = _priority(1) + c.block_of(request())
        c.send(f.frame(f.HEADERS, f.END_HEADERS | f.PRIORITY_FLAG | f.END_STREAM, 1, block))
        await c.stream_error(1, f.PROTOCOL_ERROR)

    run(case)


def test_5_3_1_priority_depending_on_its_own_stream_is_a_stream_error() -> None:
    async def case(c: Client) -> None:
        c.send(c.headers(1), f.frame(f.PRIORITY, 0, 1, _priority(1)))
        await c.stream_error(1, f.PROTOCOL_ERROR)

    run(case)


def test_5_4_1_goaway_names_the_last_stream_the_server_took() -> None:
    async def case(c: Client) -> None:
        c.send(c.call(7))
        await c.answered(7)
        c.send(f.frame(f.PING, 0, 0, b"short"))
        frame = await c.connection_error(f.FRAME_SIZE_ERROR)
        assert struct.unpack_from(">I", frame.payload)[0] == 7

    run(case)


def test_5_5_an_unknown_frame_inside_a_field_block_is_a_connection_error() -> None:
    async def case(c: Client) -> None:
        block = c.block_of(request())
        c.send(f.frame(f.HEADERS, 0, 1, block[:10]), f.frame(0x42, 0, 1, b""))
        await c.connection_error(f.PROTOCOL_ERROR)

    run(case)


# -- 6.1 DATA, 6.2 HEADERS, 6.3 PRIORITY, 6.4 RST_STREAM ---------------------------------------


def test_6_1_data_on_stream_0_is_a_connection_error() -> None:
    async def case(c: Client) -> None:
        c.send(f.frame(f.DATA, 0, 0, b"x"))
        await c.connection_error(f.PROTOCOL_ERROR)

    run(case)


def test_6_1_padding_as_long_as_the_frame_is_a_connection_error() -> None:
    async def case(c: Client) -> None:
        c.send(c.headers(1), f.frame(f.DATA, f.PADDED, 1, bytes([3]) + b"ab"))
        await c.connection_error(f.PROTOCOL_ERROR)

    run(case)


def test_6_1_padded_data_delivers_the_data_without_its_padding() -> None:
    async def case(c: Client) -> None:
        body = message()
        c.send(c.headers(1), f.frame(f.DATA, f.PADDED | f.END_STREAM, 1, b"\x04" + body + bytes(4)))
        await c.answered(1)

    run(case)


def test_6_2_headers_on_stream_0_is_a_connection_error() -> None:
    async def case(c: Client) -> None:
        c.send(c.headers(0, end_stream=True))
        await c.connection_error(f.PROTOCOL_ERROR)

    run(case)


def test_6_2_headers_padding_as_long_as_the_frame_is_a_connection_error() -> None:
    async def case(c: Client) -> None:
        block = c.block_of(request())
        c.send(f.frame(f.HEADERS, f.END_HEADERS | f.PADDED, 1, bytes([len(block) + 1]) + block))
        await c.connection_error(f.PROTOCOL_ERROR)

    run(case)


def test_6_2_headers_with_priority_and_padding_are_served() -> None:
    async def case(c: Client) -> None:
        payload = b"\x03" + _priority(0) + c.block_of(request()) + bytes(3)
        c.send(f.frame(f.HEADERS, f.END_HEADERS | f.PADDED | f.PRIORITY_FLAG, 1, payload))
        c.send(f.frame(f.DATA, f.END_STREAM, 1, message()))
        await c.answered(1)

    run(case)


def test_6_2_headers_too_short_for_their_priority_is_a_connection_error() -> None:
    async def case(c: Client) -> None:
        c.send(f.frame(f.HEADERS, f.END_HEADERS | f.PRIORITY_FLAG, 1, b"\x00\x00"))
        await c.connection_error(f.FRAME_SIZE_ERROR, f.PROTOCOL_ERROR)

    run(case)


def test_6_2_trailers_without_end_stream_are_malformed() -> None:
    async def case(c: Client) -> None:
        c.send(c.headers(1), f.frame(f.DATA, 0, 1, message()))
        c.send(c.headers(1, [(b"x-trailer", b"v")]))
        await c.stream_error(1, f.PROTOCOL_ERROR)

    run(case)


def test_6_3_priority_on_stream_0_is_a_connection_error() -> None:
    async def case(c: Client) -> None:
        c.send(f.frame(f.PRIORITY, 0, 0, _priority(1)))
        await c.connection_error(f.PROTOCOL_ERROR)

    run(case)


def test_6_3_priority_of_the_wrong_length_is_a_stream_error() -> None:
    async def case(c: Client) -> None:
        c.send(c.headers(1), f.frame(f.PRIORITY, 0, 1, b"\x00\x00\x00\x00"))
        await c.stream_error(1, f.FRAME_SIZE_ERROR)

    run(case)


def test_6_4_rst_stream_on_stream_0_is_a_connection_error() -> None:
    async def case(c: Client) -> None:
        c.send(f.rst_stream(0, f.CANCEL))
        await c.connection_error(f.PROTOCOL_ERROR)

    run(case)


def test_6_4_rst_stream_of_the_wrong_length_is_a_connection_error() -> None:
    async def case(c: Client) -> None:
        c.send(c.headers(1), f.frame(f.RST_STREAM, 0, 1, b"\x00\x00\x00\x08\x00"))
        await c.connection_error(f.FRAME_SIZE_ERROR)

    run(case)


# -- 6.5 SETTINGS --------------------------------------------------------------------------------


def test_6_5_settings_are_acknowledged() -> None:
    async def case(c: Client) -> None:
        c.send(f.settings({f.HEADER_TABLE_SIZE: 4096}))
        frames = await c.no_error()
        assert any(x.kind == f.SETTINGS and x.flags & f.ACK for x in frames)

    run(case)


def test_6_5_a_settings_ack_with_a_payload_is_a_frame_size_error() -> None:
    async def case(c: Client) -> None:
        c.send(f.frame(f.SETTINGS, f.ACK, 0, bytes(6)))
        await c.connection_error(f.FRAME_SIZE_ERROR)

    run(case)


def test_6_5_settings_on_a_stream_is_a_connection_error() -> None:
    async def case(c: Client) -> None:
        c.send(f.frame(f.SETTINGS, 0, 1, b""))
        await c.connection_error(f.PROTOCOL_ERROR)

    run(case)


def test_6_5_settings_of_a_length_not_a_multiple_of_6_is_a_frame_size_error() -> None:
    async def case(c: Client) -> None:
        c.send(f.frame(f.SETTINGS, 0, 0, bytes(7)))
        await c.connection_error(f.FRAME_SIZE_ERROR)

    run(case)


def test_6_5_2_enable_push_other_than_0_or_1_is_a_connection_error() -> None:
    async def case(c: Client) -> None:
        c.send(f.settings({f.ENABLE_PUSH: 2}))
        await c.connection_error(f.PROTOCOL_ERROR)

    run(case)


def test_6_5_2_initial_window_size_over_the_maximum_is_a_flow_control_error() -> None:
    async def case(c: Client) -> None:
        c.send(f.settings({f.INITIAL_WINDOW_SIZE: 2**31}))
        await c.connection_error(f.FLOW_CONTROL_ERROR)

    run(case)


@pytest.mark.parametrize("size", [16383, 2**24])
def test_6_5_2_max_frame_size_out_of_range_is_a_connection_error(size: int) -> None:
    async def case(c: Client) -> None:
        c.send(f.settings({f.MAX_FRAME_SIZE: size}))
        await c.connection_error(f.PROTOCOL_ERROR)

    run(case)


def test_6_5_2_an_unknown_setting_is_ignored() -> None:
    async def case(c: Client) -> None:
        c.send(f.frame(f.SETTINGS, 0, 0, struct.pack(">HI", 0x7777, 123)))
        await c.no_error()
        await c.serves()

    run(case)


def test_6_5_2_the_server_advertises_max_header_list_size() -> None:
    async def case(c: Client) -> None:
        assert c.server_settings.get(f.MAX_HEADER_LIST_SIZE, 0) > 0

    run(case)


def test_6_5_3_values_in_one_settings_frame_apply_in_order() -> None:
    async def case(c: Client) -> None:
        c.send(c.headers(1), f.frame(f.DATA, f.END_STREAM, 1, message(b"x" * 100)))
        frames = await c.no_error()
        assert not any(x.kind == f.DATA for x in frames)  # a window of 0: nothing yet
        c.send(f.frame(f.SETTINGS, 0, 0, struct.pack(">HIHI", 4, 50, 4, 200)))
        frames = [x for x in await c.no_error() if x.kind == f.DATA]
        assert sum(len(x.payload) for x in frames) == 105

    run(case, settings={f.INITIAL_WINDOW_SIZE: 0})


# -- 6.7 PING, 6.8 GOAWAY -----------------------------------------------------------------------


def test_6_7_ping_is_answered_with_its_payload() -> None:
    async def case(c: Client) -> None:
        c.send(f.frame(f.PING, 0, 0, b"payload!"))
        frames = await c.no_error()
        assert [(x.flags, x.payload) for x in frames if x.kind == f.PING] == [(f.ACK, b"payload!")]

    run(case)


def test_6_7_a_ping_ack_is_not_answered() -> None:
    async def case(c: Client) -> None:
        c.send(f.frame(f.PING, f.ACK, 0, b"ignored!"))
        assert [x for x in await c.no_error() if x.kind == f.PING] == []

    run(case)


def test_6_7_ping_on_a_stream_is_a_connection_error() -> None:
    async def case(c: Client) -> None:
        c.send(f.frame(f.PING, 0, 1, b"12345678"))
        await c.connection_error(f.PROTOCOL_ERROR)

    run(case)


def test_6_7_ping_of_the_wrong_length_is_a_frame_size_error() -> None:
    async def case(c: Client) -> None:
        c.send(f.frame(f.PING, 0, 0, b"1234567"))
        await c.connection_error(f.FRAME_SIZE_ERROR)

    run(case)


def test_6_8_goaway_on_a_stream_is_a_connection_error() -> None:
    async def case(c: Client) -> None:
        c.send(f.frame(f.GOAWAY, 0, 1, struct.pack(">II", 0, 0)))
        await c.connection_error(f.PROTOCOL_ERROR)

    run(case)


def test_6_8_after_the_client_goaway_open_streams_still_finish() -> None:
    async def case(c: Client) -> None:
        c.send(c.headers(1), f.goaway(0, f.NO_ERROR))
        c.send(f.frame(f.DATA, f.END_STREAM, 1, message()))
        await c.answered(1)

    run(case)


# -- 6.9 WINDOW_UPDATE, flow control -------------------------------------------------------------


def test_6_9_a_window_update_of_0_on_the_connection_is_a_connection_error() -> None:
    async def case(c: Client) -> None:
        c.send(f.window_update(0, 0))
        await c.connection_error(f.PROTOCOL_ERROR)

    run(case)


def test_6_9_a_window_update_of_0_on_a_stream_is_a_stream_error() -> None:
    async def case(c: Client) -> None:
        c.send(c.headers(1), f.window_update(1, 0))
        await c.stream_error(1, f.PROTOCOL_ERROR)

    run(case)


def test_6_9_a_window_update_of_the_wrong_length_is_a_frame_size_error() -> None:
    async def case(c: Client) -> None:
        c.send(f.frame(f.WINDOW_UPDATE, 0, 0, b"\x00\x00\x01"))
        await c.connection_error(f.FRAME_SIZE_ERROR)

    run(case)


def test_6_9_1_a_connection_window_over_the_maximum_is_a_flow_control_error() -> None:
    async def case(c: Client) -> None:
        c.send(f.window_update(0, 2**31 - 1))
        await c.connection_error(f.FLOW_CONTROL_ERROR)

    run(case)


def test_6_9_1_a_stream_window_over_the_maximum_is_a_stream_error() -> None:
    async def case(c: Client) -> None:
        c.send(c.headers(1), f.window_update(1, 2**31 - 1))
        await c.stream_error(1, f.FLOW_CONTROL_ERROR)

    run(case)


CHUNK = message(bytes((1 << 20) - 5))  # one request message of 1 MiB in one DATA frame


def test_6_9_1_data_past_the_connection_window_is_a_flow_control_error() -> None:
    """Requests nobody reads hold the windows: past the connection's, the connection ends."""

    async def case(c: Client) -> None:
        window = c.server_settings[f.INITIAL_WINDOW_SIZE]
        streams = 64 * (1 << 20) // window  # the connection window pbd grants: 64 MiB
        for i in range(streams):
            c.send(c.headers(1 + 2 * i, request(HOLD)))
            c.send(*(f.frame(f.DATA, 0, 1 + 2 * i, CHUNK) for _ in range(window // len(CHUNK))))
            await c.writer.drain()
        c.send(c.headers(1 + 2 * streams, request(HOLD)), f.frame(f.DATA, 0, 1 + 2 * streams, b"x"))
        await c.connection_error(f.FLOW_CONTROL_ERROR)

    run(case)


def test_6_9_1_data_past_a_stream_window_is_a_stream_error() -> None:
    async def case(c: Client) -> None:
        window = c.server_settings[f.INITIAL_WINDOW_SIZE]
        c.send(c.headers(1, request(HOLD)))
        c.send(*(f.frame(f.DATA, 0, 1, CHUNK) for _ in range(window // len(CHUNK))))
        c.send(f.frame(f.DATA, 0, 1, b"x"))
        await c.stream_error(1, f.FLOW_CONTROL_ERROR)

    run(case)


def test_6_9_2_an_initial_window_size_that_overflows_a_stream_window_is_an_error() -> None:
    async def case(c: Client) -> None:
        c.send(c.headers(1), f.window_update(1, 2**31 - 1 - 1000))
        await c.no_error()
        c.send(f.settings({f.INITIAL_WINDOW_SIZE: 2000}))
        await c.connection_error(f.FLOW_CONTROL_ERROR)

    run(case, settings={f.INITIAL_WINDOW_SIZE: 1000})


def test_6_9_2_initial_window_size_changes_the_windows_of_open_streams() -> None:
    async def case(c: Client) -> None:
        c.send(c.call(1, b"x" * 1000))
        frames = await c.no_error()
        assert sum(len(x.payload) for x in frames if x.kind == f.DATA) == 100
        c.send(f.settings({f.INITIAL_WINDOW_SIZE: 50}))  # 100 sent, window 50: -50
        frames = await c.no_error()
        assert not any(x.kind == f.DATA for x in frames)
        c.send(f.settings({f.INITIAL_WINDOW_SIZE: 2000}))
        frames = await c.no_error()
        assert sum(len(x.payload) for x in frames if x.kind == f.DATA) == 905

    run(case, settings={f.INITIAL_WINDOW_SIZE: 100})


# -- 6.10 CONTINUATION ---------------------------------------------------------------------------


def test_6_10_continuation_frames_complete_a_field_block() -> None:
    async def case(c: Client) -> None:
        block = c.block_of(request())
        c.send(
            f.frame(f.HEADERS, 0, 1, block[:5]),
            f.frame(f.CONTINUATION, 0, 1, block[5:20]),
            f.frame(f.CONTINUATION, f.END_HEADERS, 1, block[20:]),
            f.frame(f.DATA, f.END_STREAM, 1, message()),
        )
        await c.answered(1)

    run(case)


def test_6_10_continuation_after_end_headers_is_a_connection_error() -> None:
    async def case(c: Client) -> None:
        c.send(c.headers(1), f.frame(f.CONTINUATION, f.END_HEADERS, 1, b""))
        await c.connection_error(f.PROTOCOL_ERROR)

    run(case)


def test_6_10_continuation_on_stream_0_is_a_connection_error() -> None:
    async def case(c: Client) -> None:
        c.send(f.frame(f.CONTINUATION, f.END_HEADERS, 0, b""))
        await c.connection_error(f.PROTOCOL_ERROR)

    run(case)


# -- 8.1 message framing, 8.2 fields, 8.3 pseudo-headers -----------------------------------------


def _malformed(fields: list[tuple[bytes, bytes]], trailers: bool = False) -> None:
    """Section 8.1.1: a malformed request is a stream error PROTOCOL_ERROR, and never served."""

    async def case(c: Client) -> None:
        if trailers:
            c.send(c.headers(1), f.frame(f.DATA, 0, 1, message()))
            c.send(c.headers(1, fields, end_stream=True))
        else:
            c.send(c.headers(1, fields), f.frame(f.DATA, f.END_STREAM, 1, message()))
        frames = await c.stream_error(1, f.PROTOCOL_ERROR)
        assert [x.kind for x in frames if x.stream == 1] == [f.RST_STREAM], frames

    run(case)


def test_8_1_1_content_length_less_than_the_data_is_malformed() -> None:
    _malformed(request(ECHO, (b"content-length", b"3")))


def test_8_1_1_content_length_more_than_the_data_is_malformed() -> None:
    _malformed(request(ECHO, (b"content-length", b"300")))


def test_8_1_1_a_matching_content_length_is_served() -> None:
    async def case(c: Client) -> None:
        c.send(c.headers(1, request(ECHO, (b"content-length", str(len(message())).encode()))))
        c.send(f.frame(f.DATA, f.END_STREAM, 1, message()))
        await c.answered(1)

    run(case)


@pytest.mark.parametrize(
    "name",
    [b"X-Upper", b"x header", b"x:colon", b"", b"x\x7f", b"\xc3\xa9"],
    ids=["uppercase", "space", "colon", "empty", "DEL", "non-ASCII"],
)
def test_8_2_1_an_invalid_field_name_is_malformed(name: bytes) -> None:
    _malformed(request(ECHO, (name, b"v")))


@pytest.mark.parametrize(
    "value",
    [b"a\x00b", b"a\rb", b"a\nb", b" lead", b"trail ", b"\ttab"],
    ids=["NUL", "CR", "LF", "leading space", "trailing space", "leading tab"],
)
def test_8_2_1_an_invalid_field_value_is_malformed(value: bytes) -> None:
    _malformed(request(ECHO, (b"x-value", value)))


@pytest.mark.parametrize(
    "name", [b"connection", b"proxy-connection", b"keep-alive", b"transfer-encoding", b"upgrade"]
)
def test_8_2_2_a_connection_specific_field_is_malformed(name: bytes) -> None:
    _malformed(request(ECHO, (name, b"x")))


def test_8_2_2_te_other_than_trailers_is_malformed() -> None:
    fields = [x for x in request() if x[0] != b"te"] + [(b"te", b"gzip")]
    _malformed(fields)


@pytest.mark.parametrize(
    "fields",
    [
        [(b":method", b"POST"), (b":unknown", b"x")],
        [(b":method", b"POST"), (b":status", b"200")],
        [(b"x-first", b"1"), (b":method", b"POST")],
        [(b":method", b"POST"), (b":method", b"POST")],
        [(b":method", b"POST"), (b":path", ECHO)],
    ],
    ids=["unknown", "a response's", "after a regular field", "twice", "duplicate :path"],
)
def test_8_3_a_bad_pseudo_header_is_malformed(fields: list[tuple[bytes, bytes]]) -> None:
    _malformed(fields + [x for x in request() if x[0] != b":method"])


def test_8_3_a_pseudo_header_in_trailers_is_malformed() -> None:
    _malformed([(b":path", ECHO)], trailers=True)


@pytest.mark.parametrize("missing", [b":method", b":scheme", b":path"])
def test_8_3_1_a_request_without_a_required_pseudo_header_is_malformed(missing: bytes) -> None:
    _malformed([x for x in request() if x[0] != missing])


def test_8_3_1_an_empty_path_is_malformed() -> None:
    _malformed([(n, b"" if n == b":path" else v) for n, v in request()])


def test_10_5_1_a_header_list_past_the_advertised_size_is_not_served() -> None:
    """SETTINGS_MAX_HEADER_LIST_SIZE is advisory for the client; past it the server need not
    serve the request (it answers it instead: for gRPC, with a status)."""

    async def case(c: Client) -> None:
        limit = c.server_settings.get(f.MAX_HEADER_LIST_SIZE, 16384)
        c.send(c.headers(1, request(ECHO, (b"x-big", b"v" * limit))))
        c.send(f.frame(f.DATA, f.END_STREAM, 1, message()))
        frames = [x for x in await c.until_ping() if x.stream == 1]
        assert f.DATA not in [x.kind for x in frames], frames
        await c.serves()

    run(case)
