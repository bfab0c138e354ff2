"""The one request/response layer under both clients.

Every API operation is written once, in ``_ops.py``, as a generator (a
*flow*) that yields operations (:class:`Call`, :class:`Open`,
:class:`Next`, :class:`Close`, :class:`Emit`, :class:`Await`) and receives
their results. :class:`SyncDriver` performs them with ``httpx.Client``,
:class:`AsyncDriver` with ``httpx.AsyncClient``; so the sync ``Strata`` and
the asyncio ``AsyncStrata`` share the URLs, bodies, parsing and error
mapping and differ only in how bytes move.
"""

from __future__ import annotations

import inspect
import json as _json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import (
    Any,
    AsyncGenerator,
    AsyncIterator,
    Generator,
    Iterator,
    Optional,
    Sequence,
    TypeVar,
    Union,
    cast,
)

import httpx

from ._pin import pinned_transport
from .errors import ConfigError, RequestTimeout, TransportError, error_for

T = TypeVar("T")

#: Default timeout of one call, in seconds (connect, each read, each write).
DEFAULT_TIMEOUT = 60.0


class _Default:
    """The client's default timeout (as opposed to ``None``: no timeout)."""


DEFAULT: Any = _Default()


@dataclass
class Req:
    """One HTTP request, relative to the server's base URL."""

    method: str
    path: str
    params: Optional[Sequence[tuple[str, str]]] = None
    json: Any = None
    content: Optional[bytes] = None
    headers: Optional[dict[str, str]] = None
    #: Seconds, ``None`` for no limit, or ``DEFAULT`` for the client's.
    timeout: Any = DEFAULT


@dataclass
class Reply:
    """A successful (2xx) response, read whole."""

    status: int
    headers: httpx.Headers
    body: bytes

    def json(self) -> Any:
        """The body as JSON."""
        return _json.loads(self.body)


@dataclass
class Call:
    """Send ``req``, read the whole reply; the flow receives a :class:`Reply`
    (an error status raises the error's exception into the flow)."""

    req: Req


@dataclass
class Open:
    """Send ``req`` and open its body as a stream of lines; the flow
    receives a stream handle for :class:`Next` and :class:`Close`."""

    req: Req


@dataclass
class Next:
    """The next line of an opened stream (without its newline), or ``None``
    at its end."""

    stream: Any


@dataclass
class Close:
    """Close an opened stream early (the driver closes any stream left open
    when the flow ends)."""

    stream: Any


@dataclass
class Emit:
    """Hand ``value`` to the consumer of an iterating flow."""

    value: Any


@dataclass
class Await:
    """``value`` may be awaitable (a callback's result): the async driver
    awaits it; the sync driver refuses an awaitable."""

    value: Any


Op = Union[Call, Open, Next, Close, Emit, Await]
Flow = Generator[Op, Any, T]


@dataclass
class Endpoint:
    """Where the server is: ``base_url`` and, for a Unix socket, its path."""

    base_url: str
    uds: Optional[str]
    display: str


def default_store() -> Path:
    """``$STRATA_STORE``, else ``$XDG_DATA_HOME/strata``, else
    ``~/.local/share/strata`` (the CLI's rule, docs/cli.md)."""
    s = os.environ.get("STRATA_STORE")
    if s:
        return Path(s)
    xdg = os.environ.get("XDG_DATA_HOME")
    if xdg and os.path.isabs(xdg):
        return Path(xdg) / "strata"
    home = os.environ.get("HOME")
    if not home:
        raise ConfigError(
            "no server address: pass url=, set STRATA_REMOTE, STRATA_STORE or HOME"
        )
    return Path(home) / ".local/share/strata"


def parse_url(url: str) -> Endpoint:
    """``unix:///path``, ``unix:/path``, ``http://HOST:PORT`` or
    ``https://HOST:PORT`` (the forms ``strata --remote`` takes)."""
    if url.startswith("unix:"):
        path = url[len("unix:") :]
        if path.startswith("//"):
            path = path[2:]
        if not path.startswith("/"):
            raise ConfigError(
                f"{url!r}: a Unix socket URL needs an absolute path, e.g. unix:///var/lib/strata/serve.sock"
            )
        return Endpoint("http://strata", path, f"unix:{path}")
    if url.startswith(("http://", "https://")):
        return Endpoint(url.rstrip("/"), None, url)
    raise ConfigError(
        f"{url!r} is not a server address: use unix:///PATH, http://127.0.0.1:PORT or https://HOST:PORT"
    )


def _timeout(t: Any, default: Optional[float]) -> httpx.Timeout:
    if isinstance(t, _Default):
        return httpx.Timeout(default)
    if t is None:
        # No read limit (a long-running command's silent output stream),
        # but connecting stays bounded.
        return httpx.Timeout(None, connect=default)
    return httpx.Timeout(float(t))


