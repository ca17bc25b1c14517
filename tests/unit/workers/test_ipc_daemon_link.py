"""DaemonLink and the worker's reader thread: metric queries answered while another thread
reads every frame (the race where the reader files a reply just before the asker takes the
read lock must not leave the asker waiting for a frame that never comes)."""

from __future__ import annotations

import os
import socket
import threading

from pbd_wire import worker_pb2 as wpb
from pbd_wire.framing import SocketFrameReader, encode_frame
from pbd_worker.ipc.daemon_link import DaemonLink
from pbd_worker.ipc.inbox import Inbox

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


def test_queries_while_the_reader_thread_reads() -> None:
    address = f"@pbd-test-link-{os.getpid()}"
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind("\0" + address[1:])
    server.listen(1)
    daemon = threading.Thread(target=_fake_daemon, args=(server, 10), daemon=True)
    daemon.start()
    link = DaemonLink(address, lambda: None)
    link.connect()
    cancelled: list[int] = []
    inbox = Inbox(link, cancelled.extend, lambda execute: None).start()
    values: list[float] = []

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
        releases = []
        while (message := inbox.next()) is not None:
            releases.append(message.release.batch_ids[0])
        # Every non-reply frame reached the main loop, in order, whoever read it.
        assert releases == list(range(1, QUERIES + 1))
        assert cancelled == list(range(1, 11))
    finally:
        link.disconnect()
        server.close()
        daemon.join(HANG_GUARD_S)
