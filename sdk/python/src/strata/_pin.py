"""Certificate pinning for ``https://`` servers whose certificate no CA
signed (``strata serve --tls-generate`` prints its fingerprint,
``sha256:`` and 64 hex digits of the SHA-256 of the certificate's DER).

The check runs inside the TLS connection set-up (a network backend that
wraps httpcore's), right after the handshake and before any HTTP byte is
sent, so a server with another certificate never sees a request, and so
never the bearer token. httpx offers no public hook for this: the
transport's connection pool is replaced by one built with the pinning
backend (``_pool`` is the attribute httpx's own transports use)."""

from __future__ import annotations

import hashlib
import ssl
from typing import Any, Iterable, Optional, Union

import httpcore
import httpx

from .errors import ConfigError


def parse_fingerprint(s: str) -> bytes:
    """The 32-byte digest of ``sha256:HEX`` (also the ``AA:BB:..`` form
    ``openssl x509 -fingerprint -sha256`` prints)."""
    t = s.strip()
    for p in ("sha256:", "SHA256:", "sha256//"):
        if t.startswith(p):
            t = t[len(p) :]
            break
    h = t.replace(":", "")
    try:
        if len(h) != 64:
            raise ValueError
        return bytes.fromhex(h)
    except ValueError:
        raise ConfigError(
            f"fingerprint {s!r}: expected sha256: and 64 hex digits "
            "(as `strata serve --tls-generate` prints it)"
        ) from None


def _context() -> ssl.SSLContext:
    # Identity is the pinned digest, not a CA chain or a host name.
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    return ctx


def _check(stream: Any, want: bytes) -> None:
    obj = stream.get_extra_info("ssl_object")
    der = obj.getpeercert(True) if obj is not None else None
    got = hashlib.sha256(der).digest() if der else b""
    if got != want:
        raise httpcore.ConnectError(
            f"the server's TLS certificate (sha256:{got.hex() or 'none'}) is not the "
            f"pinned one (sha256:{want.hex()}); nothing was sent. Check the fingerprint "
            "`strata serve` printed"
        )


class _PinStream(httpcore.NetworkStream):
    def __init__(self, inner: httpcore.NetworkStream, want: bytes) -> None:
        self.inner = inner
        self.want = want

    def read(self, max_bytes: int, timeout: Optional[float] = None) -> bytes:
        return self.inner.read(max_bytes, timeout)

    def write(self, buffer: bytes, timeout: Optional[float] = None) -> None:
        self.inner.write(buffer, timeout)

    def close(self) -> None:
        self.inner.close()

    def start_tls(
        self,
        ssl_context: ssl.SSLContext,
        server_hostname: Optional[str] = None,
        timeout: Optional[float] = None,
    ) -> httpcore.NetworkStream:
        s = self.inner.start_tls(ssl_context, server_hostname, timeout)
        try:
            _check(s, self.want)
        except BaseException:
            s.close()
            raise
        return s

    def get_extra_info(self, info: str) -> Any:
        return self.inner.get_extra_info(info)


class _PinBackend(httpcore.NetworkBackend):
    def __init__(self, want: bytes) -> None:
        self.inner = httpcore.SyncBackend()
        self.want = want

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: Optional[float] = None,
        local_address: Optional[str] = None,
        socket_options: Optional[Iterable[Any]] = None,
    ) -> httpcore.NetworkStream:
        return _PinStream(
            self.inner.connect_tcp(host, port, timeout, local_address, socket_options), self.want
        )

    def sleep(self, seconds: float) -> None:
        self.inner.sleep(seconds)


class _AsyncPinStream(httpcore.AsyncNetworkStream):
    def __init__(self, inner: httpcore.AsyncNetworkStream, want: bytes) -> None:
        self.inner = inner
        self.want = want

    async def read(self, max_bytes: int, timeout: Optional[float] = None) -> bytes:
        return await self.inner.read(max_bytes, timeout)

    async def write(self, buffer: bytes, timeout: Optional[float] = None) -> None:
        await self.inner.write(buffer, timeout)

    async def aclose(self) -> None:
        await self.inner.aclose()

    async def start_tls(
        self,
        ssl_context: ssl.SSLContext,
        server_hostname: Optional[str] = None,
        timeout: Optional[float] = None,
    ) -> httpcore.AsyncNetworkStream:
        s = await self.inner.start_tls(ssl_context, server_hostname, timeout)
        try:
            _check(s, self.want)
        except BaseException:
            await s.aclose()
            raise
        return s

    def get_extra_info(self, info: str) -> Any:
        return self.inner.get_extra_info(info)


class _AsyncPinBackend(httpcore.AsyncNetworkBackend):
    def __init__(self, want: bytes) -> None:
        self.inner = httpcore.AnyIOBackend()
        self.want = want

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: Optional[float] = None,
        local_address: Optional[str] = None,
        socket_options: Optional[Iterable[Any]] = None,
    ) -> httpcore.AsyncNetworkStream:
        s = await self.inner.connect_tcp(host, port, timeout, local_address, socket_options)
        return _AsyncPinStream(s, self.want)

    async def sleep(self, seconds: float) -> None:
        await self.inner.sleep(seconds)


def pinned_transport(
    fingerprint: str, asynchronous: bool
) -> Union[httpx.HTTPTransport, httpx.AsyncHTTPTransport]:
    """A transport that accepts exactly the certificate ``fingerprint``
    names."""
    want = parse_fingerprint(fingerprint)
    ctx = _context()
    if asynchronous:
        at = httpx.AsyncHTTPTransport(verify=ctx)
        at._pool = httpcore.AsyncConnectionPool(
            ssl_context=ctx, network_backend=_AsyncPinBackend(want)
        )
        return at
    t = httpx.HTTPTransport(verify=ctx)
    t._pool = httpcore.ConnectionPool(ssl_context=ctx, network_backend=_PinBackend(want))
    return t
