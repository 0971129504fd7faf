"""Issue 27 item 4: derive-env installed once on a cluster's shared file system, run from there.

The path docs/install-cluster.md gives, on the real Slurm cluster of tests/e2e/slurmcluster.py
(whose nodes share the host's file system, as nodes share NFS):

1. the wheel, built from a copy of the sources (``make dist`` builds the same file), and an
   offline wheelhouse of it and its dependencies (``make wheelhouse``: ``pip download``);
2. ``examples/cluster/install.sh ROOT WHEEL WHEELHOUSE``: a venv under the cluster's shared
   folder, installed with ``--no-index`` from the wheelhouse, and ROOT/bin with derive-env
   alone;
3. the module files ``examples/cluster/derive-env.lua`` (Lmod) and ``derive-env.tcl``
   (Environment Modules; read here by Lmod, which reads both) with ``root`` set to ROOT, in a
   MODULEPATH folder on the shared file system;
4. a batch job (``sbatch -N2``) whose script does ``module load derive-env`` and then
   ``srun --ntasks-per-node=1 derive-env --frameworks pytorch -- torchrun
   --nproc-per-node=2 torch_allreduce.py``: every task ran the shared derive-env (each node
   prints ``command -v derive-env``), the 4 ranks agree (all-reduce sums to 10) and each saw
   the node layer derive-env gave torchrun;
5. on this cluster, configured without ``MpiParams=ports``, ``srun --resv-ports=1`` is refused
   with the words docs/sources/slurm.md quotes (Slurm's ``ESLURM_PORTS_INVALID``,
   src/slurmctld/port_mgr.c ``resv_port_alloc``).

Needs root, ``ip netns``, slurm-wlm, munge, Lmod (Debian's ``lmod``), torch, and the package
index for the wheelhouse's dependencies: skipped without them, FAILS under CI=true.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import derive_env
from hpc_jobs import NODES, cluster, job_env, reports, require_hpc
from hpc_jobs import write_labels as labels_file
from sessions import EXAMPLES, require

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
CLUSTER = REPO / "examples" / "cluster"
LMOD_INIT = Path("/usr/share/lmod/lmod/init/sh")
#: The install path the example module files name; replaced by the test's shared folder.
EXAMPLE_ROOT = f"/shared/sw/derive-env/{derive_env.__version__}"
JOB_TIMEOUT_S = 240.0


def _wheel_and_wheelhouse(tmp: Path) -> tuple[Path, Path]:
    """Build the wheel from a copy of the sources (as docker/*.Dockerfile copy them) and
    download its dependencies into a wheelhouse, as ``make dist`` and ``make wheelhouse``."""
    src = tmp / "src-copy"
    src.mkdir()
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy2(REPO / name, src / name)
    shutil.copytree(REPO / "src", src / "src",
                    ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    dist = tmp / "dist"
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps",
         "--wheel-dir", str(dist), str(src)],
        capture_output=True, text=True, timeout=300, check=False)
    assert built.returncode == 0, built.stderr[-3000:]
    (wheel,) = dist.glob("derive_env-*.whl")
    house = tmp / "wheelhouse"
    fetched = subprocess.run(
        [sys.executable, "-m", "pip", "download", "--quiet", "--dest", str(house),
         "--only-binary=:all:", str(wheel)],
        capture_output=True, text=True, timeout=300, check=False)
    require(fetched.returncode == 0,
            f"pip download of the dependencies failed (no package index?): "
            f"{fetched.stderr[-500:]}")
    return wheel, house


def test_a_shared_venv_and_a_module_file_run_a_real_job(tmp_path: Path) -> None:
    require_hpc("srun", "sbatch", modules=("torch",))
    require(LMOD_INIT.exists(), "Lmod is not installed (apt-get install lmod)")
    # The training environment (torchrun beside the torch this Python imports: the venv
    # that holds it, <venv>/lib/pythonX.Y/site-packages/torch), as the user's job has it.
    spec = importlib.util.find_spec("torch")
    torch_bin = Path(str(spec.origin)).parents[4] / "bin" if spec and spec.origin else None
    torchrun = shutil.which("torchrun", path=os.pathsep.join(
        [str(Path(sys.executable).parent), str(torch_bin), os.environ.get("PATH", "")]))
    require(torchrun is not None, "torchrun not found")
    wheel, house = _wheel_and_wheelhouse(tmp_path)
    with cluster() as slurm:
        shared = slurm.tmp / "shared"
        root = shared / "sw" / "derive-env" / derive_env.__version__
        installed = subprocess.run(
            ["sh", str(CLUSTER / "install.sh"), str(root), str(wheel), str(house)],
            capture_output=True, text=True, timeout=300, check=False,
            env={"PATH": "/usr/bin:/bin", "PYTHON": sys.executable, "HOME": str(tmp_path)})
        assert installed.returncode == 0, installed.stdout + installed.stderr
        assert installed.stdout == f"derive-env, version {derive_env.__version__}\n"
        # derive-env alone on the PATH the module sets: not the venv's python or pip.
        assert sorted(p.name for p in (root / "bin").iterdir()) == ["derive-env"]
        for kind, example, name in (("lua", "derive-env.lua", f"{derive_env.__version__}.lua"),
                                    ("tcl", "derive-env.tcl", derive_env.__version__)):
            text = (CLUSTER / example).read_text()
            assert EXAMPLE_ROOT in text
            folder = shared / f"modulefiles-{kind}" / "derive-env"
            folder.mkdir(parents=True)
            (folder / name).write_text(text.replace(EXAMPLE_ROOT, str(root)))
        torch_script = EXAMPLES / "torch_allreduce.py"
        for kind in ("lua", "tcl"):
            script = shared / f"train-{kind}.sh"
            script.write_text(
                "#!/bin/sh\n"
                f"export PATH={Path(str(torchrun)).parent}:$PATH\n"
                f". {LMOD_INIT}\n"
                f"export MODULEPATH={shared / f'modulefiles-{kind}'}\n"
                "module load derive-env\n"
                "srun --ntasks-per-node=1 sh -c 'echo \"which=$(hostname) "
                "$(command -v derive-env)\"'\n"
                "srun --ntasks-per-node=1 --time=2 derive-env --frameworks pytorch -- "
                f"torchrun --nproc-per-node=2 {torch_script}\n")
            output = shared / f"train-{kind}.out"
            # No labels file anywhere: --frameworks alone opts the job in (bare metal).
            env = job_env(labels_file(slurm, {}))
            env.pop("DERIVE_ENV_LABELS_FILE")
            res = slurm.run(["sbatch", "--wait", "-N2", "--time=3", "-o", str(output),
                             str(script)], timeout=JOB_TIMEOUT_S, env=env)
            text = output.read_text(errors="replace") if output.exists() else ""
            which = sorted(line for line in text.splitlines() if line.startswith("which="))
            assert which == [f"which={node} {root}/bin/derive-env" for node in NODES[:2]], \
                res.describe() + text
            got = reports(res, 4, "rank", text)
            assert [(r["hostname"], r["local_rank"], r["group_rank"]) for r in got] == [
                (NODES[i // 2], i % 2, i // 2) for i in range(4)]
            for rank, r in enumerate(got):
                node = str(rank // 2)
                assert {k: r["env"].get(k) for k in ("PET_NNODES", "PET_NODE_RANK",
                                                     "PET_MASTER_ADDR", "WORLD_SIZE")} == {
                    "PET_NNODES": "2", "PET_NODE_RANK": node, "PET_MASTER_ADDR": NODES[0],
                    "WORLD_SIZE": "4"}, r["env"]
            assert {r["result"] for r in got} == {10.0}
        # The reserved-ports option needs the site's MpiParams=ports: without it, srun says
        # so and starts nothing (the message docs/sources/slurm.md quotes).
        res = slurm.run(["srun", "-N1", "--resv-ports=1", "true"], timeout=60.0)
        assert res.returncode != 0 and "Requires more ports than can be reserved" in \
            res.stderr, res.describe()
        assert [line for line in res.stderr.splitlines() if "ports" in line], res.stderr
        print("srun --resv-ports=1 without MpiParams=ports:", res.stderr.strip())
