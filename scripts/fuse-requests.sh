#!/usr/bin/env bash
# Count the FUSE requests a workload sends to a Workspace daemon: the daemon
# (crates/strata-workspace/examples/mount.rs) runs under `strace -f -e read`
# and every request read from /dev/fuse is counted by opcode. The counts do
# not depend on the machine's load, unlike timings (docs/benchmarks.md,
# "Fewer round trips").
#
# usage: scripts/fuse-requests.sh [--no-passthrough] WORKLOAD [N]
#   create-stat-unlink  N times: create (write 2 bytes), stat, unlink
#   random-write        N pwrites of 4 KiB at random offsets of a 64 MiB file
#   create-rm-rf        create N files, then rm -rf (counted: the rm -rf)
# Env: MOUNT_BIN=path of a mount example to use instead of building one.
# Needs: root, /dev/fuse, strace, python3.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
die() { echo "fuse-requests.sh: $*" >&2; exit 1; }
ARGS=()
if [ "${1:-}" = --no-passthrough ]; then ARGS+=(--no-passthrough); shift; fi
WORKLOAD=${1:?usage: fuse-requests.sh [--no-passthrough] WORKLOAD [N]}
N=${2:-1000}
[ "$(id -u)" = 0 ] || die "must run as root (mount)"
command -v strace >/dev/null || die "strace not found (apt install strace)"

# MOUNT_BIN: a mount example built elsewhere (e.g. of an older commit).
if [ -n "${MOUNT_BIN:-}" ]; then
    BIN=$MOUNT_BIN
else
    # The path cargo reports: the workspace builds into target/<host tuple>/
    # (.cargo/config.toml), and CARGO_TARGET_DIR may move it.
    BIN=$(cargo build -q --release -p strata-workspace --example mount --manifest-path "$ROOT/Cargo.toml" \
        --message-format=json-render-diagnostics | sed -n 's/.*"executable":"\([^"]*\)".*/\1/p' | tail -n 1)
    [ -x "$BIN" ] || die "cargo built no mount example"
fi
WORK=$(mktemp -d /var/tmp/strata-fuse-requests.XXXXXX)
mkdir "$WORK/mnt"
strace -f -qq -e trace=read -xx -s 8 -o "$WORK/strace.log" \
    "$BIN" "$WORK/store" fr/main "$WORK/mnt" --scratch "$WORK/scratch" "${ARGS[@]}" \
    >"$WORK/mount.log" 2>&1 &
SERVER=$!
cleanup() {
    umount "$WORK/mnt" 2>/dev/null || umount -l "$WORK/mnt" 2>/dev/null || true
    wait "$SERVER" 2>/dev/null || true
    [ "${KEEP:-0}" = 1 ] || rm -rf "$WORK"
}
trap cleanup EXIT
for _ in $(seq 400); do
    grep -q " $WORK/mnt fuse" /proc/self/mounts && break
    kill -0 "$SERVER" 2>/dev/null || { cat "$WORK/mount.log"; die "the Workspace server exited"; }
    sleep 0.05
done
grep -q " $WORK/mnt fuse" /proc/self/mounts || die "mount did not appear"

# The workload brackets what it counts with the creation of two mark
# files (each one CREATE request); setup before the first is not counted.
python3 - "$WORKLOAD" "$N" "$WORK/mnt" <<'PY'
import os, random, shutil, sys
work, n, mnt = sys.argv[1], int(sys.argv[2]), sys.argv[3]
# os.open/os.write: Python's open() asks isatty(), which on a FUSE file is
# an IOCTL request.
def create(path, data):
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.write(fd, data)
    os.close(fd)
def mark(tag):
    create(os.path.join(mnt, ".mark-" + tag), b"")
if work == "create-stat-unlink":
    mark("start")
    for i in range(n):
        p = os.path.join(mnt, f"f{i}")
        create(p, b"x\n")
        os.stat(p)
        os.unlink(p)
    mark("end")
elif work == "random-write":
    p = os.path.join(mnt, "big")
    create(p, b"")
    os.truncate(p, 64 << 20)
    rng = random.Random(7)
    fd = os.open(p, os.O_RDWR)
    buf = os.urandom(4096)
    mark("start")
    for _ in range(n):
        os.pwrite(fd, buf, rng.randrange(0, (64 << 20) // 4096) * 4096)
    mark("end")
    os.close(fd)
elif work == "create-rm-rf":
    d = os.path.join(mnt, "tree")
    for i in range(n):
        if i % 100 == 0:
            os.makedirs(os.path.join(d, str(i // 100)))
        create(os.path.join(d, str(i // 100), f"f{i}"), b"x\n")
    mark("start")
    shutil.rmtree(d)
    mark("end")
else:
    sys.exit(f"unknown workload {work}")
PY
umount "$WORK/mnt"
wait "$SERVER" || true

python3 - "$WORK/strace.log" "$WORKLOAD" "$N" <<'PY'
import collections, re, sys
NAMES = {1: "LOOKUP", 2: "FORGET", 3: "GETATTR", 4: "SETATTR", 5: "READLINK",
         6: "SYMLINK", 8: "MKNOD", 9: "MKDIR", 10: "UNLINK", 11: "RMDIR",
         12: "RENAME", 13: "LINK", 14: "OPEN", 15: "READ", 16: "WRITE",
         17: "STATFS", 18: "RELEASE", 20: "FSYNC", 21: "SETXATTR",
         22: "GETXATTR", 23: "LISTXATTR", 24: "REMOVEXATTR", 25: "FLUSH",
         26: "INIT", 27: "OPENDIR", 28: "READDIR", 29: "RELEASEDIR",
         30: "FSYNCDIR", 34: "ACCESS", 35: "CREATE", 36: "INTERRUPT",
         38: "DESTROY", 39: "IOCTL", 42: "BATCH_FORGET", 43: "FALLOCATE",
         44: "READDIRPLUS", 45: "RENAME2", 46: "LSEEK"}
log, work, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
# Several threads read: a request is a "read(...)" line or, when another
# thread interleaved, a "<... read resumed>" line; either carries the data.
pat = re.compile(r'"((?:\\x[0-9a-f]{2}){8})"\.\.\., \d+\)\s+= \d+')
reqs = []
for line in open(log):
    m = pat.search(line)
    if m:
        b = bytes(int(h, 16) for h in m.group(1).split("\\x")[1:])
        reqs.append(int.from_bytes(b[4:8], "little"))
# The marks are the CREATE requests around the counted part: the last two,
# except for create-stat-unlink, which creates files itself (first, last).
# The window is off by the few requests of the marks themselves.
creates = [i for i, op in enumerate(reqs) if op == 35]
if work == "create-stat-unlink":
    start, end = creates[0], creates[-1]
else:
    start, end = creates[-2], creates[-1]
window = reqs[start + 1:end]
c = collections.Counter(NAMES.get(op, str(op)) for op in window)
total = sum(c.values())
print(f"{work}, {n} operations: {total} requests, {total / n:.2f} per operation")
for name, k in c.most_common():
    print(f"  {name:12} {k:7}  {k / n:.2f}")
PY
