"""Every API operation, written once as a flow (see ``_wire.py``): the
routes of ``strata serve`` (docs/server.md) and of a Sandbox's daemon as the
server relays them under ``/v1/sandboxes/{id}/`` (docs/api/openapi.yaml)."""

from __future__ import annotations

import base64
import codecs
import json
import re
from typing import Any, Callable, Mapping, Optional, Sequence, Union
from urllib.parse import quote

from ._wire import DEFAULT, Await, Call, Close, Emit, Flow, Next, Open, Req
from .errors import CommandTimeout, ExecFailed
from .types import (
    Branch,
    Commit,
    Entry,
    FileEntry,
    OutputEvent,
    PathChange,
    Project,
    RunResult,
    SandboxInfo,
    StoreCommit,
    WorkspaceChange,
    WorkspaceCommit,
    WorkspaceInfo,
)

#: ``on_stdout``/``on_stderr``: called with each piece of text as it
#: arrives; may return an awaitable with :class:`strata.AsyncStrata`.
Callback = Callable[[str], Any]
Data = Union[bytes, str]


def _seg(s: str) -> str:
    """One path segment, percent-encoded (branch names may hold ``/``)."""
    return quote(s, safe="")


def split_ref(ref: str) -> tuple[str, str]:
    """``PROJECT/REF`` (a branch, or a commit id) into its two parts."""
    if not isinstance(ref, str) or "/" not in ref:
        raise ValueError(
            f"{ref!r} is not PROJECT/REF: name a branch as 'web/main' or a commit as 'web/<hex id>'"
        )
    p, r = ref.split("/", 1)
    if not p or not r:
        raise ValueError(f"{ref!r} is not PROJECT/REF: both parts must be non-empty")
    return p, r


_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(i?b?)\s*$", re.IGNORECASE)


def parse_size(v: Union[int, str]) -> int:
    """Bytes from ``2G``, ``512M``, ``1.5GiB``, ``4096`` (powers of 1024,
    as the CLI's ``--memory``)."""
    if isinstance(v, bool):
        raise ValueError(f"{v!r} is not a size")
    if isinstance(v, int):
        if v <= 0:
            raise ValueError(f"size {v} must be positive")
        return v
    m = _SIZE.match(v)
    if not m:
        raise ValueError(f"{v!r} is not a size: write e.g. 2G, 512M or a number of bytes")
    n = float(m.group(1)) * 1024 ** " kmgt".index((m.group(2) or " ").lower())
    if n < 1:
        raise ValueError(f"size {v!r} must be positive")
    return int(n)


def _bytes(d: Data) -> bytes:
    return d.encode() if isinstance(d, str) else bytes(d)


# ---------------------------------------------------------------- Store


def list_projects() -> Flow[list[str]]:
    r = yield Call(Req("GET", "/v1/projects"))
    return [str(p) for p in r.json()["projects"]]


def create_project(name: str, message: Optional[str]) -> Flow[Project]:
    body: dict[str, Any] = {"name": name}
    if message is not None:
        body["message"] = message
    r = yield Call(Req("POST", "/v1/projects", json=body))
    return Project.from_json(r.json())


def list_branches(project: str) -> Flow[list[Branch]]:
    r = yield Call(Req("GET", f"/v1/projects/{_seg(project)}/branches"))
    return [Branch.from_json(b) for b in r.json()["branches"]]


def head(ref: str) -> Flow[str]:
    p, b = split_ref(ref)
    branches = yield from list_branches(p)
    for br in branches:
        if br.name == b:
            return br.head
    # Not a branch: a commit id resolves through the log.
    commits = yield from log(ref, 1)
    return commits[0].id


def fork(src: str, dst: str) -> Flow[Branch]:
    sp, sr = split_ref(src)
    dp, dr = split_ref(dst)
    if sp != dp:
        raise ValueError(
            f"fork {src!r} -> {dst!r}: a branch is forked inside its project; name the new one {sp}/NAME"
        )
    r = yield Call(
        Req("POST", f"/v1/projects/{_seg(sp)}/branches", json={"name": dr, "from": sr})
    )
    return Branch.from_json(r.json())


