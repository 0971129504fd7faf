"""ForceCommand of the stand-in kernel runner's sshd: an SSH session in the runner's environment.

Usage (from sshd_config): ``python session_shell.py ENV_JSON``. Replaces the environment
OpenSSH built for the session with the kernel runner's (ENV_JSON, a JSON object), keeping
the session's own SSH_* and TERM variables, then runs the client's command
(SSH_ORIGINAL_COMMAND) with the user's shell ``-c``, or a login shell when there is none.
That is what Backend.AI's dropbear, built not to clear the environment, gives a session.
"""

import json
import os
import pwd
import sys

with open(sys.argv[1]) as f:
    env = json.load(f)
env.update({k: v for k, v in os.environ.items() if k.startswith("SSH_") or k == "TERM"})
shell = pwd.getpwuid(os.getuid()).pw_shell or "/bin/sh"
command = os.environ.get("SSH_ORIGINAL_COMMAND")
argv = [shell, "-c", command] if command is not None else ["-" + os.path.basename(shell)]
os.execve(shell, argv, env)
