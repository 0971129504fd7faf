# Example training image: TensorFlow (CPU) + derive-env.
#
# Build from the repository root (the build context must hold pyproject.toml and src/),
# with BuildKit (Docker's default builder since 23.0; on Docker 20.10, e.g. Debian 12's
# docker.io, set DOCKER_BUILDKIT=1). The legacy builder cannot build this file: it builds
# every stage (also the unused wheel stage below) and has no `RUN --mount`, which keeps
# the wheels out of the image's layers.
#
#     DOCKER_BUILDKIT=1 docker build -f docker/tensorflow.Dockerfile -t derive-env-example/tensorflow .
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

ARG TENSORFLOW_VERSION=2.21.0
RUN pip install --no-cache-dir "tensorflow-cpu==${TENSORFLOW_VERSION}"

# derive-env in a venv of its own, only its command linked onto PATH: its pydantic and click
# never meet the training code's (which may pin pydantic 1.x or click 7), and `python` is
# still the image's. Installed from the wheels of the first stages, with no index; the
# wheels are bind-mounted for this step only (no layer keeps them; /mnt: an empty folder of
# Debian's images, so the mount leaves no mount point behind).
RUN --mount=type=bind,from=derive-env-wheels,source=/wheelhouse,target=/mnt \
    python3 -m venv /opt/derive-env \
 && /opt/derive-env/bin/pip install --no-cache-dir --no-index --find-links /mnt derive-env \
 && ln -s /opt/derive-env/bin/derive-env /usr/local/bin/derive-env

# ---- Labels: one ARG per value, after the heavy layers so that changing a value does
# ---- not reinstall TensorFlow.
# Frameworks to derive variables for (the opt-in label).
ARG DE_FRAMEWORKS=tensorflow
# Port of the TensorFlow server on every node (the host:port entries of TF_CONFIG).
ARG DE_TENSORFLOW_PORT=2222
# Backend.AI role -> TF task type. main1 becomes the chief, every sub a worker.
# Leave the label out for "every node a worker".
ARG DE_TENSORFLOW_ROLES=main:chief,sub:worker
# fail: bad input stops the container start. warn: run the command without TF_CONFIG.
ARG DE_ON_ERROR=fail

LABEL ai.backend.distributed.frameworks="${DE_FRAMEWORKS}" \
      ai.backend.distributed.tensorflow-port="${DE_TENSORFLOW_PORT}" \
      ai.backend.distributed.tensorflow-roles="${DE_TENSORFLOW_ROLES}" \
      ai.backend.distributed.on-error="${DE_ON_ERROR}"

# The labels file, from the same ARGs (values are plain words, numbers, ':' and ',': no
# JSON escaping needed).
RUN mkdir -p /etc/derive-env \
 && { printf '{\n' \
   && printf '  "ai.backend.distributed.frameworks": "%s",\n' "${DE_FRAMEWORKS}" \
   && printf '  "ai.backend.distributed.tensorflow-port": "%s",\n' "${DE_TENSORFLOW_PORT}" \
   && printf '  "ai.backend.distributed.tensorflow-roles": "%s",\n' "${DE_TENSORFLOW_ROLES}" \
   && printf '  "ai.backend.distributed.on-error": "%s"\n' "${DE_ON_ERROR}" \
   && printf '}\n'; } > /etc/derive-env/labels.json

# Fail the build on a bad label value. No cluster variables here: a single-container dry
# run (the role mapping is checked against the real roles at container start).
RUN derive-env --dry-run --explain

# Backend.AI ignores ENTRYPOINT and sources this hook instead (see docker/bootstrap.sh).
COPY docker/bootstrap.sh /opt/container/bootstrap.sh
RUN chmod 0755 /opt/container/bootstrap.sh
# The batch command runs only in main1: this starts a command in every container over
# the session's SSH (see docker/on-every-node.sh).
COPY docker/on-every-node.sh /usr/local/bin/on-every-node
RUN chmod 0755 /usr/local/bin/on-every-node

ENTRYPOINT ["tini", "--", "derive-env", "--"]
# A smoke test of the multi-worker setup: builds the strategy from TF_CONFIG and prints
# this task and the number of replicas. Replace with your training command.
CMD ["python", "-c", "import tensorflow as tf; s = tf.distribute.MultiWorkerMirroredStrategy(); r = s.cluster_resolver; print(r.task_type, r.task_id, s.num_replicas_in_sync, flush=True)"]
