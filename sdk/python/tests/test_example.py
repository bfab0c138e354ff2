"""examples/python/agent_loop.py runs against the session's server and
leaves the expected commit in the Store."""

from __future__ import annotations

import os
import subprocess
import sys

import strata
from conftest import REPO, Server, require_sandboxes, unique


def test_agent_loop_example(server: Server, s: strata.Strata) -> None:
    require_sandboxes()
    project = unique("ex")
    r = subprocess.run(
        [sys.executable, str(REPO / "examples/python/agent_loop.py"), "--project", project],
        env={**os.environ, "STRATA_REMOTE": server.url, "STRATA_TOKEN": server.token},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    agents = [b for b in s.branches.list(project) if b.name.startswith("agent-")]
    assert len(agents) == 1
    assert s.read(agents[0].ref, "answer.txt") == b"42\n"
    assert s.read(f"{project}/main", "answer.txt") == b"40\n"
    assert [d.path for d in s.diff(f"{project}/main", agents[0].ref)] == ["answer.txt"]
