#!/bin/sh
# on-every-node: run a command in every container of the session, this one included, once
# every container answers and agrees on the job; stop them all when one fails.
# Installed in images as /usr/local/bin/on-every-node. POSIX sh (dash, busybox sh, bash).
#
#     on-every-node [--keep-going] [--] COMMAND [ARG]...   e.g.  on-every-node torchrun train.py
#
# - Hosts: `derive-env --dry-run --format hosts`, the canonical order every node agrees on;
#   derive-env from PATH, else /opt/derive-env/bin/derive-env (as bootstrap.sh); neither:
#   a message and exit status 127. This container is the host equal to BACKENDAI_CLUSTER_HOST
#   (else `hostname`), compared case-insensitively as derive-env does.
# - Before the start (nothing runs anywhere until all of this holds):
#   1. Probe: every other node must answer over SSH. Containers start without a barrier, so
#      all peers are tried at once, each again once a second, for at most
#      ON_EVERY_NODE_SSH_WAIT seconds in all (default 30; each ssh with BatchMode=yes and
#      ConnectTimeout=min(5, that bound)); an attempt still running at the bound is stopped.
#      Once a peer's first attempt fails (its sshd not up yet), one line says that the wait
#      began (`on-every-node: waiting up to 30s for every node's SSH
#      (ON_EVERY_NODE_SSH_WAIT)`), and each such peer gets one when it answers
#      (`on-every-node: HOST: SSH answered after Ns`); peers that answer at once print nothing.
#   2. Agreement: the same ssh round prints each node's `derive-env --dry-run --format
#      digest` line (`<digest> <node rank> <host>`; this node's too, run here); all digests
#      must be equal. When one differs, `--format digest-facts` of that node and of this
#      one are compared and the facts that differ are printed (`name: value`, both nodes).
#   With one host (a single-container session lists `localhost`) there is nothing to check.
# - The run id: each invocation is one run, with one DERIVE_ENV_RUN_ID on every node (in
#   COMMAND's environment and in every digest probe, so the digests cover it), printed in
#   the start line on stderr (`on-every-node: run ID (DERIVE_ENV_RUN_ID) on N nodes`):
#   1. ON_EVERY_NODE_RUN_ID when set: the id you chose for this run (e.g. to resume one);
#   2. else a DERIVE_ENV_RUN_ID you exported yourself: kept. The hook exported one in every
#      container at its start, derived from the session, the same for every run of the
#      session: a set value equal to what `derive-env` derives here without it is the
#      hook's, replaced; so is any set value where derive-env derives none that is stable
#      (it draws a fresh one at each start: no session id): use ON_EVERY_NODE_RUN_ID there;
#   3. else a fresh one: 16 lowercase hex digits from /dev/urandom.
#   Either set value must be 1 to 64 letters, digits, '.', '_', '-', the first a letter or
#   digit.
# - This container runs COMMAND itself; each other one over `ssh -tt HOST` (Backend.AI's
#   ~/.ssh/config gives port 2200 and the cluster key), in the current working directory,
#   each argument single-quoted for the remote shell, so it arrives byte for byte.
#   COMMAND's standard input is /dev/null and ON_EVERY_NODE=1 is in its environment on
#   every node (derive-env then does not warn that only this container runs it).
# - Each ssh client's own input is a FIFO that nobody writes to and that stays open until
#   the end, never /dev/null: Backend.AI's SSH server (dropbear) closes the session's
#   terminal as soon as the client's input ends, which loses the remote output and ends
#   the remote command with a wrong status; OpenSSH's sshd does not care either way.
# - Fail fast: the first node whose COMMAND exits non-zero stops every other node: SIGTERM
#   to the local command and to each ssh client (which closes the remote terminal, so the
#   remote shell gets SIGHUP and passes it on to the remote command; torchrun stops its
#   workers on both), SIGKILL to the local command and the ssh clients still running
#   ON_EVERY_NODE_GRACE seconds later (default 10; 0: at once), not to processes they
#   started. A remote command that ignores SIGHUP is out of reach once its ssh client is
#   gone.
#   Status files are polled twice a second.
# - --keep-going: no stop; wait for every node, then the first non-zero status in canonical
#   order.
# - Ctrl-C / SIGTERM stop every node the same way (also during the probe: nothing starts),
#   then exit 130 / 143. A second Ctrl-C / SIGTERM sends SIGKILL at once.
# - `-tt` gives the remote command a terminal (needed for that SIGHUP): its stderr arrives
#   on our stdout; `stty -onlcr` keeps its line ends as they are.
#
# Exit status:
#   0     COMMAND exited 0 on every node
#   N     COMMAND's status on the node named on stderr (fail fast: the first node that
#         failed; --keep-going: the first non-zero status in canonical order)
#   2     usage: no COMMAND, an unknown option, ON_EVERY_NODE_SSH_WAIT (a whole number
#         of seconds, 1 or more) / ON_EVERY_NODE_GRACE (0 or more) not a number, or a run
#         id (ON_EVERY_NODE_RUN_ID, DERIVE_ENV_RUN_ID) that is not one
#   3     the nodes do not agree (their digests differ); nothing was started
#   255   a node did not answer over SSH within ON_EVERY_NODE_SSH_WAIT; nothing was started
#         (after the start, 255 of a node is its ssh client's own failure)
#   1-5, 126, 127   derive-env failed on this node or on a peer (its message, the node
#         named); 127 also: derive-env is not installed; nothing was started
#   130, 143   stopped by Ctrl-C / SIGTERM

