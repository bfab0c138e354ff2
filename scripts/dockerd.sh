#!/usr/bin/env bash
# Start or stop a Docker Engine for the docker backend's tests
# (crates/strata-docker/tests). Needs root and Debian's docker.io
# (`apt-get install docker.io busybox-static`; .ci/run installs both).
#
#   scripts/dockerd.sh start   # start dockerd unless an Engine answers; wait until it does
#   scripts/dockerd.sh stop    # stop the dockerd this script started (by its recorded pid)
#   scripts/dockerd.sh status
#
# dockerd runs with --iptables=false --bridge=none: strata's containers use
# network "none" (or the host's), and a VM without the netfilter modules
# cannot set up the default bridge. Its log is $STATE/dockerd.log; when it
# cannot start, this script prints the log's tail and exits non-zero, so
# that the tests fail with the reason instead of skipping.
set -euo pipefail

STATE=${STRATA_DOCKERD_STATE:-/var/tmp/strata-dockerd}
SOCK=/var/run/docker.sock
PIDFILE=$STATE/dockerd.pid
LOG=$STATE/dockerd.log

answers() {
    # The Engine's /_ping over its socket, with no docker CLI (curl is in
    # .ci/run's packages).
    curl -sf --max-time 2 --unix-socket "$SOCK" http://docker/_ping >/dev/null 2>&1
}

start() {
    mkdir -p "$STATE"
    exec 9>"$STATE/lock"
    flock 9
    if answers; then
        echo "dockerd: an Engine already answers on $SOCK"
        return 0
    fi
    if ! command -v dockerd >/dev/null; then
        echo "dockerd.sh: dockerd is not installed: apt-get install docker.io" >&2
        return 1
    fi
    if [ "$(id -u)" != 0 ]; then
        echo "dockerd.sh: dockerd needs root" >&2
        return 1
    fi
    # A stale pid file of a dead dockerd, or its socket, would confuse
    # the wait below.
    rm -f "$PIDFILE"
    setsid dockerd --iptables=false --bridge=none --host "unix://$SOCK" \
        >>"$LOG" 2>&1 </dev/null &
    echo $! >"$PIDFILE"
    for _ in $(seq 1 150); do
        if answers; then
            echo "dockerd: started (pid $(cat "$PIDFILE")), log $LOG"
            return 0
        fi
        if ! kill -0 "$(cat "$PIDFILE")" 2>/dev/null; then
            break
        fi
        sleep 0.2
    done
    echo "dockerd.sh: dockerd did not answer on $SOCK within 30 s; its log:" >&2
    tail -n 40 "$LOG" >&2 || true
    return 1
}

stop() {
    if [ ! -f "$PIDFILE" ]; then
        echo "dockerd: not started by this script"
        return 0
    fi
    pid=$(cat "$PIDFILE")
    if kill -0 "$pid" 2>/dev/null; then
        kill -TERM "$pid"
        for _ in $(seq 1 100); do
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.2
        done
        if kill -0 "$pid" 2>/dev/null; then
            kill -KILL "$pid" || true
        fi
    fi
    rm -f "$PIDFILE"
    echo "dockerd: stopped"
}

case "${1:-}" in
start) start ;;
stop) stop ;;
status) if answers; then echo running; else echo "not running"; exit 1; fi ;;
*)
    echo "usage: $0 start|stop|status" >&2
    exit 2
    ;;
esac
