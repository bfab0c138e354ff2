"""The synchronous client: :class:`Strata` and what it hands out."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Iterator, Literal, Mapping, Optional, Sequence, Union, overload

from . import _ops as ops
from ._ops import Callback, Data
from ._ws import refuse_https, Interactive
from ._wire import DEFAULT, DEFAULT_TIMEOUT, SyncDriver, default_store, parse_url
from .errors import ConfigError
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

__all__ = ["Strata", "Sandbox", "Workspace", "Files", "Process", "resolve"]

#: Creating, restarting or closing a Sandbox, mounting and committing can
#: take longer than a plain call (a daemon starts, a FUSE mount, fsync).
SLOW_TIMEOUT = 120.0


def resolve(
    url: Optional[str],
    token: Optional[str],
    token_file: Union[str, Path, None],
    store: Union[str, Path, None],
) -> tuple[str, str]:
    """The server URL and token ``connect()`` uses: the arguments, else
    ``STRATA_REMOTE``/``STRATA_TOKEN``/``STRATA_TOKEN_FILE``, else the
    local server of the Store (``unix:STORE/serve.sock``)."""
    if url is None:
        url = os.environ.get("STRATA_REMOTE") or None
    if url is None:
        base = Path(store) if store is not None else default_store()
        url = f"unix:{(base / 'serve.sock').absolute()}"
    if token is None and token_file is None:
        token = os.environ.get("STRATA_TOKEN") or None
        if token is None and os.environ.get("STRATA_TOKEN_FILE"):
            token_file = os.environ["STRATA_TOKEN_FILE"]
    if token is None and token_file is not None:
        try:
            token = Path(token_file).read_text().strip()
        except OSError as e:
            raise ConfigError(f"could not read the token file {token_file}: {e}") from e
    if not token:
        raise ConfigError(
            "no token: pass token= or set STRATA_TOKEN (create one with `strata token create`)"
        )
    return url, token


class Strata:
    """A client of one ``strata serve`` (thread-safe for calls; one
    connection pool). Use :meth:`connect`; close it with :meth:`close` or
    a ``with`` block.

    Attributes:
        projects: projects of the Store.
        branches: fork, list, delete branches.
        sandboxes: create, list, open Sandboxes.
    """

    def __init__(self, driver: SyncDriver) -> None:
        self._d = driver
        self.projects = Projects(driver)
        self.branches = Branches(driver)
        self.sandboxes = Sandboxes(driver)

    @classmethod
    def connect(
        cls,
        url: Optional[str] = None,
        token: Optional[str] = None,
        *,
        token_file: Union[str, Path, None] = None,
        store: Union[str, Path, None] = None,
        timeout: Optional[float] = DEFAULT_TIMEOUT,
        verify: Any = True,
        fingerprint: Optional[str] = None,
    ) -> Strata:
        """Connect to a server.

        Args:
            url: ``unix:///path/serve.sock``, ``http://127.0.0.1:PORT`` or
                ``https://HOST:PORT``; default ``STRATA_REMOTE``, else the
                local socket ``STORE/serve.sock``.
            token: the bearer token; default ``STRATA_TOKEN`` (or the file
                ``token_file`` / ``STRATA_TOKEN_FILE`` names).
            store: the Store directory whose local socket to use (default
                ``STRATA_STORE``, else ``~/.local/share/strata``).
            timeout: seconds each call may take by default (connect, and
                each read or write); ``None`` for no limit. Most calls
                also take their own ``timeout=``.
            verify: TLS verification for ``https://`` (a CA bundle path or
                an ``ssl.SSLContext``), as httpx takes it.
            fingerprint: for ``https://``, accept exactly the certificate
                with this SHA-256 (``sha256:HEX``, as ``strata serve
                --tls-generate`` prints it) instead of verifying a CA
                chain; default ``STRATA_REMOTE_FINGERPRINT``.

        Nothing is sent until the first call (:meth:`ping` checks).
        """
        url, tok = resolve(url, token, token_file, store)
        ep = parse_url(url)
        fp = fingerprint or os.environ.get("STRATA_REMOTE_FINGERPRINT") or None
        if fp is not None and not ep.base_url.startswith("https://"):
            raise ConfigError(f"a pinned fingerprint needs an https:// server, not {url}")
        return cls(SyncDriver(ep, tok, timeout, verify, fp))

    def close(self) -> None:
        """Close the connections (Sandboxes keep running)."""
        self._d.close()

    def __enter__(self) -> Strata:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def ping(self) -> None:
        """Check that the server answers and accepts the token (raises
        :class:`strata.Unauthorized` or :class:`strata.TransportError`)."""
        self._d.run(ops.list_projects())

    # Store reads and writes.
    def log(self, ref: str, limit: Optional[int] = None) -> list[Commit]:
        """Commits of ``PROJECT/REF``, newest first along first parents."""
        return self._d.run(ops.log(ref, limit))

    def diff(self, a: str, b: str) -> list[PathChange]:
        """Paths that differ from ``a`` to ``b`` (both ``PROJECT/REF`` of
        one project)."""
        return self._d.run(ops.diff(a, b))

    def ls(self, ref: str, path: Optional[str] = None) -> list[Entry]:
        """A committed directory's entries (or the one entry a path names)."""
        return self._d.run(ops.ls(ref, path))

    def stat(self, ref: str, path: str) -> Entry:
        """One committed entry."""
        return self._d.run(ops.stat(ref, path))

    def read(
        self, ref: str, path: str, *, start: Optional[int] = None, end: Optional[int] = None
    ) -> bytes:
        """A committed file's bytes (``[start, end)`` when given)."""
        return self._d.run(ops.cat(ref, path, start, end))

    def head(self, ref: str) -> str:
        """The commit id a branch (or commit REF) names."""
        return self._d.run(ops.head(ref))

    def write(
        self,
        ref: str,
        changes: Sequence[Mapping[str, Any]],
        *,
        expected_head: Optional[str] = None,
        message: Optional[str] = None,
    ) -> StoreCommit:
        """Write a change set to branch ``ref`` as one commit, published only
        if the branch is still at ``expected_head`` (default: its head now,
        read first). Changes are dicts as on the wire (docs/server.md), e.g.
        ``{"op": "put", "path": "a.txt", "content": "text or bytes"}``,
        ``{"op": "delete", "path": "old"}``. Raises
        :class:`strata.Conflict` (with ``actual_head``) if the branch moved."""
        return self._d.run(ops.write_changes(ref, changes, expected_head, message))

    def export_tar(self, ref: str, path: Optional[str] = None) -> bytes:
        """A commit (or a directory of it) as a tar archive."""
        return self._d.run(ops.export_tar(ref, path))

    def import_tar(
        self,
        ref: str,
        data: bytes,
        *,
        expected_head: Optional[str] = None,
        message: Optional[str] = None,
    ) -> StoreCommit:
        """Make a tar archive the branch's whole next tree (compare-and-swap
        as :meth:`write`)."""
        return self._d.run(ops.import_tar(ref, data, expected_head, message))