usage="usage: on-every-node [--keep-going] [--] COMMAND [ARG]..."
keep_going=
while [ "$#" -gt 0 ]; do
    case $1 in
        --keep-going) keep_going=1 ;;
        --) shift; break ;;
        --help|-h) echo "$usage"; exit 0 ;;
        -*) echo "on-every-node: unknown option $1" >&2; echo "$usage" >&2; exit 2 ;;
        *) break ;;
    esac
    shift
done
if [ "$#" -eq 0 ]; then
    echo "$usage" >&2
    exit 2
fi

# seconds NAME VALUE MIN: VALUE as a whole number of seconds (leading zeros dropped) in
# $seconds, else one message naming NAME and exit 2.
seconds() {
    seconds=$2
    # more than 9 characters is refused before the zeros are stripped (linear time)
    case $seconds in ??????????*) seconds=x ;; esac
    while :; do
        case $seconds in 0?*) seconds=${seconds#0} ;; *) break ;; esac
    done
    case $seconds in
        ''|*[!0-9]*|??????????*) ;;
        *) [ "$seconds" -lt "$3" ] || return 0 ;;
    esac
    # shown with control characters as '?': the value may hold terminal escapes
    echo "on-every-node: $1='$(printf '%s' "$2" | tr -c '[:print:]' '?')': expected a whole" \
        "number of seconds, $3 or more (at most 9 digits)" >&2
    exit 2
}
seconds ON_EVERY_NODE_SSH_WAIT "${ON_EVERY_NODE_SSH_WAIT:-30}" 1
wait_s=$seconds
seconds ON_EVERY_NODE_GRACE "${ON_EVERY_NODE_GRACE:-10}" 0
grace_s=$seconds

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
# The same lookup on a peer (its remote shell), setting $d.
lookup='if command -v derive-env >/dev/null 2>&1; then d=derive-env;
elif [ -x /opt/derive-env/bin/derive-env ]; then d=/opt/derive-env/bin/derive-env;
else echo "derive-env is not installed (not on PATH, no /opt/derive-env/bin/derive-env)" >&2;
exit 127; fi'

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

# ---- the run id: one per invocation, the same on every node ----------------------------
# run_id_ok ID: ID is a run id derive-env keeps (1 to 64 letters, digits, '.', '_', '-',
# the first a letter or digit).
run_id_ok() {
    case $1 in ''|[!A-Za-z0-9]*|*[!A-Za-z0-9._-]*) return 1 ;; esac
    [ "${#1}" -le 64 ]
}
# derived_run_id: the DERIVE_ENV_RUN_ID derive-env derives here when none is set; the
# Backend.AI hook exported that one (from the session id) in every container at its start.
derived_run_id() {
    (unset DERIVE_ENV_RUN_ID; "$derive_env" --dry-run --format digest-facts 2>/dev/null) |
        sed -n 's/^var\.DERIVE_ENV_RUN_ID: //p'
}
if [ -n "${ON_EVERY_NODE_RUN_ID-}" ]; then
    run_id=$ON_EVERY_NODE_RUN_ID run_id_name=ON_EVERY_NODE_RUN_ID
