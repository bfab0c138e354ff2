"""The values calls return: plain frozen dataclasses built from the wire's
JSON (docs/server.md; the daemon's shapes in docs/api/openapi.yaml)."""

from __future__ import annotations

import base64
from dataclasses import dataclass, field
from typing import Any, Mapping, Optional

__all__ = [
    "Project",
    "Branch",
    "Commit",
    "PathChange",
    "Entry",
    "StoreCommit",
    "SandboxInfo",
    "WorkspaceInfo",
    "WorkspaceChange",
    "WorkspaceCommit",
    "FileEntry",
    "OutputEvent",
    "RunResult",
]


def _s(d: Mapping[str, Any], k: str, default: str = "") -> str:
    v = d.get(k, default)
    return v if isinstance(v, str) else default


def _oi(d: Mapping[str, Any], k: str) -> Optional[int]:
    v = d.get(k)
    return v if isinstance(v, int) and not isinstance(v, bool) else None


@dataclass(frozen=True)
class Project:
    """A project and the head of its ``main`` branch."""

    name: str
    head: str

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Project:
        return cls(name=_s(d, "name"), head=_s(d, "head"))


@dataclass(frozen=True)
class Branch:
    """A branch ``project/name`` and its head commit."""

    project: str
    name: str
    head: str

    @property
    def ref(self) -> str:
        """``PROJECT/BRANCH``."""
        return f"{self.project}/{self.name}"

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Branch:
        return cls(project=_s(d, "project"), name=_s(d, "name"), head=_s(d, "head"))


@dataclass(frozen=True)
class Commit:
    """One commit of a log."""

    id: str
    tree: str
    parents: list[str]
    message: str
    time_ns: int
    metadata: dict[str, str]
    file_bytes: Optional[int] = None
    entries: Optional[int] = None

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Commit:
        return cls(
            id=_s(d, "id"),
            tree=_s(d, "tree"),
            parents=[str(p) for p in d.get("parents") or []],
            message=_s(d, "message"),
            time_ns=int(d.get("time_ns") or 0),
            metadata={str(k): str(v) for k, v in (d.get("metadata") or {}).items()},
            file_bytes=_oi(d, "file_bytes"),
            entries=_oi(d, "entries"),
        )


@dataclass(frozen=True)
class PathChange:
    """One changed path of a diff: ``kind`` is ``added``, ``modified``,
    ``deleted`` or ``type_changed``."""

    path: str
    kind: str

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> PathChange:
        return cls(path=_s(d, "path"), kind=_s(d, "kind"))


@dataclass(frozen=True)
class Entry:
    """One entry of a committed tree (``ls``/``stat`` on the Store)."""

    name: str
    kind: str
    mode: int
    size: int
    uid: int
    gid: int
    mtime_ns: int
    target: Optional[str] = None

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Entry:
        return cls(
            name=_s(d, "name"),
            kind=_s(d, "type"),
            mode=int(d.get("mode") or 0),
            size=int(d.get("size") or 0),
            uid=int(d.get("uid") or 0),
            gid=int(d.get("gid") or 0),
            mtime_ns=int(d.get("mtime_ns") or 0),
            target=d.get("target") if isinstance(d.get("target"), str) else None,
        )


@dataclass(frozen=True)
class StoreCommit:
    """The commit a change set (or a tar import) made on a branch."""

    project: str
    branch: str
    commit: str
    tree: str
    parent: str

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> StoreCommit:
        return cls(
            project=_s(d, "project"),
            branch=_s(d, "branch"),
            commit=_s(d, "commit"),
            tree=_s(d, "tree"),
            parent=_s(d, "parent"),
        )


@dataclass(frozen=True)
class SandboxInfo:
    """A Sandbox as the server describes it (``raw`` holds every field
    sent, including ones this version does not name)."""

    id: str
    name: Optional[str]
    state: str
    backend: str
    labels: dict[str, str]
    project: Optional[str]
    created_unix_ms: int = 0
    #: The mounted Workspaces (given by ``get``/``refresh``, not by lists).
    workspaces: Optional[list[WorkspaceInfo]] = None
    raw: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> SandboxInfo:
        ws = d.get("workspaces")
        return cls(
            created_unix_ms=int(d.get("created_unix_ms") or 0),
            workspaces=[WorkspaceInfo.from_json(w) for w in ws] if isinstance(ws, list) else None,
            id=_s(d, "id"),
            name=d.get("name") if isinstance(d.get("name"), str) else None,
            state=str(d.get("state", "")),
            backend=str(d.get("backend", "")),
            labels={str(k): str(v) for k, v in (d.get("labels") or {}).items()},
            project=d.get("project") if isinstance(d.get("project"), str) else None,
            raw=dict(d),
        )