class Projects:
    """``s.projects``."""

    def __init__(self, d: SyncDriver) -> None:
        self._d = d

    def list(self) -> list[str]:
        """The projects the token sees, sorted."""
        return self._d.run(ops.list_projects())

    def create(self, name: str, message: Optional[str] = None) -> Project:
        """A new project with an empty ``main`` branch."""
        return self._d.run(ops.create_project(name, message))


class Branches:
    """``s.branches``."""

    def __init__(self, d: SyncDriver) -> None:
        self._d = d

    def fork(self, src: str, dst: str) -> Branch:
        """A new branch ``dst`` at ``src``'s head (O(1)); both
        ``PROJECT/NAME`` of one project."""
        return self._d.run(ops.fork(src, dst))

    def list(self, project: str) -> list[Branch]:
        """The project's branches."""
        return self._d.run(ops.list_branches(project))

    def delete(self, ref: str) -> None:
        """Delete branch ``PROJECT/NAME`` (its commits stay reachable by id
        until collected)."""
        self._d.run(ops.delete_branch(ref))


class Sandboxes:
    """``s.sandboxes``."""

    def __init__(self, d: SyncDriver) -> None:
        self._d = d

    def create(
        self,
        *,
        labels: Optional[Mapping[str, str]] = None,
        memory: Union[int, str, None] = None,
        pids: Optional[int] = None,
        cpus: Optional[float] = None,
        network: Optional[str] = None,
        project: Optional[str] = None,
        name: Optional[str] = None,
        no_limits: bool = False,
        image: Optional[str] = None,
        timeout: Optional[float] = SLOW_TIMEOUT,
    ) -> Sandbox:
        """Create a Sandbox and wait until its daemon is ready.

        Args:
            labels: ``key -> value``, to find it again with :meth:`list`.
            memory: limit, bytes or ``"2G"``/``"512M"``.
            pids, cpus: limits.
            network: ``"none"`` (default) or ``"host"``.
            project: the project it works on (required with a token scoped
                to projects).
            image: a container image (the docker backend).
        """
        info = self._d.run(
            ops.create_sandbox(
                project=project,
                name=name,
                labels=labels,
                network=network,
                memory=memory,
                pids=pids,
                cpus=cpus,
                no_limits=no_limits,
                image=image,
                timeout=timeout,
            )
        )
        return Sandbox(self._d, info)

    def list(self, labels: Optional[Mapping[str, str]] = None) -> list[Sandbox]:
        """The Sandboxes the token sees, those with all ``labels`` only."""
        return [Sandbox(self._d, i) for i in self._d.run(ops.list_sandboxes(labels))]

    def get(self, sandbox_id: str) -> Sandbox:
        """Open a Sandbox by id (e.g. after a restart of this process)."""
        return Sandbox(self._d, self._d.run(ops.get_sandbox(sandbox_id)))


