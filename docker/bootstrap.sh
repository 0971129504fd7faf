#!/bin/sh
# /opt/container/bootstrap.sh: Backend.AI's per-image hook, running derive-env.
#
# Backend.AI replaces the image's ENTRYPOINT with its own entrypoint script. That script,
# as root, SOURCES this file (". /opt/container/bootstrap.sh"; only when the file is
# executable) and then starts the kernel runner. Variables exported here reach the user's
# programs: terminal, batch command, SSH between the containers of the session.
#
# Because the file is sourced, not run:
#   - no "set -e" and no top-level names left behind (they would leak into the
#     entrypoint's shell); names used here start with _derive_env_ and are unset;
#   - "exit" ends Backend.AI's entrypoint, so the container stops and the session does
#     not start. That is what this hook does when derive-env fails with on-error=fail
#     (the image label's default): a session whose containers would disagree on the
#     master or the node ranks must not start training. derive-env's message (what was
#     wrong, which variable, which value) is in the container's log just above ours.
#   - With label ai.backend.distributed.on-error=warn, derive-env prints a warning, exits
#     0 and prints no exports: the session starts without the derived variables.
#   - An image that did not opt in (no ai.backend.distributed.frameworks label) gets no
#     exports; a message only when the session has more than one container (contract
#     section 11: "nothing derived", and how to opt in), so that containers that each train
#     alone do not look healthy.
#   - derive-env not installed (not on PATH, and no /opt/derive-env/bin/derive-env, where
#     the packaged install puts it): a message says so and the container starts without
#     the variables. It stops only for an error derive-env reports under on-error=fail; a
#     hook that cannot run derive-env cannot know whether the image opted in or asked for
#     on-error=warn, and must not stop the images that did not opt in.
#   - POSIX sh only (dash, busybox ash, bash); Backend.AI's entrypoint does not use
#     "set -e", but the hook also works if the sourcing shell does.
#
# The hook must return quickly (Backend.AI waits for it). derive-env takes well under a
# second, except with label socket-ifname=auto, where it may wait up to 5 s in all for
# the names of the master, the peers and its own host to resolve.

if command -v derive-env >/dev/null 2>&1; then
    _derive_env_bin=derive-env
elif [ -x /opt/derive-env/bin/derive-env ]; then
    _derive_env_bin=/opt/derive-env/bin/derive-env
else
    _derive_env_bin=
fi
if [ -z "$_derive_env_bin" ]; then
    echo "bootstrap.sh: derive-env is not installed (not on PATH, no" \
        "/opt/derive-env/bin/derive-env): the session starts without the distributed" \
        "training variables. See docs/integration.md (Backend.AI hook)." >&2
elif _derive_env_out=$("$_derive_env_bin" --dry-run --format shell); then
    # POSIX `export NAME='value'` lines, quoted by derive-env to be safe for eval.
    eval "$_derive_env_out"
else
    _derive_env_rc=$?
    echo "bootstrap.sh: derive-env failed (exit $_derive_env_rc); the container stops here." \
        "See the message above and docs/operator-guide.md (troubleshooting)." >&2
    exit "$_derive_env_rc"
fi
unset _derive_env_bin _derive_env_out _derive_env_rc
