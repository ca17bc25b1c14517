"""What one HTTP/2 connection may cost the server: the sizes it advertises and holds the client
to, its timeouts, and the budgets a misbehaving client spends.

A client that spends a budget (more PINGs than the ping policy allows, SETTINGS or empty
frames past their rate, streams reset before their answer past theirs) gets GOAWAY
``ENHANCE_YOUR_CALM`` and the connection ends: each such frame costs the server as much as a
useful one and does nothing for the client, so a flood of them is cut off after a bounded
amount of work rather than answered frame by frame. docs/transport.md lists what each attack
gets. One :class:`Limits` serves every connection of a server; nothing here is global.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

MIB = 1024 * 1024


@dataclass(frozen=True)
class Rate:
    """At most ``count`` events per ``seconds`` (see :class:`Budget`)."""

    count: int
    seconds: float


@dataclass(frozen=True)
class Limits:
    # Receive windows the server opens (SETTINGS_INITIAL_WINDOW_SIZE, and the connection's):
    # credited again as the application takes the data, so they bound what a client can make
    # one connection hold, and a client sending a large message never waits on them.
    stream_window: int = 16 * MIB
    connection_window: int = 64 * MIB
    max_frame: int = MIB  # SETTINGS_MAX_FRAME_SIZE
    # Open streams (SETTINGS_MAX_CONCURRENT_STREAMS). A stream counts until its answer has
    # left, so a client that never reads holds at most this many answers.
    max_streams: int = 1024
    # SETTINGS_MAX_HEADER_LIST_SIZE (RFC 9113 section 6.5.2 sizes: name + value + 32 per
    # field), as grpc core (Triton) advertises it; a larger request is answered, not served.
    max_header_list: int = 16 * 1024
    # A header block's encoded bytes (HEADERS and CONTINUATION, each frame's 9-byte header
    # counted), and what it may decode to before decoding stops: past either the connection
    # ends (ENHANCE_YOUR_CALM), as the HPACK table can no longer be kept in step.
    max_header_block: int = 64 * 1024
    max_decoded_header_list: int = 64 * 1024
    # Seconds a new connection has for its preface and first SETTINGS (TLS included), and a
    # header block for its CONTINUATION frames (or any frame the core keeps part way in); an
    # idle connection (no open stream) is closed with GOAWAY NO_ERROR after ``idle_timeout``
    # to twice that. 0: no limit.
    handshake_timeout: float = 10.0
    header_timeout: float = 10.0
    idle_timeout: float = 300.0
    # grpc core's ping policy (Triton's --grpc-http2-* flags): a PING that comes sooner than
    # ``min_ping_interval`` after the last one while the server sent no HEADERS or DATA since
    # (two hours when no call is open, unless ``pings_without_calls``) is a strike; more than
    # ``max_ping_strikes`` ends the connection ("too_many_pings"). 0 strikes: no policing.
    min_ping_interval: float = 300.0
    max_ping_strikes: int = 2
    pings_without_calls: bool = False
    # SETTINGS frames; streams the client resets before their answer began, with the stream
    # errors the server answers (rapid reset, CVE-2023-44487); DATA frames without data or
    # END_STREAM and CONTINUATION frames without data or END_HEADERS (CVE-2019-9518).
    settings_rate: Rate = Rate(100, 10.0)
    reset_rate: Rate = Rate(200, 10.0)
    empty_rate: Rate = Rate(100, 10.0)
    # Streams the server reset whose late frames are still ignored (RFC 9113 section 5.1,
    # "closed"); older ones answer such frames with RST_STREAM STREAM_CLOSED.
    reset_memory: int = 128


DEFAULT_LIMITS = Limits()
IDLE_PING_INTERVAL = 2 * 3600.0  # grpc core's minimum between pings with no call open


class Budget:
    """Counts events against a :class:`Rate`: ``spend`` is False once more than ``count``
    came within ``seconds``. The clock is read only when the count runs out, so a budget
    costs an addition per event: the window starts at the connection's start or where the
    previous one ran out, and up to twice ``count`` may come in a burst across two windows."""

    __slots__ = ("count", "seconds", "left", "since")

    def __init__(self, rate: Rate, now: float) -> None:
        self.count = rate.count
        self.seconds = rate.seconds
        self.left = rate.count
        self.since = now

    def spend(self, clock: Callable[[], float]) -> bool:
        self.left -= 1
        if self.left >= 0:
            return True
        now = clock()
        if now - self.since < self.seconds:
            return False
        self.since = now
        self.left = self.count - 1
        return True