class Sandbox:
    """A Sandbox: mount branches in it, then run commands in them."""

    def __init__(self, d: SyncDriver, info: SandboxInfo) -> None:
        self._d = d
        self.info = info

    @property
    def id(self) -> str:
        """The Sandbox id."""
        return self.info.id

    def __repr__(self) -> str:
        return f"<strata.Sandbox {self.id} {self.info.state}>"

    def __enter__(self) -> Sandbox:
        return self

    def __exit__(self, *exc: object) -> None:
        # Leaving the block closes the Sandbox; what was not committed
        # by then is dropped.
        self.close(discard=True)

    def refresh(self) -> SandboxInfo:
        """Read the Sandbox's state again."""
        self.info = self._d.run(ops.get_sandbox(self.id))
        return self.info

    def mount(
        self, branch: str, at: Optional[str] = None, *, timeout: Optional[float] = SLOW_TIMEOUT
    ) -> Workspace:
        """Mount ``PROJECT/BRANCH`` as a Workspace (at ``at`` inside the
        Sandbox, default ``/workspace``)."""
        return Workspace(self, self._d.run(ops.mount(self.id, branch, at, timeout)))

    def workspaces(self) -> list[Workspace]:
        """The mounted Workspaces."""
        return [Workspace(self, w) for w in self._d.run(ops.list_workspaces(self.id))]

    def logs(self, lines: int = 100) -> str:
        """The last lines of the Sandbox's log."""
        return self._d.run(ops.sandbox_logs(self.id, lines))

    def restart(self, *, timeout: Optional[float] = SLOW_TIMEOUT) -> None:
        """Start a stopped Sandbox again (its daemon ended or crashed); its
        Workspaces are mounted again with their uncommitted work. A running
        Sandbox is refused (409)."""
        self.info = self._d.run(ops.restart_sandbox(self.id, timeout))

    def close(
        self, *, discard: bool = False, timeout: Optional[float] = SLOW_TIMEOUT
    ) -> None:
        """Stop the Sandbox and remove it. A Workspace with uncommitted
        changes makes it refuse (409, nothing stopped) unless
        ``discard=True``, which drops them."""
        self._d.run(ops.close_sandbox(self.id, discard, timeout))

    def process(self, exec_id: str) -> Process:
        """A handle on a running (or ended) command by its exec id."""
        return Process(self._d, self.id, exec_id, 0, None, None)


