"""Stand-in of Backend.AI's kernel runner, exec'd by entrypoint.sh after the image's hook.

Usage: ``python kernel_runner.py STATE_DIR`` (STATE_DIR: this container's folder for the
runner's own files, outside the paths the image sees). What it does, as the real runner
does it (src/ai/backend/kernel/base.py, intrinsic.py in lablup/backend.ai):

1. Writes the environment it inherited (Docker's variables + the hook's exports) to
   STATE_DIR/runner-env.json: the record of what the hook exported.
2. Re-reads /home/config/environ.txt (``KEY=VALUE`` lines, unquoted) and lets those keys
   override the inherited values: the environment of everything it starts.
3. Writes ~/.ssh/config with one ``Host {role}*`` entry per role of
   BACKENDAI_CLUSTER_REPLICAS (port 2200, key /home/config/ssh/id_cluster, no host key
   check) and appends /home/config/ssh/id_cluster.pub to ~/.ssh/authorized_keys.
4. Serves SSH on port 2200 with OpenSSH's sshd in the foreground (Backend.AI uses a dropbear
   built NOT to clear the environment). OpenSSH builds a fresh environment for every
   session, so ``ForceCommand`` runs session_shell.py, which restores this runner's
   environment from STATE_DIR/session-env.json (JSON: any value, newlines included, survives;
   sshd_config ``SetEnv`` and ~/.ssh/environment are line-based and cannot carry one).
   When STATE_DIR/no-sshd exists (a test's failure: an SSH server that died or never came
   up), no sshd: the runner waits for SIGTERM (exit 0).
5. Only when STATE_DIR/batch-command exists (the harness writes it for main1 alone, where
   Backend.AI runs a batch session's command): runs it with ``/bin/sh -c`` in /home/work,
   writes its exit status to STATE_DIR/batch-rc, stops sshd and exits with that status.
   Otherwise it serves SSH until SIGTERM (exit 0).
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
from pathlib import Path

SSH_PORT = 2200
CONFIG = Path("/home/config")
SSH_DIR = Path("/root/.ssh")
SESSION_SHELL = Path(__file__).resolve().parent / "session_shell.py"


def read_environ_txt(path: Path) -> dict[str, str]:
    """``KEY=VALUE`` lines of ``path`` (missing file: {}); lines without ``=`` are skipped."""
    if not path.exists():
        return {}
    pairs = (line.split("=", 1) for line in path.read_text().splitlines() if "=" in line)
    return {key: value for key, value in pairs}


def write_ssh_client_config(replicas: str) -> None:
    """~/.ssh/config and authorized_keys as Backend.AI's runner writes them."""
    with open(SSH_DIR / "config", "a") as f:
        for pair in replicas.split(","):
            role = pair.rsplit(":", 1)[0]
            f.write(f"\nHost {role}*\n\tPort {SSH_PORT}\n\tStrictHostKeyChecking no\n"
                    f"\tIdentityFile {CONFIG / 'ssh' / 'id_cluster'}\n")
    with open(SSH_DIR / "authorized_keys", "ab") as f:
        f.write(b"\n" + (CONFIG / "ssh" / "id_cluster.pub").read_bytes() + b"\n")


def start_sshd(state: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
    """sshd -D on port 2200 whose sessions get ``env``; its log goes to STATE/sshd.log."""
    (state / "session-env.json").write_text(json.dumps(env))
    key = state / "ssh_host_ed25519_key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)],
                   check=True, timeout=30)
    force = shlex.join([sys.executable, str(SESSION_SHELL), str(state / "session-env.json")])
    (state / "sshd_config").write_text(
        f"Port {SSH_PORT}\nHostKey {key}\nPidFile none\nUsePAM no\n"
        "PermitRootLogin prohibit-password\nPasswordAuthentication no\n"
        "KbdInteractiveAuthentication no\nStrictModes no\n"
        f"AuthorizedKeysFile {SSH_DIR / 'authorized_keys'}\n"
        f"ForceCommand {force}\nPrintMotd no\nLogLevel ERROR\n"
    )
    log = open(state / "sshd.log", "ab")  # noqa: SIM115 - sshd keeps it open
    return subprocess.Popen(["/usr/sbin/sshd", "-D", "-e", "-f", str(state / "sshd_config")],
                            stdin=subprocess.DEVNULL, stdout=log, stderr=log, env=env)


def main() -> int:
    """Run as described in the module docstring; return the exit status."""
    state = Path(sys.argv[1])
    (state / "runner-env.json").write_text(json.dumps(dict(os.environ)))
    env = {**os.environ, **read_environ_txt(CONFIG / "environ.txt")}
    write_ssh_client_config(env.get("BACKENDAI_CLUSTER_REPLICAS", "main:1"))
    if (state / "no-sshd").exists():
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
        signal.pause()
        return 0
    sshd = start_sshd(state, env)
    try:
        batch = state / "batch-command"
        if not batch.exists():
            signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
            return sshd.wait()
        rc = subprocess.run(["/bin/sh", "-c", batch.read_text()], cwd="/home/work",
                            env=env, check=False).returncode
        (state / "batch-rc").write_text(f"{rc}\n")
        return rc
    finally:
        sshd.terminate()
        sshd.wait(timeout=10)


if __name__ == "__main__":
    sys.exit(main())
