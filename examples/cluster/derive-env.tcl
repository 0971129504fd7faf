#%Module1.0
## Environment Modules (Tcl) module file for derive-env installed in a shared venv
## (docs/install-cluster.md). Copy to <a MODULEPATH folder>/derive-env/0.2.1 and set root.
proc ModulesHelp { } {
    puts stderr "derive-env: derives the distributed-training variables from Slurm's"
    puts stderr "in every task of srun:"
    puts stderr "    srun --ntasks-per-node=1 derive-env --frameworks pytorch -- torchrun train.py"
}
module-whatis "Name: derive-env"

set root /shared/sw/derive-env/0.2.1
# Only derive-env's own folder: the venv's bin also holds python and pip, which would
# shadow the job's.
prepend-path PATH $root/bin
