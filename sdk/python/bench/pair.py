#!/usr/bin/env python3
"""The Python side of strata-bench's `python` group (docs/benchmarks.md,
"Python SDK beside the Rust SDK"): the same calls the benchmark makes with
the Rust SDK (`strata_sdk::Client`), with the sync Python SDK, against the
server the benchmark started, on the Sandbox and Workspace it made.

Prints one JSON object on stdout: the wall-clock milliseconds of every
timed call (after the warm-up calls, which are not timed), which the
benchmark turns into medians and p99s beside its own, and this process's
mean CPU time per call (`*_cpu_ms`):

    {"python": "3.11.2", "httpx": "0.28.1",
     "branch_list_ms": [...], "branch_list_cpu_ms": 0.4,
     "exec_true_ms": [...], "exec_true_cpu_ms": 1.1, "flow_ms": [...],
     "flow_steps": [["create a project", 1.2], ...]}

    python pair.py --url unix:///…/server.sock --token T --project b \\
        --sandbox sb-… --workspace ws-… --rounds 200 --exec-rounds 50 --flows 5

Every call is checked (a branch list of the wrong length, an exec that did
not exit 0 or a flow step with the wrong result stops the run with the
reason), so a figure is never that of a failing call.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from typing import Any, Callable

import httpx

import strata
from bench import flow


def timed(f: Callable[[], Any], n: int, warm: int) -> tuple[list[float], float]:
    """`warm` untimed calls of `f`, then the milliseconds of `n` more, and
    the mean CPU time of this process per timed call (ms): the client's
    own work, which waiting for the server or a busy machine's run queue
    does not add to."""
    for _ in range(warm):
        f()
    out = []
    cpu = time.process_time()
    for _ in range(n):
        t = time.perf_counter()
        f()
        out.append((time.perf_counter() - t) * 1e3)
    return out, (time.process_time() - cpu) * 1e3 / max(n, 1)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--url", required=True, help="the server, e.g. unix:///path/server.sock")
    ap.add_argument("--token", required=True)
    ap.add_argument("--project", required=True, help="a project with --branches branches")
    ap.add_argument("--branches", type=int, default=10)
    ap.add_argument("--sandbox", required=True, help="the Sandbox the Rust side runs `true` in")
    ap.add_argument("--workspace", required=True, help="its Workspace")
    ap.add_argument("--rounds", type=int, default=2000, help="timed branch lists")
    ap.add_argument("--exec-rounds", type=int, default=200, help="timed execs of `true`")
    ap.add_argument("--flows", type=int, default=5, help="timed 15-call flows")
    ap.add_argument("--warm", type=int, default=100, help="untimed branch lists first")
    ap.add_argument("--exec-warm", type=int, default=10, help="untimed execs first")
    a = ap.parse_args()

    with strata.Strata.connect(a.url, a.token) as s:

        def branch_list() -> None:
            got = len(s.branches.list(a.project))
            if got != a.branches:
                sys.exit(f"pair.py: {a.project} has {got} branches, expected {a.branches}")

        lists, lists_cpu = timed(branch_list, a.rounds, a.warm)

        sb = s.sandboxes.get(a.sandbox)
        found = [w for w in sb.workspaces() if w.id == a.workspace]
        if not found:
            sys.exit(f"pair.py: Sandbox {a.sandbox} has no Workspace {a.workspace}")
        ws = found[0]

        def exec_true() -> None:
            r = ws.run(["true"])
            if r.exit_code != 0:
                sys.exit(f"pair.py: `true` ended with {r}")

        execs, execs_cpu = timed(exec_true, a.exec_rounds, a.exec_warm)

        # One untimed flow first (the first Sandbox create of a process
        # pays for code paths not yet warm), then the timed ones.
        tag = f"py-{os.getpid()}"
        flow(s, f"{tag}-warm")
        flows = [flow(s, f"{tag}-{i}") for i in range(a.flows)]

    steps = [
        [name, statistics.median(f[i][1] for f in flows)] for i, (name, _) in enumerate(flows[0])
    ] if flows else []
    json.dump(
        {
            "python": platform.python_version(),
            "httpx": httpx.__version__,
            "branch_list_ms": lists,
            "branch_list_cpu_ms": lists_cpu,
            "exec_true_ms": execs,
            "exec_true_cpu_ms": execs_cpu,
            "flow_ms": [sum(ms for _, ms in f) for f in flows],
            "flow_steps": steps,
        },
        sys.stdout,
    )
    print()


if __name__ == "__main__":
    main()
