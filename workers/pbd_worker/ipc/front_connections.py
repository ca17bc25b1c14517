"""The worker's end of the direct path: front ends that send their requests here themselves.

With ``pbd serve --frontends N`` every request of a front-end process used to cross the daemon
twice (in, and the result back out); the daemon, one process for all of them, became the
bottleneck. A worker given ``Initialize.front_socket`` therefore listens on that abstract Unix
socket once initialized, and a front end talks to it as the daemon does: ``Execute`` ->
``ExecuteResult``, ``Release``, ``CancelRequests``, the response sender's ``StreamedResponse``
(worker.proto, "The direct path"). Everything else (BLS, metrics, heartbeats, spans) stays
with the daemon.

- Who may connect: a process of our own uid (or root), checked with SO_PEERCRED at accept,
  whose first frame is a ``FrontHello`` with the instance's token. A connection that says
  nothing for ``HELLO_TIMEOUT_S``, or something else first, is closed. The hello is read when
  it arrives, never waited for: the main thread serves the daemon meanwhile.
- Ids: front end k numbers its requests and batches in [front_base(k) + 1, front_base(k + 1)),
  so an id names its link and runs through the executor unchanged. A frame with an id out of
  its link's range is a bug of the front end, and its link is closed. Streamed responses are
  held under ids of the worker's own (top bit); a link may release those it was sent.
- Reading never blocks the main thread: a link's bytes are taken as they come (MSG_DONTWAIT)
  and cut into frames, kept in the link's inbox for ``WorkerLoop.next``. With no coroutine
  alive the main loop waits in ``wait`` (one poll over the daemon's socket, the listener and
  every link; the daemon's first); with coroutines, the event loop watches them (``attach``).
  A worker without a front socket never gets here: its loop reads the daemon as before.
- Sending: results from the main thread, streamed responses from model threads, so a link
  sends under its lock, one ``sendall`` per call. Its socket blocks (fronts are pbd's own and
  read what they are sent), but no longer than ``SEND_TIMEOUT_S``: then the link is cut.
  A thread other than the main one only shuts a broken link down; the main thread then reads
  its EOF and cleans up, so links change on one thread only.
- A link that ends (EOF, error, a frame it may not send) takes what it held with it: its
  batches' and responses' output blocks are freed, its live requests cancelled. Its frames
  not run yet are dropped; a result or response for it is dropped, its blocks freed.
- The daemon gone, finalize, close: the listener and every link close. In a process the model
  forked, our copies of their descriptors are closed (no shutdown: the worker's connections
  stay up), so the child can neither send on them nor keep them open.
"""

from __future__ import annotations

import collections
import contextlib
import hmac
import logging
import os
import select
import socket
import struct
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Protocol

from google.protobuf.message import DecodeError

from pbd_wire import front_base, front_of
from pbd_wire import worker_pb2 as wpb
from pbd_wire.framing import FrameError, FrameSplitter, encode_frame, socket_address

if TYPE_CHECKING:
    from asyncio import AbstractEventLoop, TimerHandle

log = logging.getLogger("pbd_worker")

HELLO_TIMEOUT_S = 5.0
SEND_TIMEOUT_S = 30.0
BACKLOG = 128
# One read at most; read into a buffer kept for the process's life (``_receive``).
_READ_BYTES = 1 << 18
_PEERCRED = struct.Struct("3i")  # struct ucred: pid, uid, gid
_HELD_BIT = 1 << 63  # live_requests.STREAM_HELD_BIT (not imported: that pulls the model API)
# The highest front index whose ids still fit below the held bit.
_MAX_FRONT = (_HELD_BIT >> 40) - 2


class Holder(Protocol):
    """What a link's cleanup uses of the executor (``pbd_worker.executor.BatchExecutor``)."""

    def held_batches(self) -> list[int]: ...
    def release(self, batch_ids: list[int]) -> None: ...
    def sweep_inputs(self) -> None: ...


class Live(Protocol):
    """What a link's cleanup uses of ``pbd_worker.live_requests.LiveRequests``."""

    def live_ids(self) -> list[int]: ...
    def cancel(self, request_ids: list[int]) -> None: ...


