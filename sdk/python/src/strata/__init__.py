"""strata: a typed Python client of ``strata serve`` (docs/python.md).

Versioned, content-addressed Workspaces for agents, and the Sandboxes
they run in::

    from strata import Strata
    s = Strata.connect()              # STRATA_REMOTE / STRATA_TOKEN, or STORE/serve.sock
    s.branches.fork("web/main", "web/agent-1")
    sb = s.sandboxes.create(labels={"agent": "1"}, memory="2G")
    ws = sb.mount("web/agent-1")
    r = ws.run(["make", "test"], on_stdout=print, timeout=600)
    ws.commit("tests pass")
    sb.close()

:class:`AsyncStrata` is the same surface for asyncio.
"""

from .aio import AsyncStrata
from .aio import Files as AsyncFiles
from .aio import Process as AsyncProcess
from .aio import Sandbox as AsyncSandbox
from .aio import Workspace as AsyncWorkspace
from ._ws import AsyncInteractive, Interactive
from .client import Files, Process, Sandbox, Strata, Workspace
from .errors import (
    AlreadyExists,
    ApiError,
    Busy,
    CommandTimeout,
    ConfigError,
    Conflict,
    ExecFailed,
    Forbidden,
    Internal,
    InvalidInput,
    MountMoved,
    NotFound,
    PayloadTooLarge,
    RangeNotSatisfiable,
    RequestTimeout,
    StdinClosed,
    Stopped,
    StrataError,
    TransportError,
    Unauthorized,
    Uncommitted,
    UnsupportedMediaType,
)
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

__version__ = "0.1.0"

__all__ = [
    "Strata",
    "Sandbox",
    "Workspace",
    "Files",
    "Process",
    "Interactive",
    "AsyncStrata",
    "AsyncSandbox",
    "AsyncWorkspace",
    "AsyncFiles",
    "AsyncProcess",
    "AsyncInteractive",
    "StrataError",
    "ConfigError",
    "TransportError",
    "RequestTimeout",
    "ApiError",
    "InvalidInput",
    "Unauthorized",
    "Forbidden",
    "NotFound",
    "Conflict",
    "AlreadyExists",
    "Busy",
    "StdinClosed",
    "Uncommitted",
    "MountMoved",
    "Stopped",
    "PayloadTooLarge",
    "UnsupportedMediaType",
    "RangeNotSatisfiable",
    "Internal",
    "ExecFailed",
    "CommandTimeout",
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
