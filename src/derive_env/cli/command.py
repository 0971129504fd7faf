"""The click command: options -> :func:`derive_env.cli.run`. No derivation logic here."""

from __future__ import annotations

import sys

import click

from derive_env import __version__
from derive_env.cli import run
from derive_env.formats import FORMATS

_EPILOG = """\b
Exit codes: 0 ok (or the command's own status), 1 dry-run output not written, 2 usage,
3 bad cluster variables, 4 bad image label, 5 environment too large, 126 command not
executable, 127 not found, 130 interrupted.
143 SIGTERM while resolving host names (label socket-ifname=auto); 130 for SIGINT there.
Troubleshooting by message: the operator guide (docs/operator-guide.md in the source)."""


@click.command(
    context_settings={
        "help_option_names": ["-h", "--help"],
        "allow_interspersed_args": False,
        "max_content_width": 100,
    },
    epilog=_EPILOG,
)
@click.option("--dry-run", is_flag=True, help="Print the derived variables; run nothing.")
@click.option(
    "--format", "fmt", type=click.Choice(FORMATS), default=None,
    help="Dry-run output: KEY=VALUE lines (env, default), one JSON object, a TOML table, "
         "eval-safe `export` lines (shell), or the session's nodes for a launcher (hosts, "
         "openmpi-/mpich-/deepspeed-hostfile, horovod-hosts).",
)
@click.option(
    "--explain", is_flag=True,
    help="Dry-run output for a person: each variable with its value and where it came from.",
)
@click.option(
    "--label", "label_items", multiple=True, metavar="KEY=VALUE",
    help="An image label (repeatable); wins over the labels files.",
)
@click.option(
    "--labels-file", "labels_files", metavar="PATH", multiple=True,
    help="Labels as a JSON object, `docker image inspect` output or its {{json .Config}} "
         "('-' for stdin); wins over the image's /etc/derive-env/labels.json (repeatable, "
         "later wins).",
)
@click.option(
    "--env-file", "env_files", metavar="PATH", multiple=True,
    help="Read the input environment from a file instead of this process's, e.g. to see what "
         "another container of the session would get: env -0 or /proc/PID/environ output, "
         "docker inspect output, Backend.AI's environ.txt, or dotenv KEY=VALUE lines "
         "('-' for stdin).",
)
@click.option(
    "--source", "source", metavar="NAME", default=None,
    help="Which source states the topology: auto (default: detect), none (a single "
         "container), or a source name (slurm-step, slurm-allocation, openmpi, hydra, "
         "mvapich2, pals, torchrun, backendai, kubeflow-pytorchjob, kubeflow-trainjob). "
         "Default: the DERIVE_ENV_SOURCE variable, else auto.",
)
@click.version_option(__version__, prog_name="derive-env")
@click.argument("command", nargs=-1, type=click.UNPROCESSED, metavar="[--] COMMAND [ARG]...")
def cli(
    dry_run: bool,
    fmt: str | None,
    explain: bool,
    label_items: tuple[str, ...],
    labels_files: tuple[str, ...],
    env_files: tuple[str, ...],
    source: str | None,
    command: tuple[str, ...],
) -> None:
    """Derive distributed-training variables from the cluster manager's, then exec COMMAND.

    Reads the cluster topology from every cluster manager and launcher whose variables are
    set (Backend.AI, a Slurm step or allocation, Open MPI, MPICH/Intel MPI, MVAPICH2, Cray
    PALS, torchrun, Kubeflow) and the image's ai.backend.distributed.* labels (or --label),
    sets MASTER_ADDR, RANK..., torchrun's PET_* defaults, TF_CONFIG or JAX's coordinator
    address, and replaces itself with COMMAND (same PID). Without the
    ai.backend.distributed.frameworks label the environment is passed unchanged.

    \b
      derive-env -- torchrun train.py
      srun --ntasks-per-node=2 derive-env -- python train.py
      derive-env --dry-run --explain
      eval "$(derive-env --dry-run --format shell)"
    """
    if not dry_run:
        if fmt is not None or explain:
            raise click.UsageError("--format and --explain need --dry-run.")
        if not command:
            raise click.UsageError(
                "no command given: derive-env [OPTIONS] -- COMMAND [ARG]..., or --dry-run."
            )
    elif explain and fmt is not None:
        raise click.UsageError("--explain prints for a person; drop --format.")
    if len(env_files) > 1:
        raise click.UsageError("--env-file given more than once: one environment at a time.")
    if "-" in env_files and "-" in labels_files:
        raise click.UsageError(
            "--env-file - and --labels-file - both read stdin, which holds one file: give one "
            "of them a path."
        )
    try:
        status = run(
            list(command), dry_run=dry_run, fmt=fmt or "env", explain=explain,
            labels_files=labels_files, label_items=label_items,
            env_file=env_files[0] if env_files else None, source=source,
        )
    except KeyboardInterrupt:  # 130 as on the other paths, not click's "Aborted!" exit 1
        from derive_env.cli import interrupted

        status = interrupted()
    sys.exit(status)