class FrontConnection:
    """One accepted front end: its socket, the frames it sent that wait for the main loop, and
    the streamed-response ids it may release."""

    def __init__(self, sock: socket.socket, front: int, splitter: FrameSplitter) -> None:
        self.sock = sock
        self.front = front
        self.first, self.end = front_base(front) + 1, front_base(front + 1)
        self.splitter = splitter
        self.inbox: collections.deque[wpb.DaemonToWorker] = collections.deque()
        self.lock = threading.Lock()  # sending, ``held`` and ``closed``
        self.held: set[int] = set()  # streamed responses' held ids sent here, not released yet
        self.closed = False

    def __repr__(self) -> str:
        return f"front link {self.front}"

    def owns(self, ident: int) -> bool:
        return self.first <= ident < self.end

    def send(self, messages: Sequence[wpb.WorkerToDaemon], held: Iterable[int] = ()) -> bool:
        """Send ``messages`` in one write, ``held`` becoming ours to release; False when the
        link is closed or broke (the caller frees what the messages hold)."""
        if len(messages) == 1:  # nearly always: one result
            data = encode_frame(messages[0].SerializeToString())
        else:
            data = b"".join([encode_frame(m.SerializeToString()) for m in messages])
        with self.lock:
            if self.closed:
                return False
            if held:
                held = [h for h in held if h]
                self.held.update(held)
            try:
                self.sock.sendall(data)
                return True
            except OSError as exc:
                log.warning("%r: sending failed (%s); closing it", self, exc)
                self.held.difference_update(held)
                # The main thread reads the EOF this makes and cleans up.
                with contextlib.suppress(OSError):
                    self.sock.shutdown(socket.SHUT_RDWR)
                return False

    def take_owned(self, ids: Iterable[int]) -> list[int]:
        """Of ``ids`` (a Release's), those this link may release: its batches, and the streamed
        responses it was sent (each once)."""
        owned = []
        with self.lock:
            for ident in ids:
                if ident & _HELD_BIT:
                    if ident in self.held:
                        self.held.discard(ident)
                        owned.append(ident)
                elif self.owns(ident):
                    owned.append(ident)
        return owned

    def problem(self, message: wpb.DaemonToWorker) -> str | None:
        """Why ``message`` may not come on this link; None when it may."""
        kind = message.WhichOneof("kind")
        if kind == "execute":
            execute = message.execute
            first, end = self.first, self.end
            batch_id = execute.batch_id
            outside: int | None = None if first <= batch_id < end else batch_id
            if outside is None:  # nearly always one request: no list, no call
                for request in execute.requests:
                    ident = request.request_id
                    if not first <= ident < end:
                        outside = ident
                        break
            if outside is None and execute.release:
                outside = self._outside([i for i in execute.release if not i & _HELD_BIT])
        elif kind == "release":
            outside = self._outside([i for i in message.release.batch_ids if not i & _HELD_BIT])
        elif kind == "cancel":
            outside = self._outside(message.cancel.request_ids)
        else:
            return f"a {kind} frame"
        if outside is not None:
            return f"id {outside} outside its range [{self.first}, {self.end})"
        return None

    def _outside(self, ids: Iterable[int]) -> int | None:
        """The first of ``ids`` outside this link's range; None when all are in it."""
        first, end = self.first, self.end
        for ident in ids:
            if not first <= ident < end:
                return ident
        return None


