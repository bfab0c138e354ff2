"""A real `strata serve` for the session, on a fresh Store, with the debug
`strata` binary ($STRATA_BIN, else target/x86_64-unknown-linux-gnu/debug/strata
of this repository). No mocks: every test talks HTTP to that server, which
creates real Sandboxes (namespaces, FUSE). What these tests need and is
missing (the binary, root, /dev/fuse) fails them loudly; nothing skips."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import tempfile
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Optional

import pytest

import strata

REPO = Path(__file__).resolve().parents[3]


def strata_bin() -> Path:
    b = os.environ.get("STRATA_BIN")
    p = Path(b) if b else REPO / "target/x86_64-unknown-linux-gnu/debug/strata"
    if not p.is_file() or not os.access(p, os.X_OK):
        pytest.fail(
            f"the strata binary {p} is missing: build it with "
            "`cargo build -p strata-cli` (or set STRATA_BIN)",
            pytrace=False,
        )
    return p


@dataclass
class Server:
    """A running `strata serve`."""

    bin: Path
    store: Path
    sock: Path
    token: str
    proc: "subprocess.Popen[bytes]"

    @property
    def url(self) -> str:
        return f"unix://{self.sock}"

    def cli(self, *args: str) -> str:
        """Run the CLI on the same Store (locally, not through the server)."""
        r = subprocess.run(
            [str(self.bin), "--store", str(self.store), *args],
            capture_output=True,
            timeout=120,
        )
        if r.returncode != 0:
            raise AssertionError(f"strata {' '.join(args)}: {r.stderr.decode()}")
        return r.stdout.decode()

    def new_token(self, *projects: str) -> str:
        args = ["--json", "token", "create"]
        for p in projects:
            args += ["--project", p]
        return str(json.loads(self.cli(*args))["token"])


def _start(bin: Path, store: Path) -> Server:
    subprocess.run([str(bin), "--store", str(store), "init"], check=True, capture_output=True)
    tok = json.loads(
        subprocess.run(
            [str(bin), "--store", str(store), "--json", "token", "create"],
            check=True,
            capture_output=True,
        ).stdout
    )["token"]
    proc = subprocess.Popen(
        [str(bin), "--store", str(store), "--json", "serve"],
        stdout=subprocess.PIPE,
        stderr=open(store.parent / "serve.log", "wb"),
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line:
        proc.wait(10)
        log = (store.parent / "serve.log").read_text()
        pytest.fail(f"strata serve did not start: {log}", pytrace=False)
    listening = json.loads(line)["listening"]
    assert listening.startswith("unix:"), listening
    return Server(bin, store, Path(listening[len("unix:") :]), tok, proc)


@pytest.fixture(scope="session")
def server() -> Iterator[Server]:
    """The session's server; at the end, every Sandbox it still has is
    closed (they outlive the server) and the server is stopped."""
    bin = strata_bin()
    tmp = Path(tempfile.mkdtemp(prefix="strata-py-"))
    srv = _start(bin, tmp / "store")
    try:
        yield srv
    finally:
        try:
            with strata.Strata.connect(srv.url, srv.token) as s:
                for sb in s.sandboxes.list():
                    try:
                        sb.close(discard=True)
                    except strata.StrataError:
                        pass
        except strata.StrataError:
            pass
        srv.proc.send_signal(signal.SIGTERM)
        try:
            srv.proc.wait(30)
        except subprocess.TimeoutExpired:
            srv.proc.kill()
            srv.proc.wait()
        shutil.rmtree(tmp, ignore_errors=True)


@pytest.fixture
def s(server: Server) -> Iterator[strata.Strata]:
    """A client of the session's server."""
    with strata.Strata.connect(server.url, server.token, timeout=60) as c:
        yield c


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def project(s: strata.Strata) -> str:
    """A fresh project whose main holds README and src/lib.txt."""
    name = unique("p")
    s.projects.create(name)
    s.write(
        f"{name}/main",
        [
            {"op": "put", "path": "README", "content": "demo project\n"},
            {"op": "put", "path": "src/lib.txt", "content": "lib\n"},
        ],
        message="initial files",
    )
    return name


def require_sandboxes() -> None:
    """Sandboxes need root and /dev/fuse: fail (never skip) without them."""
    problems: list[str] = []
    if os.geteuid() != 0:
        problems.append("not root (Sandboxes need namespaces and FUSE mounts)")
    if not os.path.exists("/dev/fuse"):
        problems.append("/dev/fuse is missing (modprobe fuse)")
    if problems:
        pytest.fail("cannot run Sandbox tests: " + "; ".join(problems), pytrace=False)


@pytest.fixture
def sandbox(s: strata.Strata) -> Iterator[strata.Sandbox]:
    """A fresh Sandbox, closed afterwards."""
    require_sandboxes()
    sb = s.sandboxes.create(labels={"test": unique("t")})
    try:
        yield sb
    finally:
        try:
            sb.close(discard=True)
        except strata.NotFound:
            pass


def find_sandbox(s: strata.Strata, sid: str) -> Optional[strata.Sandbox]:
    try:
        return s.sandboxes.get(sid)
    except strata.NotFound:
        return None
