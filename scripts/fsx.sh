#!/usr/bin/env bash
# Run fsx (crates.io 0.3.2) against a fresh Workspace mount: at least
# 100,000 seeded operations per mode (FUSE passthrough and daemon I/O over
# /dev/fuse; `uring` and `uring-daemon`: the same two over FUSE io_uring,
# which must really serve requests through its rings), then commit the
# result (the commit must succeed).
#
# Needs: root, /dev/fuse, `cargo install --locked fsx --version 0.3.2`.
# Env: FSX_OPS (default 100000), FSX_SEED (default 20261130),
#      FSX_MODES (default "passthrough daemon"; also "uring uring-daemon").
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
OPS=${FSX_OPS:-100000}
SEED=${FSX_SEED:-20261130}
MODES=${FSX_MODES:-passthrough daemon}

die() { echo "fsx.sh: $*" >&2; exit 1; }
[ "$(id -u)" = 0 ] || die "must run as root (mount(2) of FUSE)"
[ -e /dev/fuse ] || die "/dev/fuse is missing (modprobe fuse)"
command -v fsx >/dev/null || die "fsx not found: cargo install --locked fsx --version 0.3.2"
[ "$OPS" -ge 100000 ] || echo "fsx.sh: warning: FSX_OPS=$OPS is below the required 100000"

# The path cargo reports: the workspace builds into target/<host tuple>/
# (.cargo/config.toml), and CARGO_TARGET_DIR may move it.
BIN=$(cargo build -q -p strata-workspace --example mount --manifest-path "$ROOT/Cargo.toml" \
    --message-format=json-render-diagnostics | sed -n 's/.*"executable":"\([^"]*\)".*/\1/p' | tail -n 1)
[ -x "$BIN" ] || die "cargo built no mount example"

FAILED=0
for MODE in $MODES; do
    WORK=$(mktemp -d /tmp/strata-fsx.XXXXXX)
    mkdir "$WORK/mnt"
    ARGS=(--allow-other --commit-on-exit "fsx $MODE")
    [ "$MODE" = daemon ] && ARGS+=(--no-passthrough --transport dev-fuse)
    [ "$MODE" = passthrough ] && ARGS+=(--transport dev-fuse)
    [ "$MODE" = uring ] && ARGS+=(--transport uring)
    [ "$MODE" = uring-daemon ] && ARGS+=(--no-passthrough --transport uring)
    "$BIN" "$WORK/store" fsx/main "$WORK/mnt" "${ARGS[@]}" >"$WORK/mount.log" 2>&1 &
    SERVER=$!
    for _ in $(seq 200); do
        grep -q " $WORK/mnt fuse" /proc/self/mounts && break
        kill -0 "$SERVER" 2>/dev/null || { cat "$WORK/mount.log"; die "the Workspace server exited"; }
        sleep 0.05
    done
    cat >"$WORK/fsx.toml" <<'TOML'
flen = 8388608
[weights]
close_open = 1
read = 10
write = 10
mapread = 10
mapwrite = 10
invalidate = 1
truncate = 5
fsync = 1
fdatasync = 1
posix_fallocate = 1
punch_hole = 1
sendfile = 1
posix_fadvise = 1
copy_file_range = 1
TOML
    START=$(date +%s)
    set +e
    fsx -N "$OPS" -S "$SEED" -f "$WORK/fsx.toml" -P "$WORK" "$WORK/mnt/fsx.file" >"$WORK/fsx.out" 2>&1
    RC=$?
    set -e
    END=$(date +%s)
    umount "$WORK/mnt" || umount -l "$WORK/mnt"
    SRC=0
    wait "$SERVER" || SRC=$?
    [ "$SRC" = 0 ] || { echo "fsx ($MODE): the server failed to commit (exit $SRC)"; FAILED=1; }
    if [ "$RC" = 0 ] && grep -q "All operations completed A-OK" "$WORK/fsx.out"; then
        echo "fsx ($MODE): $OPS operations passed, 0 failed, seed $SEED, $((END - START)) s"
    else
        echo "fsx ($MODE): FAILED (exit $RC) after $((END - START)) s, seed $SEED"
        tail -40 "$WORK/fsx.out"
        FAILED=1
    fi
    cat "$WORK/mount.log"
    if [ "${MODE#uring}" != "$MODE" ]; then
        SERVED=$(sed -n 's/^ring-served requests: //p' "$WORK/mount.log")
        if [ "${SERVED:-0}" -gt 0 ]; then
            echo "fsx ($MODE): $SERVED requests served through the io_uring rings"
        else
            echo "fsx ($MODE): FAILED: no request went through the io_uring rings"
            FAILED=1
        fi
    fi
    [ "${KEEP:-0}" = 1 ] || rm -rf "$WORK"
done
exit "$FAILED"
