#!/bin/sh
# Plays Docker creating one container of a simulated Backend.AI session. Runs inside the
# container's network namespace (`ip netns exec`, which also gives it a mount namespace of
# its own), so the bind mounts below are seen by this container only and vanish with it.
#
#     container.sh DIR BOOTSTRAP ENTRYPOINT [ARG]...
#
# DIR is the container's folder on the machine: DIR/opt-container (holds an empty
# bootstrap.sh, replaced below by the repository's docker/bootstrap.sh, as an image installs
# it), DIR/config (-> /home/config: environ.txt, ssh/id_cluster), DIR/work (-> /home/work,
# the working directory), DIR/dot-ssh (-> /root/.ssh). BOOTSTRAP is the hook file to install.
# Then exec ENTRYPOINT [ARG]... (the stand-in of /opt/kernel/entrypoint.sh).
set -eu
dir=$1 bootstrap=$2
shift 2
mount --bind "$dir/opt-container" /opt/container
mount --bind "$bootstrap" /opt/container/bootstrap.sh
mount --bind "$dir/config" /home/config
mount --bind "$dir/work" /home/work
mount --bind "$dir/dot-ssh" /root/.ssh
cd /home/work
exec "$@"