elif [ -n "${DERIVE_ENV_RUN_ID-}" ] && derived=$(derived_run_id) &&
    [ "$DERIVE_ENV_RUN_ID" != "$derived" ] && [ "$derived" = "$(derived_run_id)" ]; then
    # yours, not the hook's: kept. (Where derive-env draws a fresh id at each start, no
    # manager naming the job, the two differ: the hook's cannot be told from yours.)
    run_id=$DERIVE_ENV_RUN_ID run_id_name=DERIVE_ENV_RUN_ID
else
    run_id=$(od -An -N8 -tx1 /dev/urandom | tr -d ' \n') run_id_name=
    if [ "${#run_id}" -ne 16 ]; then
        echo "on-every-node: no run id: /dev/urandom could not be read" >&2
        exit 1
    fi
fi
if ! run_id_ok "$run_id"; then
    echo "on-every-node: $run_id_name='$(printf '%s' "$run_id" | tr -c '[:print:]' '?')':" \
        "expected a run id of 1 to 64 characters: letters, digits, '.', '_' or '-', the" \
        "first a letter or digit" >&2
    exit 2
fi
DERIVE_ENV_RUN_ID=$run_id
export DERIVE_ENV_RUN_ID
# the same on a peer: the remote shell's environment has the hook's
export_run_id="DERIVE_ENV_RUN_ID=$(quote "$run_id"); export DERIVE_ENV_RUN_ID;"

hosts=$("$derive_env" --dry-run --format hosts) || exit
if [ -z "$hosts" ]; then
    echo "on-every-node: derive-env --dry-run --format hosts listed no host" >&2
    exit 1
fi
# lower case WORD: host names compare case-insensitively, as derive-env matches HOST.
lower() { printf '%s' "$1" | tr '[:upper:]' '[:lower:]'; }
self=$(lower "${BACKENDAI_CLUSTER_HOST:-$(hostname)}")
# is_self HOST: HOST is this container (localhost: a single-container session).
is_self() {
    _s=$(lower "$1")
    [ "$_s" = "$self" ] || [ "$_s" = localhost ]
}

# is_main: true in this script's own process, false in a subshell (a background job or a
# command substitution), which some shells (bash) let run this process's traps.
is_main() { [ "$(exec sh -c 'echo "$PPID"')" = "$$" ]; }
tmp=$(mktemp -d "${TMPDIR:-/tmp}/on-every-node.XXXXXX") || exit
trap 'is_main && rm -rf "$tmp"' EXIT
probing= pids=  # the background jobs of the current phase (probes, then one per node)
nap() { sleep 0.5 2>/dev/null || sleep 1; }
now() { date +%s; }

# halt: SIGTERM to every job; after grace_s seconds SIGKILL to the commands still running.
halt() {
    # shellcheck disable=SC2086 # one word per pid
    kill -TERM $pids 2>/dev/null
    _h_end=$(($(now) + grace_s))
    while [ "$(now)" -le "$_h_end" ]; do  # at least grace_s seconds
        _h_all=1 _h_i=0
        for _h in $pids; do
            _h_i=$((_h_i + 1))
            [ -f "$tmp/rc.$_h_i" ] || _h_all=
        done
        [ -z "$_h_all" ] || break
        nap
    done
    kill_all
    wait
}
# kill_all: SIGKILL to every command still running (a second Ctrl-C: no more waiting).
kill_all() {
    for _k in "$tmp"/child.*; do
        [ -f "$_k" ] && [ ! -f "$tmp/rc.${_k##*.}" ] && read -r _k_pid <"$_k" &&
            kill -KILL "$_k_pid" 2>/dev/null
    done
}
stop() {
    trap kill_all INT TERM
    if [ -n "$probing" ]; then
        # shellcheck disable=SC2086 # one word per pid
        kill -TERM $pids 2>/dev/null
        wait
    else
        halt
    fi
    exit "$1"
}
trap 'is_main && stop 130' INT
trap 'is_main && stop 143' TERM

# ---- before the start: every peer answers over SSH and prints the same digest ---------

