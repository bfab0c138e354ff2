"""Interactive execs over the server's WebSocket route
(``GET /v1/sandboxes/{id}/execs/{eid}/ws``, docs/server.md): binary frames
in are the command's stdin; binary frames out are its output, the first
byte saying which stream (1 stdout, 2 stderr); a text frame in is a control
(``{"type": "resize", "rows", "cols"}`` or ``{"type": "close_stdin"}``);
the last frame out is a text frame with how the command ended (``{"exit":
...}`` or ``{"failed": ...}``), then the server closes. A text frame out
with ``{"error": ...}`` reports a control the server refused.

:class:`Interactive` (sync, ``websockets.sync``) and
:class:`AsyncInteractive` (asyncio, ``websockets.asyncio``) are the two
clients of it. The socket is opened here (a Unix socket or TCP) and
handed to websockets. Not over ``https://`` yet: with TLS done by the ssl
module on the socket, the sync client's handshake hung now and then in
tests (likely, not proven: websockets reads from one thread while the
caller writes from another, and one OpenSSL connection must not be used
by two threads at once), so both clients refuse it with
:class:`ConfigError` before anything is started.
"""

from __future__ import annotations

import asyncio
import json
import socket
from typing import Any, AsyncIterator, Iterator, Optional, Union
from urllib.parse import urlsplit

import websockets.asyncio.client as aws
import websockets.sync.client as sws
from websockets.exceptions import ConnectionClosed, InvalidStatus, WebSocketException

from ._ops import Data, Ending, _bytes, _result, parse_frame
from ._wire import Endpoint
from .errors import ConfigError, RequestTimeout, TransportError, error_for
from .types import OutputEvent, RunResult

#: The first byte of an output frame: which stream it is.
_STREAMS = {1: "stdout", 2: "stderr"}
#: Largest frame accepted (the daemon's output chunks are far smaller).
_MAX_FRAME = 16 << 20


def refuse_https(ep: Endpoint) -> None:
    """The interactive WebSocket is not offered over ``https://`` yet
    (module docstring)."""
    if ep.base_url.startswith("https://"):
        raise ConfigError(
            f"interactive commands over {ep.display}: not offered over https:// yet; "
            "use the server's unix:// or http:// address for them"
        )


def _open_socket(ep: Endpoint, timeout: Optional[float]) -> tuple[socket.socket, str]:
    """A connected socket to the server and the ``ws://`` base URL to
    speak over it."""
    refuse_https(ep)
    try:
        if ep.uds:
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.settimeout(timeout)
            s.connect(ep.uds)
            return s, "ws://strata"
        u = urlsplit(ep.base_url)
        s = socket.create_connection((u.hostname or "localhost", u.port or 80), timeout=timeout)
        return s, f"ws://{u.netloc}"
    except OSError as e:
        raise TransportError(f"WebSocket to {ep.display}: {e}") from e


def _refused(e: InvalidStatus) -> Exception:
    body = e.response.body or b""
    try:
        parsed: Any = json.loads(body)
    except ValueError:
        parsed = None
    return error_for(e.response.status_code, parsed, body.decode("utf-8", "replace"))


def _control(kind: str, **fields: int) -> str:
    return json.dumps({"type": kind, **fields})


class _Session:
    """What the two clients share: turning frames into events and the end."""

    def __init__(self, exec_id: str, pid: int) -> None:
        self.id = exec_id
        self.pid = pid
        self.result: Optional[RunResult] = None
        self._out = bytearray()
        self._err = bytearray()

    def _frame(self, msg: Union[str, bytes]) -> Optional[OutputEvent]:
        """An output event, or ``None`` once the final frame set
        :attr:`result`; raises the server's error for a refused control."""
        if isinstance(msg, (bytes, bytearray, memoryview)):
            b = bytes(msg)
            stream = _STREAMS.get(b[0]) if b else None
            if stream is None:
                raise TransportError(f"exec {self.id}: output frame with tag {b[:1]!r}")
            (self._out if stream == "stdout" else self._err).extend(b[1:])
            return OutputEvent(stream, b[1:])
        d = json.loads(msg)
        if isinstance(d, dict) and "error" in d:
            raise error_for(400, d, msg)
        end = parse_frame(msg)
        if not isinstance(end, Ending):
            raise TransportError(f"exec {self.id}: unexpected text frame {msg[:200]!r}")
        self.result = _result(self.id, end.frame, bytes(self._out), bytes(self._err))
        return None

    def _gone(self, e: ConnectionClosed) -> TransportError:
        r = e.rcvd
        why = f"{r.code} {r.reason}" if r is not None else "no close frame"
        return TransportError(f"exec {self.id}: the WebSocket closed before the end ({why})")


