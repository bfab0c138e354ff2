"""An agent's session against `strata mcp`, driven by the official MCP
Python SDK (the `mcp` package from PyPI) as the client.

    python mcp_client.py stdio STRATA_BIN STORE_DIR
    python mcp_client.py http URL TOKEN
    python mcp_client.py unauthorized URL
    python mcp_client.py http-leave URL TOKEN
    python mcp_client.py foreign URL OTHER_TOKEN SANDBOX_ID WORKSPACE_ID
    python mcp_client.py leave STRATA_BIN STORE_DIR
    python mcp_client.py leave-dirty STRATA_BIN STORE_DIR   (with an uncommitted file)
    python mcp_client.py bench STRATA_BIN STORE_DIR   (BENCH_N runs; docs/benchmarks.md)

`stdio` and `http` list the tools, then run the agent flow on project
`demo` (fork demo/main -> demo/agent, sandbox, mount, write, edit, run,
status, commit, diff, log, glob, grep, list, restore, close) with the
failures an agent makes on the way (a failing command, a bad path, an
unknown sandbox or workspace, an edit whose text is absent or not unique),
each of which must come back as a tool error while the next call works.
It asserts what the protocol shows and prints one JSON line with what
the Store must now hold, for the Rust test to read back.

`unauthorized` checks that the HTTP endpoint answers 401 without a token
and with a wrong one. `leave` creates a Sandbox and ends the session
without closing it (stdin closes), printing its id: the server must close
it itself.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from typing import Any

import httpx2
from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client

TOOLS = {
    "sandbox_create",
    "sandbox_close",
    "workspace_mount",
    "run",
    "read_file",
    "write_file",
    "edit_file",
    "list_files",
    "glob",
    "grep",
    "status",
    "commit",
    "diff",
    "log",
    "fork",
    "restore",
}


def text_of(r: Any) -> str:
    return "\n".join(getattr(c, "text", "") for c in r.content)


class Agent:
    def __init__(self, session: ClientSession) -> None:
        self.s = session

    async def ok(self, name: str, args: dict[str, Any], **kw: Any) -> Any:
        r = await self.s.call_tool(name, args, **kw)
        assert not r.is_error, f"{name} {args} failed: {text_of(r)}"
        return r

    async def err(self, name: str, args: dict[str, Any], needle: str) -> str:
        r = await self.s.call_tool(name, args)
        t = text_of(r)
        assert r.is_error, f"{name} {args} should be a tool error, got: {t}"
        assert needle in t, f"{name}: expected {needle!r} in the error, got: {t}"
        return t


async def list_tools(s: ClientSession) -> None:
    tools = (await s.list_tools()).tools
    names = {t.name for t in tools}
    assert names == TOOLS, f"tools: {sorted(names)}"
    for t in tools:
        assert t.description and len(t.description) > 40, f"{t.name}: no description"
        schema = t.input_schema
        assert schema.get("type") == "object", f"{t.name}: schema {schema}"
        props = schema.get("properties", {})
        for req in schema.get("required", []):
            assert req in props, f"{t.name}: required {req} not in properties"
        for name, p in props.items():
            assert p.get("description"), f"{t.name}.{name}: no description"
    run = next(t for t in tools if t.name == "run").input_schema
    assert {"workspace_id", "command", "argv", "timeout_secs"} <= set(run["properties"])
    assert run["required"] == ["workspace_id"], run["required"]
    edit = next(t for t in tools if t.name == "edit_file").input_schema
    assert set(edit["required"]) == {"workspace_id", "path", "old_string", "new_string"}


async def flow(s: ClientSession) -> dict[str, Any]:
    a = Agent(s)
    await list_tools(s)
    await a.ok("fork", {"from": "demo/main", "new": "demo/agent"})
    await a.err("sandbox_close", {"sandbox_id": "nope"}, "unknown sandbox")
    r = await a.ok("sandbox_create", {"labels": {"test": "mcp"}})
    sb = r.structured_content["sandbox_id"]
    await a.err("workspace_mount", {"sandbox_id": sb, "branch": "demo"}, "PROJECT/BRANCH")
    r = await a.ok("workspace_mount", {"sandbox_id": sb, "branch": "demo/agent"})
    ws = r.structured_content["workspace_id"]
    assert r.structured_content["path"] == "/workspace"

    await a.ok("write_file", {"workspace_id": ws, "path": "notes/hello.txt", "content": "hello\nworld\n"})
    await a.err(
        "edit_file",
        {"workspace_id": ws, "path": "notes/hello.txt", "old_string": "planet", "new_string": "x"},
        "not found",
    )
    await a.err(
        "edit_file",
        {"workspace_id": ws, "path": "notes/hello.txt", "old_string": "l", "new_string": "L"},
        "occurs 3 times",
    )
    await a.ok(
        "edit_file",
        {"workspace_id": ws, "path": "notes/hello.txt", "old_string": "world", "new_string": "strata"},
    )
    r = await a.ok("read_file", {"workspace_id": ws, "path": "notes/hello.txt"})
    assert text_of(r) == "hello\nstrata\n", repr(text_of(r))
    r = await a.ok("read_file", {"workspace_id": ws, "path": "notes/hello.txt", "offset": 2, "limit": 1})
    assert text_of(r) == "strata\n", repr(text_of(r))
    await a.err("read_file", {"workspace_id": ws, "path": "no/such/file"}, "No such file")
    await a.err("read_file", {"workspace_id": "ws-unknown", "path": "x"}, "unknown workspace")
    # The file tools are commands in the Sandbox: the host's Store and /etc
    # are out of their reach (the Rust test checks the host file is absent).
    store = os.environ["STRATA_TEST_STORE"]
    await a.err("read_file", {"workspace_id": ws, "path": f"{store}/strata.db"}, "No such file")
    await a.err("write_file", {"workspace_id": ws, "path": "/etc/strata-mcp-escape", "content": "x"}, "writing")

    # run: output streamed as progress, exit code and output in the result.
    progress: list[str] = []

    async def on_progress(p: float, total: float | None, message: str | None) -> None:
        progress.append(message or "")

    r = await a.ok(
        "run",
        {"workspace_id": ws, "command": "cat notes/hello.txt; id -u; echo to-stderr >&2"},
        progress_callback=on_progress,
    )
    sc = r.structured_content
    assert sc["exit_code"] == 0, sc
    assert sc["stdout"] == "hello\nstrata\n1500\n", sc
    assert sc["stderr"] == "to-stderr\n", sc
    streamed = "".join(progress)
    assert "hello\nstrata\n" in streamed and "[stderr] to-stderr" in streamed, progress

    r = await s.call_tool("run", {"workspace_id": ws, "command": "echo failing >&2; exit 3"})
    assert r.is_error and r.structured_content["exit_code"] == 3, text_of(r)
    assert "exit code 3" in text_of(r) and "failing" in text_of(r), text_of(r)
    r = await s.call_tool("run", {"workspace_id": ws, "argv": ["sleep", "5"], "timeout_secs": 1})
    assert r.is_error and r.structured_content["timed_out"], text_of(r)
    r = await s.call_tool("run", {"workspace_id": ws, "command": "head -c 100000 /dev/zero | tr '\\0' x"})
    assert not r.is_error and r.structured_content["stdout_omitted_bytes"] == 100000 - 32768, r.structured_content
    assert "bytes of stdout not shown" in r.structured_content["stdout"]
    # A request the client gives up on (read timeout: notifications/cancelled)
    # stops its command: the second write never happens.
    try:
        await s.call_tool(
            "run",
            {"workspace_id": ws, "command": "echo started > /tmp/c; sleep 3; echo finished > /tmp/c"},
            read_timeout_seconds=1.5,
        )
        raise AssertionError("the run should have timed out on the client's side")
    except Exception as e:  # the SDK's timeout error
        assert "AssertionError" not in type(e).__name__, e
    await asyncio.sleep(3.5)
    r = await a.ok("read_file", {"workspace_id": ws, "path": "/tmp/c"})
    assert text_of(r) == "started\n", repr(text_of(r))
    await a.err("run", {"workspace_id": ws, "argv": ["/no/such/program"]}, "ENOENT")
    await a.err("run", {"workspace_id": ws}, "give `command`")
    await a.ok("run", {"workspace_id": ws, "argv": ["true"]})
    r = await a.ok("run", {"workspace_id": ws, "argv": ["tr", "a-z", "A-Z"], "stdin": "abc\n", "env": {"X": "1"}})
    assert r.structured_content["stdout"] == "ABC\n", r.structured_content
    r = await a.ok("run", {"workspace_id": ws, "command": "pwd; echo $X", "cwd": "src", "env": {"X": "42"}})
    assert r.structured_content["stdout"] == "/workspace/src\n42\n", r.structured_content
    await a.err("run", {"workspace_id": ws, "argv": ["true"], "cwd": "/etc"}, "outside the Workspace")

    r = await a.ok("list_files", {"workspace_id": ws})
    assert text_of(r).split("\n") == ["README.md", "notes/", "src/"], text_of(r)
    r = await a.ok("list_files", {"workspace_id": ws, "recursive": True})
    assert text_of(r).split("\n") == ["README.md", "notes/", "notes/hello.txt", "src/", "src/main.c"], text_of(r)
    r = await a.ok("glob", {"workspace_id": ws, "pattern": "**/*.txt"})
    assert text_of(r) == "notes/hello.txt", text_of(r)
    r = await a.ok("glob", {"workspace_id": ws, "pattern": "*.md"})
    assert text_of(r) == "README.md", text_of(r)
    r = await a.ok("grep", {"workspace_id": ws, "pattern": "str[a-z]+"})
    assert text_of(r) == "notes/hello.txt:2:strata", text_of(r)
    r = await a.ok("grep", {"workspace_id": ws, "pattern": "MAIN", "ignore_case": True, "include": "*.c"})
    assert text_of(r) == "src/main.c:1:int main(void) { return 0; }", text_of(r)
    r = await a.ok("grep", {"workspace_id": ws, "pattern": "absent-word"})
    assert "no matches" in text_of(r)
    await a.err("grep", {"workspace_id": ws, "pattern": "a", "path": "no/such/dir"}, "No such file")
    await a.err("grep", {"workspace_id": ws, "pattern": "("}, "failed")
    # Output beyond max_results is cut with a notice (the rest never leaves the Sandbox).
    await a.ok("run", {"workspace_id": ws, "command": "seq 1 5000 > /tmp/many.txt"})
    r = await a.ok("grep", {"workspace_id": ws, "pattern": "^[0-9]+$", "path": "/tmp/many.txt", "max_results": 3})
    assert text_of(r).split("\n")[:3] == ["1:1", "2:2", "3:3"], text_of(r)
    assert "more than 3 matching lines" in text_of(r), text_of(r)
    # A file larger than read_file's limit comes back in part, cut at a line end.
    await a.ok("run", {"workspace_id": ws, "command": "seq 1 100000 > /tmp/big.txt"})
    r = await a.ok("read_file", {"workspace_id": ws, "path": "/tmp/big.txt"})
    t = text_of(r)
    assert t.startswith("1\n2\n") and "100000 lines in all" in t and "offset=" in t, t[-300:]
    r = await a.ok("read_file", {"workspace_id": ws, "path": "/tmp/big.txt", "offset": 99999})
    assert text_of(r) == "99999\n100000\n", text_of(r)
    await a.err("read_file", {"workspace_id": ws, "path": "/tmp/big.txt", "offset": 100001}, "past the end")

    r = await a.ok("status", {"workspace_id": ws})
    changes = {c["path"]: c["kind"] for c in r.structured_content["changes"]}
    assert changes.get("notes/hello.txt") == "added", changes
    await a.err("commit", {"workspace_id": ws, "message": "  "}, "message is empty")
    r = await a.ok("commit", {"workspace_id": ws, "message": "agent: hello notes"})
    assert r.structured_content["outcome"] == "committed"
    commit = r.structured_content["commit"]
    r = await a.ok("status", {"workspace_id": ws})
    assert r.structured_content["changes"] == [], r.structured_content
    r = await a.ok("diff", {"from": "demo/main", "to": "demo/agent"})
    diff = {c["path"]: c["kind"] for c in r.structured_content["changes"]}
    assert diff == {"notes": "added", "notes/hello.txt": "added"}, diff
    r = await a.ok("log", {"ref": "demo/agent"})
    commits = r.structured_content["commits"]
    assert [c["message"] for c in commits][0] == "agent: hello notes", commits
    assert commits[0]["commit"] == commit and len(commits) == 2, commits
    base = commits[1]["commit"]

    # restore: discard uncommitted changes, then the files of an older commit.
    await a.ok("write_file", {"workspace_id": ws, "path": "scratch.txt", "content": "junk"})
    await a.ok("restore", {"workspace_id": ws})
    r = await a.ok("status", {"workspace_id": ws})
    assert r.structured_content["changes"] == [], r.structured_content
    await a.err("read_file", {"workspace_id": ws, "path": "scratch.txt"}, "No such file")
    r = await a.ok("restore", {"workspace_id": ws, "ref": base})
    r = await a.ok("status", {"workspace_id": ws})
    changes = {c["path"]: c["kind"] for c in r.structured_content["changes"]}
    assert changes == {"notes": "deleted", "notes/hello.txt": "deleted"}, changes
    # Closing with uncommitted changes is refused; the Sandbox keeps working.
    await a.err("sandbox_close", {"sandbox_id": sb}, "commit first")
    await a.ok("restore", {"workspace_id": ws})
    r = await a.ok("read_file", {"workspace_id": ws, "path": "notes/hello.txt"})
    assert text_of(r) == "hello\nstrata\n"
    await a.ok("sandbox_close", {"sandbox_id": sb})
    await a.err("status", {"workspace_id": ws}, "unknown workspace")
    return {"commit": commit, "base": base, "sandbox_id": sb}


async def leave(s: ClientSession) -> dict[str, Any]:
    """A Sandbox with a mounted Workspace, left open."""
    a = Agent(s)
    r = await a.ok("sandbox_create", {"labels": {"test": "mcp-leave"}})
    sb = r.structured_content["sandbox_id"]
    r = await a.ok("workspace_mount", {"sandbox_id": sb, "branch": "demo/main"})
    return {"sandbox_id": sb, "workspace_id": r.structured_content["workspace_id"]}


async def foreign(s: ClientSession, sb: str, ws: str) -> dict[str, Any]:
    """Another token, limited to project `other`: another token's Sandbox
    and Workspace are unknown to it, and project demo does not exist for it."""
    a = Agent(s)
    await a.err("status", {"workspace_id": ws}, "unknown workspace")
    await a.err("read_file", {"workspace_id": ws, "path": "a"}, "unknown workspace")
    await a.err("sandbox_close", {"sandbox_id": sb, "discard": True}, "unknown sandbox")
    await a.err("workspace_mount", {"sandbox_id": sb, "branch": "other/main"}, "unknown sandbox")
    await a.err("log", {"ref": "demo/main"}, "not found")
    await a.err("fork", {"from": "demo/main", "new": "other/x"}, "not found")
    await a.err("diff", {"from": "demo/main", "to": "demo/main"}, "not found")
    r = await a.ok("sandbox_create", {})
    own = r.structured_content["sandbox_id"]
    await a.err("workspace_mount", {"sandbox_id": own, "branch": "demo/main"}, "not found")
    await a.ok("sandbox_close", {"sandbox_id": own})
    return {"ok": True}


async def bench(s: ClientSession, n: int) -> dict[str, Any]:
    """One `run` of `true` end to end, n times after a warm-up: the
    client's view (JSON-RPC over the pipes, the tool, the exec in the
    Sandbox and back)."""
    import statistics
    import time

    r = await s.call_tool("sandbox_create", {"labels": {"bench": "mcp"}})
    sb = r.structured_content["sandbox_id"]
    r = await s.call_tool("workspace_mount", {"sandbox_id": sb, "branch": "demo/main"})
    ws = r.structured_content["workspace_id"]
    for _ in range(5):
        await s.call_tool("run", {"workspace_id": ws, "argv": ["true"]})
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        r = await s.call_tool("run", {"workspace_id": ws, "argv": ["true"]})
        times.append((time.perf_counter() - t0) * 1000)
        assert not r.is_error, text_of(r)
    # For comparison: a tool call that is one request to the daemon and
    # runs nothing (the protocol's and the client's share of the above).
    status = []
    for _ in range(n):
        t0 = time.perf_counter()
        await s.call_tool("status", {"workspace_id": ws})
        status.append((time.perf_counter() - t0) * 1000)
    await s.call_tool("sandbox_close", {"sandbox_id": sb})
    times.sort()
    return {
        "n": n,
        "median_ms": round(statistics.median(times), 3),
        "p90_ms": round(times[int(n * 0.9) - 1], 3),
        "min_ms": round(times[0], 3),
        "status_median_ms": round(statistics.median(status), 3),
    }


async def main() -> None:
    mode = sys.argv[1]
    if mode in ("stdio", "leave", "leave-dirty", "bench"):
        # The client passes only a minimal environment on; the Sandbox
        # state root the test chose must reach the server.
        env = {k: v for k, v in os.environ.items() if k == "STRATA_SANDBOX_STATE"}
        params = StdioServerParameters(command=sys.argv[2], args=["--store", sys.argv[3], "mcp"], env=env)
        async with stdio_client(params) as (read, write), ClientSession(read, write) as s:
            await s.initialize()
            if mode == "leave-dirty":
                out = await leave(s)
                a = Agent(s)
                await a.ok("write_file", {"workspace_id": out["workspace_id"], "path": "wip.txt", "content": "wip"})
            elif mode == "bench":
                out = await bench(s, int(os.environ.get("BENCH_N", "100")))
            elif mode == "leave":
                r = await s.call_tool("sandbox_create", {"labels": {"test": "mcp-leave"}})
                assert not r.is_error, text_of(r)
                out = {"sandbox_id": r.structured_content["sandbox_id"]}
            else:
                out = await flow(s)
    elif mode == "stdio-remote":
        # `strata --remote URL mcp`: the tools reach the Store and its
        # Sandboxes through `strata serve`, with the server's token.
        env = {"STRATA_TOKEN": sys.argv[4]}
        params = StdioServerParameters(command=sys.argv[2], args=["--remote", sys.argv[3], "mcp"], env=env)
        async with stdio_client(params) as (read, write), ClientSession(read, write) as s:
            await s.initialize()
            out = await flow(s)
    elif mode == "http":
        url, token = sys.argv[2], sys.argv[3]
        async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=120) as http:
            async with streamable_http_client(url, http_client=http) as (read, write):
                async with ClientSession(read, write) as s:
                    await s.initialize()
                    out = await flow(s)
    elif mode in ("http-leave", "foreign"):
        url, token = sys.argv[2], sys.argv[3]
        async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=120) as http:
            async with streamable_http_client(url, http_client=http) as (read, write):
                async with ClientSession(read, write) as s:
                    await s.initialize()
                    if mode == "http-leave":
                        out = await leave(s)
                    else:
                        out = await foreign(s, sys.argv[4], sys.argv[5])
    elif mode == "unauthorized":
        url = sys.argv[2]
        body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
        hdrs = {"Accept": "application/json, text/event-stream"}
        async with httpx2.AsyncClient() as http:
            statuses = []
            for auth in (None, "Bearer strata_wrong_0000", "Basic abc"):
                h = dict(hdrs)
                if auth:
                    h["Authorization"] = auth
                r = await http.post(url, json=body, headers=h)
                statuses.append(r.status_code)
                assert r.status_code == 401, (auth, r.status_code, r.text)
                assert r.headers.get("www-authenticate", "").startswith("Bearer"), r.headers
                assert "strata token create" in r.json()["error"]["message"], r.text
        out = {"statuses": statuses}
    else:
        raise SystemExit(f"unknown mode {mode}")
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    asyncio.run(main())
