"""SageMaker's way to start an image, for real: ``docker run IMAGE train`` in two containers.

SageMaker runs a training image as ``docker run IMAGE train`` (its developer guide, "How
Amazon SageMaker Runs Your Training Image") with ``/opt/ml/input/config/resourceconfig.json`` and
``hyperparameters.json`` mounted, ``TRAINING_JOB_NAME``/``TRAINING_JOB_ARN`` set, and the
hosts named algo-1, algo-2, ... on the job's network. Here the example PyTorch image (its
ENTRYPOINT ``tini -- derive-env --``) gets a ``train`` program on PATH, as
docs/sources/clouds.md's recipe says, and two containers algo-1 and algo-2 run it on an
internal network: derive-env reads the resource config, torchrun starts 2 workers in each,
and the gloo all-reduce over the 4 ranks gives 1+2+3+4 = 10 in every rank. The same image
without ``train`` stops with the message that says what SageMaker expects (exit 127).

Then the other way: SageMaker's training toolkit (sagemaker-training 5.1.4, its wheel built on
this host from PyPI's sdist, installed into the image with its dependencies from PyPI), whose
own ``train`` reads hyperparameters.json and runs the job's entry point, ``launch.sh``
(``torchrun allreduce.py``), in each host: derive-env, the image's ENTRYPOINT, derived
torchrun's ``PET_*`` before the toolkit started, and the 4 ranks agree again. The toolkit's
torch_distributed launcher belongs to the framework containers (sagemaker-pytorch-training's
``training:main``), not to sagemaker-training: not run here.

Needs the tests' engine (tests/e2e/engine.py); skipped without it, a FAILURE under CI=true.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from engine import Ended, Engine, describe, ended, example_image
from sessions import json_lines

pytestmark = pytest.mark.e2e

HOSTS = ("algo-1", "algo-2")
JOB = "bert-1"
ARN = f"arn:aws:sagemaker:us-west-2:111122223333:training-job/{JOB}"
#: The recipe's train program (docs/sources/clouds.md, "Amazon SageMaker").
TRAIN = '#!/bin/sh\nexec torchrun /opt/derive-env/examples/allreduce.py "$@"\n'
#: The recipe's Dockerfile lines, on top of the example image (ENTRYPOINT inherited).
DOCKERFILE = ("FROM derive-env-example/pytorch\n"
              "COPY train /usr/local/bin/train\n"
              "RUN chmod 0755 /usr/local/bin/train\n")
TAG = "derive-env-e2e/sagemaker-byoc"
TOOLKIT = "sagemaker-training==5.1.4"
TOOLKIT_TAG = "derive-env-e2e/sagemaker-toolkit"
#: The toolkit's image: the example image plus sagemaker-training (its ``train`` on PATH).
TOOLKIT_DOCKERFILE = (
    "FROM derive-env-example/pytorch\n"
    "RUN --mount=type=bind,source=wheels,target=/mnt \\\n"
    "    pip install --no-cache-dir --find-links /mnt sagemaker-training\n")
#: The job's entry point (the estimator's entry_point), run by the toolkit's train.
LAUNCH = "#!/bin/sh\nexec torchrun /opt/derive-env/examples/allreduce.py\n"
TIMEOUT_S = 300.0


def resource_config(host: str) -> dict[str, object]:
    """SageMaker's /opt/ml/input/config/resourceconfig.json of ``host`` (a homogeneous job
    of 2 ml.c5.xlarge hosts, as the platform writes it)."""
    return {"current_host": host, "current_instance_type": "ml.c5.xlarge",
            "current_group_name": "homogeneousCluster", "hosts": list(HOSTS),
            "instance_groups": [{"instance_group_name": "homogeneousCluster",
                                 "instance_type": "ml.c5.xlarge", "hosts": list(HOSTS)}],
            "network_interface_name": "eth0"}


def config_dir(tmp_path: Path, host: str, hyperparameters: dict[str, str]) -> Path:
    """A folder standing in for ``host``'s /opt/ml/input/config (the platform's files)."""
    folder = tmp_path / host / "config"
    folder.mkdir(parents=True)
    (folder / "resourceconfig.json").write_text(json.dumps(resource_config(host)))
    (folder / "hyperparameters.json").write_text(json.dumps(hyperparameters))
    (folder / "inputdataconfig.json").write_text("{}")
    return folder


def sagemaker_env(host: str) -> dict[str, str]:
    """The variables of a SageMaker training container: the platform's and the ones its
    training toolkit exports (SM_HOSTS, SM_CURRENT_HOST, ...), for ``host``."""
    return {"TRAINING_JOB_NAME": JOB, "TRAINING_JOB_ARN": ARN, "PYTHONUNBUFFERED": "1",
            "SM_HOSTS": json.dumps(list(HOSTS)), "SM_CURRENT_HOST": host,
            "SM_CURRENT_INSTANCE_GROUP": "homogeneousCluster", "SM_NUM_GPUS": "0"}


def run_sagemaker_job(engine: Engine, image: str, name: str, tmp_path: Path,
                      hyperparameters: dict[str, str] | None = None,
                      options: tuple[str, ...] = ()) -> dict[str, Ended]:
    """algo-1 and algo-2 of ``image`` started as SageMaker does (``docker run IMAGE train``)
    at once on an internal network, until both ended."""
    with engine.network(name) as net:
        ids = {host: engine.run(image, net, host, "train", env=sagemaker_env(host), options=(
            "-v", f"{config_dir(tmp_path, host, hyperparameters or {})}:/opt/ml/input/config:ro",
            *options)) for host in HOSTS}
        return ended(engine, ids, TIMEOUT_S)


def byoc_image(engine: Engine, tmp_path: Path) -> str:
    """The example PyTorch image plus the recipe's ``train`` on PATH."""
    example_image(engine, "pytorch")
    context = tmp_path / "context"
    context.mkdir()
    (context / "train").write_text(TRAIN)
    (context / "Dockerfile").write_text(DOCKERFILE)
    engine.docker("build", "--network", "host", "-t", TAG, str(context), timeout=600)
    return TAG