class _Unintroduced:
    """An accepted connection that has not said hello yet."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.splitter = FrameSplitter()
        self.deadline = time.monotonic() + HELLO_TIMEOUT_S


_instances: weakref.WeakSet[FrontConnections] = weakref.WeakSet()
_registered = False


class FrontConnections:
    """The listener and the front links of one worker. Everything but ``route`` and
    ``send_result`` (any thread) runs on the main thread."""

    def __init__(
        self,
        daemon_send: Callable[..., None],
        executor: Callable[[], Holder | None],
        live: Callable[[], Live],
    ) -> None:
        self.daemon_send = daemon_send
        self._executor = executor
        self._live = live
        self.listener: socket.socket | None = None
        self.token = b""
        # By front index; changed on the main thread only, read by any (``route``).
        self.links: dict[int, FrontConnection] = {}
        self._turn = 0  # where ``take`` looks first
        self._by_fd: dict[int, FrontConnection | _Unintroduced | None] = {}  # None: the listener
        self._hellos = 0  # entries of _by_fd that are connections yet to say hello
        self._poll: select.poll | None = None  # over _by_fd and the daemon's socket
        self._poll_daemon = -1
        self._links_poll: select.poll | None = None  # over _by_fd alone (``read_now``)
        # When each Execute waiting in an inbox was read (monotonic), by batch id: kept only
        # for a model that batches here (``pbd_worker.front_batcher``), whose delay counts from it.
        self.arrived: dict[int, float] | None = None
        self._loop: AbstractEventLoop | None = None  # the event loop watching us (``attach``)
        self._arrived: Callable[[], None] | None = None
        self._expiry: TimerHandle | None = None
        self._reads = memoryview(bytearray(_READ_BYTES))  # main thread only, as reading is
        _remember(self)

    @property
    def active(self) -> bool:
        """Listening (or links left): the main loop must watch more than the daemon."""
        return bool(self._by_fd)

    # -- listening --------------------------------------------------------------------------------

    def listen(self, address: str, token: str) -> None:
        """Listen at ``address`` (empty: nowhere) for front ends presenting ``token``, after
        closing what an earlier Initialize opened."""
        self.close()
        if not address:
            return
        if not token:
            log.warning("no front token with front socket %s: not listening", address)
            return
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.bind(socket_address(address))
            sock.listen(BACKLOG)
            sock.setblocking(False)
        except OSError as exc:
            sock.close()
            log.error("cannot listen for front ends at %s: %s", address, exc)
            return
        self.listener, self.token = sock, token.encode()
        self._watch(sock, None)
        log.debug("listening for front ends at %s", address)

    def close(self) -> None:
        """Close the listener and every link (their cleanup runs)."""
        for link in list(self.links.values()):
            self._drop(link, None)
        for fd, entry in list(self._by_fd.items()):
            if isinstance(entry, _Unintroduced):
                self._unwatch(fd)
                entry.sock.close()
        if self.listener is not None:
            self._unwatch(self.listener.fileno())
            self.listener.close()
            self.listener = None
        self.token = b""

    def forget_after_fork(self) -> None:
        """In a process the model forked: close our copies of the descriptors, without
        shutdown (the worker's connections stay up), and forget them."""
        socks = [e.sock for e in self._by_fd.values() if e is not None]
        if self.listener is not None:
            socks.append(self.listener)
        for link in self.links.values():
            link.lock = threading.Lock()  # the copy may be held by a thread not here
            link.closed = True
            link.inbox.clear()
        for sock in socks:
            with contextlib.suppress(OSError):
                sock.close()
        self.listener, self.token = None, b""
        self.links.clear()
        self._by_fd.clear()
        self._hellos = 0
        self._poll, self._loop, self._arrived, self._expiry = None, None, None, None
        self._links_poll = None

    # -- reading (main thread) --------------------------------------------------------------------

    def ready(self) -> bool:
        """A frame of a link waits in its inbox."""
        for link in self.links.values():  # noqa: SIM110 - no generator on the hot loop
            if link.inbox:
                return True
        return False

    def take(self) -> tuple[FrontConnection, wpb.DaemonToWorker] | None:
        """The next frame of a link (and the link), one link after the other."""
        # Not by reordering ``links``: model threads look links up there meanwhile (``route``).
        links = list(self.links.values())
        if len(links) == 1:
            (link,) = links
            return (link, link.inbox.popleft()) if link.inbox else None
        for i in range(len(links)):
            link = links[(self._turn + i) % len(links)]
            if link.inbox:
                self._turn = (self._turn + i + 1) % len(links)
                return link, link.inbox.popleft()
        return None

    def wait(self, daemon: socket.socket) -> bool:
        """Wait until the daemon's socket is readable (True) or a link's frame is here
        (False), accepting connections and reading hellos meanwhile. The daemon goes first:
        when both are ready, True."""
        daemon_fd = daemon.fileno()
        while True:
            poller = self._poller(daemon_fd)
            timeout = 0 if self.ready() else self._expiry_ms()
            events = poller.poll(timeout)
            for fd, _ in events:
                if fd == daemon_fd:
                    return True
            for fd, _ in events:
                self._readable(fd)
            if self._hellos:
                self._expire()
            if self.ready():
                return False

    def read_now(self, timeout_s: float = 0.0) -> None:
        """Read what the links have sent by now into their inboxes, waiting up to
        ``timeout_s`` when nothing is there yet (a batch waiting to fill): the daemon's
        socket is left to ``wait``."""
        poller = self._links_poll
        if poller is None:
            poller = self._links_poll = select.poll()
            for fd in self._by_fd:
                poller.register(fd, select.POLLIN)
        timeout_ms = 0.0 if self.ready() else timeout_s * 1000.0
        for fd, _ in poller.poll(timeout_ms):
            self._readable(fd)
        if self._hellos:
            self._expire()

    @staticmethod
    def put_back(link: FrontConnection, messages: Sequence[wpb.DaemonToWorker]) -> None:
        """Return frames taken from ``link`` (in the order taken) to the head of its inbox:
        they come out of ``take`` again first."""
        if not link.closed:
            link.inbox.extendleft(reversed(messages))

    def attach(self, loop: AbstractEventLoop, arrived: Callable[[], None]) -> None:
        """Have ``loop`` watch the listener and the links while it runs (coroutines are
        alive); ``arrived`` is called when a link's frame is here."""
        if self._loop is not None:
            return
        self._loop, self._arrived = loop, arrived
        for fd in self._by_fd:
            loop.add_reader(fd, self._on_loop_readable, fd)
        self._schedule_expiry()

    def detach(self) -> None:
        loop, self._loop, self._arrived = self._loop, None, None
        if loop is None:
            return
        for fd in self._by_fd:
            loop.remove_reader(fd)
        if self._expiry is not None:
            self._expiry.cancel()
            self._expiry = None

    def _on_loop_readable(self, fd: int) -> None:
        self._readable(fd)
        if self._hellos:
            self._expire()
        if self.ready() and self._arrived is not None:
            self._arrived()

    def _readable(self, fd: int) -> None:
        if fd not in self._by_fd:
            return  # closed by an earlier event of the same round
        entry = self._by_fd[fd]
        if entry is None:
            self._accept()
        elif isinstance(entry, _Unintroduced):
            self._read_hello(fd, entry)
        else:
            self._read_link(entry)

    def _accept(self) -> None:
        assert self.listener is not None
        for _ in range(BACKLOG):
            try:
                sock, _address = self.listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                log.warning("accepting a front end failed: %s", exc)
                return
            try:
                _pid, uid, _gid = _PEERCRED.unpack(
                    sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _PEERCRED.size)
                )
                if uid not in (0, os.getuid()):
                    log.warning("refused a front end of uid %d", uid)
                    sock.close()
                    continue
                sock.setblocking(True)
                seconds = int(SEND_TIMEOUT_S)
                timeval = struct.pack("ll", seconds, int((SEND_TIMEOUT_S - seconds) * 1e6))
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, timeval)
            except OSError as exc:
                log.warning("a front end's connection failed: %s", exc)
                sock.close()
                continue
            pending = _Unintroduced(sock)
            self._watch(sock, pending)
            self._schedule_expiry()

    def _read_hello(self, fd: int, pending: _Unintroduced) -> None:
        frames = _receive(pending.sock, pending.splitter, self._reads)
        if frames is not None and not frames:
            return  # part of a frame so far
        self._unwatch(fd)
        why = "it closed the connection"
        hello = None
        if frames:
            try:
                first = wpb.DaemonToWorker.FromString(bytes(frames[0]))
            except DecodeError:
                first = wpb.DaemonToWorker()
            if first.WhichOneof("kind") != "front_hello":
                why = "its first frame is not a hello"
            elif not hmac.compare_digest(first.front_hello.token.encode(), self.token):
                why = "wrong token"
            elif first.front_hello.front > _MAX_FRONT:
                why = f"front index {first.front_hello.front} out of range"
            else:
                hello = first.front_hello
        if hello is None or frames is None:
            log.warning("refused a front end: %s", why)
            pending.sock.close()
            return
        old = self.links.get(hello.front)
        if old is not None:
            self._drop(old, "the front end connected again")
        executor = self._executor()
        if executor is not None:  # a front end that replaces a dead one: let go of its arena
            executor.sweep_inputs()
        link = FrontConnection(pending.sock, hello.front, pending.splitter)
        self.links[hello.front] = link
        self._watch(link.sock, link)
        log.debug("front end %d connected", hello.front)
        self._file(link, frames[1:])

    def _read_link(self, link: FrontConnection) -> None:
        frames = _receive(link.sock, link.splitter, self._reads)
        if frames is None:
            self._drop(link, "it closed the connection")
        else:
            self._file(link, frames)

    def _file(self, link: FrontConnection, frames: list[bytes | bytearray | memoryview]) -> None:
        arrived = self.arrived
        now = time.monotonic() if arrived is not None else 0.0
        for frame in frames:
            try:
                message = wpb.DaemonToWorker.FromString(frame)  # type: ignore[arg-type]  # any buffer
            except DecodeError:
                self._drop(link, "an undecodable frame", warn=True)
                return
            problem = link.problem(message)
            if problem is not None:
                self._drop(link, f"it sent {problem}", warn=True)
                return
            link.inbox.append(message)
            if arrived is not None and message.WhichOneof("kind") == "execute":
                arrived[message.execute.batch_id] = now

    def _expiry_ms(self) -> int | None:
        if not self._hellos:
            return None
        deadlines = [e.deadline for e in self._by_fd.values() if isinstance(e, _Unintroduced)]
        if not deadlines:
            return None
        return max(int((min(deadlines) - time.monotonic()) * 1000) + 1, 0)

    def _expire(self) -> None:
        now = time.monotonic()
        for fd, entry in list(self._by_fd.items()):
            if isinstance(entry, _Unintroduced) and entry.deadline <= now:
                log.warning("refused a front end: no hello within %gs", HELLO_TIMEOUT_S)
                self._unwatch(fd)
                entry.sock.close()

    def _schedule_expiry(self) -> None:
        loop = self._loop
        if loop is None or self._expiry is not None:
            return
        wait = self._expiry_ms()
        if wait is not None:
            self._expiry = loop.call_later(wait / 1000, self._expired_on_loop)

    def _expired_on_loop(self) -> None:
        self._expiry = None
        self._expire()
        self._schedule_expiry()

    # -- watching ---------------------------------------------------------------------------------

    def _watch(self, sock: socket.socket, entry: FrontConnection | _Unintroduced | None) -> None:
        fd = sock.fileno()
        self._by_fd[fd] = entry
        self._hellos = sum(isinstance(e, _Unintroduced) for e in self._by_fd.values())
        self._poll = self._links_poll = None
        if self._loop is not None:
            self._loop.add_reader(fd, self._on_loop_readable, fd)

    def _unwatch(self, fd: int) -> None:
        if self._by_fd.pop(fd, False) is False:
            return
        self._hellos = sum(isinstance(e, _Unintroduced) for e in self._by_fd.values())
        self._poll = self._links_poll = None
        if self._loop is not None:
            self._loop.remove_reader(fd)

    def _poller(self, daemon_fd: int) -> select.poll:
        if self._poll is None or self._poll_daemon != daemon_fd:
            self._poll, self._poll_daemon = select.poll(), daemon_fd
            for fd in (daemon_fd, *self._by_fd):
                self._poll.register(fd, select.POLLIN)
        return self._poll

    # -- cleanup ----------------------------------------------------------------------------------

    def _drop(self, link: FrontConnection, why: str | None, warn: bool = False) -> None:
        """Close ``link``: free the output blocks it held, cancel its live requests."""
        if why is not None:
            (log.warning if warn else log.debug)("closing %r: %s", link, why)
        if self.links.get(link.front) is link:
            del self.links[link.front]
        with link.lock:
            link.closed = True
            held, link.held = link.held, set()
        link.inbox.clear()
        if self.arrived:
            for ident in [i for i in self.arrived if front_of(i) == link.front]:
                del self.arrived[ident]
        self._unwatch(link.sock.fileno())
        with contextlib.suppress(OSError):
            link.sock.shutdown(socket.SHUT_RDWR)  # a forked child's copy must not keep it up
        link.sock.close()
        front = link.front
        executor = self._executor()
        if executor is not None:
            batches = [b for b in executor.held_batches() if front_of(b) == front]
            executor.release([b for b in batches if not b & _HELD_BIT] + sorted(held))
            executor.sweep_inputs()  # the front end's arena, if it is already gone
        live = self._live()
        live.cancel([r for r in live.live_ids() if front_of(r) == front])

    # -- sending (any thread) ---------------------------------------------------------------------

    def send_result(self, link: FrontConnection, frame: wpb.WorkerToDaemon) -> None:
        """An ExecuteResult for a batch of ``link``; dropped (its blocks freed) when the
        link is gone."""
        self.send_results(link, [frame])

    def send_results(self, link: FrontConnection, frames: Sequence[wpb.WorkerToDaemon]) -> None:
        """ExecuteResults for batches of ``link``, in one write; dropped (their blocks freed)
        when the link is gone."""
        if not link.send(frames):
            self._free([frame.result.batch_id for frame in frames])

    def route(self, *messages: wpb.WorkerToDaemon) -> None:
        """``LiveRequests.send``: streamed responses go where their request came from."""
        if len(messages) == 1 and front_of(messages[0].streamed.request_id) < 0:
            self.daemon_send(*messages)  # the daemon's request, nearly always
            return
        groups: dict[int, list[wpb.WorkerToDaemon]] = {}
        for message in messages:
            groups.setdefault(front_of(message.streamed.request_id), []).append(message)
        for front, group in groups.items():
            if front < 0:
                self.daemon_send(*group)
                continue
            held = [m.streamed.held for m in group if m.streamed.held]
            link = self.links.get(front)
            if link is None or not link.send(group, held):
                self._free(held)

    def _free(self, ids: list[int]) -> None:
        executor = self._executor()
        if ids and executor is not None:
            executor.release(ids)


