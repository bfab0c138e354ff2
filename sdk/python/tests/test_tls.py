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


@pytest.fixture
def tls_server(server: Server) -> Iterator[tuple[str, str]]:
    # Its log to a file: a pipe nobody reads fills up and stops the
    # server at its next log line.
    log = server.store.parent / "serve-tls.log"
    proc = subprocess.Popen(
        [str(server.bin), "--store", str(server.store), "--json", "serve",
         "--listen", "tcp:127.0.0.1:0", "--tls-generate"],
        stdout=subprocess.PIPE,
        stderr=open(log, "wb"),
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        if not line:
            proc.wait(10)
            pytest.fail(f"strata serve --tls-generate did not start: {log.read_text()}")
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


def test_interactive_refused_over_https_before_anything_starts(
    server: Server, tls_server: tuple[str, str], project: str
) -> None:
    """Interactive commands are not offered over https:// yet
    (docs/python.md, Limits): refused with the reason before an exec is
    created, by both clients."""
    require_sandboxes()
    url, fp = tls_server
    with strata.Strata.connect(url, server.token, fingerprint=fp) as s:
        sb = s.sandboxes.create(labels={"test": unique("tls")})
        try:
            ws = sb.mount(f"{project}/main")
            with pytest.raises(strata.ConfigError, match="https"):
                ws.run(["sleep", "1000"], tty=True)
            with pytest.raises(strata.ConfigError, match="https"):
                ws.interactive(["sleep", "1000"])

            async def main() -> None:
                async with strata.AsyncStrata.connect(url, server.token, fingerprint=fp) as a:
                    aws = (await (await a.sandboxes.get(sb.id)).workspaces())[0]
                    with pytest.raises(strata.ConfigError, match="https"):
                        await aws.run(["sleep", "1000"], tty=True)

            asyncio.run(main())
        finally:
            sb.close(discard=True)
