"""The asyncio client, AsyncStrata: the same flow with await, async
callbacks, `async for` over output, and commands in parallel."""

from __future__ import annotations

import asyncio

import pytest

import strata
from conftest import Server, require_sandboxes, unique


def test_async_store_and_errors(server: Server, project: str) -> None:
    async def main() -> None:
        async with strata.AsyncStrata.connect(server.url, server.token) as s:
            assert project in await s.projects.list()
            b = await s.branches.fork(f"{project}/main", f"{project}/{unique('a')}")
            c = await s.write(b.ref, [{"op": "put", "path": "x", "content": "async"}])
            assert await s.read(b.ref, "x") == b"async"
            with pytest.raises(strata.Conflict) as e:
                await s.write(b.ref, [{"op": "put", "path": "x", "content": "late"}], expected_head=b.head)
            assert e.value.actual_head == c.commit
            with pytest.raises(strata.NotFound):
                await s.sandboxes.get("sb-000000000000000000000000")
        async with strata.AsyncStrata.connect(server.url, "strata_00_00") as bad:
            with pytest.raises(strata.Unauthorized):
                await bad.projects.list()

    asyncio.run(main())


def test_async_flow(server: Server, project: str) -> None:
    require_sandboxes()

    async def main() -> None:
        async with strata.AsyncStrata.connect(server.url, server.token) as s:
            agent = f"{project}/{unique('agent')}"
            await s.branches.fork(f"{project}/main", agent)
            sb = await s.sandboxes.create(labels={"agent": "async"})
            try:
                ws = await sb.mount(agent)
                got: list[str] = []

                async def on_stdout(t: str) -> None:
                    await asyncio.sleep(0)
                    got.append(t)

                r = await ws.run(["sh", "-c", "for i in 1 2 3; do echo $i; done"], on_stdout=on_stdout)
                assert r.stdout == "1\n2\n3\n" and "".join(got) == r.stdout

                # Three commands at once on one client.
                rs = await asyncio.gather(
                    *(ws.run(["sh", "-c", f"echo {i} > f{i}; cat f{i}"]) for i in range(3))
                )
                assert [x.stdout for x in rs] == ["0\n", "1\n", "2\n"]

                # Background: async for over the output, stdin with EOF.
                p = await ws.run(["sh", "-c", "echo ready; cat"], background=True, stdin=True)
                it = p.output()
                first = await it.__anext__()
                assert first.data == b"ready\n"
                await p.write("piped\n")
                await p.close_stdin()
                rest = [ev.data async for ev in it]
                assert b"".join(rest) == b"piped\n"
                assert (await p.wait()).exit_code == 0

                with pytest.raises(strata.CommandTimeout):
                    await ws.run(["sleep", "600"], timeout=1)
                k = await ws.run(["sleep", "600"], background=True)
                assert (await k.kill()).cancelled

                c = await ws.commit("async flow")
                assert c.committed
                assert await s.read(agent, "f2") == b"2\n"
                assert {d.path for d in await s.diff(f"{project}/main", agent)} == {"f0", "f1", "f2"}
            finally:
                await sb.close(discard=True)

    asyncio.run(main())