def delete_branch(ref: str) -> Flow[None]:
    p, b = split_ref(ref)
    yield Call(Req("DELETE", f"/v1/projects/{_seg(p)}/branches/{_seg(b)}"))
    return None


def log(ref: str, limit: Optional[int]) -> Flow[list[Commit]]:
    p, r = split_ref(ref)
    params = [("ref", r)]
    if limit is not None:
        params.append(("limit", str(limit)))
    rep = yield Call(Req("GET", f"/v1/projects/{_seg(p)}/log", params=params))
    return [Commit.from_json(c) for c in rep.json()["commits"]]


def diff(a: str, b: str) -> Flow[list[PathChange]]:
    pa, ra = split_ref(a)
    pb, rb = split_ref(b)
    if pa != pb:
        raise ValueError(f"diff {a!r} {b!r}: both REFs must be of one project")
    rep = yield Call(
        Req("GET", f"/v1/projects/{_seg(pa)}/diff", params=[("from", ra), ("to", rb)])
    )
    return [PathChange.from_json(c) for c in rep.json()["changes"]]


def _path_params(r: str, path: Optional[str]) -> list[tuple[str, str]]:
    params = [("ref", r)]
    if path:
        params.append(("path", path))
    return params


def ls(ref: str, path: Optional[str]) -> Flow[list[Entry]]:
    p, r = split_ref(ref)
    rep = yield Call(Req("GET", f"/v1/projects/{_seg(p)}/ls", params=_path_params(r, path)))
    return [Entry.from_json(e) for e in rep.json()["entries"]]


def stat(ref: str, path: str) -> Flow[Entry]:
    p, r = split_ref(ref)
    rep = yield Call(Req("GET", f"/v1/projects/{_seg(p)}/stat", params=_path_params(r, path)))
    return Entry.from_json(rep.json())


def cat(ref: str, path: str, start: Optional[int], end: Optional[int]) -> Flow[bytes]:
    p, r = split_ref(ref)
    headers = None
    if start is not None or end is not None:
        headers = {"range": f"bytes={start or 0}-{'' if end is None else end - 1}"}
    rep = yield Call(
        Req("GET", f"/v1/projects/{_seg(p)}/cat", params=_path_params(r, path), headers=headers)
    )
    return bytes(rep.body)


