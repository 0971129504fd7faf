#!/bin/sh
# on-every-node: run a command in every container of the session, this one included.
# Installed in images as /usr/local/bin/on-every-node.
#
#     on-every-node [--] COMMAND [ARG]...      e.g.   on-every-node torchrun train.py
#
# - Hosts: `derive-env --dry-run --format hosts`, the canonical order every node agrees on;
#   derive-env from PATH, else /opt/derive-env/bin/derive-env (as bootstrap.sh); neither:
#   a message and exit status 127. This container is the host equal to BACKENDAI_CLUSTER_HOST
#   (else `hostname`), compared case-insensitively as derive-env does.
# - This container runs COMMAND itself; each other one over `ssh -tt HOST` (Backend.AI's
#   ~/.ssh/config gives port 2200 and the cluster key), in the current working directory,
#   each argument single-quoted for the remote shell, so it arrives byte for byte.
# - Containers start without a barrier: a peer's SSH is retried once a second for up to
#   ON_EVERY_NODE_SSH_WAIT seconds (default 60) before the command starts there; a value
#   that is not digits is a usage error (exit 2) before any node starts.
# - COMMAND's standard input is /dev/null on every node.
# - Waits for all. Exit status: 0 when every node exited 0, else the first non-zero status
#   in canonical order; a line on stderr names each node that failed (ssh's own failures
#   are status 255).
# - Ctrl-C / SIGTERM stop the command on every node: the local one gets SIGTERM, each ssh
#   client too, which closes the remote terminal so the remote command gets SIGHUP
#   (torchrun stops its workers on both); then exit 130 / 143.
# - `-tt` gives the remote command a terminal (needed for that SIGHUP): its stderr arrives
#   on our stdout; `stty -onlcr` keeps its line ends as they are; its input is /dev/null.

[ "${1-}" = "--" ] && shift
if [ "$#" -eq 0 ]; then
    echo "usage: on-every-node [--] COMMAND [ARG]..." >&2
    exit 2
fi
# Checked once, before any node: a bad value would otherwise fail once per peer.
wait_s=${ON_EVERY_NODE_SSH_WAIT:-60}
case $wait_s in
    '' | *[!0-9]*) wait_ok= ;;
    *) [ "${#wait_s}" -le 6 ] && wait_ok=1 || wait_ok= ;;
esac
if [ -z "$wait_ok" ]; then
    printf "on-every-node: ON_EVERY_NODE_SSH_WAIT='%s': expected a number of seconds (digits, at most 6)\n" \
        "$wait_s" | LC_ALL=C tr -c '[:print:]\n' '?' >&2
    exit 2
fi
# The same lookup as bootstrap.sh: PATH, then the packaged install's own venv.
if command -v derive-env >/dev/null 2>&1; then
    derive_env=derive-env
elif [ -x /opt/derive-env/bin/derive-env ]; then
    derive_env=/opt/derive-env/bin/derive-env
else
    echo "on-every-node: derive-env is not installed (not on PATH, no" \
        "/opt/derive-env/bin/derive-env)" >&2
    exit 127
fi
hosts=$("$derive_env" --dry-run --format hosts) || exit
if [ -z "$hosts" ]; then
    echo "on-every-node: derive-env --dry-run --format hosts listed no host" >&2
    exit 1
fi
# lower case WORD: host names compare case-insensitively, as derive-env matches HOST.
lower() { printf '%s' "$1" | tr '[:upper:]' '[:lower:]'; }
self=$(lower "${BACKENDAI_CLUSTER_HOST:-$(hostname)}")

# quote WORD: WORD as one single-quoted shell word ('  becomes  '\'' ).
quote() {
    _q_rest=$1 _q_out=
    while :; do
        case $_q_rest in
            *\'*) _q_out="$_q_out${_q_rest%%\'*}'\\''"; _q_rest=${_q_rest#*\'} ;;
            *) break ;;
        esac
    done
    printf "'%s%s'" "$_q_out" "$_q_rest"
}
remote="stty -onlcr 2>/dev/null; cd $(quote "$PWD") && exec"
for arg in "$@"; do
    remote="$remote $(quote "$arg")"
done
remote="$remote </dev/null"

# ready HOST: wait (at most wait_s seconds) until HOST's SSH runs a command.
ready() {
    _r_end=$(($(date +%s) + wait_s))
    until ssh -o BatchMode=yes -o ConnectTimeout=5 -o LogLevel=ERROR "$1" true \
        </dev/null >/dev/null 2>&1; do
        if [ "$(date +%s)" -ge "$_r_end" ]; then
            echo "on-every-node: $1: SSH did not answer within ${wait_s}s" >&2
            return 255
        fi
        sleep 1
    done
}

pids=
stop() {
    trap 'kill -KILL $pids 2>/dev/null' INT TERM  # a second Ctrl-C: no more waiting
    # shellcheck disable=SC2086 # one word per pid
    kill -TERM $pids 2>/dev/null
    wait
    exit "$1"
}
trap 'stop 130' INT
trap 'stop 143' TERM

for host in $hosts; do
    host_lc=$(lower "$host")
    if [ "$host_lc" = "$self" ] || [ "$host_lc" = localhost ]; then  # localhost: one container
        "$@" &
    else
        { ready "$host" && exec ssh -tt -o LogLevel=ERROR "$host" "$remote" </dev/null; } &
    fi
    pids="$pids $!"
done

# shellcheck disable=SC2086 # one word per pid, in the order of $hosts
set -- $pids
status=0
for host in $hosts; do
    wait "$1"
    rc=$?
    shift
    if [ "$rc" -ne 0 ]; then
        echo "on-every-node: $host: exit status $rc" >&2
        [ "$status" -ne 0 ] || status=$rc
    fi
done
exit "$status"
