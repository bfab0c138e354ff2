"""Sandboxes, Workspaces and commands through `strata serve`: real
Sandboxes (namespaces, FUSE), asserted by what the command saw and by
reading the Store back through the server."""

from __future__ import annotations

import os

import pytest

import strata
from conftest import Server, find_sandbox, require_sandboxes, unique


def test_flow_end_to_end(s: strata.Strata, project: str) -> None:
    require_sandboxes()
    agent = f"{project}/{unique('agent')}"
    s.branches.fork(f"{project}/main", agent)
    label = unique("flow")
    sb = s.sandboxes.create(labels={"agent": label}, memory="2G")
    try:
        assert sb.info.state == "running"
        assert sb.info.labels["agent"] == label
        assert sb.info.raw.get("memory") == 2 * 1024**3
        assert [x.id for x in s.sandboxes.list(labels={"agent": label})] == [sb.id]
        assert s.sandboxes.list(labels={"agent": "nobody"}) == []

        ws = sb.mount(agent)
        assert ws.info.branch == agent and ws.path == "/workspace"
        # What serves it: the server's default transport, auto, takes FUSE
        # io_uring where the kernel allows it (scripts/test turns it on).
        assert ws.info.transport == expected_transport()
        assert [(w.id, w.info.transport) for w in sb.workspaces()] == [(ws.id, ws.info.transport)]
        listed = s.sandboxes.get(sb.id).info.workspaces
        assert listed is not None
        assert [(w.id, w.transport) for w in listed] == [(ws.id, ws.info.transport)]
        seen: list[str] = []
        r = ws.run(
            ["sh", "-c", "cat README; echo 'written in a sandbox' > out.txt; id -u"],
            on_stdout=seen.append,
            timeout=60,
        )
        assert r.exit_code == 0 and r.ok, r
        assert r.stdout == "demo project\n1500\n"
        assert "".join(seen) == r.stdout
        changes = {(c.path, c.kind) for c in ws.status()}
        assert changes == {("out.txt", "added")}
        c = ws.commit("flow: out.txt")
        assert c.committed and c.branch == agent
        assert ws.commit("nothing new").outcome == "up_to_date"

        # The Store, read back through the server.
        assert s.head(agent) == c.commit
        assert s.read(agent, "out.txt") == b"written in a sandbox\n"
        assert [(d.path, d.kind) for d in s.diff(f"{project}/main", agent)] == [
            ("out.txt", "added")
        ]
        assert s.log(agent)[0].message == "flow: out.txt"
        assert "exec" in sb.logs(50)
        ws.unmount()
        sb.close()
    finally:
        if find_sandbox(s, sb.id) is not None:
            sb.close(discard=True)
    with pytest.raises(strata.NotFound):
        s.sandboxes.get(sb.id)
    assert find_sandbox(s, sb.id) is None


def test_streaming_callbacks_in_order(sandbox: strata.Sandbox, project: str) -> None:
    ws = sandbox.mount(f"{project}/main")
    events: list[tuple[str, str]] = []
    script = "for i in $(seq 1 200); do echo out$i; echo err$i >&2; done; printf 'caf\\303\\251'"
    r = ws.run(
        ["sh", "-c", script],
        on_stdout=lambda t: events.append(("out", t)),
        on_stderr=lambda t: events.append(("err", t)),
    )
    want_out = "".join(f"out{i}\n" for i in range(1, 201)) + "café"
    want_err = "".join(f"err{i}\n" for i in range(1, 201))
    assert r.stdout == want_out and r.stderr == want_err
    assert "".join(t for k, t in events if k == "out") == want_out
    assert "".join(t for k, t in events if k == "err") == want_err


def test_output_streams_while_the_command_runs(sandbox: strata.Sandbox, project: str) -> None:
    ws = sandbox.mount(f"{project}/main")
    p = ws.run(["sh", "-c", "echo first; exec sleep 600"], background=True)
    it = p.output()
    ev = next(it)
    # The first line arrived while the command still runs: streamed, not
    # collected at the end.
    assert (ev.stream, ev.data) == ("stdout", b"first\n")
    assert p.poll() is None
    r = p.kill(grace=1)
    assert r.cancelled and r.signal_name == "SIGTERM" and r.exit_code is None
    assert list(it) == []  # the stream ends after the exit


def test_background_and_kill(sandbox: strata.Sandbox, project: str) -> None:
    ws = sandbox.mount(f"{project}/main")
    p = ws.run(["sleep", "1000"], background=True)
    assert p.pid > 0 and p.poll() is None
    again = sandbox.process(p.id)
    assert again.poll() is None
    r = p.kill()
    assert r.cancelled and r.signal_name == "SIGTERM", r
    w = p.wait()
    assert w.cancelled and w.exit_code is None
    # The process is really gone from the Sandbox.
    ps = ws.run(["sh", "-c", "ps -eo comm= | grep -cx sleep || true"])
    assert ps.stdout.strip() == "0", ps


def test_stdin_with_eof(sandbox: strata.Sandbox, project: str) -> None:
    ws = sandbox.mount(f"{project}/main")
    assert ws.run(["tr", "a-z", "A-Z"], stdin="via stdin\n").stdout == "VIA STDIN\n"
    p = ws.run(["sh", "-c", "cat; echo after-eof"], background=True, stdin=True)
    assert p.write("hello\n") == 6
    assert p.write(b"world\n") == 6
    assert p.poll() is None  # cat waits for more until EOF
    p.close_stdin()
    r = p.wait(timeout=60)
    assert r.exit_code == 0 and r.stdout == "hello\nworld\nafter-eof\n"
    with pytest.raises(strata.StdinClosed):
        p.write("late")


