#!/bin/sh
# Install derive-env into a venv on the cluster's shared file system, once, from a login
# node (docs/install-cluster.md). Usage, from the repository's folder after `make dist`
# (or `make wheelhouse` for a cluster without internet):
#
#     sh examples/cluster/install.sh /shared/sw/derive-env/0.2.1 dist/derive_env-0.2.1-py3-none-any.whl [wheelhouse]
#
# Makes ROOT/venv (derive-env and its three dependencies, nothing else) and ROOT/bin holding
# only a link to derive-env: the folder a module file (or the job script) puts on PATH.
set -eu
root=$1
wheel=$2
wheelhouse=${3:-}
python=${PYTHON:-python3}
"$python" -m venv "$root/venv"
if [ -n "$wheelhouse" ]; then
    "$root/venv/bin/pip" install --quiet --no-index --find-links "$wheelhouse" "$wheel"
else
    "$root/venv/bin/pip" install --quiet "$wheel"
fi
mkdir -p "$root/bin"
ln -sf ../venv/bin/derive-env "$root/bin/derive-env"
chmod -R a+rX "$root"
"$root/bin/derive-env" --version
