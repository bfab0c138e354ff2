"""Interactive commands over the server's WebSocket route: a terminal the
command sees as one (`test -t 0`, a resize that `stty size` reads), stdin
as binary frames with EOF, output tagged per stream, the exit status; sync
and asyncio. Real Sandboxes through a real `strata serve`."""

from __future__ import annotations

import asyncio

import pytest

import strata
from conftest import Server, require_sandboxes, unique


def read_until(p: strata.Interactive, marker: bytes) -> bytes:
    """Output until `marker` has been seen (a terminal may split it)."""
    got = b""
    while marker not in got:
        ev = p.next(timeout=60)
        assert ev is not None, f"the command ended before {marker!r}; it wrote {got!r}"
        got += ev.data
    return got


def test_tty_command_sees_a_terminal_and_its_new_size(
    sandbox: strata.Sandbox, project: str
) -> None:
    ws = sandbox.mount(f"{project}/main")
    with ws.run(
        ["sh", "-c", "test -t 0 && test -t 1 && echo on-a-tty; stty size; read x; stty size; echo got:$x"],
        tty=True,
        rows=24,
        cols=80,
        timeout=60,
    ) as p:
        assert isinstance(p, strata.Interactive) and p.pid > 0
        first = read_until(p, b"24 80")
        # The terminal's own line discipline turned "\n" into "\r\n".
        assert b"on-a-tty\r\n" in first, first
        p.resize(30, 100)
        p.send("hello\n")
        r = p.wait(timeout=60)
    out = r.stdout_bytes  # all of it, what read_until saw included
    assert out.startswith(first), (first, out)
    assert r.exit_code == 0, r
    assert b"30 100" in out and b"got:hello" in out, out
    # A terminal has one output stream: nothing arrived as stderr.
    assert r.stderr_bytes == b""


def test_pipes_stdin_eof_tagged_streams_and_exit_code(
    sandbox: strata.Sandbox, project: str
) -> None:
    ws = sandbox.mount(f"{project}/main")
    p = ws.interactive(["sh", "-c", "test -t 0 || echo no-tty; cat; echo err >&2; exit 3"])
    try:
        p.send(b"ping\n")
        p.send("pong\n")
        p.close_stdin()
        events = list(p)
    finally:
        p.close()
    assert p.result is not None
    assert p.result.exit_code == 3, p.result
    assert b"".join(e.data for e in events if e.stream == "stdout") == b"no-tty\nping\npong\n"
    assert b"".join(e.data for e in events if e.stream == "stderr") == b"err\n"
    assert p.result.stdout_bytes == b"no-tty\nping\npong\n"


def test_interactive_errors(sandbox: strata.Sandbox, project: str) -> None:
    ws = sandbox.mount(f"{project}/main")
    with pytest.raises(ValueError, match="tty=True returns"):
        ws.run(["true"], tty=True, background=True)  # type: ignore[call-overload]
    with pytest.raises(strata.ExecFailed) as ef:
        ws.run(["/no/such/program"], tty=True).wait(timeout=60)
    assert ef.value.errno_name == "ENOENT"
    # A command that outlives the client's patience: a timeout, and it
    # is still running afterwards (killed here over HTTP).
    p = ws.interactive(["sleep", "1000"])
    with pytest.raises(strata.RequestTimeout):
        p.next(timeout=0.5)
    p.close()
    proc = sandbox.process(p.id)
    assert proc.poll() is None
    assert proc.kill().cancelled


def test_async_interactive_tty(server: Server, project: str) -> None:
    require_sandboxes()

    async def main() -> None:
        async with strata.AsyncStrata.connect(server.url, server.token) as s:
            sb = await s.sandboxes.create(labels={"test": unique("ws")})
            try:
                ws = await sb.mount(f"{project}/main")
                p = await ws.run(
                    ["sh", "-c", "test -t 0 && echo on-a-tty; read x; stty size; echo got:$x"],
                    tty=True,
                    rows=10,
                    cols=40,
                )
                assert isinstance(p, strata.AsyncInteractive)
                async with p:
                    seen = b""
                    async for ev in p:
                        seen += ev.data
                        if b"on-a-tty" in seen:
                            break
                    await p.resize(33, 101)
                    await p.send("async\n")
                    r = await p.wait(timeout=60)
                out = r.stdout_bytes
                assert r.exit_code == 0, r
                assert b"on-a-tty\r\n" in out and b"33 101" in out and b"got:async" in out, out
                # Pipes through asyncio too, with EOF.
                q = await ws.interactive(["sh", "-c", "cat; echo err >&2"])
                await q.send(b"x\n")
                await q.close_stdin()
                r = await q.wait(timeout=60)
                await q.close()
                assert (r.exit_code, r.stdout_bytes, r.stderr_bytes) == (0, b"x\n", b"err\n")
            finally:
                await sb.close(discard=True)

    asyncio.run(main())