def test_timeouts(sandbox: strata.Sandbox, project: str) -> None:
    ws = sandbox.mount(f"{project}/main")
    with pytest.raises(strata.CommandTimeout) as e:
        ws.run(["sh", "-c", "echo started; exec sleep 600"], timeout=1)
    assert e.value.result.timed_out and e.value.result.stdout == "started\n"
    assert e.value.result.exit_code is None
    # A call's own timeout: waiting on a command that does not end.
    p = ws.run(["sleep", "600"], background=True)
    with pytest.raises(strata.RequestTimeout):
        p.wait(timeout=0.5)
    assert p.poll() is None  # the command was not touched by that
    assert p.kill().cancelled


def test_bad_input(s: strata.Strata, server: Server, sandbox: strata.Sandbox, project: str) -> None:
    with pytest.raises(strata.NotFound):
        s.sandboxes.get("sb-000000000000000000000000")
    with pytest.raises(strata.NotFound):
        sandbox.mount(f"{project}/no-such-branch")
    ws = sandbox.mount(f"{project}/main")
    with pytest.raises(strata.ExecFailed) as ef:
        ws.run(["/no/such/program"])
    assert ef.value.errno_name == "ENOENT"
    with pytest.raises(ValueError, match="list of strings"):
        ws.run("make test")
    with pytest.raises(strata.InvalidInput):
        ws.run(["true"], env={"": "x"})
    with strata.Strata.connect(server.url, "strata_0000000000000000_" + "11" * 32) as bad:
        with pytest.raises(strata.Unauthorized):
            bad.sandboxes.get(sandbox.id)
    # The Sandbox still works after all that.
    assert ws.run(["echo", "alive"]).stdout == "alive\n"


def test_commit_conflict_carries_the_winner(sandbox: strata.Sandbox, project: str) -> None:
    ref = f"{project}/main"
    a = sandbox.mount(ref, "/tmp/a")
    b = sandbox.mount(ref, "/tmp/b")
    assert a.run(["sh", "-c", "echo A > who"]).ok
    assert b.run(["sh", "-c", "echo B > who"]).ok
    won = a.commit("a wins")
    with pytest.raises(strata.Conflict) as e:
        b.commit("b loses")
    assert e.value.actual_head == won.commit
    # The loser wrote nothing: the branch holds the winner's file.
    ws = sandbox.mount(ref, "/tmp/c")
    assert ws.run(["cat", "who"]).stdout == "A\n"


def test_scoped_token_and_sandboxes(server: Server, s: strata.Strata, project: str) -> None:
    require_sandboxes()
    other = unique("o")
    s.projects.create(other)
    with strata.Strata.connect(server.url, server.new_token(project)) as scoped:
        sb = scoped.sandboxes.create(project=project)
        try:
            assert sb.info.project == project
            with pytest.raises(strata.NotFound):
                sb.mount(f"{other}/main")
            assert sb.mount(f"{project}/main").run(["cat", "README"]).stdout == "demo project\n"
        finally:
            sb.close(discard=True)


def test_output_back_pressure(sandbox: strata.Sandbox, project: str) -> None:
    """A reader that stops reading stops the command, through the whole
    chain (this client reads no further than asked, the server relays no
    faster than it is read, the daemon's buffer is bounded): the writer
    blocks in the kernel's pipe_write (its /proc wchan) and has not
    finished; reading on then gets every byte."""
    ws = sandbox.mount(f"{project}/main")
    size = 16 * 1024 * 1024
    p = ws.run(["sh", "-c", f"head -c {size} /dev/zero; echo done > marker"], background=True)
    it = p.output(timeout=120)
    first = next(it)  # attached, then not reading
    blocked = ""
    for _ in range(300):
        probe = ws.run(
            ["sh", "-c", 'for p in /proc/[0-9]*; do [ "$(cat $p/comm)" = head ] && cat $p/wchan; done; echo']
        )
        blocked = probe.stdout.strip()
        # pipe_write, named anon_pipe_write since Linux 6.16 (fs/pipe.c).
        if blocked in ("pipe_write", "anon_pipe_write"):
            break
    assert blocked in ("pipe_write", "anon_pipe_write"), f"the writer is not blocked on its pipe: {blocked!r}"
    assert not ws.run(["test", "-e", "marker"]).ok
    assert p.poll() is None
    total = len(first.data) + sum(len(ev.data) for ev in it)
    assert total == size
    assert p.wait().exit_code == 0
    assert ws.run(["cat", "marker"]).stdout == "done\n"


def expected_transport() -> str:
    """What a Sandbox's mount made by this environment's server uses: the
    server's STRATA_FUSE_TRANSPORT (unset: auto), io_uring only where the
    kernel's enable_uring is Y."""
    t = os.environ.get("STRATA_FUSE_TRANSPORT", "auto")
    try:
        with open("/sys/module/fuse/parameters/enable_uring") as f:
            on = f.read().strip() == "Y"
    except OSError:
        on = False
    return "io_uring" if t != "dev-fuse" and on else "/dev/fuse"
