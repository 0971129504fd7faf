# Example training image: PyTorch + derive-env.
#
# Build from the repository root (the build context must hold pyproject.toml and src/),
# with BuildKit (Docker's default builder since 23.0; on Docker 20.10, e.g. Debian 12's
# docker.io, set DOCKER_BUILDKIT=1). The legacy builder cannot build this file: it builds
# every stage (also the unused wheel stages below) and has no `RUN --mount`, which keeps
# the wheels out of the image's layers.
#
#     DOCKER_BUILDKIT=1 docker build -f docker/pytorch.Dockerfile -t derive-env-example/pytorch .
#
# Change a label value at build time, e.g. the master port:
#
#     docker build -f docker/pytorch.Dockerfile --build-arg DE_MASTER_PORT=29400 ...
#
# Another base (a Python 3.11 image of your registry, a CUDA image): --build-arg BASE_IMAGE=...
# (pip must be able to install into its Python, as in python:3.11-slim).
#
# Each label value is declared ONCE, as a build ARG below. The same ARG feeds the image
# LABEL (what `docker image inspect` and cluster managers see) and the labels file
# /etc/derive-env/labels.json (what derive-env reads at run time: a container cannot read
# its own image's labels). tests/test_docker_examples.py checks that both agree.
#
# Air-gapped build (no package index for derive-env): `make wheelhouse`, then add
# --build-arg DERIVE_ENV_WHEELS=wheelhouse. torch's wheel from a folder instead of PyTorch's
# index: see TORCH_WHEELS below.

# ---- derive-env's wheels, made in a stage of their own, chosen by DERIVE_ENV_WHEELS:
# ----   source     (default) built here from this repository's copy; pip fetches the
# ----              dependencies (pydantic, click, tomli-w) from the package index;
# ----   wheelhouse the folder wheelhouse/ of the build context, made beforehand on a
# ----              connected machine by `make wheelhouse WHEELHOUSE_PYTHON=3.11` (for
# ----              air-gapped builds: no index is used). See docs/integration.md.
# ---- Only the chosen stage is built (BuildKit).
ARG DERIVE_ENV_WHEELS=source
# ---- Where torch's wheel comes from, chosen by TORCH_WHEELS:
# ----   index  (default) PyTorch's index (TORCH_INDEX_URL below);
# ----   folder the folder torch-wheels/ of the build context first (e.g. made by
# ----          `pip download --no-deps --only-binary=:all: --python-version 3.11 torch==2.13.0
# ----          --index-url https://download.pytorch.org/whl/cpu -d torch-wheels`: the image's
# ----          Python), torch's small dependencies still from TORCH_INDEX_URL.
# ---- Either way the wheels are only bind-mounted into the install step: no layer keeps them.
ARG TORCH_WHEELS=index
ARG BASE_IMAGE=python:3.11-slim

FROM ${BASE_IMAGE} AS derive-env-wheels-source
COPY pyproject.toml README.md LICENSE /opt/derive-env-src/
COPY src /opt/derive-env-src/src
RUN pip wheel --no-cache-dir --wheel-dir /wheelhouse /opt/derive-env-src

FROM scratch AS derive-env-wheels-wheelhouse
COPY wheelhouse/ /wheelhouse/

FROM derive-env-wheels-${DERIVE_ENV_WHEELS} AS derive-env-wheels

FROM scratch AS torch-wheels-index

FROM scratch AS torch-wheels-folder
COPY torch-wheels/ /

FROM torch-wheels-${TORCH_WHEELS} AS torch-wheels

FROM ${BASE_IMAGE}