def _build(client: Union[httpx.Client, httpx.AsyncClient], req: Req, default: Optional[float]) -> httpx.Request:
    headers = dict(req.headers or {})
    content = req.content
    if req.json is not None:
        content = _json.dumps(req.json).encode()
        headers.setdefault("content-type", "application/json")
    return client.build_request(
        req.method,
        req.path,
        params=httpx.QueryParams(list(req.params)) if req.params else None,
        content=content,
        headers=headers,
        timeout=_timeout(req.timeout, default),
    )


def _raise_for(status: int, body: bytes) -> None:
    if 200 <= status < 300:
        return
    try:
        parsed: Any = _json.loads(body)
    except ValueError:
        parsed = None
    raise error_for(status, parsed, body.decode("utf-8", "replace"))


def _transport_error(e: httpx.HTTPError, req: Req, where: str) -> TransportError:
    what = f"{req.method} {req.path} to {where}"
    if isinstance(e, httpx.TimeoutException):
        return RequestTimeout(f"{what}: timed out ({type(e).__name__}); pass a larger timeout=")
    return TransportError(f"{what}: {e or type(e).__name__}")


class SyncDriver:
    """Performs flows with an ``httpx.Client`` (one pooled connection set)."""

    def __init__(
        self,
        ep: Endpoint,
        token: str,
        timeout: Optional[float],
        verify: Any,
        fingerprint: Optional[str] = None,
    ) -> None:
        self.endpoint = ep
        self.timeout = timeout
        # For the interactive WebSocket, which opens its own connection.
        self.token = token
        transport: Optional[httpx.BaseTransport] = None
        if fingerprint is not None:
            transport = cast(httpx.HTTPTransport, pinned_transport(fingerprint, False))
        elif ep.uds:
            transport = httpx.HTTPTransport(uds=ep.uds, verify=verify)
        self.client = httpx.Client(
            base_url=ep.base_url,
            transport=transport,
            headers={"authorization": f"Bearer {token}"},
            verify=verify,
            timeout=timeout,
        )

    def close(self) -> None:
        self.client.close()

    def _open(self, req: Req) -> Any:
        try:
            resp = self.client.send(_build(self.client, req, self.timeout), stream=True)
        except httpx.HTTPError as e:
            raise _transport_error(e, req, self.endpoint.display) from e
        if not 200 <= resp.status_code < 300:
            try:
                body = resp.read()
            finally:
                resp.close()
            _raise_for(resp.status_code, body)
        return _SyncStream(resp, resp.iter_lines(), req, self.endpoint.display)

    def _do(self, op: Op, opened: list[Any]) -> Any:
        if isinstance(op, Call):
            try:
                resp = self.client.send(_build(self.client, op.req, self.timeout))
            except httpx.HTTPError as e:
                raise _transport_error(e, op.req, self.endpoint.display) from e
            _raise_for(resp.status_code, resp.content)
            return Reply(resp.status_code, resp.headers, resp.content)
        if isinstance(op, Open):
            s = self._open(op.req)
            opened.append(s)
            return s
        if isinstance(op, Next):
            return op.stream.next_line()
        if isinstance(op, Close):
            op.stream.close()
            return None
        if isinstance(op, Await):
            if inspect.isawaitable(op.value):
                raise TypeError(
                    "a callback returned an awaitable: use AsyncStrata for async callbacks"
                )
            return op.value
        raise TypeError(f"unexpected {op!r}")

    def _iter(self, flow: Flow[Any]) -> Generator[Any, None, None]:
        opened: list[Any] = []
        try:
            send: Any = None
            exc: Optional[BaseException] = None
            while True:
                try:
                    op = flow.throw(exc) if exc is not None else flow.send(send)
                except StopIteration as stop:
                    yield _Done(stop.value)
                    return
                send, exc = None, None
                if isinstance(op, Emit):
                    yield op.value
                    continue
                try:
                    send = self._do(op, opened)
                except Exception as e:  # handed to the flow, which may handle it
                    exc = e
        finally:
            flow.close()
            for s in opened:
                s.close()

    def run(self, flow: Flow[T]) -> T:
        """Perform a flow to its result."""
        it = self._iter(flow)
        try:
            for v in it:
                if isinstance(v, _Done):
                    return v.value  # type: ignore[no-any-return]
        finally:
            it.close()  # closes any stream the flow left open, now
        raise RuntimeError("flow ended without a result")  # pragma: no cover

    def iterate(self, flow: Flow[Any]) -> Iterator[Any]:
        """Perform a flow, yielding what it emits; stopping early closes its
        streams."""
        it = self._iter(flow)
        try:
            for v in it:
                if isinstance(v, _Done):
                    return
                yield v
        finally:
            it.close()


