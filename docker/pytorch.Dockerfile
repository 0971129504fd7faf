# Example training image: PyTorch + derive-env.
#
# Build from the repository root (the build context must hold pyproject.toml and src/):
#
#     docker build -f docker/pytorch.Dockerfile -t derive-env-example/pytorch .
#
# Change a label value at build time, e.g. the master port:
#
#     docker build -f docker/pytorch.Dockerfile --build-arg DE_MASTER_PORT=29400 ...
#
# Each label value is declared ONCE, as a build ARG below. The same ARG feeds the image
# LABEL (what `docker image inspect` and cluster managers see) and the labels file
# /etc/derive-env/labels.json (what derive-env reads at run time: a container cannot read
# its own image's labels). tests/test_docker_examples.py checks that both agree.
#
# This example uses a slim Python base and torch from PyPI. For GPUs, start from a CUDA
# base image instead; for a CPU-only image, install torch from PyTorch's CPU wheel index.
FROM python:3.11-slim

# tini reaps zombie processes and forwards signals. derive-env itself execs the command
# (same PID) and does not reap children, so something must, when the program does not.
# openssh-client: on-every-node's ssh on Backend.AI (which brings only the server).
RUN apt-get update \
 && apt-get install -y --no-install-recommends tini openssh-client \
 && rm -rf /var/lib/apt/lists/*

ARG TORCH_VERSION=2.13.0
RUN pip install --no-cache-dir "torch==${TORCH_VERSION}"

# derive-env from this repository's copy (only what the build needs; no .venv, no tests).
COPY pyproject.toml README.md /opt/derive-env/src-copy/
COPY src /opt/derive-env/src-copy/src
RUN pip install --no-cache-dir /opt/derive-env/src-copy && rm -rf /opt/derive-env/src-copy

# The example job: the gloo all-reduce that `make demo` runs. Replace with your own script.
COPY tests/e2e/torch_allreduce.py /opt/derive-env/examples/allreduce.py
COPY tests/e2e/worker_report.py /opt/derive-env/examples/worker_report.py

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
