#!/usr/bin/env python3
"""An agent loop on strata (docs/python.md): fork a branch per attempt, work
in a Sandbox, run the tests, let the policy edit files, commit when the
tests pass, and show the diff against main. A failed attempt leaves main
untouched; its branch stays in history for inspection.

The "model" here is `propose()`: a deterministic stand-in that reads the
test output and returns file edits. Replace it with a call to your LLM.

    strata token create                  # once; export STRATA_TOKEN=...
    strata serve &                       # or set STRATA_REMOTE
    python examples/python/agent_loop.py --project demo
"""

from __future__ import annotations

import argparse
import sys
import uuid

from strata import AlreadyExists, Strata, Workspace

TEST = """#!/bin/sh
# The task: answer.txt must hold the answer.
test "$(cat answer.txt 2>/dev/null)" = 42 || { echo "FAIL: answer.txt is '$(cat answer.txt 2>/dev/null)', want 42" >&2; exit 1; }
echo PASS
"""


def propose(test_output: str, ws: Workspace) -> dict[str, str]:
    """The policy: file edits from the failing tests' output. A real agent
    sends `test_output` and the files it reads with `ws.files.read` to a
    model and gets edits back."""
    if "answer.txt" in test_output:
        current = ws.files.read("answer.txt").decode().strip() if ws.files.exists("answer.txt") else ""
        guess = int(current or "40") + 1  # a slow but steady "model"
        return {"answer.txt": f"{guess}\n"}
    return {}


def ensure_project(s: Strata, project: str) -> None:
    try:
        s.projects.create(project)
        s.write(
            f"{project}/main",
            [
                {"op": "put", "path": "test.sh", "content": TEST, "mode": 0o755},
                {"op": "put", "path": "answer.txt", "content": "40\n"},
            ],
            message="the task",
        )
    except AlreadyExists:
        pass


def attempt(s: Strata, project: str, max_steps: int) -> bool:
    branch = f"{project}/agent-{uuid.uuid4().hex[:6]}"
    s.branches.fork(f"{project}/main", branch)
    sb = s.sandboxes.create(labels={"agent": branch}, memory="1G")
    try:
        ws = sb.mount(branch)
        for step in range(1, max_steps + 1):
            r = ws.run(["./test.sh"], on_stdout=lambda t: print("  |", t, end=""), timeout=60)
            if r.exit_code == 0:
                c = ws.commit(f"agent: tests pass after {step - 1} edit(s)")
                print(f"{branch}: tests pass, committed {c.commit[:12]}")
                for d in s.diff(f"{project}/main", branch):
                    print(f"  {d.kind:8} {d.path}")
                return True
            edits = propose(r.stderr + r.stdout, ws)
            if not edits:
                print(f"{branch}: no idea what to change; giving up")
                return False
            for path, text in edits.items():
                ws.files.write(path, text)
            print(f"step {step}: edited {', '.join(edits)} ({len(ws.status())} changed path(s))")
        print(f"{branch}: still failing after {max_steps} steps")
        return False
    finally:
        sb.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--project", default="demo")
    ap.add_argument("--max-steps", type=int, default=5)
    ap.add_argument("--url", help="server URL (default: STRATA_REMOTE, else the local socket)")
    ap.add_argument("--token", help="default: STRATA_TOKEN")
    a = ap.parse_args()
    with Strata.connect(a.url, a.token) as s:
        ensure_project(s, a.project)
        ok = attempt(s, a.project, a.max_steps)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
