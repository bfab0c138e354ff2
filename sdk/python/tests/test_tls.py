"""TLS: a second `strata serve` of the session's Store on a loopback TCP
port with `--tls-generate`; a client pinning the printed fingerprint gets
through, one pinning another is refused before sending anything."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
from typing import Iterator

import pytest

import strata
from conftest import Server, require_sandboxes, unique
from strata._wire import parse_url
from strata._ws import _open_socket


@pytest.fixture
def tls_server(server: Server) -> Iterator[tuple[str, str]]:
    proc = subprocess.Popen(
        [str(server.bin), "--store", str(server.store), "--json", "serve",
         "--listen", "tcp:127.0.0.1:0", "--tls-generate"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        assert proc.stdout is not None and proc.stderr is not None
        line = proc.stdout.readline()
        if not line:
            pytest.fail(f"strata serve --tls-generate did not start: {proc.stderr.read().decode()}")
        ready = json.loads(line)
        host_port = ready["listening"][len("tcp:") :]
        yield f"https://{host_port}", ready["fingerprint"]
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)


def test_pinned_fingerprint(server: Server, tls_server: tuple[str, str], project: str) -> None:
    url, fp = tls_server
    assert fp.startswith("sha256:")
    with strata.Strata.connect(url, server.token, fingerprint=fp) as s:
        assert project in s.projects.list()
    wrong = "sha256:" + "00" * 32
    with strata.Strata.connect(url, server.token, fingerprint=wrong) as s:
        with pytest.raises(strata.TransportError, match="not the pinned one"):
            s.projects.list()
    # Without a pin, the self-signed certificate is not trusted.
    with strata.Strata.connect(url, server.token) as s:
        with pytest.raises(strata.TransportError):
            s.projects.list()

    async def main() -> None:
        async with strata.AsyncStrata.connect(url, server.token, fingerprint=fp) as a:
            assert project in await a.projects.list()
        async with strata.AsyncStrata.connect(url, server.token, fingerprint=wrong) as a:
            with pytest.raises(strata.TransportError, match="not the pinned one"):
                await a.projects.list()

    asyncio.run(main())
    with pytest.raises(strata.ConfigError, match="https"):
        strata.Strata.connect(server.url, server.token, fingerprint=fp)


def test_interactive_over_pinned_tls(
    server: Server, tls_server: tuple[str, str], project: str
) -> None:
    """The interactive WebSocket opens its own TLS connection: pinned like
    the client's, checked before the upgrade request (with the token)."""
    require_sandboxes()
    url, fp = tls_server
    with strata.Strata.connect(url, server.token, fingerprint=fp) as s:
        sb = s.sandboxes.create(labels={"test": unique("tls")})
        try:
            ws = sb.mount(f"{project}/main")
            with ws.run(["sh", "-c", "test -t 0 && echo tls-tty"], tty=True) as p:
                r = p.wait(timeout=60)
            assert r.exit_code == 0 and b"tls-tty\r\n" in r.stdout_bytes, r
        finally:
            sb.close(discard=True)
    with pytest.raises(strata.TransportError, match="not the pinned one"):
        _open_socket(parse_url(url), True, "sha256:" + "00" * 32, 10.0)