class Workspace:
    """A branch mounted in a Sandbox: run commands in it, read and write its
    files, see its changes, commit them."""

    def __init__(self, sandbox: Sandbox, info: WorkspaceInfo) -> None:
        self.sandbox = sandbox
        self.info = info
        self._d = sandbox._d
        self.files = Files(self)

    @property
    def id(self) -> str:
        """The Workspace id."""
        return self.info.id

    @property
    def path(self) -> str:
        """Where it is mounted inside the Sandbox."""
        return self.info.path

    def __repr__(self) -> str:
        return f"<strata.Workspace {self.id} {self.info.branch} at {self.path}>"

    @overload
    def run(
        self,
        argv: Sequence[str],
        *,
        on_stdout: Optional[Callback] = None,
        on_stderr: Optional[Callback] = None,
        timeout: Optional[float] = None,
        stdin: Union[Data, bool, None] = None,
        env: Optional[Mapping[str, str]] = None,
        cwd: Optional[str] = None,
        user: Optional[str] = None,
        background: Literal[False] = False,
        tty: Literal[False] = False,
    ) -> RunResult: ...

    @overload
    def run(
        self,
        argv: Sequence[str],
        *,
        on_stdout: Optional[Callback] = None,
        on_stderr: Optional[Callback] = None,
        timeout: Optional[float] = None,
        stdin: Union[Data, bool, None] = None,
        env: Optional[Mapping[str, str]] = None,
        cwd: Optional[str] = None,
        user: Optional[str] = None,
        background: Literal[True],
        tty: Literal[False] = False,
    ) -> Process: ...

    @overload
    def run(
        self,
        argv: Sequence[str],
        *,
        timeout: Optional[float] = None,
        env: Optional[Mapping[str, str]] = None,
        cwd: Optional[str] = None,
        user: Optional[str] = None,
        tty: Literal[True],
        rows: int = 24,
        cols: int = 80,
    ) -> Interactive: ...

    def run(
        self,
        argv: Sequence[str],
        *,
        on_stdout: Optional[Callback] = None,
        on_stderr: Optional[Callback] = None,
        timeout: Optional[float] = None,
        stdin: Union[Data, bool, None] = None,
        env: Optional[Mapping[str, str]] = None,
        cwd: Optional[str] = None,
        user: Optional[str] = None,
        background: bool = False,
        tty: bool = False,
        rows: int = 24,
        cols: int = 80,
    ) -> Union[RunResult, Process, Interactive]:
        """Run a command (no shell: ``argv[0]`` is the program) in this
        Workspace.

        Args:
            on_stdout, on_stderr: called with each piece of output text as it
                arrives, in the order the Sandbox saw it.
            timeout: seconds; then the command is cancelled (SIGTERM, then
                SIGKILL) and :class:`strata.CommandTimeout` is raised with
                what it wrote.
            stdin: bytes/str fed to it then EOF, or ``True`` for a pipe you
                write with :meth:`Process.write` and close with
                :meth:`Process.close_stdin` (background only).
            env: the command's whole environment (default: only PATH).
            cwd: working directory inside the Sandbox (default: the mount).
            user: ``UID:GID`` (default ``1500:1500``).
            background: return a :class:`Process` at once instead of waiting.
            tty: run it on a terminal (``rows`` x ``cols``) and return an
                :class:`strata.Interactive` at once: :meth:`interactive`.

        Returns:
            a :class:`strata.RunResult` (``exit_code``, ``stdout``,
            ``stderr``...), with ``background=True`` a :class:`Process`,
            with ``tty=True`` a :class:`strata.Interactive`.

        Raises:
            strata.ExecFailed: the program could not be started.
            strata.CommandTimeout: ``timeout`` ran out.
        """
        if tty:
            if background or stdin is not None or on_stdout or on_stderr:
                raise ValueError(
                    "tty=True returns an Interactive at once: write its input with send(), "
                    "iterate its output; background, stdin and callbacks do not apply"
                )
            return self.interactive(
                argv, tty=True, rows=rows, cols=cols, timeout=timeout, env=env, cwd=cwd, user=user
            )
        if stdin is True and not background:
            raise ValueError(
                "stdin=True opens a pipe to write to: use it with background=True, "
                "or pass the bytes as stdin=b'...'"
            )
        body = ops.exec_request(
            self.id, argv, env=env, cwd=cwd, user=user, stdin=stdin, timeout=timeout
        )
        if background:
            eid, pid = self._d.run(ops.exec_create(self.sandbox.id, body))
            return Process(self._d, self.sandbox.id, eid, pid, on_stdout, on_stderr, timeout)
        return self._d.run(ops.run(self.sandbox.id, body, on_stdout, on_stderr, timeout))

    def interactive(
        self,
        argv: Sequence[str],
        *,
        tty: bool = False,
        rows: int = 24,
        cols: int = 80,
        timeout: Optional[float] = None,
        env: Optional[Mapping[str, str]] = None,
        cwd: Optional[str] = None,
        user: Optional[str] = None,
    ) -> Interactive:
        """Start a command with its stdin, output and (``tty=True``) a
        ``rows`` x ``cols`` terminal on one WebSocket (docs/python.md,
        "Interactive commands"); returns at once. ``timeout`` is the
        command's own (then it is cancelled), as in :meth:`run`."""
        refuse_https(self._d.endpoint)
        eid, pid = self._d.run(
            ops.interactive_create(
                self.sandbox.id,
                self.id,
                argv,
                tty=tty,
                rows=rows,
                cols=cols,
                timeout=timeout,
                env=env,
                cwd=cwd,
                user=user,
            )
        )
        d = self._d
        return Interactive.open(
            d.endpoint,
            d.token,
            ops.ex_path(self.sandbox.id, eid, "/ws"),
            eid,
            pid,
            d.timeout,
        )

    def status(self) -> list[WorkspaceChange]:
        """Paths changed since the base commit, sorted."""
        return self._d.run(ops.ws_status(self.sandbox.id, self.id))

    def commit(
        self, message: str, *, timeout: Optional[float] = SLOW_TIMEOUT
    ) -> WorkspaceCommit:
        """Commit the changes to the branch (compare-and-swap on the base).

        Raises:
            strata.Conflict: the branch moved since the Workspace's base
                (``e.actual_head`` is the winner's commit); nothing was
                committed.
        """
        return self._d.run(ops.ws_commit(self.sandbox.id, self.id, message, timeout))

    def unmount(self, *, discard: bool = False, timeout: Optional[float] = SLOW_TIMEOUT) -> None:
        """Unmount (``discard=True`` also drops uncommitted changes;
        otherwise a Workspace with changes is refused:
        :class:`strata.Uncommitted`)."""
        self._d.run(ops.ws_unmount(self.sandbox.id, self.id, discard, timeout))


