#!/usr/bin/env bash
# CI's benchmark smoke run (docs/benchmarks.md): `strata-bench --quick` must run every
# group's workloads and give each a figure. It checks no timing: speed
# goals are read from the table, never asserted (docs/benchmarks.md).
#
# Needs what the groups need: root and /dev/fuse (fs, sandbox), git, tar,
# fuse-overlayfs for the peer column (skipped with a note when missing),
# qemu-system-x86 and a guest kernel for the microvm group,
# and for the python group the test venv target/py-venv with httpx
# (scripts/test makes it first; .ci/run runs this after scripts/test).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT=${BENCH_JSON:-$ROOT/target/bench-quick.json}
# The microvm group boots the release `strata` binary as its VMs' /init.
cargo build -q --release -p strata-cli --manifest-path "$ROOT/Cargo.toml"
cargo run -q --release -p strata-bench --manifest-path "$ROOT/Cargo.toml" -- \
    --quick --json "$OUT"
python3 - "$OUT" <<'PY'
import json, math, sys
rows = json.load(open(sys.argv[1]))["rows"]
want = {"store", "fs", "sandbox", "rootless", "python", "microvm"}
groups = {r["group"] for r in rows}
missing = want - groups
bad = [r["workload"] for r in rows
       if not isinstance(r["strata"], (int, float)) or not math.isfinite(r["strata"])
       or r["strata"] < 0]
if missing or bad:
    sys.exit(f"bench-quick: groups without rows: {sorted(missing)}; rows without a figure: {bad}")
print(f"bench-quick: {len(rows)} rows in {len(groups)} groups, every row has a figure")
PY
