"""The Store through `strata serve`: every result is read back through the
server (and, where it matters, with the local CLI on the same Store)."""

from __future__ import annotations

import io
import tarfile

import pytest

import strata
from conftest import Server, unique


def test_projects_branches_log_diff_read(s: strata.Strata, project: str) -> None:
    assert project in s.projects.list()
    b = s.branches.fork(f"{project}/main", f"{project}/agent-1")
    assert (b.project, b.name) == (project, "agent-1")
    assert b.head == s.head(f"{project}/main")
    names = sorted(x.name for x in s.branches.list(project))
    assert names == ["agent-1", "main"]

    c = s.write(
        f"{project}/agent-1",
        [
            {"op": "put", "path": "notes.md", "content": "hello\n"},
            {"op": "put", "path": "bin/run", "content": b"#!/bin/sh\n\xff", "mode": 0o755},
            {"op": "symlink", "path": "latest", "target": "notes.md"},
            {"op": "delete", "path": "src/lib.txt"},
        ],
        message="agent work",
    )
    assert c.parent == b.head and c.commit != b.head
    assert s.head(f"{project}/agent-1") == c.commit

    assert s.read(f"{project}/agent-1", "notes.md") == b"hello\n"
    assert s.read(f"{project}/agent-1", "bin/run") == b"#!/bin/sh\n\xff"
    assert s.read(f"{project}/agent-1", "notes.md", start=1, end=4) == b"ell"
    st = s.stat(f"{project}/agent-1", "bin/run")
    assert (st.kind, st.mode, st.size) == ("file", 0o755, 11)
    assert s.stat(f"{project}/agent-1", "latest").target == "notes.md"
    assert [e.name for e in s.ls(f"{project}/agent-1")] == ["README", "bin", "latest", "notes.md", "src"]

    log = s.log(f"{project}/agent-1")
    assert [x.message for x in log[:2]] == ["agent work", "initial files"]
    assert log[0].id == c.commit and log[0].parents == [b.head]
    assert len(s.log(f"{project}/agent-1", limit=1)) == 1

    d = {(x.path, x.kind) for x in s.diff(f"{project}/main", f"{project}/agent-1")}
    assert d == {
        ("notes.md", "added"),
        ("bin", "added"),
        ("bin/run", "added"),
        ("latest", "added"),
        ("src/lib.txt", "deleted"),
    }
    # main did not move.
    assert s.read(f"{project}/main", "src/lib.txt") == b"lib\n"

    s.branches.delete(f"{project}/agent-1")
    assert [x.name for x in s.branches.list(project)] == ["main"]


def test_change_set_conflict_carries_the_winner(s: strata.Strata, project: str) -> None:
    ref = f"{project}/main"
    base = s.head(ref)
    won = s.write(ref, [{"op": "put", "path": "a", "content": "first"}], expected_head=base)
    with pytest.raises(strata.Conflict) as e:
        s.write(ref, [{"op": "put", "path": "a", "content": "second"}], expected_head=base)
    assert e.value.actual_head == won.commit
    assert e.value.status == 409 and e.value.code == "conflict"
    # Nothing of the loser was written.
    assert s.read(ref, "a") == b"first"
    assert s.head(ref) == won.commit


def test_errors_are_typed(s: strata.Strata, server: Server, project: str) -> None:
    with pytest.raises(strata.NotFound) as nf:
        s.read(f"{project}/main", "no/such/file")
    assert "no/such/file" in str(nf.value) or "not found" in str(nf.value).lower()
    with pytest.raises(strata.NotFound):
        s.log("no-such-project/main")
    with pytest.raises(strata.AlreadyExists):
        s.projects.create(project)
    with pytest.raises(strata.AlreadyExists):
        s.branches.fork(f"{project}/main", f"{project}/main")
    with pytest.raises(strata.InvalidInput) as bad:
        s.projects.create("Not A Name!")
    assert bad.value.status == 400 and bad.value.message
    with pytest.raises(strata.InvalidInput):
        s.write(f"{project}/main", [{"op": "put", "path": "../escape", "content": "x"}])
    with pytest.raises(strata.InvalidInput):
        s.write(f"{project}/main", [{"op": "frobnicate", "path": "x"}])
    with pytest.raises(ValueError):
        s.log("no-slash")
    # Nothing was published by the refused change sets.
    assert [c.message for c in s.log(f"{project}/main")][0] == "initial files"


def test_wrong_token_is_unauthorized(server: Server, project: str) -> None:
    with strata.Strata.connect(server.url, "strata_0000000000000000_" + "00" * 32) as bad:
        with pytest.raises(strata.Unauthorized) as e:
            bad.projects.list()
        assert e.value.status == 401
        with pytest.raises(strata.Unauthorized):
            bad.sandboxes.list()
    with pytest.raises(strata.ConfigError):
        strata.Strata.connect(server.url, "")


def test_scoped_token_sees_only_its_project(server: Server, s: strata.Strata, project: str) -> None:
    other = unique("q")
    s.projects.create(other)
    with strata.Strata.connect(server.url, server.new_token(project)) as scoped:
        assert scoped.projects.list() == [project]
        with pytest.raises(strata.NotFound):
            scoped.log(f"{other}/main")
        with pytest.raises(strata.Forbidden):
            scoped.projects.create(unique("r"))


def test_connect_from_environment(
    server: Server, project: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # STRATA_REMOTE + STRATA_TOKEN.
    monkeypatch.setenv("STRATA_REMOTE", server.url)
    monkeypatch.setenv("STRATA_TOKEN", server.token)
    with strata.Strata.connect() as c:
        assert project in c.projects.list()
    # No STRATA_REMOTE: the Store's own socket (STRATA_STORE/serve.sock).
    monkeypatch.delenv("STRATA_REMOTE")
    monkeypatch.setenv("STRATA_STORE", str(server.store))
    with strata.Strata.connect() as c:
        assert project in c.projects.list()
    monkeypatch.delenv("STRATA_TOKEN")
    with pytest.raises(strata.ConfigError, match="STRATA_TOKEN"):
        strata.Strata.connect()
    with pytest.raises(strata.ConfigError, match="not a server address"):
        strata.Strata.connect("ftp://x", "t")
    # A socket nobody serves: a transport error naming it, not a hang.
    with strata.Strata.connect(f"unix://{server.store}/nothing.sock", "t") as c:
        with pytest.raises(strata.TransportError, match="nothing.sock"):
            c.projects.list()


def test_tar_round_trip_and_cli_agrees(s: strata.Strata, server: Server, project: str) -> None:
    ref = f"{project}/main"
    data = s.export_tar(ref)
    with tarfile.open(fileobj=io.BytesIO(data)) as t:
        names = sorted(m.name.strip("./") for m in t.getmembers() if m.isfile())
    assert names == ["README", "src/lib.txt"]

    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT) as t:
        body = b"imported\n"
        info = tarfile.TarInfo("only.txt")
        info.size = len(body)
        t.addfile(info, io.BytesIO(body))
    c = s.import_tar(ref, buf.getvalue(), message="import")
    assert s.head(ref) == c.commit
    assert [e.name for e in s.ls(ref)] == ["only.txt"]
    # The CLI on the same Store, not through the server, reads the same.
    assert server.cli("cat", ref, "only.txt") == "imported\n"