@dataclass(frozen=True)
class WorkspaceInfo:
    """A mounted Workspace: its id, mount path inside the Sandbox, branch
    (``PROJECT/BRANCH``), the base commit it shows changes against, and
    what serves its FUSE requests (``transport``: ``io_uring`` or
    ``/dev/fuse``; None from a daemon older than the field)."""

    id: str
    path: str
    branch: str
    base: str
    transport: Optional[str] = None

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> WorkspaceInfo:
        t = d.get("transport")
        return cls(
            id=_s(d, "id"),
            path=_s(d, "path"),
            branch=_s(d, "branch"),
            base=_s(d, "base"),
            transport=t if isinstance(t, str) else None,
        )


@dataclass(frozen=True)
class WorkspaceChange:
    """One changed path of a Workspace's status (``path_bytes`` is exact;
    ``path`` is for display)."""

    path: str
    path_bytes: bytes
    kind: str

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> WorkspaceChange:
        b64 = _s(d, "path_b64")
        return cls(
            path=_s(d, "path"),
            path_bytes=base64.b64decode(b64) if b64 else _s(d, "path").encode(),
            kind=_s(d, "kind"),
        )


@dataclass(frozen=True)
class WorkspaceCommit:
    """What a Workspace commit did: ``outcome`` is ``committed`` (the
    branch moved to ``commit``) or ``up_to_date`` (nothing changed,
    nothing written)."""

    outcome: str
    commit: str
    branch: str

    @property
    def committed(self) -> bool:
        """A new commit was published."""
        return self.outcome == "committed"

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> WorkspaceCommit:
        return cls(outcome=_s(d, "outcome"), commit=_s(d, "commit"), branch=_s(d, "branch"))


@dataclass(frozen=True)
class FileEntry:
    """A file in a live Workspace: ``kind`` is ``file``, ``dir``,
    ``symlink`` or ``other``; ``uid``/``gid`` as the Workspace records
    them; ``raw`` holds every field sent (``name_b64``: the exact bytes)."""

    name: str
    kind: str
    size: int
    mode: int
    uid: int = 0
    gid: int = 0
    mtime_ms: int = 0
    target: Optional[str] = None
    raw: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> FileEntry:
        target = d.get("target")
        return cls(
            name=_s(d, "name"),
            kind=str(d.get("kind", "")),
            size=int(d.get("size") or 0),
            mode=int(d.get("mode") or 0),
            uid=int(d.get("uid") or 0),
            gid=int(d.get("gid") or 0),
            mtime_ms=int(d.get("mtime_ms") or 0),
            target=target if isinstance(target, str) else None,
            raw=dict(d),
        )


@dataclass(frozen=True)
class OutputEvent:
    """One piece of a command's output stream, in the order the Sandbox
    saw it: ``stream`` is ``stdout`` or ``stderr``, ``data`` the bytes."""

    stream: str
    data: bytes
    seq: int = 0

    @property
    def text(self) -> str:
        """``data`` decoded as UTF-8 (invalid bytes replaced)."""
        return self.data.decode("utf-8", "replace")


@dataclass(frozen=True)
class RunResult:
    """How a command ended and what it wrote.

    ``exit_code`` is set when it exited, ``signal``/``signal_name`` when a
    signal ended it (``cancelled`` after ``kill()``, ``timed_out`` after its
    timeout ran out)."""

    exec_id: str
    exit_code: Optional[int]
    stdout_bytes: bytes = b""
    stderr_bytes: bytes = b""
    signal: Optional[int] = None
    signal_name: Optional[str] = None
    cancelled: bool = False
    timed_out: bool = False

    @property
    def stdout(self) -> str:
        """stdout decoded as UTF-8 (invalid bytes replaced)."""
        return self.stdout_bytes.decode("utf-8", "replace")

    @property
    def stderr(self) -> str:
        """stderr decoded as UTF-8 (invalid bytes replaced)."""
        return self.stderr_bytes.decode("utf-8", "replace")

    @property
    def ok(self) -> bool:
        """It exited with code 0."""
        return self.exit_code == 0
