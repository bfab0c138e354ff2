"""The parts that need no server: sizes, REFs, URLs, output frames, and
the mapping of error bodies to exception classes."""

from __future__ import annotations

import pytest

import strata
from strata import _ops as ops
from strata._pin import parse_fingerprint
from strata._wire import parse_url
from strata.errors import error_for


def test_sizes() -> None:
    assert ops.parse_size("2G") == 2 * 1024**3
    assert ops.parse_size("512M") == 512 * 1024**2
    assert ops.parse_size("1.5GiB") == 3 * 1024**3 // 2
    assert ops.parse_size(4096) == 4096
    for bad in ("two gigs", "-1G", "0", 0, True):
        with pytest.raises(ValueError):
            ops.parse_size(bad)


def test_refs_and_urls() -> None:
    assert ops.split_ref("web/feature/x") == ("web", "feature/x")
    for bad in ("web", "/main", "web/"):
        with pytest.raises(ValueError, match="PROJECT/REF"):
            ops.split_ref(bad)
    ep = parse_url("unix:///run/strata/serve.sock")
    assert (ep.uds, ep.base_url) == ("/run/strata/serve.sock", "http://strata")
    assert parse_url("unix:/x.sock").uds == "/x.sock"
    assert parse_url("http://127.0.0.1:7878/").base_url == "http://127.0.0.1:7878"
    for bad in ("unix:relative.sock", "127.0.0.1:80", "tcp:127.0.0.1:1"):
        with pytest.raises(strata.ConfigError):
            parse_url(bad)


def test_output_frames_both_shapes() -> None:
    ev = ops.parse_frame('{"type":"stderr","seq":3,"data":"aGk="}')
    assert ev == strata.OutputEvent("stderr", b"hi", 3)
    ev = ops.parse_frame('{"stream":"stdout","seq":4,"data_b64":"aGk="}')
    assert ev == strata.OutputEvent("stdout", b"hi", 4)
    end = ops.parse_frame('{"exit":{"code":3}}')
    assert isinstance(end, ops.Ending) and end.frame["code"] == 3
    fail = ops.parse_frame('{"failed":{"stage":"exec","message":"no","errno_name":"ENOENT"}}')
    assert isinstance(fail, ops.Ending)
    with pytest.raises(strata.ExecFailed, match="never ran"):
        ops._result("x1", fail.frame, b"", b"")
    with pytest.raises(ValueError):
        ops.parse_frame('{"what":1}')


def test_error_mapping() -> None:
    e = error_for(409, {"error": {"code": "conflict", "message": "moved", "actual_head": "ab" * 32}})
    assert isinstance(e, strata.Conflict) and e.actual_head == "ab" * 32
    e = error_for(422, {"error": {"code": "invalid_input", "message": "unknown field `usr`"}})
    assert isinstance(e, strata.InvalidInput) and "usr" in str(e)
    e = error_for(409, {"error": {"code": "from_the_future", "message": "?"}})
    assert type(e) is strata.ApiError and e.code == "from_the_future"
    # Not our error shape (a proxy's page): classed by status, text kept.
    e = error_for(502, None, "<html>bad gateway</html>")
    assert isinstance(e, strata.Internal) and "bad gateway" in str(e)
    assert isinstance(error_for(404, "x"), strata.NotFound)


def test_argv_and_fingerprints() -> None:
    with pytest.raises(ValueError, match="list of strings"):
        ops.exec_request(None, "make test", env=None, cwd=None, user=None, stdin=None, timeout=None)
    with pytest.raises(ValueError, match="empty"):
        ops.exec_request(None, [], env=None, cwd=None, user=None, stdin=None, timeout=None)
    body = ops.exec_request("w1", ["cat"], env={"A": "1"}, cwd=None, user=None, stdin="x", timeout=1.5)
    assert body == {"argv": ["cat"], "workspace": "w1", "env": {"A": "1"}, "stdin_data": "eA==", "timeout_ms": 1500}
    d = bytes(range(32))
    assert parse_fingerprint("sha256:" + d.hex()) == d
    assert parse_fingerprint(":".join(f"{b:02X}" for b in d)) == d
    with pytest.raises(strata.ConfigError):
        parse_fingerprint("sha256:abc")