class _Done:
    def __init__(self, value: Any) -> None:
        self.value = value


class _SyncStream:
    def __init__(self, resp: httpx.Response, lines: Iterator[str], req: Req, where: str) -> None:
        self.resp = resp
        self.lines = lines
        self.req = req
        self.where = where

    def next_line(self) -> Optional[str]:
        try:
            while True:
                line = next(self.lines)
                if line:
                    return line
        except StopIteration:
            return None
        except httpx.HTTPError as e:
            raise _transport_error(e, self.req, self.where) from e

    def close(self) -> None:
        self.resp.close()


class _AsyncStream:
    def __init__(
        self, resp: httpx.Response, lines: AsyncIterator[str], req: Req, where: str
    ) -> None:
        self.resp = resp
        self.lines = lines
        self.req = req
        self.where = where

    async def next_line(self) -> Optional[str]:
        try:
            while True:
                line = await self.lines.__anext__()
                if line:
                    return line
        except StopAsyncIteration:
            return None
        except httpx.HTTPError as e:
            raise _transport_error(e, self.req, self.where) from e

    async def close(self) -> None:
        await self.resp.aclose()


class AsyncDriver:
    """Performs flows with an ``httpx.AsyncClient`` (asyncio)."""

    def __init__(
        self,
        ep: Endpoint,
        token: str,
        timeout: Optional[float],
        verify: Any,
        fingerprint: Optional[str] = None,
    ) -> None:
        self.endpoint = ep
        self.timeout = timeout
        # For the interactive WebSocket, which opens its own connection.
        self.token = token
        transport: Optional[httpx.AsyncBaseTransport] = None
        if fingerprint is not None:
            transport = cast(httpx.AsyncHTTPTransport, pinned_transport(fingerprint, True))
        elif ep.uds:
            transport = httpx.AsyncHTTPTransport(uds=ep.uds, verify=verify)
        self.client = httpx.AsyncClient(
            base_url=ep.base_url,
            transport=transport,
            headers={"authorization": f"Bearer {token}"},
            verify=verify,
            timeout=timeout,
        )

    async def close(self) -> None:
        await self.client.aclose()

    async def _do(self, op: Op, opened: list[Any]) -> Any:
        if isinstance(op, Call):
            try:
                resp = await self.client.send(_build(self.client, op.req, self.timeout))
            except httpx.HTTPError as e:
                raise _transport_error(e, op.req, self.endpoint.display) from e
            _raise_for(resp.status_code, resp.content)
            return Reply(resp.status_code, resp.headers, resp.content)
        if isinstance(op, Open):
            try:
                resp = await self.client.send(
                    _build(self.client, op.req, self.timeout), stream=True
                )
            except httpx.HTTPError as e:
                raise _transport_error(e, op.req, self.endpoint.display) from e
            if not 200 <= resp.status_code < 300:
                try:
                    body = await resp.aread()
                finally:
                    await resp.aclose()
                _raise_for(resp.status_code, body)
            s = _AsyncStream(resp, resp.aiter_lines(), op.req, self.endpoint.display)
            opened.append(s)
            return s
        if isinstance(op, Next):
            return await op.stream.next_line()
        if isinstance(op, Close):
            await op.stream.close()
            return None
        if isinstance(op, Await):
            if inspect.isawaitable(op.value):
                return await op.value
            return op.value
        raise TypeError(f"unexpected {op!r}")

    async def _iter(self, flow: Flow[Any]) -> AsyncGenerator[Any, None]:
        opened: list[Any] = []
        try:
            send: Any = None
            exc: Optional[BaseException] = None
            while True:
                try:
                    op = flow.throw(exc) if exc is not None else flow.send(send)
                except StopIteration as stop:
                    yield _Done(stop.value)
                    return
                send, exc = None, None
                if isinstance(op, Emit):
                    yield op.value
                    continue
                try:
                    send = await self._do(op, opened)
                except Exception as e:
                    exc = e
        finally:
            flow.close()
            for s in opened:
                await s.close()

    async def run(self, flow: Flow[T]) -> T:
        """Perform a flow to its result."""
        it = self._iter(flow)
        try:
            async for v in it:
                if isinstance(v, _Done):
                    return v.value  # type: ignore[no-any-return]
        finally:
            await it.aclose()
        raise RuntimeError("flow ended without a result")  # pragma: no cover

    async def iterate(self, flow: Flow[Any]) -> AsyncIterator[Any]:
        """Perform a flow, yielding what it emits."""
        it = self._iter(flow)
        try:
            async for v in it:
                if isinstance(v, _Done):
                    return
                yield v
        finally:
            await it.aclose()
