#!/usr/bin/env python3
"""The Python SDK's per-call cost through `strata serve` (docs/benchmarks.md,
"Python SDK"), beside raw HTTP over the same Unix socket in the same run.

- a cheap call (the branch list of a project): `s.branches.list(p)` vs one
  hand-written HTTP/1.1 request on a kept-alive socket, parsed with json;
- exec of `true`: `ws.run(["true"])` vs the same two requests by hand
  (POST .../execs, GET .../execs/{id}/output read to its final frame);
- the 15-call flow (crates/strata-sdk/examples/flow.rs, adapted to a
  server: the Store exists, so its first two calls create a project and
  write its files as one commit), each call checked.

Medians over N rounds after warm-up, raw and SDK alternating call by call. Starts its own server on a fresh
Store with the debug binary unless --url/--token are given. Run as root.

    target/py-venv/bin/python sdk/python/bench/bench.py [--rounds 200] [--flows 20]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Optional

import strata

REPO = Path(__file__).resolve().parents[3]


class RawHttp:
    """The least a client can do: HTTP/1.1 on one kept-alive Unix socket."""

    def __init__(self, sock_path: str, token: str) -> None:
        self.s = socket.socket(socket.AF_UNIX)
        self.s.connect(sock_path)
        self.f = self.s.makefile("rb")
        self.auth = f"Authorization: Bearer {token}\r\n"

    def request(self, method: str, path: str, body: Optional[bytes] = None) -> tuple[int, bytes]:
        head = f"{method} {path} HTTP/1.1\r\nHost: strata\r\n{self.auth}"
        if body is not None:
            head += f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
        self.s.sendall(head.encode() + b"\r\n" + (body or b""))
        status = int(self.f.readline().split()[1])
        length, chunked = 0, False
        while True:
            line = self.f.readline()
            if line in (b"\r\n", b""):
                break
            k, _, v = line.decode().partition(":")
            if k.lower() == "content-length":
                length = int(v)
            elif k.lower() == "transfer-encoding" and "chunked" in v:
                chunked = True
        if not chunked:
            return status, self.f.read(length)
        out = bytearray()
        while True:
            n = int(self.f.readline().split(b";")[0], 16)
            if n == 0:
                self.f.readline()
                return status, bytes(out)
            out += self.f.read(n)
            self.f.readline()


def medians_ms(
    a: Callable[[], Any], b: Callable[[], Any], n: int, warm: int = 20
) -> tuple[float, float, float, float]:
    """Medians of `a` and `b` (wall clock, then this process's CPU time:
    the client's own work, which the machine's load does not inflate),
    alternating call by call so that both see the same machine."""
    for _ in range(warm):
        a()
        b()
    xa, xb, ca, cb = [], [], [], []
    for _ in range(n):
        c, t = time.process_time(), time.perf_counter()
        a()
        xa.append(time.perf_counter() - t)
        ca.append(time.process_time() - c)
        c, t = time.process_time(), time.perf_counter()
        b()
        xb.append(time.perf_counter() - t)
        cb.append(time.process_time() - c)
    m = statistics.median
    return m(xa) * 1e3, m(xb) * 1e3, m(ca) * 1e3, m(cb) * 1e3


def flow(s: strata.Strata, tag: str) -> list[tuple[str, float]]:
    """The 15 calls, each timed and checked."""
    steps: list[tuple[str, float]] = []
    t = time.perf_counter()

    def lap(name: str) -> None:
        nonlocal t
        now = time.perf_counter()
        steps.append((name, (now - t) * 1e3))
        t = now

    p = f"flow-{tag}"
    head = s.projects.create(p).head
    lap("create a project")
    # The head is known: no read of it first (the Rust side's flow in
    # strata-bench's python group makes the same two requests).
    s.write(f"{p}/main", [
        {"op": "put", "path": "README", "content": "demo project\n"},
        {"op": "put", "path": "lib/a.txt", "content": "a\n"},
    ], expected_head=head, message="flow: files")
    lap("write its files as a commit")
    s.branches.fork(f"{p}/main", f"{p}/agent")
    lap("fork a branch")
    sb = s.sandboxes.create(labels={"flow-run": tag})
    lap("create a Sandbox")
    ws = sb.mount(f"{p}/agent")
    lap("mount the branch")
    r = ws.run(["sh", "-c", "echo 'written in a sandbox' > out.txt; id -u"])
    assert r.stdout == "1500\n", r
    lap("exec a write")
    r = ws.run(["cat", "out.txt", "README"])
    assert r.stdout == "written in a sandbox\ndemo project\n", r
    lap("exec a read")
    assert any(c.path == "out.txt" for c in ws.status())
    lap("status")
    c = ws.commit("flow: out.txt")
    assert c.committed
    lap("commit")
    r = ws.run(["sh", "-c", "tr a-z A-Z; echo err >&2"], stdin="via stdin\n")
    assert r.stdout == "VIA STDIN\n" and r.stderr == "err\n", r
    lap("exec with stdin")
    pr = ws.run(["sleep", "1000"], background=True)
    k = pr.kill()
    assert k.cancelled and k.signal_name == "SIGTERM", k
    lap("spawn sleep 1000 + cancel")
    assert "exec" in sb.logs(20)
    lap("log tail")
    ws.unmount()
    lap("unmount")
    sb.close()
    lap("close the Sandbox")
    assert s.read(f"{p}/agent", "out.txt") == b"written in a sandbox\n"
    lap("read the file from the Store")
    return steps


def start_server() -> tuple[subprocess.Popen[bytes], str, str, Path]:
    b = os.environ.get("STRATA_BIN") or str(REPO / "target/x86_64-unknown-linux-gnu/debug/strata")
    d = Path(tempfile.mkdtemp(prefix="strata-pybench-")) / "store"
    subprocess.run([b, "--store", str(d), "init"], check=True, capture_output=True)
    tok = json.loads(subprocess.run([b, "--store", str(d), "--json", "token", "create"],
                                    check=True, capture_output=True).stdout)["token"]
    p = subprocess.Popen([b, "--store", str(d), "--json", "serve"], stdout=subprocess.PIPE,
                         stderr=subprocess.DEVNULL)
    assert p.stdout is not None
    listening = json.loads(p.stdout.readline())["listening"]
    return p, listening[len("unix:"):], tok, d


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=200)
    ap.add_argument("--flows", type=int, default=10)
    a = ap.parse_args()
    proc, sock, tok, store = start_server()
    try:
        with strata.Strata.connect(f"unix://{sock}", tok) as s:
            s.projects.create("b")
            for i in range(9):
                s.branches.fork("b/main", f"b/agent-{i}")
            raw = RawHttp(sock, tok)

            def raw_list() -> None:
                st, body = raw.request("GET", "/v1/projects/b/branches")
                assert st == 200 and len(json.loads(body)["branches"]) == 10

            def sdk_list() -> None:
                assert len(s.branches.list("b")) == 10

            rows = [("branch list", *medians_ms(raw_list, sdk_list, a.rounds))]

            sb = s.sandboxes.create(labels={"bench": "py"})
            try:
                ws = sb.mount("b/main")
                base = f"/v1/sandboxes/{sb.id}"
                req = json.dumps({"argv": ["true"], "workspace": ws.id}).encode()

                def raw_exec() -> None:
                    st, body = raw.request("POST", f"{base}/execs", req)
                    assert st == 201 or st == 200, (st, body)
                    eid = json.loads(body)["id"]
                    st, out = raw.request("GET", f"{base}/execs/{eid}/output")
                    last = json.loads(out.splitlines()[-1])
                    assert last.get("type") == "exit" and last.get("code") == 0, last

                def sdk_exec() -> None:
                    assert ws.run(["true"]).exit_code == 0

                n = max(20, a.rounds // 4)
                rows.append(("exec of `true`", *medians_ms(raw_exec, sdk_exec, n, 5)))
            finally:
                sb.close()

            flows = [flow(s, f"{os.getpid()}-{i}") for i in range(a.flows)]
            totals = [sum(ms for _, ms in f) for f in flows]

        print(f"{'call':<22} {'raw HTTP ms':>12} {'Python SDK ms':>14} {'SDK adds ms':>12}"
              f" {'client CPU raw/SDK ms':>22}")
        for name, raw_ms, sdk_ms, raw_cpu, sdk_cpu in rows:
            print(f"{name:<22} {raw_ms:>12.3f} {sdk_ms:>14.3f} {sdk_ms - raw_ms:>12.3f}"
                  f" {raw_cpu:>10.3f} / {sdk_cpu:.3f}")
        print(f"\n15-call flow through the server, Python SDK: median {statistics.median(totals):.1f} ms "
              f"over {len(totals)} runs (min {min(totals):.1f}, max {max(totals):.1f})")
        for i, (name, _) in enumerate(flows[0]):
            print(f"  {i + 1:>2} {name:<30} {statistics.median(f[i][1] for f in flows):>8.2f} ms")
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)
        shutil.rmtree(store.parent, ignore_errors=True)


if __name__ == "__main__":
    main()