def _change(c: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(c)
    content = out.pop("content", None)
    if isinstance(content, (bytes, bytearray)):
        out["content_base64"] = base64.b64encode(content).decode()
    elif content is not None:
        out["content"] = content
    return out


def write_changes(
    ref: str,
    changes: Sequence[Mapping[str, Any]],
    expected_head: Optional[str],
    message: Optional[str],
) -> Flow[StoreCommit]:
    p, b = split_ref(ref)
    if expected_head is None:
        expected_head = yield from head(ref)
    body: dict[str, Any] = {
        "expected_head": expected_head,
        "changes": [_change(c) for c in changes],
    }
    if message is not None:
        body["message"] = message
    rep = yield Call(
        Req("POST", f"/v1/projects/{_seg(p)}/branches/{_seg(b)}/commits", json=body)
    )
    return StoreCommit.from_json(rep.json())


def export_tar(ref: str, path: Optional[str]) -> Flow[bytes]:
    p, r = split_ref(ref)
    rep = yield Call(Req("GET", f"/v1/projects/{_seg(p)}/tar", params=_path_params(r, path)))
    return bytes(rep.body)


def import_tar(
    ref: str, data: bytes, expected_head: Optional[str], message: Optional[str]
) -> Flow[StoreCommit]:
    p, b = split_ref(ref)
    if expected_head is None:
        expected_head = yield from head(ref)
    params = [("expected_head", expected_head)]
    if message is not None:
        params.append(("message", message))
    rep = yield Call(
        Req(
            "POST",
            f"/v1/projects/{_seg(p)}/branches/{_seg(b)}/tar",
            params=params,
            content=data,
            headers={"content-type": "application/x-tar"},
        )
    )
    return StoreCommit.from_json(rep.json())


# ---------------------------------------------------------------- Sandboxes


def sb_path(sid: str, rest: str = "") -> str:
    return f"/v1/sandboxes/{_seg(sid)}{rest}"


def create_sandbox(
    *,
    project: Optional[str],
    name: Optional[str],
    labels: Optional[Mapping[str, str]],
    network: Optional[str],
    memory: Optional[Union[int, str]],
    pids: Optional[int],
    cpus: Optional[float],
    no_limits: bool,
    image: Optional[str],
    timeout: Any,
) -> Flow[SandboxInfo]:
    body: dict[str, Any] = {}
    for k, v in (
        ("project", project),
        ("name", name),
        ("network", network),
        ("pids", pids),
        ("cpus", cpus),
        ("image", image),
    ):
        if v is not None:
            body[k] = v
    if labels:
        body["labels"] = {str(k): str(v) for k, v in labels.items()}
    if memory is not None:
        body["memory"] = parse_size(memory)
    if no_limits:
        body["no_limits"] = True
    rep = yield Call(Req("POST", "/v1/sandboxes", json=body, timeout=timeout))
    return SandboxInfo.from_json(rep.json())


def list_sandboxes(labels: Optional[Mapping[str, str]]) -> Flow[list[SandboxInfo]]:
    params = [("label", f"{k}={v}") for k, v in (labels or {}).items()]
    rep = yield Call(Req("GET", "/v1/sandboxes", params=params or None))
    return [SandboxInfo.from_json(s) for s in rep.json()["sandboxes"]]


def get_sandbox(sid: str) -> Flow[SandboxInfo]:
    rep = yield Call(Req("GET", sb_path(sid)))
    return SandboxInfo.from_json(rep.json())


def sandbox_logs(sid: str, lines: int) -> Flow[str]:
    rep = yield Call(Req("GET", sb_path(sid, "/logs"), params=[("lines", str(lines))]))
    return bytes(rep.body).decode("utf-8", "replace")


def restart_sandbox(sid: str, timeout: Any) -> Flow[SandboxInfo]:
    rep = yield Call(Req("POST", sb_path(sid, "/restart"), timeout=timeout))
    try:
        return SandboxInfo.from_json(rep.json())
    except ValueError:
        info = yield from get_sandbox(sid)
        return info


def close_sandbox(sid: str, discard: bool, timeout: Any) -> Flow[None]:
    params = [("discard", "true")] if discard else None
    yield Call(Req("DELETE", sb_path(sid), params=params, timeout=timeout))
    return None


# ---------------------------------------------------------------- Workspaces


def mount(sid: str, ref: str, at: Optional[str], timeout: Any) -> Flow[WorkspaceInfo]:
    split_ref(ref)
    body: dict[str, Any] = {"ref": ref}
    if at is not None:
        body["at"] = at
    rep = yield Call(Req("POST", sb_path(sid, "/workspaces"), json=body, timeout=timeout))
    return WorkspaceInfo.from_json(rep.json())


def list_workspaces(sid: str) -> Flow[list[WorkspaceInfo]]:
    rep = yield Call(Req("GET", sb_path(sid, "/workspaces")))
    body = rep.json()
    items = body["workspaces"] if isinstance(body, dict) else body
    return [WorkspaceInfo.from_json(w) for w in items]


def ws_path(sid: str, wid: str, rest: str = "") -> str:
    return sb_path(sid, f"/workspaces/{_seg(wid)}{rest}")


def ws_status(sid: str, wid: str) -> Flow[list[WorkspaceChange]]:
    rep = yield Call(Req("GET", ws_path(sid, wid, "/status")))
    return [WorkspaceChange.from_json(c) for c in rep.json()["changes"]]


def ws_commit(sid: str, wid: str, message: str, timeout: Any) -> Flow[WorkspaceCommit]:
    rep = yield Call(
        Req("POST", ws_path(sid, wid, "/commit"), json={"message": message}, timeout=timeout)
    )
    return WorkspaceCommit.from_json(rep.json())


def ws_unmount(sid: str, wid: str, discard: bool, timeout: Any) -> Flow[None]:
    yield Call(
        Req("POST", ws_path(sid, wid, "/unmount"), json={"discard": discard}, timeout=timeout)
    )
    return None


def _p(path: str) -> list[tuple[str, str]]:
    return [("path", path)]


def file_read(sid: str, wid: str, path: str, timeout: Any) -> Flow[bytes]:
    rep = yield Call(Req("GET", ws_path(sid, wid, "/files"), params=_p(path), timeout=timeout))
    return bytes(rep.body)


def file_write(
    sid: str, wid: str, path: str, data: Data, mode: Optional[int], timeout: Any
) -> Flow[None]:
    params = _p(path)
    if mode is not None:
        params.append(("mode", f"{mode:04o}"))
    yield Call(
        Req(
            "PUT",
            ws_path(sid, wid, "/files"),
            params=params,
            content=_bytes(data),
            headers={"content-type": "application/octet-stream"},
            timeout=timeout,
        )
    )
    return None


def file_remove(sid: str, wid: str, path: str, recursive: bool) -> Flow[None]:
    params = _p(path)
    if recursive:
        params.append(("recursive", "true"))
    yield Call(Req("DELETE", ws_path(sid, wid, "/files"), params=params))
    return None


def file_list(sid: str, wid: str, path: str) -> Flow[list[FileEntry]]:
    rep = yield Call(Req("GET", ws_path(sid, wid, "/ls"), params=_p(path)))
    body = rep.json()
    items = body["entries"] if isinstance(body, dict) else body
    return [FileEntry.from_json(e) for e in items]


def file_stat(sid: str, wid: str, path: str) -> Flow[FileEntry]:
    rep = yield Call(Req("GET", ws_path(sid, wid, "/stat"), params=_p(path)))
    return FileEntry.from_json(rep.json())


def file_rename(sid: str, wid: str, src: str, dst: str) -> Flow[None]:
    yield Call(Req("POST", ws_path(sid, wid, "/rename"), json={"from": src, "to": dst}))
    return None


def file_mkdir(sid: str, wid: str, path: str, parents: bool) -> Flow[None]:
    yield Call(
        Req("POST", ws_path(sid, wid, "/mkdir"), json={"path": path, "parents": parents})
    )
    return None


# ---------------------------------------------------------------- execs


def ex_path(sid: str, eid: str, rest: str = "") -> str:
    return sb_path(sid, f"/execs/{_seg(eid)}{rest}")


def exec_request(
    wid: Optional[str],
    argv: Sequence[str],
    *,
    env: Optional[Mapping[str, str]],
    cwd: Optional[str],
    user: Optional[str],
    stdin: Union[Data, bool, None],
    timeout: Optional[float],
    tty: bool = False,
    tty_size: Optional[tuple[int, int]] = None,
) -> dict[str, Any]:
    if isinstance(argv, (str, bytes)):
        raise ValueError(
            f"argv must be a list of strings, not {type(argv).__name__} {argv!r}: "
            "write ['sh', '-c', 'a && b'] for a shell command line"
        )
    body: dict[str, Any] = {"argv": [str(a) for a in argv]}
    if not body["argv"]:
        raise ValueError("argv is empty: name a program, e.g. ['make', 'test']")
    if wid is not None:
        body["workspace"] = wid
    if env:
        body["env"] = {str(k): str(v) for k, v in env.items()}
    if cwd is not None:
        body["cwd"] = cwd
    if user is not None:
        body["user"] = user
    if stdin is True:
        body["stdin"] = True
    elif isinstance(stdin, (bytes, bytearray, str)):
        body["stdin_data"] = base64.b64encode(_bytes(stdin)).decode()
    if timeout is not None:
        if timeout <= 0:
            raise ValueError(f"timeout {timeout!r} must be positive (seconds)")
        body["timeout_ms"] = max(1, int(timeout * 1000))
    if tty:
        body["tty"] = True
        if tty_size is not None:
            body["tty_size"] = [int(tty_size[0]), int(tty_size[1])]
    return body


def exec_create(sid: str, body: dict[str, Any]) -> Flow[tuple[str, int]]:
    rep = yield Call(Req("POST", sb_path(sid, "/execs"), json=body))
    d = rep.json()
    return str(d["id"]), int(d.get("pid") or 0)


def interactive_create(
    sid: str,
    wid: str,
    argv: Sequence[str],
    *,
    tty: bool,
    rows: int,
    cols: int,
    timeout: Optional[float],
    env: Optional[Mapping[str, str]],
    cwd: Optional[str],
    user: Optional[str],
) -> Flow[tuple[str, int]]:
    """An exec with an open stdin and, with ``tty``, a ``rows`` x ``cols``
    terminal, for an interactive session on the exec's WebSocket."""
    body = exec_request(
        wid,
        argv,
        env=env,
        cwd=cwd,
        user=user,
        stdin=True,
        timeout=timeout,
        tty=tty,
        tty_size=(rows, cols) if tty else None,
    )
    return (yield from exec_create(sid, body))


class Ending:
    """The final frame of an output stream."""

    def __init__(self, frame: Mapping[str, Any]) -> None:
        self.frame = frame


def parse_frame(line: str) -> Union[OutputEvent, Ending]:
    """One NDJSON line of an exec's output: the daemon's frame shape
    (``{"type": "stdout", "seq", "data"}``, final ``exit``/``error``), or
    the server's ``?format=ndjson`` shape (``{"stream", "seq", "data_b64"}``,
    final ``{"exit": ...}`` or ``{"failed": ...}``)."""
    d = json.loads(line)
    t = d.get("type")
    if t in ("stdout", "stderr"):
        return OutputEvent(t, base64.b64decode(d.get("data") or ""), int(d.get("seq") or 0))
    if t in ("exit", "error"):
        return Ending(d)
    if "stream" in d:
        return OutputEvent(
            str(d["stream"]),
            base64.b64decode(d.get("data_b64") or d.get("data") or ""),
            int(d.get("seq") or 0),
        )
    if isinstance(d.get("exit"), dict):
        return Ending({"type": "exit", **d["exit"]})
    for k in ("failed", "error"):
        if isinstance(d.get(k), dict):
            return Ending({"type": "error", **d[k]})
    raise ValueError(f"unexpected output frame {line[:200]!r}")


def _result(eid: str, fin: Mapping[str, Any], out: bytes, err: bytes) -> RunResult:
    if fin.get("type") == "error" or fin.get("state") == "failed":
        f = fin.get("failure", fin)
        raise ExecFailed(
            str(f.get("stage", "")),
            str(f.get("message", "")),
            f.get("errno"),
            f.get("errno_name"),
        )
    x = fin.get("exit", fin)
    return RunResult(
        exec_id=eid,
        exit_code=x.get("code"),
        stdout_bytes=out,
        stderr_bytes=err,
        signal=x.get("signal"),
        signal_name=x.get("signal_name"),
        cancelled=bool(x.get("cancelled")),
        timed_out=bool(x.get("timed_out")),
    )


def output_events(sid: str, eid: str, timeout: Optional[float]) -> Flow[Optional[Ending]]:
    """Emits each :class:`OutputEvent`; returns the final frame."""
    s = yield Open(Req("GET", ex_path(sid, eid, "/output"), timeout=timeout))
    while True:
        line = yield Next(s)
        if line is None:
            return None
        ev = parse_frame(line)
        if isinstance(ev, Ending):
            yield from _drain(s)
            return ev
        yield Emit(ev)


def _drain(s: Any) -> Flow[None]:
    """Read a stream to its end after the final frame (the server ends it
    there), so its connection goes back to the pool instead of being
    closed mid-body and opened again for the next call."""
    while (yield Next(s)) is not None:
        pass
    yield Close(s)


def collect(
    sid: str,
    eid: str,
    on_stdout: Optional[Callback],
    on_stderr: Optional[Callback],
    read_timeout: Optional[float],
    run_timeout: Optional[float],
) -> Flow[RunResult]:
    """Read the output stream to its end, calling the callbacks in order
    (text decoded incrementally, so a character split between two chunks
    arrives whole), then build the result."""
    s = yield Open(Req("GET", ex_path(sid, eid, "/output"), timeout=read_timeout))
    out, err = bytearray(), bytearray()
    dec = {
        "stdout": codecs.getincrementaldecoder("utf-8")("replace"),
        "stderr": codecs.getincrementaldecoder("utf-8")("replace"),
    }
    cbs = {"stdout": on_stdout, "stderr": on_stderr}
    fin: Optional[Mapping[str, Any]] = None
    while True:
        line = yield Next(s)
        if line is None:
            break
        ev = parse_frame(line)
        if isinstance(ev, Ending):
            fin = ev.frame
            yield from _drain(s)
            break
        (out if ev.stream == "stdout" else err).extend(ev.data)
        cb = cbs.get(ev.stream)
        if cb is not None:
            text = dec[ev.stream].decode(ev.data)
            if text:
                yield Await(cb(text))
    yield Close(s)
    for name, cb in cbs.items():
        tail = dec[name].decode(b"", final=True)
        if cb is not None and tail:
            yield Await(cb(tail))
    if fin is None:
        # The stream ended without its final frame (a server shutting
        # down): ask for the status instead.
        st = yield from exec_wait(sid, eid, None)
        fin = st
    r = _result(eid, fin, bytes(out), bytes(err))
    if r.timed_out and run_timeout is not None:
        raise CommandTimeout(run_timeout, r)
    return r


def run(
    sid: str,
    body: dict[str, Any],
    on_stdout: Optional[Callback],
    on_stderr: Optional[Callback],
    run_timeout: Optional[float],
) -> Flow[RunResult]:
    eid, _pid = yield from exec_create(sid, body)
    read_timeout = None if run_timeout is None else run_timeout + 30.0
    r = yield from collect(sid, eid, on_stdout, on_stderr, read_timeout, run_timeout)
    return r


def exec_status(sid: str, eid: str) -> Flow[dict[str, Any]]:
    rep = yield Call(Req("GET", ex_path(sid, eid)))
    d: dict[str, Any] = rep.json()
    return d


def exec_wait(sid: str, eid: str, timeout: Optional[float]) -> Flow[dict[str, Any]]:
    params = None
    req_timeout: Any = None
    if timeout is not None:
        params = [("timeout_ms", str(max(0, int(timeout * 1000))))]
        req_timeout = timeout + 30.0
    rep = yield Call(Req("GET", ex_path(sid, eid, "/wait"), params=params, timeout=req_timeout))
    d: dict[str, Any] = rep.json()
    return d


def status_result(eid: str, st: Mapping[str, Any]) -> Optional[RunResult]:
    """The result of a status, or ``None`` while the exec runs."""
    if st.get("state") == "running":
        return None
    return _result(eid, st, b"", b"")


def stdin_write(sid: str, eid: str, data: Data) -> Flow[int]:
    rep = yield Call(
        Req(
            "POST",
            ex_path(sid, eid, "/stdin"),
            content=_bytes(data),
            headers={"content-type": "application/octet-stream"},
        )
    )
    return int(rep.json().get("written", 0))


def stdin_close(sid: str, eid: str) -> Flow[None]:
    yield Call(Req("POST", ex_path(sid, eid, "/stdin/close")))
    return None


def cancel(sid: str, eid: str, grace: Optional[float]) -> Flow[dict[str, Any]]:
    body: dict[str, Any] = {}
    if grace is not None:
        body["grace_ms"] = max(0, int(grace * 1000))
    rep = yield Call(
        Req(
            "POST",
            ex_path(sid, eid, "/cancel"),
            json=body,
            timeout=(grace or 2.0) + 30.0,
        )
    )
    d: dict[str, Any] = rep.json()
    return d


def resize(sid: str, eid: str, rows: int, cols: int) -> Flow[None]:
    yield Call(Req("POST", ex_path(sid, eid, "/resize"), json={"rows": rows, "cols": cols}))
    return None


__all__ = ["DEFAULT"]