# remote_derive_env FORMAT: the remote shell command printing `--dry-run --format FORMAT`.
remote_derive_env() {
    printf '%s %s; exec "$d" --dry-run --format %s' "$export_run_id" "$lookup" "$1"
}
connect_s=$((wait_s < 5 ? wait_s : 5))
# ssh_to HOST COMMAND: ssh that never asks and gives up connecting after connect_s (the
# same options as in probe, where it must be the background job itself, not a function).
ssh_to() {
    ssh -o BatchMode=yes -o ConnectTimeout="$connect_s" -o LogLevel=ERROR "$1" "$2" </dev/null
}

# probe I HOST (a background job): HOST's digest line in $tmp/probe.I.out (ssh's errors in
# .err), its ssh status in $tmp/rc.I; ssh failures (255) retried once a second until
# $deadline. SIGTERM stops it and its ssh.
probe() {  # a background job already: its traps are its own
    _p_child=
    trap '[ -z "$_p_child" ] || { kill -TERM "$_p_child"; wait "$_p_child"; } 2>/dev/null
          exit 143' TERM
    while :; do
        ssh -o BatchMode=yes -o ConnectTimeout="$connect_s" -o LogLevel=ERROR "$2" \
            "$(remote_derive_env digest)" </dev/null >"$tmp/probe.$1.out" 2>"$tmp/probe.$1.try" &
        _p_child=$!
        wait "$_p_child"
        _p_rc=$?
        # an attempt cut short by the bound keeps the last whole attempt's message
        mv -f "$tmp/probe.$1.try" "$tmp/probe.$1.err"
        [ "$_p_rc" -eq 255 ] && [ "$(now)" -lt "$deadline" ] || break
        : >"$tmp/retry.$1"  # for report_waiting: this peer is late
        sleep 1
    done
    echo "$_p_rc" >"$tmp/rc.$1.new" && mv -f "$tmp/rc.$1.new" "$tmp/rc.$1"
}

# report_waiting: once a peer's first attempt failed (it left $tmp/retry.I), one line that
# the wait began; then one line for each such peer whose probe ended with an answer. $late
# holds the indexes already reported.
report_waiting() {
    _w_i=0
    for _w_host in $peers; do
        _w_i=$((_w_i + 1))
        [ -f "$tmp/retry.$_w_i" ] || continue
        if [ -z "$waiting" ]; then
            waiting=1
            echo "on-every-node: waiting up to ${wait_s}s for every node's SSH" \
                "(ON_EVERY_NODE_SSH_WAIT)" >&2
        fi
        case $late in *" $_w_i "*) continue ;; esac
        [ -f "$tmp/rc.$_w_i" ] && read -r _w_rc <"$tmp/rc.$_w_i" && [ "$_w_rc" -ne 255 ] ||
            continue
        late="$late$_w_i "
        echo "on-every-node: $_w_host: SSH answered after $(($(now) - started))s" >&2
    done
}

# diff_facts HOST: print the digest facts that differ between this node and HOST.
diff_facts() {
    if ! "$derive_env" --dry-run --format digest-facts >"$tmp/facts.self" 2>&1; then
        echo "on-every-node:     (derive-env --dry-run --format digest-facts failed here:" \
            "$(head -n 1 "$tmp/facts.self"))" >&2
        return
    fi
    if ! ssh_to "$1" "$(remote_derive_env digest-facts)" >"$tmp/facts.peer" 2>&1; then
        echo "on-every-node:     (derive-env --dry-run --format digest-facts failed on $1:" \
            "$(head -n 1 "$tmp/facts.peer"))" >&2
        return
    fi
    _d_seen=' ' _d_any=
    { grep -Fvx -f "$tmp/facts.peer" "$tmp/facts.self"
      grep -Fvx -f "$tmp/facts.self" "$tmp/facts.peer"; } >"$tmp/facts.diff"
    while IFS= read -r _d_line; do
        _d_name=${_d_line%%:*}
        case $_d_seen in *" $_d_name "*) continue ;; esac
        _d_seen="$_d_seen$_d_name " _d_any=1
        echo "on-every-node:     $self_name: $(fact "$_d_name" "$tmp/facts.self")" >&2
        echo "on-every-node:     $1: $(fact "$_d_name" "$tmp/facts.peer")" >&2
    done <"$tmp/facts.diff"
    [ -n "$_d_any" ] || echo "on-every-node:     (no fact differs: different versions of" \
        "derive-env?)" >&2
}
# fact NAME FILE: the line of fact NAME in FILE, else `NAME: (absent)`.
fact() {
    while IFS= read -r _f_line; do
        case $_f_line in "$1:"*) printf '%s\n' "$_f_line"; return ;; esac
    done <"$2"
    printf '%s: (absent)\n' "$1"
}

