"""Exceptions: one class per error code of the API (docs/server.md, "Errors").

Every error the server (or a Sandbox's daemon, through the server) returns
is ``{"error": {"code", "message", ...}}``; :func:`error_for` turns it into
the class registered for its ``code``, so callers catch what they mean::

    try:
        ws.commit("tests pass")
    except strata.Conflict as e:
        print("the branch moved to", e.actual_head)

A code this version does not know becomes a plain :class:`ApiError` with
the code kept as sent.
"""

from __future__ import annotations

from typing import Any, Optional

__all__ = [
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
    "error_for",
]


class StrataError(Exception):
    """Base class of every error this package raises."""


class ConfigError(StrataError):
    """The client could not be set up (no server address, no token...)."""


class TransportError(StrataError):
    """The server could not be reached, or the connection broke mid-call."""


class RequestTimeout(TransportError):
    """A call did not complete within its timeout (connect, read or write)."""


class ApiError(StrataError):
    """The server answered with an error body.

    Attributes:
        status: the HTTP status.
        code: the stable machine-readable code (``not_found``...).
        message: what went wrong and what to do, for a person.
        hint: a daemon's extra advice, when it gave one.
        body: the whole ``error`` object as sent.
    """

    code_name: str = ""

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        *,
        hint: Optional[str] = None,
        body: Optional[dict[str, Any]] = None,
    ) -> None:
        self.status = status
        self.code = code
        self.message = message
        self.hint = hint
        self.body: dict[str, Any] = body or {}
        text = f"{code} (HTTP {status}): {message}"
        if hint:
            text += f" ({hint})"
        super().__init__(text)


class InvalidInput(ApiError):
    """400/422 ``invalid_input``, ``invalid_json``, ``unknown_field``: the
    request was refused before anything happened; the message says which
    field or value."""

    code_name = "invalid_input"


class Unauthorized(ApiError):
    """401 ``unauthorized``: no token, or a wrong, unknown or revoked one.
    Create one with ``strata token create`` and pass it as ``token=`` or
    ``STRATA_TOKEN``."""

    code_name = "unauthorized"


class Forbidden(ApiError):
    """403 ``forbidden``: outside the token's project scope."""

    code_name = "forbidden"


class NotFound(ApiError):
    """404 ``not_found``: no such project, branch, path, Sandbox, Workspace
    or exec (or one outside the token's scope, which reads the same)."""

    code_name = "not_found"


class Conflict(ApiError):
    """409 ``conflict``: a commit lost the race for its branch; nothing was
    written.

    Attributes:
        actual_head: the commit that won (the branch's head now).
    """

    code_name = "conflict"

    @property
    def actual_head(self) -> Optional[str]:
        """The branch's head that won the race (64 hex digits)."""
        v = self.body.get("actual_head")
        return v if isinstance(v, str) else None


class AlreadyExists(ApiError):
    """409 ``already_exists``: a project or branch of that name exists."""

    code_name = "already_exists"


class Busy(ApiError):
    """409/503 ``busy``: in use (a lock, a mount path, another output
    stream); retrying may work."""

    code_name = "busy"


class StdinClosed(ApiError):
    """409 ``stdin_closed``: the exec has no open stdin (start it with
    ``stdin=True`` to write to it)."""

    code_name = "stdin_closed"


class Uncommitted(ApiError):
    """409 ``uncommitted``: unmount of a Workspace with changes; commit
    first or pass ``discard=True``."""

    code_name = "uncommitted"


class MountMoved(ApiError):
    """409 ``mount_moved``: the mount path changed while being mounted."""

    code_name = "mount_moved"


class Stopped(ApiError):
    """409 ``stopped``: the Sandbox's daemon does not answer; restart the
    Sandbox (``sb.restart()``)."""

    code_name = "stopped"


class PayloadTooLarge(ApiError):
    """413 ``payload_too_large``: the body is above the server's limit."""

    code_name = "payload_too_large"


class UnsupportedMediaType(ApiError):
    """415 ``unsupported_media_type``."""

    code_name = "unsupported_media_type"


class RangeNotSatisfiable(ApiError):
    """416 ``range_not_satisfiable``."""

    code_name = "range_not_satisfiable"


class Internal(ApiError):
    """500 ``internal`` or 502 ``backend``: the server, a daemon or the
    Sandbox backend failed; not the caller's mistake."""

    code_name = "internal"


class ExecFailed(StrataError):
    """A command never ran (e.g. ``ENOENT``: its program is not in the
    Sandbox). Never reported as a made-up exit status.

    Attributes:
        stage: where it failed (``exec``, ``execve``, ``chdir``...).
        errno_name: the symbolic errno (``ENOENT``), when an OS call failed.
    """

    def __init__(
        self, stage: str, message: str, errno: Optional[int], errno_name: Optional[str]
    ) -> None:
        self.stage = stage
        self.message = message
        self.errno = errno
        self.errno_name = errno_name
        super().__init__(f"the command never ran ({stage}): {message}")


class CommandTimeout(StrataError):
    """``run(..., timeout=T)``: the command was still running after ``T``
    seconds and was cancelled (SIGTERM, then SIGKILL).

    Attributes:
        result: what it had written until then, and how it ended
            (a :class:`strata.RunResult` with ``timed_out`` true).
    """

    def __init__(self, timeout: float, result: Any) -> None:
        self.timeout = timeout
        self.result = result
        super().__init__(
            f"the command ran longer than its timeout of {timeout:g} s and was cancelled"
        )


_BY_CODE: dict[str, type[ApiError]] = {
    "invalid_input": InvalidInput,
    "invalid_json": InvalidInput,
    "unknown_field": InvalidInput,
    "unauthorized": Unauthorized,
    "forbidden": Forbidden,
    "not_found": NotFound,
    "conflict": Conflict,
    "already_exists": AlreadyExists,
    "busy": Busy,
    "stdin_closed": StdinClosed,
    "uncommitted": Uncommitted,
    "mount_moved": MountMoved,
    "stopped": Stopped,
    "payload_too_large": PayloadTooLarge,
    "unsupported_media_type": UnsupportedMediaType,
    "range_not_satisfiable": RangeNotSatisfiable,
    "internal": Internal,
    "bad_gateway": Internal,
    "backend": Internal,
}

_BY_STATUS: dict[int, type[ApiError]] = {
    400: InvalidInput,
    401: Unauthorized,
    403: Forbidden,
    404: NotFound,
    413: PayloadTooLarge,
    415: UnsupportedMediaType,
    416: RangeNotSatisfiable,
    422: InvalidInput,
}


def error_for(status: int, body: Any, fallback_text: str = "") -> ApiError:
    """The exception for an error response (``body`` is its parsed JSON,
    or anything else when it was not JSON)."""
    detail = body.get("error") if isinstance(body, dict) else None
    if isinstance(detail, dict) and isinstance(detail.get("code"), str):
        code: str = detail["code"]
        message = str(detail.get("message", ""))
        hint = detail.get("hint")
        cls = _BY_CODE.get(code, ApiError)
        return cls(
            status,
            code,
            message,
            hint=hint if isinstance(hint, str) else None,
            body=detail,
        )
    cls = _BY_STATUS.get(status, Internal if status >= 500 else ApiError)
    text = fallback_text.strip()[:500] or "(no body)"
    return cls(status, cls.code_name or f"http_{status}", text)