def toolkit_image(engine: Engine, tmp_path: Path) -> str:
    """The example PyTorch image plus SageMaker's training toolkit: its wheel built here
    (the sdist compiles a small C extension), its dependencies from PyPI in the build."""
    example_image(engine, "pytorch")
    context = tmp_path / "toolkit"
    (context / "wheels").mkdir(parents=True)
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps",
                            TOOLKIT, "-w", str(context / "wheels")],
                           capture_output=True, text=True, timeout=600, check=False)
    assert built.returncode == 0, built.stderr[-3000:]
    (context / "Dockerfile").write_text(TOOLKIT_DOCKERFILE)
    engine.docker("build", "--network", "host", "-t", TOOLKIT_TAG, str(context), timeout=1200)
    return TOOLKIT_TAG


def assert_all_ranks_agree(results: dict[str, Ended]) -> None:
    """4 ranks in host order, master algo-1 (the first distribution host), every
    all-reduce 1+2+3+4 = 10."""
    assert {h: r.code for h, r in results.items()} == dict.fromkeys(HOSTS, 0), \
        describe(results)
    workers = [w for r in results.values() for w in json_lines(r.out)]
    assert sorted((w["hostname"], w["rank"], w["group_rank"]) for w in workers) == [
        ("algo-1", 0, 0), ("algo-1", 1, 0), ("algo-2", 2, 1), ("algo-2", 3, 1)], \
        describe(results)
    assert {(w["master_addr"], w["world_size"], w["result"]) for w in workers} == {
        ("algo-1", 4, 10.0)}


def test_docker_run_image_train_two_hosts_all_ranks_agree(engine: Engine,
                                                          tmp_path: Path) -> None:
    """`docker run IMAGE train` on algo-1 and algo-2, train being the recipe's script."""
    assert_all_ranks_agree(run_sagemaker_job(engine, byoc_image(engine, tmp_path), "de-sm",
                                             tmp_path))


def test_training_toolkit_train_runs_the_entry_point_behind_derive_env(
        engine: Engine, tmp_path: Path) -> None:
    """The toolkit's own train (hyperparameters as the SageMaker SDK writes them: JSON
    text) runs launch.sh from /opt/ml/code in each host; its torchrun joins over derive-env's
    PET_* and MASTER_*; the toolkit reports success (/opt/ml/output/success)."""
    code = tmp_path / "code"
    code.mkdir()
    (code / "launch.sh").write_text(LAUNCH)
    (code / "launch.sh").chmod(0o755)
    hyperparameters = {"sagemaker_program": json.dumps("launch.sh"),
                       "sagemaker_submit_directory": json.dumps("/opt/ml/code")}
    results = run_sagemaker_job(engine, toolkit_image(engine, tmp_path), "de-sm-tk", tmp_path,
                                hyperparameters, options=("-v", f"{code}:/opt/ml/code"))

    assert_all_ranks_agree(results)
    assert all("Reporting training SUCCESS" in r.out + r.err for r in results.values()), \
        describe(results)


def test_image_without_train_says_what_sagemaker_expects(engine: Engine,
                                                         tmp_path: Path) -> None:
    """The example image as it is (no train program) started as SageMaker does: exit 127,
    the command not run, the message says what SageMaker expects."""
    results = run_sagemaker_job(engine, example_image(engine, "pytorch"), "de-sm-none",
                                tmp_path)

    path = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
    assert {h: (r.code, r.out, r.err) for h, r in results.items()} == dict.fromkeys(HOSTS, (
        127, "",
        f"derive-env: error: train: command not found in PATH={path}; SageMaker starts a "
        "training image as 'IMAGE train', so the image needs a program named train on PATH: "
        "your own (e.g. a script that runs torchrun train.py) or the one of SageMaker's "
        "training toolkit (pip install sagemaker-training), which runs the job's entry point "
        "(docs/sources/clouds.md, \"Amazon SageMaker\")\n"
        "derive-env: note: the command was not run (exit 127)\n"))