class Files:
    """``ws.files``: files of a live Workspace without running a command
    (paths relative to the Workspace root; confined to it)."""

    def __init__(self, ws: Workspace) -> None:
        self._ws = ws
        self._d = ws._d

    def _ids(self) -> tuple[str, str]:
        return self._ws.sandbox.id, self._ws.id

    def read(self, path: str, *, timeout: Any = DEFAULT) -> bytes:
        """The file's bytes."""
        return self._d.run(ops.file_read(*self._ids(), path, timeout))

    def read_text(self, path: str, encoding: str = "utf-8") -> str:
        """The file decoded as text."""
        return self.read(path).decode(encoding)

    def write(
        self, path: str, data: Data, *, mode: Optional[int] = None, timeout: Any = DEFAULT
    ) -> None:
        """Create or replace a file (``str`` is written as UTF-8); parent
        directories are created."""
        self._d.run(ops.file_write(*self._ids(), path, data, mode, timeout))

    def list(self, path: str = ".") -> list[FileEntry]:
        """A directory's entries."""
        return self._d.run(ops.file_list(*self._ids(), path))

    def stat(self, path: str) -> FileEntry:
        """One entry (a symlink itself, not its target)."""
        return self._d.run(ops.file_stat(*self._ids(), path))

    def exists(self, path: str) -> bool:
        """Whether the path exists."""
        from .errors import NotFound

        try:
            self.stat(path)
        except NotFound:
            return False
        return True

    def remove(self, path: str, *, recursive: bool = False) -> None:
        """Remove a file, symlink or (``recursive=True``) a directory tree."""
        self._d.run(ops.file_remove(*self._ids(), path, recursive))

    def rename(self, src: str, dst: str) -> None:
        """Rename ``src`` to ``dst`` (replacing a file at ``dst``)."""
        self._d.run(ops.file_rename(*self._ids(), src, dst))

    def mkdir(self, path: str, *, parents: bool = True) -> None:
        """Create a directory (and its parents)."""
        self._d.run(ops.file_mkdir(*self._ids(), path, parents))