def _receive(
    sock: socket.socket, splitter: FrameSplitter, reads: memoryview
) -> list[bytes | bytearray | memoryview] | None:
    """The frames now whole on ``sock`` (without waiting); None: the link ended (EOF, an
    error, a frame no peer may send). A frame may be a view of ``reads``, valid until the
    next read: the caller decodes it at once.

    Into ``reads``, not ``recv``: a ``recv(256 KiB)`` allocates that much for each read, which
    glibc serves with mmap (over its 128 KiB threshold), then shrinks with mremap and frees
    with munmap; strace counted the three syscalls for 57 % of a worker's calls behind a
    front end, and the page faults of each new mapping came on top."""
    try:
        n = sock.recv_into(reads, _READ_BYTES, socket.MSG_DONTWAIT)
    except (BlockingIOError, InterruptedError):
        return []
    except OSError:
        return None
    if not n:
        return None
    try:
        return splitter.split(reads[:n])
    except FrameError:
        return None


def _remember(links: FrontConnections) -> None:
    """Close the links of every FrontConnections in a forked child (``os.register_at_fork``)."""
    global _registered
    _instances.add(links)
    if not _registered:
        os.register_at_fork(after_in_child=_forget_in_child)
        _registered = True


def _forget_in_child() -> None:
    for links in list(_instances):
        links.forget_after_fork()
