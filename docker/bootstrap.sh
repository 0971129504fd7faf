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
#     exports and no message.
#
# The hook must return quickly (Backend.AI waits for it). derive-env takes well under a
# second, except with label socket-ifname=auto, where it may wait up to 5 s in all for
# the names of the master, the peers and its own host to resolve.

_derive_env_out=$(derive-env --dry-run --format shell)
_derive_env_rc=$?
if [ "$_derive_env_rc" -ne 0 ]; then
    echo "bootstrap.sh: derive-env failed (exit $_derive_env_rc); the container stops here." \
        "See the message above and docs/operator-guide.md (troubleshooting)." >&2
    exit "$_derive_env_rc"
fi
# The output is POSIX `export NAME='value'` lines, quoted to be safe for eval.
eval "$_derive_env_out"
unset _derive_env_out _derive_env_rc
