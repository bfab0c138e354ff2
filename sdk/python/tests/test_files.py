"""Files of a live Workspace through the API (no exec per file), confined
to the Workspace; results checked by a command in the Sandbox and by the
Store read back after a commit."""

from __future__ import annotations

import pytest

import strata


def test_files_round_trip(s: strata.Strata, sandbox: strata.Sandbox, project: str) -> None:
    ref = f"{project}/main"
    ws = sandbox.mount(ref)
    assert ws.files.read("README") == b"demo project\n"
    ws.files.write("notes.md", "first note\n")
    ws.files.write("deep/dir/data.bin", bytes(range(256)))
    assert ws.files.read("deep/dir/data.bin") == bytes(range(256))
    # A command sees what the API wrote, owned by the command's uid.
    r = ws.run(["sh", "-c", "cat notes.md; stat -c %u notes.md"])
    assert r.stdout == "first note\n1500\n"
    names = {e.name: e.kind for e in ws.files.list(".")}
    assert names["notes.md"] == "file" and names["deep"] == "dir"
    st = ws.files.stat("deep/dir/data.bin")
    assert (st.size, st.kind, st.uid) == (256, "file", 1500)
    ws.files.write("run.sh", "#!/bin/sh\necho ran\n", mode=0o755)
    assert ws.files.stat("run.sh").mode == 0o755
    assert ws.run(["./run.sh"]).stdout == "ran\n"
    ws.files.rename("notes.md", "NOTES.md")
    assert not ws.files.exists("notes.md") and ws.files.exists("NOTES.md")
    ws.files.mkdir("empty/sub")
    assert ws.files.stat("empty/sub").kind == "dir"
    ws.files.remove("deep", recursive=True)
    with pytest.raises(strata.NotFound):
        ws.files.read("deep/dir/data.bin")
    assert {c.path for c in ws.status()} >= {"NOTES.md"}
    c = ws.commit("files through the API")
    assert s.read(ref, "NOTES.md") == b"first note\n"
    assert s.head(ref) == c.commit
    names_committed = {e.name for e in s.ls(ref)}
    assert "deep" not in names_committed and "notes.md" not in names_committed


def test_files_cannot_leave_the_workspace(sandbox: strata.Sandbox, project: str) -> None:
    ws = sandbox.mount(f"{project}/main")
    assert ws.run(["ln", "-s", "/etc/shadow", "x"]).ok
    for path in ("x", "../../etc/shadow", "/etc/shadow"):
        with pytest.raises((strata.InvalidInput, strata.NotFound, strata.Forbidden)):
            data = ws.files.read(path)
            assert b"root:" not in data
