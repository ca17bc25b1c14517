"""DaemonLink: metric queries answered while the main loop reads every other frame (the race
where the main loop files a reply just before the asker takes the read lock must not leave
the asker waiting for a frame that never comes)."""

from __future__ import annotations

import os
import socket
import threading

from pbd_wire import worker_pb2 as wpb
from pbd_wire.framing import SocketFrameReader, encode_frame
from pbd_worker.ipc.daemon_link import DaemonLink

QUERIES = 300
HANG_GUARD_S = 60.0  # only a hang goes past this


def _fake_daemon(server: socket.socket, cancels: int) -> None:
    """Answer each metric query; after each, also send a Release and a CancelRequests."""
    conn, _ = server.accept()
    with conn:
        reader = SocketFrameReader(conn)
        while (frame := reader.read()) is not None:
            message = wpb.WorkerToDaemon.FromString(frame)
            if message.WhichOneof("kind") != "metrics" or not message.metrics.query:
                continue
            query = message.metrics.query
            out = [
                wpb.DaemonToWorker(metric_reply=wpb.MetricReply(query=query, value=query)),
                wpb.DaemonToWorker(release=wpb.Release(batch_ids=[query])),
            ]
            if query <= cancels:
                out.append(wpb.DaemonToWorker(cancel=wpb.CancelRequests(request_ids=[query])))
            conn.sendall(b"".join(encode_frame(m.SerializeToString()) for m in out))


def test_queries_while_the_main_loop_reads() -> None:
    address = f"@pbd-test-link-{os.getpid()}"
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind("\0" + address[1:])
    server.listen(1)
    daemon = threading.Thread(target=_fake_daemon, args=(server, 10), daemon=True)
    daemon.start()
    link = DaemonLink(address, lambda: None)
    link.connect()
    values: list[float] = []
    frames: list[wpb.DaemonToWorker] = []

    def main_loop() -> None:  # as WorkerRuntime.converse reads
        while (message := link.next()) is not None:
            frames.append(message)

    reader = threading.Thread(target=main_loop, daemon=True)
    reader.start()

    def ask_all() -> None:
        for query in range(1, QUERIES + 1):
            values.append(link.ask(wpb.MetricUpdates(query=query)).value)

    asker = threading.Thread(target=ask_all, daemon=True)
    asker.start()
    asker.join(HANG_GUARD_S)
    try:
        assert not asker.is_alive(), f"ask() hung after {len(values)} replies"
        assert values == [float(q) for q in range(1, QUERIES + 1)]
        link.disconnect()
        reader.join(HANG_GUARD_S)
        assert not reader.is_alive()
        releases = [m.release.batch_ids[0] for m in frames if m.WhichOneof("kind") == "release"]
        cancelled = [m.cancel.request_ids[0] for m in frames if m.WhichOneof("kind") == "cancel"]
        # Every non-reply frame reached the main loop, in order, whoever read it.
        assert releases == list(range(1, QUERIES + 1))
        assert cancelled == list(range(1, 11))
    finally:
        link.disconnect()
        server.close()
        daemon.join(HANG_GUARD_S)