class Interactive(_Session):
    """A command with its stdin, output and (with ``tty=True``) terminal on
    one WebSocket: ``send`` bytes or text to its stdin, ``close_stdin``,
    ``resize`` its terminal, iterate its output as :class:`OutputEvent`
    (a terminal's output is all ``stdout``), and ``wait`` for how it
    ended. Close it (or use ``with``) to let go of the output; the command
    itself keeps running until it ends or is killed."""

    def __init__(self, conn: sws.ClientConnection, exec_id: str, pid: int) -> None:
        super().__init__(exec_id, pid)
        self._conn = conn

    @classmethod
    def open(
        cls,
        ep: Endpoint,
        token: str,
        path: str,
        exec_id: str,
        pid: int,
        timeout: Optional[float],
    ) -> Interactive:
        sock, base = _open_socket(ep, timeout)
        try:
            conn = sws.connect(
                base + path,
                sock=sock,
                additional_headers={"Authorization": f"Bearer {token}"},
                open_timeout=timeout,
                max_size=_MAX_FRAME,
                compression=None,
                proxy=None,
                # The connection is this object's to close (close(),
                # `with`), not a `with connect(...)` block's.
                legacy=True,
            )
        except InvalidStatus as e:
            sock.close()
            raise _refused(e) from None
        except (WebSocketException, OSError, TimeoutError) as e:
            sock.close()
            raise TransportError(f"WebSocket {path} on {ep.display}: {e}") from e
        return cls(conn, exec_id, pid)

    def __repr__(self) -> str:
        return f"<strata.Interactive {self.id} pid {self.pid}>"

    def __enter__(self) -> Interactive:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def send(self, data: Data) -> None:
        """Write to the command's stdin (its terminal's input with ``tty``)."""
        self._send(_bytes(data))

    def close_stdin(self) -> None:
        """The command reads EOF."""
        self._send(_control("close_stdin"))

    def resize(self, rows: int, cols: int) -> None:
        """Resize the command's terminal (``tty=True``): it sees the new
        size (SIGWINCH, ``stty size``)."""
        self._send(_control("resize", rows=int(rows), cols=int(cols)))

    def _send(self, m: Union[str, bytes]) -> None:
        try:
            self._conn.send(m)
        except ConnectionClosed as e:
            raise self._gone(e) from None

    def next(self, timeout: Optional[float] = None) -> Optional[OutputEvent]:
        """The next piece of output, or ``None`` at the end (then
        :attr:`result` is set). Raises :class:`strata.RequestTimeout` when
        nothing came within ``timeout`` seconds."""
        if self.result is not None:
            return None
        while True:
            try:
                msg = self._conn.recv(timeout)
            except TimeoutError:
                raise RequestTimeout(
                    f"exec {self.id}: no output within {timeout} s (it keeps running)"
                ) from None
            except ConnectionClosed as e:
                raise self._gone(e) from None
            ev = self._frame(msg)
            if ev is not None or self.result is not None:
                return ev

    def __iter__(self) -> Iterator[OutputEvent]:
        while (ev := self.next()) is not None:
            yield ev

    def wait(self, timeout: Optional[float] = None) -> RunResult:
        """Read the output to the end; how the command ended and everything
        it wrote over this connection (``stdout_bytes``, ``stderr_bytes``)."""
        while self.result is None:
            self.next(timeout)
        assert self.result is not None
        return self.result

    def close(self) -> None:
        """Close the WebSocket (the output is free for another reader)."""
        self._conn.close()


class AsyncInteractive(_Session):
    """:class:`Interactive` for asyncio: ``await`` each call, ``async for``
    the output."""

    def __init__(self, conn: aws.ClientConnection, exec_id: str, pid: int) -> None:
        super().__init__(exec_id, pid)
        self._conn = conn

    @classmethod
    async def open(
        cls,
        ep: Endpoint,
        token: str,
        path: str,
        exec_id: str,
        pid: int,
        timeout: Optional[float],
    ) -> AsyncInteractive:
        # Connecting is blocking socket work: in a thread, then the socket
        # goes to asyncio.
        sock, base = await asyncio.to_thread(_open_socket, ep, timeout)
        sock.setblocking(False)
        try:
            conn = await aws.connect(
                base + path,
                sock=sock,
                additional_headers={"Authorization": f"Bearer {token}"},
                open_timeout=timeout,
                max_size=_MAX_FRAME,
                compression=None,
                proxy=None,
            )
        except InvalidStatus as e:
            sock.close()
            raise _refused(e) from None
        except (WebSocketException, OSError, TimeoutError) as e:
            sock.close()
            raise TransportError(f"WebSocket {path} on {ep.display}: {e}") from e
        return cls(conn, exec_id, pid)

    def __repr__(self) -> str:
        return f"<strata.AsyncInteractive {self.id} pid {self.pid}>"

    async def __aenter__(self) -> AsyncInteractive:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def send(self, data: Data) -> None:
        """Write to the command's stdin."""
        await self._send(_bytes(data))

    async def close_stdin(self) -> None:
        """The command reads EOF."""
        await self._send(_control("close_stdin"))

    async def resize(self, rows: int, cols: int) -> None:
        """Resize the command's terminal (``tty=True``)."""
        await self._send(_control("resize", rows=int(rows), cols=int(cols)))

    async def _send(self, m: Union[str, bytes]) -> None:
        try:
            await self._conn.send(m)
        except ConnectionClosed as e:
            raise self._gone(e) from None

    async def next(self, timeout: Optional[float] = None) -> Optional[OutputEvent]:
        """The next piece of output, or ``None`` at the end."""
        if self.result is not None:
            return None
        while True:
            try:
                msg = await asyncio.wait_for(self._conn.recv(), timeout)
            except asyncio.TimeoutError:
                raise RequestTimeout(
                    f"exec {self.id}: no output within {timeout} s (it keeps running)"
                ) from None
            except ConnectionClosed as e:
                raise self._gone(e) from None
            ev = self._frame(msg)
            if ev is not None or self.result is not None:
                return ev

    async def __aiter__(self) -> AsyncIterator[OutputEvent]:
        while (ev := await self.next()) is not None:
            yield ev

    async def wait(self, timeout: Optional[float] = None) -> RunResult:
        """Read the output to the end; how the command ended."""
        while self.result is None:
            await self.next(timeout)
        assert self.result is not None
        return self.result

    async def close(self) -> None:
        """Close the WebSocket."""
        await self._conn.close()
