#!/bin/sh
# Stand-in of Backend.AI's /opt/kernel/entrypoint.sh (src/ai/backend/runner/entrypoint.sh):
# POSIX sh, run as root when the container starts. What matters for derive-env, as the real
# one does it: SOURCE the image's hook /opt/container/bootstrap.sh only when it is
# executable (so its exports, and an `exit`, act on this shell), then exec the kernel runner,
# which inherits those exports. The image's own ENTRYPOINT never runs.
#
# Arguments: the kernel runner's command line.
if [ -x /opt/container/bootstrap.sh ]; then
    . /opt/container/bootstrap.sh
fi
exec "$@"