peers=
for host in $hosts; do
    is_self "$host" || peers="$peers $host"
done
if [ -n "$peers" ]; then
    self_name=${BACKENDAI_CLUSTER_HOST:-$(hostname)}
    self_line=$("$derive_env" --dry-run --format digest) || {
        rc=$?
        echo "on-every-node: $self_name (this node): derive-env --dry-run --format digest" \
            "failed (exit status $rc)" >&2
        exit "$rc"
    }
    self_digest=${self_line%% *}
    started=$(now)
    deadline=$((started + wait_s))
    probing=1 i=0 waiting= late=' '
    for host in $peers; do
        i=$((i + 1))
        probe "$i" "$host" 2>/dev/null &
        pids="$pids $!"
    done
    while [ "$(now)" -lt "$deadline" ]; do
        all=1 i=0
        for host in $peers; do
            i=$((i + 1))
            [ -f "$tmp/rc.$i" ] || all=
        done
        report_waiting
        [ -z "$all" ] || break
        nap
    done
    # shellcheck disable=SC2086 # one word per pid
    kill -TERM $pids 2>/dev/null  # attempts still running at the bound
    wait
    report_waiting  # the answers of the last poll
    pids= probing=
    status=0 differ= i=0 silent=
    for host in $peers; do
        i=$((i + 1))
        rc=255
        [ -f "$tmp/rc.$i" ] && read -r rc <"$tmp/rc.$i"
        if [ "$rc" -eq 255 ]; then
            # ssh's last message (it ends lines in CR LF when it has a terminal)
            why=  # none when no attempt ended within the bound
            [ ! -f "$tmp/probe.$i.err" ] ||
                why=$(tr -d '\r' <"$tmp/probe.$i.err" | grep -v '^$' | tail -n 1)
            echo "on-every-node: $host: SSH did not answer within ${wait_s}s${why:+ ($why)}" >&2
            silent=" (ON_EVERY_NODE_SSH_WAIT=$wait_s)"
        elif [ "$rc" -ne 0 ]; then
            echo "on-every-node: $host: derive-env --dry-run --format digest failed there" \
                "(exit status $rc):" >&2
            sed "s/^/on-every-node: $host: /" "$tmp/probe.$i.err" >&2
        else
            digest=
            read -r digest _ <"$tmp/probe.$i.out"
            if [ -n "$digest" ]; then
                [ "$digest" = "$self_digest" ] || differ="$differ $host"
                continue
            fi
            echo "on-every-node: $host: derive-env --dry-run --format digest printed" \
                "nothing there" >&2
            rc=1
        fi
        [ "$status" -ne 0 ] || status=$rc
    done
    if [ "$status" -ne 0 ]; then
        # the bound is named only when a node did not answer within it
        echo "on-every-node: nothing was started$silent" >&2
        exit "$status"
    fi
    if [ -n "$differ" ]; then
        echo "on-every-node: the nodes do not agree on the job (derive-env --dry-run" \
            "--format digest); nothing was started" >&2
        for host in $differ; do
            echo "on-every-node: $host differs from $self_name (this node) in:" >&2
            diff_facts "$host"
        done
        exit 3
    fi
fi

# ---- the start: COMMAND on every node; the first failure stops the others --------------

ON_EVERY_NODE=1
export ON_EVERY_NODE
# The remote shell runs COMMAND as its child and passes the terminal's hangup (SIGHUP, when
# our ssh client ends) on to it; then COMMAND's status (a second wait after the trap).
# Not `exec COMMAND`: on dropbear, a command exec'd as the session's leader with an input
# other than the terminal is, in about half the runs, reported as killed by a signal (ssh
# exits 255) however it ended.
remote="stty -onlcr 2>/dev/null; ON_EVERY_NODE=1; export ON_EVERY_NODE; $export_run_id"
remote="$remote cd $(quote "$PWD") || exit; c= h=; trap 'h=1; [ -z \"\$c\" ] ||"
remote="$remote kill -HUP \"\$c\" 2>/dev/null' HUP;"
for arg in "$@"; do
    remote="$remote $(quote "$arg")"