class Process:
    """A command started with ``background=True``."""

    def __init__(
        self,
        d: SyncDriver,
        sandbox_id: str,
        exec_id: str,
        pid: int,
        on_stdout: Optional[Callback],
        on_stderr: Optional[Callback],
        timeout: Optional[float] = None,
    ) -> None:
        self._d = d
        self.sandbox_id = sandbox_id
        self.id = exec_id
        self.pid = pid
        self._cbs = (on_stdout, on_stderr)
        self._timeout = timeout
        self._result: Optional[RunResult] = None
        self._streamed = False

    def __repr__(self) -> str:
        return f"<strata.Process {self.id} pid {self.pid}>"

    def write(self, data: Data) -> int:
        """Write to the command's stdin (started with ``stdin=True``);
        returns the bytes written. Raises :class:`strata.StdinClosed`."""
        return self._d.run(ops.stdin_write(self.sandbox_id, self.id, data))

    def close_stdin(self) -> None:
        """Close stdin: the command reads EOF (idempotent)."""
        self._d.run(ops.stdin_close(self.sandbox_id, self.id))

    def output(self, *, timeout: Optional[float] = None) -> Iterator[OutputEvent]:
        """The output as it arrives, in order, until the command ends
        (back-pressure: the command blocks while you do not read). Only one
        reader at a time; after it, :meth:`wait` returns the exit status
        without the output."""
        self._streamed = True
        return self._d.iterate(ops.output_events(self.sandbox_id, self.id, timeout))

    def poll(self) -> Optional[RunResult]:
        """The result if the command ended, else ``None`` (no output)."""
        return ops.status_result(self.id, self._d.run(ops.exec_status(self.sandbox_id, self.id)))

    def wait(self, timeout: Optional[float] = None) -> RunResult:
        """Wait for the end; returns how it ended and (unless
        :meth:`output` was read) what it wrote, calling the callbacks given
        to ``run``. Raises :class:`strata.RequestTimeout` after ``timeout``
        seconds (the command keeps running)."""
        if self._result is not None:
            return self._result
        if self._streamed:
            st = self._d.run(ops.exec_wait(self.sandbox_id, self.id, timeout))
            r = ops.status_result(self.id, st)
            if r is None:
                from .errors import RequestTimeout

                raise RequestTimeout(f"exec {self.id} still running after {timeout} s")
        else:
            self._streamed = True
            r = self._d.run(
                ops.collect(
                    self.sandbox_id, self.id, *self._cbs, timeout, self._timeout
                )
            )
        self._result = r
        return r

    def kill(self, grace: Optional[float] = None) -> RunResult:
        """Cancel the command: SIGTERM to its process group, SIGKILL after
        ``grace`` seconds (default 2); returns how it ended."""
        st = self._d.run(ops.cancel(self.sandbox_id, self.id, grace))
        r = ops.status_result(self.id, st)
        if r is None:
            return self.wait()
        return r

    def resize(self, rows: int, cols: int) -> None:
        """Resize a PTY command's terminal."""
        self._d.run(ops.resize(self.sandbox_id, self.id, rows, cols))
