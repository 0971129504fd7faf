-- Lmod module file for derive-env installed in a shared venv (docs/install-cluster.md).
-- Copy to <a MODULEPATH folder>/derive-env/0.2.1.lua and set root to the install's folder.
help([[
derive-env: derives the distributed-training variables (torchrun's PET_*, RANK,
WORLD_SIZE, MASTER_ADDR, TF_CONFIG, JAX's) from Slurm's in every task of srun:
    srun --ntasks-per-node=1 derive-env --frameworks pytorch -- torchrun train.py
]])
whatis("Name: derive-env")
whatis("Description: distributed-training variables from the cluster manager's")

local root = "/shared/sw/derive-env/0.2.1"
-- Only derive-env's own folder: the venv's bin also holds python and pip, which would
-- shadow the job's.
prepend_path("PATH", pathJoin(root, "bin"))