done
# (the waits' own messages, e.g. dash's "Hangup", go nowhere)
remote="$remote </dev/null & c=\$!; wait \"\$c\" 2>/dev/null; s=\$?; [ -z \"\$h\" ] || {"
remote="$remote wait \"\$c\" 2>/dev/null; r=\$?; [ \"\$r\" -eq 127 ] || s=\$r; };"
remote="$remote exit \"\$s\""

# node I HOST COMMAND...: run COMMAND here (HOST empty) or over SSH on HOST (a background
# job); its pid in $tmp/child.I, its status in $tmp/rc.I. SIGTERM is passed on to it.
# COMMAND's stderr is fd 9; the job's own stderr is /dev/null (shells print "Terminated"
# there for a child a signal stopped).
node() {  # a background job already: its traps are its own
    _n_i=$1 _n_host=$2 _n_child= _n_stop=
    shift 2
    trap '_n_stop=1; [ -z "$_n_child" ] || kill -TERM "$_n_child" 2>/dev/null' TERM
    if [ -z "$_n_host" ]; then
        "$@" </dev/null 2>&9 9>&- &
    else
        # input: the FIFO, read-write so that it never reaches its end (see the header)
        ssh -tt -o LogLevel=ERROR "$_n_host" "$remote" 0<>"$tmp/input" 2>&9 9>&- &
    fi
    _n_child=$!
    echo "$_n_child" >"$tmp/child.$_n_i"
    [ -z "$_n_stop" ] || kill -TERM "$_n_child" 2>/dev/null
    wait "$_n_child"
    _n_rc=$?
    if [ -n "$_n_stop" ] && [ "$_n_rc" -gt 128 ]; then  # the wait was interrupted: again
        wait "$_n_child"
        _n_again=$?
        [ "$_n_again" -eq 127 ] || _n_rc=$_n_again
    fi
    echo "$_n_rc" >"$tmp/rc.$_n_i.new" && mv -f "$tmp/rc.$_n_i.new" "$tmp/rc.$_n_i"
}

rm -f "$tmp"/rc.*
mkfifo "$tmp/input" || exit
n=0
for host in $hosts; do n=$((n + 1)); done
echo "on-every-node: run $run_id (DERIVE_ENV_RUN_ID) on $n node$([ "$n" -eq 1 ] || echo s)" >&2
i=0
for host in $hosts; do
    i=$((i + 1))
    if is_self "$host"; then
        node "$i" "" "$@" 9>&2 2>/dev/null &
    else
        node "$i" "$host" 9>&2 2>/dev/null &
    fi
    pids="$pids $!"
done

failed=
while :; do
    all=1 i=0
    for host in $hosts; do
        i=$((i + 1))
        if [ -f "$tmp/rc.$i" ]; then
            read -r rc <"$tmp/rc.$i"
            if [ -z "$keep_going$failed" ] && [ "$rc" -ne 0 ]; then
                failed=$host status=$rc
            fi
        else
            all=
        fi
    done
    [ -z "$all" ] && [ -z "$failed" ] || break
    nap
done
running= i=0
for host in $hosts; do
    i=$((i + 1))
    [ -f "$tmp/rc.$i" ] || running="$running $i "
done
if [ -n "$failed" ] && [ -n "$running" ]; then
    echo "on-every-node: $failed: exit status $status; stopping the command on every" \
        "other node (SIGTERM, SIGKILL after ${grace_s}s)" >&2
    halt
    i=0
    for host in $hosts; do
        i=$((i + 1))
        read -r rc <"$tmp/rc.$i" 2>/dev/null || rc=?
        case $running in
            *" $i "*) echo "on-every-node: $host: exit status $rc (stopped)" >&2 ;;
            *) [ "$host" = "$failed" ] || [ "$rc" = 0 ] ||
                echo "on-every-node: $host: exit status $rc" >&2 ;;
        esac
    done
    exit "$status"
fi
wait
status=0 i=0
for host in $hosts; do
    i=$((i + 1))
    read -r rc <"$tmp/rc.$i"
    if [ "$rc" -ne 0 ]; then
        echo "on-every-node: $host: exit status $rc" >&2
        [ "$status" -ne 0 ] || status=$rc
    fi
done
exit "$status"