# tini reaps zombie processes and forwards signals. derive-env itself execs the command
# (same PID) and does not reap children, so something must, when the program does not.
# openssh-client: on-every-node's ssh on Backend.AI (which brings only the server).
RUN apt-get update \
 && apt-get install -y --no-install-recommends tini openssh-client \
 && rm -rf /var/lib/apt/lists/*

# The CPU build of torch, from PyTorch's CPU wheel index: this example trains over gloo on
# CPUs, and the default wheel would pull several GB of CUDA libraries. For GPUs: start FROM
# a CUDA base image and replace the index's last part `cpu` with your CUDA build (e.g.
# --build-arg TORCH_INDEX_URL=https://download.pytorch.org/whl/cu126), or give
# https://pypi.org/simple for the default wheel, which bundles CUDA; then NCCL.
# numpy: torch runs without it but warns "Failed to initialize NumPy" in every process.
ARG TORCH_VERSION=2.13.0
ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu
# (/mnt: an empty folder of Debian's images, so the mount leaves no mount point behind.)
RUN --mount=type=bind,from=torch-wheels,target=/mnt \
    pip install --no-cache-dir --find-links /mnt --index-url "${TORCH_INDEX_URL}" \
      "torch==${TORCH_VERSION}" numpy

# derive-env in a venv of its own, only its command linked onto PATH: its pydantic and click
# never meet the training code's (which may pin pydantic 1.x or click 7), and `python` is
# still the image's. Installed from the wheels of the first stages, with no index; the
# wheels are bind-mounted for this step only (no layer keeps them).
RUN --mount=type=bind,from=derive-env-wheels,source=/wheelhouse,target=/mnt \
    python3 -m venv /opt/derive-env \
 && /opt/derive-env/bin/pip install --no-cache-dir --no-index --find-links /mnt derive-env \
 && ln -s /opt/derive-env/bin/derive-env /usr/local/bin/derive-env

# The example job: the gloo all-reduce that `make demo` runs. Replace with your own script.
COPY examples/training/torch_allreduce.py /opt/derive-env/examples/allreduce.py
COPY examples/training/worker_report.py /opt/derive-env/examples/worker_report.py

# ---- Labels: one ARG per value. Declared after the heavy layers, so that changing a
# ---- value does not rebuild torch.
# Frameworks to derive variables for (the opt-in label).
ARG DE_FRAMEWORKS=pytorch
# Rendezvous port on the master (node rank 0).
ARG DE_MASTER_PORT=29500
# torchrun (torchrun starts the per-process workers) or process-per-container.
ARG DE_PYTORCH_MODE=torchrun
# Processes per container. 2 suits this CPU example; on a GPU image leave the label out
# (delete this ARG, its LABEL line and its labels-file line) to use the GPU count.
ARG DE_NPROC_PER_NODE=2
# fail: bad input stops the container start. warn: run the command without the variables.
ARG DE_ON_ERROR=fail

LABEL ai.backend.distributed.frameworks="${DE_FRAMEWORKS}" \
      ai.backend.distributed.master-port="${DE_MASTER_PORT}" \
      ai.backend.distributed.pytorch-mode="${DE_PYTORCH_MODE}" \
      ai.backend.distributed.nproc-per-node="${DE_NPROC_PER_NODE}" \
      ai.backend.distributed.on-error="${DE_ON_ERROR}"

# The labels file, from the same ARGs (values are plain words and numbers: no JSON escaping
# needed).
RUN mkdir -p /etc/derive-env \
 && { printf '{\n' \
   && printf '  "ai.backend.distributed.frameworks": "%s",\n' "${DE_FRAMEWORKS}" \
   && printf '  "ai.backend.distributed.master-port": "%s",\n' "${DE_MASTER_PORT}" \
   && printf '  "ai.backend.distributed.pytorch-mode": "%s",\n' "${DE_PYTORCH_MODE}" \
   && printf '  "ai.backend.distributed.nproc-per-node": "%s",\n' "${DE_NPROC_PER_NODE}" \
   && printf '  "ai.backend.distributed.on-error": "%s"\n' "${DE_ON_ERROR}" \
   && printf '}\n'; } > /etc/derive-env/labels.json

# Fail the build on a bad label value (a typo must not reach a cluster). No cluster
# variables here, so this is a single-container dry run.
RUN derive-env --dry-run --explain

# Backend.AI ignores ENTRYPOINT and sources this hook instead (see docker/bootstrap.sh).
COPY docker/bootstrap.sh /opt/container/bootstrap.sh
RUN chmod 0755 /opt/container/bootstrap.sh
# The batch command runs only in main1: this starts a command in every container over
# the session's SSH (see docker/on-every-node.sh).
COPY docker/on-every-node.sh /usr/local/bin/on-every-node
RUN chmod 0755 /usr/local/bin/on-every-node

# Exec form. tini (PID 1) -> derive-env -> exec CMD, so CMD keeps derive-env's PID.
ENTRYPOINT ["tini", "--", "derive-env", "--"]
CMD ["torchrun", "/opt/derive-env/examples/allreduce.py"]
