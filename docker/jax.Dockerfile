# Example training image: JAX (CPU) + derive-env.
#
# Build from the repository root (the build context must hold pyproject.toml and src/),
# with BuildKit (Docker's default builder since 23.0; on Docker 20.10, e.g. Debian 12's
# docker.io, set DOCKER_BUILDKIT=1). The legacy builder cannot build this file: it builds
# every stage (also the unused wheel stage below) and has no `RUN --mount`, which keeps
# the wheels out of the image's layers.
#
#     DOCKER_BUILDKIT=1 docker build -f docker/jax.Dockerfile -t derive-env-example/jax .
#
# Another base (a Python 3.11 image of your registry, a CUDA image): --build-arg BASE_IMAGE=...
# (pip must be able to install into its Python, as in python:3.11-slim).
#
# Each label value is declared ONCE, as a build ARG below. The same ARG feeds the image
# LABEL and the labels file /etc/derive-env/labels.json that derive-env reads at run time
# (a container cannot read its own image's labels). tests/test_docker_examples.py checks
# that both agree.
#
# Air-gapped build (no package index for derive-env): `make wheelhouse`, then add
# --build-arg DERIVE_ENV_WHEELS=wheelhouse.

# ---- derive-env's wheels, made in a stage of their own, chosen by DERIVE_ENV_WHEELS:
# ----   source     (default) built here from this repository's copy; pip fetches the
# ----              dependencies (pydantic, click, tomli-w) from the package index;
# ----   wheelhouse the folder wheelhouse/ of the build context, made beforehand on a
# ----              connected machine by `make wheelhouse WHEELHOUSE_PYTHON=3.11` (for
# ----              air-gapped builds: no index is used). See docs/integration.md.
# ---- Only the chosen stage is built (BuildKit).
ARG DERIVE_ENV_WHEELS=source
ARG BASE_IMAGE=python:3.11-slim

FROM ${BASE_IMAGE} AS derive-env-wheels-source
COPY pyproject.toml README.md LICENSE /opt/derive-env-src/
COPY src /opt/derive-env-src/src
RUN pip wheel --no-cache-dir --wheel-dir /wheelhouse /opt/derive-env-src

FROM scratch AS derive-env-wheels-wheelhouse
COPY wheelhouse/ /wheelhouse/

FROM derive-env-wheels-${DERIVE_ENV_WHEELS} AS derive-env-wheels

FROM ${BASE_IMAGE}

# tini reaps zombie processes and forwards signals; derive-env execs the command and
# does not reap children.
# openssh-client: on-every-node's ssh on Backend.AI (which brings only the server).
RUN apt-get update \
 && apt-get install -y --no-install-recommends tini openssh-client \
 && rm -rf /var/lib/apt/lists/*

# jax from the package index pulls the CPU jaxlib. For GPUs: start FROM a CUDA base image
# and install "jax[cuda12]" instead (JAX's installation guide).
ARG JAX_VERSION=0.10.2
RUN pip install --no-cache-dir "jax==${JAX_VERSION}" "jaxlib==${JAX_VERSION}"

# derive-env in a venv of its own, only its command linked onto PATH: its pydantic and click
# never meet the training code's (which may pin pydantic 1.x or click 7), and `python` is
# still the image's. Installed from the wheels of the first stages, with no index; the
# wheels are bind-mounted for this step only (no layer keeps them; /mnt: an empty folder of
# Debian's images, so the mount leaves no mount point behind).
RUN --mount=type=bind,from=derive-env-wheels,source=/wheelhouse,target=/mnt \
    python3 -m venv /opt/derive-env \
 && /opt/derive-env/bin/pip install --no-cache-dir --no-index --find-links /mnt derive-env \
 && ln -s /opt/derive-env/bin/derive-env /usr/local/bin/derive-env

# The example job: joins the JAX distributed runtime with the coordinator address, process
# count and id that derive-env sets, then runs two cross-process collectives over gloo on
# the CPU and prints one JSON line per container. Replace with your own script.
COPY examples/training/jax_worker.py /opt/derive-env/examples/jax_worker.py
COPY examples/training/worker_report.py /opt/derive-env/examples/worker_report.py

# ---- Labels: one ARG per value, after the heavy layers so that changing a value does
# ---- not reinstall JAX.
# Frameworks to derive variables for (the opt-in label).
ARG DE_FRAMEWORKS=jax
# Port of JAX's coordinator, which process 0 (on the master, node rank 0) serves.
ARG DE_JAX_PORT=1234
# fail: bad input stops the container start. warn: run the command without the variables.
ARG DE_ON_ERROR=fail

LABEL ai.backend.distributed.frameworks="${DE_FRAMEWORKS}" \
      ai.backend.distributed.jax-port="${DE_JAX_PORT}" \
      ai.backend.distributed.on-error="${DE_ON_ERROR}"

# The labels file, from the same ARGs (values are plain words and numbers: no JSON escaping
# needed).
RUN mkdir -p /etc/derive-env \
 && { printf '{\n' \
   && printf '  "ai.backend.distributed.frameworks": "%s",\n' "${DE_FRAMEWORKS}" \
   && printf '  "ai.backend.distributed.jax-port": "%s",\n' "${DE_JAX_PORT}" \
   && printf '  "ai.backend.distributed.on-error": "%s"\n' "${DE_ON_ERROR}" \
   && printf '}\n'; } > /etc/derive-env/labels.json

# Fail the build on a bad label value. No cluster variables here: a single-container dry run.
RUN derive-env --dry-run --explain

# Backend.AI ignores ENTRYPOINT and sources this hook instead (see docker/bootstrap.sh).
COPY docker/bootstrap.sh /opt/container/bootstrap.sh
RUN chmod 0755 /opt/container/bootstrap.sh
# The batch command runs only in main1: this starts a command in every container over
# the session's SSH (see docker/on-every-node.sh).
COPY docker/on-every-node.sh /usr/local/bin/on-every-node
RUN chmod 0755 /usr/local/bin/on-every-node

ENTRYPOINT ["tini", "--", "derive-env", "--"]
CMD ["python", "/opt/derive-env/examples/jax_worker.py"]
