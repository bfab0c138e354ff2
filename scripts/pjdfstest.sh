#!/usr/bin/env bash
# Run pjdfstest (crates.io rewrite 0.2.2) as root against a fresh Workspace
# mounted with allow_other, print pass/fail counts, and compare failures with
# crates/strata-workspace/tests/pjdfstest-expected-failures.txt.
#
# Needs: root, /dev/fuse, `cargo install --locked pjdfstest --version 0.2.2`
# (build needs libacl1-dev). Creates the `tests` user pjdfstest switches to.
# Env: PASSTHROUGH=0 to serve without FUSE passthrough; TRANSPORT=uring to
# serve over FUSE io_uring (crates/strata-workspace/src/uring; fails if the
# kernel refuses it, and fails unless requests really went through the
# ring); KEEP=1 keeps the work directory.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
EXPECTED=$ROOT/crates/strata-workspace/tests/pjdfstest-expected-failures.txt

die() { echo "pjdfstest.sh: $*" >&2; exit 1; }
[ "$(id -u)" = 0 ] || die "must run as root (pjdfstest switches users and needs allow_other)"
[ -e /dev/fuse ] || die "/dev/fuse is missing (modprobe fuse)"
command -v pjdfstest >/dev/null || die "pjdfstest not found: cargo install --locked pjdfstest --version 0.2.2 (apt: libacl1-dev)"
getent group tests >/dev/null || groupadd tests
getent passwd tests >/dev/null || useradd -M -g tests -s /usr/sbin/nologin tests
NOBODY_GROUP=$(id -gn nobody)

# The path cargo reports: the workspace builds into target/<host tuple>/
# (.cargo/config.toml), and CARGO_TARGET_DIR may move it.
BIN=$(cargo build -q -p strata-workspace --example mount --manifest-path "$ROOT/Cargo.toml" \
    --message-format=json-render-diagnostics | sed -n 's/.*"executable":"\([^"]*\)".*/\1/p' | tail -n 1)
[ -x "$BIN" ] || die "cargo built no mount example"

WORK=$(mktemp -d /tmp/strata-pjdfstest.XXXXXX)
chmod 755 "$WORK"
mkdir "$WORK/mnt"
ARGS=(--allow-other)
[ "${PASSTHROUGH:-1}" = 0 ] && ARGS+=(--no-passthrough)
TRANSPORT=${TRANSPORT:-dev-fuse}
ARGS+=(--transport "$TRANSPORT")
"$BIN" "$WORK/store" pjdfstest/main "$WORK/mnt" "${ARGS[@]}" >"$WORK/mount.log" 2>&1 &
SERVER=$!
cleanup() {
    umount "$WORK/mnt" 2>/dev/null || umount -l "$WORK/mnt" 2>/dev/null || true
    wait "$SERVER" 2>/dev/null || true
    [ "${KEEP:-0}" = 1 ] || rm -rf "$WORK"
}
trap cleanup EXIT
for _ in $(seq 200); do
    grep -q " $WORK/mnt fuse" /proc/self/mounts && break
    kill -0 "$SERVER" 2>/dev/null || { cat "$WORK/mount.log"; die "the Workspace server exited"; }
    sleep 0.05
done
grep -q " $WORK/mnt fuse" /proc/self/mounts || die "mount did not appear"

cat >"$WORK/pjdfstest.toml" <<TOML
[features]
posix_fallocate = {}
utimensat = {}
utime_now = {}
rename_ctime = {}

[settings]
naptime = 0.01
allow_remount = false

[dummy_auth]
entries = [
  ["nobody", "$NOBODY_GROUP"],
  ["tests", "tests"],
]
TOML

set +e
(cd "$WORK/mnt" && pjdfstest -c "$WORK/pjdfstest.toml" -p "$WORK/mnt") >"$WORK/out.txt" 2>&1
RC=$?
set -e
RESULTS=$(grep -E '^[a-z_0-9]+::[A-Za-z_0-9:]+ +(ok|FAILED|skipped.*)$' "$WORK/out.txt" || true)
PASS=$(grep -cE ' ok$' <<<"$RESULTS" || true)
FAIL=$(grep -cE ' FAILED$' <<<"$RESULTS" || true)
SKIP=$(grep -cE ' skipped' <<<"$RESULTS" || true)
echo "pjdfstest: $PASS passed, $FAIL failed, $SKIP skipped (exit $RC, passthrough=${PASSTHROUGH:-1}, transport=$TRANSPORT)"
grep -q "^transport: io_uring" "$WORK/mount.log" && [ "$TRANSPORT" != uring ] &&
    die "the mount used io_uring, which was not asked for"
if [ "$TRANSPORT" = uring ]; then
    grep -q "^transport: io_uring" "$WORK/mount.log" || { cat "$WORK/mount.log"; die "TRANSPORT=uring but the mount does not use io_uring"; }
    umount "$WORK/mnt"
    wait "$SERVER" || { cat "$WORK/mount.log"; die "the Workspace server failed"; }
    SERVED=$(sed -n 's/^ring-served requests: //p' "$WORK/mount.log")
    echo "pjdfstest: $SERVED requests served through the io_uring rings"
    [ "${SERVED:-0}" -gt 0 ] || die "no request went through the io_uring rings"
fi
grep '^Summary' "$WORK/out.txt" || true

# Failures not listed in the expected file fail the run; each listed line is
# "test::name  reason".
EXP=$(grep -vE '^\s*(#|$)' "$EXPECTED" | awk '{print $1}' | sort -u || true)
GOT=$(grep -E ' FAILED$' <<<"$RESULTS" | awk '{print $1}' | sort -u || true)
UNEXPECTED=$(comm -13 <(echo "$EXP") <(echo "$GOT") | sed '/^$/d')
FIXED=$(comm -23 <(echo "$EXP") <(echo "$GOT") | sed '/^$/d')
[ -n "$FIXED" ] && echo "expected failures that now pass (remove them from $EXPECTED):" && echo "$FIXED"
if [ -n "$UNEXPECTED" ]; then
    echo "UNEXPECTED failures:"
    echo "$UNEXPECTED"
    grep -E -A3 "$(echo "$UNEXPECTED" | head -20 | paste -sd'|')" "$WORK/out.txt" | head -80
    exit 1
fi
if [ "$PASS" -eq 0 ]; then
    tail -40 "$WORK/out.txt"
    die "no test passed: the suite did not run"
fi
echo "pjdfstest: OK (all failures expected)"
