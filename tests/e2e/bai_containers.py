"""A Backend.AI session on the tests' Docker engine, run by Backend.AI's own container runtime.

Every container of the session is a container of the example PyTorch image (built from
docker/pytorch.Dockerfile by tests/e2e/engine.py), created the way Backend.AI's agent creates
a kernel container, with Backend.AI's own runtime from its wheels (tests/e2e/bai_runtime.py):

- Entrypoint ``/opt/kernel/entrypoint.sh`` (kernel-binary's, run as root: it makes the user
  ``work`` with LOCAL_USER_ID, SOURCES the image's /opt/container/bootstrap.sh, then
  ``su-exec``s the command); Cmd ``/opt/backend.ai/bin/python -s -m ai.backend.kernel app``
  (the kernel runner; ``app``: the image has no ``ai.backend.runtime-type`` label): the
  container config of ``DockerKernelCreationContext.spawn`` (``Tty``, ``OpenStdin``,
  ``StopSignal: SIGINT``, ``EntryPoint``, ``WorkingDir: /home/work``, ``HostConfig.Init``,
  ``CapAdd``, ``Ulimits`` capped at this host's limits as ``get_safe_ulimit`` does) in
  src/ai/backend/agent/docker/agent.py, and the runner's command line of
  ``AbstractAgent.create_kernel`` in src/ai/backend/agent/agent.py (lablup/backend.ai).
- Mounts of ``KernelRunnerMountProvisioner`` (src/ai/backend/agent/stage/kernel_lifecycle/
  docker/mount/krunner.py): /opt/kernel/{entrypoint.sh, su-exec, dropbearmulti,
  sftp-server, tmux, extract_dotfiles.py, fantompass.py, hash_phrase.py, words.json,
  libbaihook.so} read-only, the static Python at /opt/backend.ai, the kernel runner and
  helpers packages into its site-packages; /home/config (environ.txt, resource.txt,
  dotfiles.json, ssh/id_cluster{,.pub}, ssh/dropbear_rsa_host_key made by dropbearkey as the
  agent does), /home/work (the scratch folder, owned by the kernel user), and
  /opt/kernel/agent.sock (``prepare_mounts`` of agent.py; here a bare socket file: nothing in
  a batch session talks to the agent over it).
- Env: the session's variables (BACKENDAI_CLUSTER_*, BACKENDAI_SESSION_ID,
  BACKENDAI_KERNEL_ID), LOCAL_USER_ID/LOCAL_GROUP_ID (UID_MATCH: the agent's kernel uid),
  LD_PRELOAD=/opt/kernel/libbaihook.so (``create_kernel``/``mount_krunner``); the same
  ``KEY=VALUE`` lines in environ.txt (``prepare_container`` of agent.py).
- Network: one internal network of the engine per session, every container with its
  cluster host name as hostname and network alias (``apply_network``, mode ``bridge``).
- The batch command: sent to main1's kernel runner over the runner's own ZeroMQ sockets
  (PUSH to its port 2000, PULL from 2001) as ``clean``, ``build``, ``exec`` messages, exactly
  ``AbstractKernel.feed_batch`` of src/ai/backend/agent/kernel.py; its ``stdout``/``stderr``
  chunks are relayed, ``finished`` carries the exit code. The sender runs inside main1 with
  the runner's own static Python (``docker exec``), since the session network is internal.

The runner then does what it does under Backend.AI: re-reads environ.txt, starts dropbear on
port 2200 with the cluster key and ``~/.ssh/config`` entries per role, and runs the batch
command with ``_BACKEND_BATCH_MODE=1``. Nothing of the stand-ins (tests/e2e/backendai/) is
used. Everything (containers, network, temporary folder) is removed on exit, also on failure
and Ctrl-C.

    with ContainerSession(engine, image, DEFAULT, "on-every-node hostname") as session:
        result = session.run(timeout=120)        # a bai_session.SessionResult
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import resource
import shutil
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Any

from bai_runtime import Runtime, unpacked
from bai_session import ContainerRecord, Layout, SessionResult
from engine import DOCKER, Engine

__all__ = ["BATCH_MARK", "IMAGE_SCRIPT", "TORCH_BATCH", "ContainerSession"]

#: The kernel user (UID_MATCH: the agent's ``container.kernel-uid``/``kernel-gid``).
KERNEL_UID = 1000
KERNEL_GID = 1000
#: The all-reduce the example image carries, and main1's batch command for it (the docs').
IMAGE_SCRIPT = "/opt/derive-env/examples/allreduce.py"
TORCH_BATCH = f"on-every-node torchrun {IMAGE_SCRIPT}"
#: The line the batch sender prints last: ``<mark> <exit code>``.
BATCH_MARK = "@@backendai-batch-finished@@"
#: libbaihook build for a glibc image (the agent matches the image's distro to the nearest
#: build, ``match_distro_data``; Debian 12's glibc 2.36 runs the Ubuntu 22.04 one).
LIBBAIHOOK = "libbaihook.ubuntu22.04.x86_64.so"
#: Seconds the containers get between SIGINT (their StopSignal) and SIGKILL at the end.
STOP_GRACE_S = 5
#: The agent's side of feed_batch, run by the static Python inside main1 (argv[1]: command).
FEEDER = f"""
import json, sys, zmq
ctx = zmq.Context()
push = ctx.socket(zmq.PUSH); push.connect("tcp://127.0.0.1:2000")
pull = ctx.socket(zmq.PULL); pull.connect("tcp://127.0.0.1:2001")
for op, text in (("clean", ""), ("build", ""), ("exec", sys.argv[1])):
    push.send_multipart([op.encode(), text.encode("utf8")])
while True:
    parts = pull.recv_multipart()
    kind, data = parts[0], (parts[1] if len(parts) > 1 else b"")
    if kind == b"stdout":
        sys.stdout.buffer.write(data); sys.stdout.flush()
    elif kind == b"stderr":
        sys.stderr.buffer.write(data); sys.stderr.flush()
    elif kind == b"finished":
        print("\\n{BATCH_MARK}", json.loads(data)["exitCode"], flush=True)
        break
"""
#: Prints the kernel runner's environment (its /proc/PID/environ: what it was exec'd with,
#: after entrypoint.sh sourced the hook), NUL-separated. The runner's command line is
#: ``bai-krunner -s -m ai.backend.kernel ...`` (the static Python's argv[0]); PID 1
#: (docker-init, whose command line holds the runner's) and this shell are skipped.
RUNNER_ENV = ('for d in /proc/[0-9]*; do p=${d#/proc/}; '
              '{ [ "$p" = 1 ] || [ "$p" = $$ ]; } && continue; '
              'case "$(tr "\\0" " " < "$d/cmdline" 2>/dev/null)" in '
              '*" -m ai.backend.kernel "*) cat "$d/environ"; exit 0 ;; esac; done; exit 1')


def _safe_ulimit(name: str, soft: int, hard: int) -> dict[str, Any]:
    """A Docker ulimit capped at this host's own hard limit (``get_safe_ulimit`` of the
    agent: a container cannot get more than the daemon has). -1: unlimited."""
    limit = getattr(resource, f"RLIMIT_{name.upper()}")
    _, host_hard = resource.getrlimit(limit)
    if host_hard != resource.RLIM_INFINITY:
        soft = host_hard if soft < 0 else min(soft, host_hard)
        hard = host_hard if hard < 0 else min(hard, host_hard)
    return {"Name": name, "Soft": soft, "Hard": hard}


class ContainerSession:
    """Context manager: the containers of one Backend.AI session (module docstring).

    :param engine: the tests' started engine. :param image: the example PyTorch image.
    :param layout: the session's containers (bai_session.DEFAULT, TEMPLATE).
    :param batch: main1's batch command (run by the kernel runner with ``/bin/sh -c``).
    :param labels: image labels for every container (a labels file mounted over the image's
        /etc/derive-env/labels.json); None: the image's own.
    :param user_env: session variables the user set (Env and environ.txt).
    :param host_labels: host -> the labels of that container instead.
    :param without_sshd: containers whose command is not the kernel runner (an SSH server
        that never came up): they sleep until the session ends.
    """

    def __init__(self, engine: Engine, image: str, layout: Layout, batch: str,
                 labels: Mapping[str, str] | None = None, *,
                 user_env: Mapping[str, str] | None = None,
                 host_labels: Mapping[str, Mapping[str, str]] | None = None,
                 without_sshd: Collection[str] = ()) -> None:
        self.engine, self.image, self.layout, self.batch = engine, image, layout, batch
        self.labels = None if labels is None else dict(labels)
        self.host_labels = {h: dict(v) for h, v in (host_labels or {}).items()}
        self.user_env = dict(user_env or {})
        self.without_sshd = frozenset(without_sshd)
        self.name = f"de-bai-{os.getpid() % 100000}x{random.randrange(1000)}"
        self.session_id = str(uuid.uuid4())
        self._stack = contextlib.ExitStack()
        self._feeder: subprocess.Popen[bytes] | None = None
        self._feeder_out: Any = None
        self.tmp = Path()
        self.runtime: Runtime | None = None
        self.net: Any = None

    # -- folders and files the agent writes ----------------------------------------------

    def container_dir(self, host: str) -> Path:
        """The machine-side folder of ``host``: ``work`` is its /home/work (the scratch
        folder), ``config`` its /home/config."""
        return self.tmp / host

    def container(self, host: str) -> str:
        """The Docker name of ``host``'s container."""
        return f"{self.name}-{host}"

    def given_env(self, host: str) -> dict[str, str]:
        """The container's Env as the agent sets it (the image's ENV comes on top)."""
        env = {**self.layout.env(host), "BACKENDAI_SESSION_ID": self.session_id,
               "BACKENDAI_KERNEL_ID": str(uuid.uuid5(uuid.UUID(self.session_id), host)),
               "LOCAL_USER_ID": str(KERNEL_UID), "LOCAL_GROUP_ID": str(KERNEL_GID),
               "LD_PRELOAD": "/opt/kernel/libbaihook.so", **self.user_env}
        return env

    def _prepare(self) -> None:
        """Cluster key pair, and per container the config and scratch folders."""
        self.tmp = Path(self._stack.enter_context(
            tempfile.TemporaryDirectory(prefix="derive-env-baic-")))
        key = self.tmp / "id_cluster"
        subprocess.run(["ssh-keygen", "-q", "-t", "rsa", "-b", "2048", "-m", "PEM", "-N", "",
                        "-C", "cluster", "-f", str(key)], check=True, timeout=60)
        assert self.runtime is not None
        for host in self.layout.hosts:
            d = self.container_dir(host)
            config, work = d / "config", d / "work"
            (config / "ssh").mkdir(parents=True)
            work.mkdir()
            for name in ("id_cluster", "id_cluster.pub"):
                shutil.copy(self.tmp / name, config / "ssh" / name)
            (config / "ssh" / "id_cluster").chmod(0o600)
            subprocess.run([str(self.runtime.dropbearmulti), "dropbearkey", "-t", "rsa", "-s",
                            "2048", "-f", str(config / "ssh" / "dropbear_rsa_host_key")],
                           check=True, capture_output=True, timeout=60)
            env = self.given_env(host)
            (config / "environ.txt").write_text("".join(f"{k}={v}\n" for k, v in env.items()))
            (config / "resource.txt").write_text(
                'SCRATCH_SIZE=0m\nMOUNTS=\nSLOTS={"cpu": "1", "mem": "2147483648"}\n'
                "UNIFIED_DEVICES=[]\nCPU_SHARES=root:1\n")
            (config / "dotfiles.json").write_text("[]")
            labels = self.host_labels.get(host, self.labels)
            if labels is not None:
                (d / "labels.json").write_text(json.dumps(labels))
            with socket.socket(socket.AF_UNIX) as sock:  # the agent.sock mount point
                sock.bind(str(d / "agent.sock"))
            for path in (d, config, config / "ssh", work, *config.rglob("*"), d / "agent.sock"):
                os.chown(path, KERNEL_UID, KERNEL_GID)

    def _mounts(self, host: str) -> list[str]:
        """``-v`` options: the krunner mounts, config, scratch, agent.sock, labels."""
        rt = self.runtime
        assert rt is not None
        runner = rt.runner
        kernel_files = {
            "entrypoint.sh": "entrypoint.sh", "su-exec": "su-exec.x86_64.bin",
            "dropbearmulti": "dropbearmulti.x86_64.bin", "sftp-server": "sftp-server.x86_64.bin",
            "tmux": "tmux.x86_64.bin", "extract_dotfiles.py": "extract_dotfiles.py",
            "fantompass.py": "fantompass.py", "hash_phrase.py": "hash_phrase.py",
            "words.json": "words.json", "libbaihook.so": LIBBAIHOOK,
        }
        site = f"/opt/backend.ai/lib/{rt.python_dir}/site-packages/ai/backend"
        pairs = [(runner / src, f"/opt/kernel/{dst}", "ro") for dst, src in kernel_files.items()]
        pairs += [(rt.krunner_env, "/opt/backend.ai", "ro"),
                  (rt.kernel_pkg, f"{site}/kernel", "ro"),
                  (rt.helpers_pkg, f"{site}/helpers", "ro")]
        d = self.container_dir(host)
        pairs += [(d / "config", "/home/config", "rw"), (d / "work", "/home/work", "rw"),
                  (d / "agent.sock", "/opt/kernel/agent.sock", "rw")]
        if (d / "labels.json").exists():
            pairs.append((d / "labels.json", "/etc/derive-env/labels.json", "ro"))
        return [a for src, dst, mode in pairs for a in ("-v", f"{src}:{dst}:{mode}")]

    def _options(self, host: str) -> list[str]:
        """``docker run`` options of the agent's container config (module docstring)."""
        nofile = _safe_ulimit("nofile", 1048576, 1048576)
        memlock = _safe_ulimit("memlock", -1, -1)
        return ["-t", "-i", "--init", "--stop-signal", "SIGINT",
                "--entrypoint", "/opt/kernel/entrypoint.sh", "--workdir", "/home/work",
                "--cap-add", "IPC_LOCK", "--cap-add", "SYS_NICE",
                "--ulimit", f"nofile={nofile['Soft']}:{nofile['Hard']}",
                "--ulimit", f"memlock={memlock['Soft']}:{memlock['Hard']}",
                "--label", f"ai.backend.session-id={self.session_id}",
                *self._mounts(host)]

    # -- lifecycle -----------------------------------------------------------------------

    def __enter__(self) -> ContainerSession:
        try:
            self.runtime = unpacked()
            self._prepare()
            self.net = self._stack.enter_context(self.engine.network(self.name))
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Stop the sender, remove the containers and the network, then the folder."""
        if self._feeder is not None and self._feeder.poll() is None:
            self._feeder.kill()
            self._feeder.wait(10)
        if self._feeder_out is not None:
            for f in self._feeder_out:
                f.close()
            self._feeder_out = None
        self._stack.close()  # network (and its containers) first, then the folder

    def leftovers(self) -> list[str]:
        """After the ``with`` block: this session's containers, network and folder that are
        still there (empty when all is gone)."""
        found = []
        ps = self.engine.docker("ps", "-a", "--filter", f"name={self.name}", "--format",
                                "{{.Names}}", check=False).stdout.split()
        found += [f"container {n}" for n in ps]
        nets = self.engine.docker("network", "ls", "--filter", f"name={self.name}",
                                  "--format", "{{.Name}}", check=False).stdout.split()
        found += [f"network {n}" for n in nets]
        found += [f"folder {self.tmp}"] if self.tmp.exists() else []
        return found

    def start(self) -> None:
        """Create every container (no barrier between them, as Backend.AI), then send the
        batch command to main1's runner."""
        command = ["/opt/backend.ai/bin/python", "-s", "-m", "ai.backend.kernel", "app"]
        for host in self.layout.hosts:
            cmd = ["sleep", "600"] if host in self.without_sshd else command
            self.engine.run(self.image, self.net, host, *cmd, env=self.given_env(host),
                            options=self._options(host))
        out = tempfile.TemporaryFile()  # noqa: SIM115 - closed by close()
        err = tempfile.TemporaryFile()  # noqa: SIM115
        self._feeder_out = (out, err)
        self._feeder = subprocess.Popen(
            [DOCKER, "exec", self.container("main1"), "/opt/backend.ai/bin/python", "-s",
             "-c", FEEDER, self.batch],
            env=self.engine.env(), stdin=subprocess.DEVNULL, stdout=out, stderr=err)

    def exec(self, host: str, script: str, timeout: float = 30,
             user: str = "root") -> subprocess.CompletedProcess[str]:
        """``sh -c SCRIPT`` in ``host``'s container as ``user`` (a test's look inside)."""
        return self.engine.docker("exec", "-u", user, self.container(host), "sh", "-c", script,
                                  check=False, timeout=timeout)

    def alive(self, host: str, pid: int) -> bool:
        """Process ``pid`` (of the container's PID namespace) runs in ``host`` (not a
        zombie)."""
        done = self.exec(host, f"cat /proc/{pid}/stat")
        return done.returncode == 0 and done.stdout.rsplit(")", 1)[1].split()[0] != "Z"

    def _runner_env(self, host: str) -> dict[str, str] | None:
        # as the kernel user: root in the container lacks CAP_SYS_PTRACE for its environ
        done = self.exec(host, RUNNER_ENV, user=f"{KERNEL_UID}:{KERNEL_GID}")
        if done.returncode != 0:
            return None
        pairs = (item.split("=", 1) for item in done.stdout.split("\0") if "=" in item)
        return {k: v for k, v in pairs}

    def wait(self, timeout: float) -> SessionResult:
        """Wait (at most ``timeout`` s) for the batch command to finish, then collect every
        container's runner environment and log, and stop them (SIGINT, SIGKILL after
        STOP_GRACE_S)."""
        assert self._feeder is not None and self._feeder_out is not None, "start() first"
        timed_out = False
        try:
            self._feeder.wait(timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            self._feeder.kill()
            self._feeder.wait(10)
        out, err = (_read(f) for f in self._feeder_out)
        batch_rc = None
        head, mark, tail = out.rpartition(BATCH_MARK)
        if mark:
            batch_rc, out = int(tail.split()[0]), head.removesuffix("\n")
        containers = {}
        for host in self.layout.hosts:
            runner_env = self._runner_env(host)
            name = self.container(host)
            self.engine.docker("stop", "-t", str(STOP_GRACE_S), name, check=False)
            state = self.engine.docker("inspect", "-f", "{{.State.ExitCode}}", name,
                                       check=False).stdout.strip()
            logs = self.engine.logs(name)
            given = {**self._image_env(), **self.given_env(host), "HOSTNAME": host}
            # main1: the batch command's output as the agent got it, and the log apart
            stdout, stderr, log = (out, err, logs) if host == "main1" else (logs, "", "")
            containers[host] = ContainerRecord(
                host=host, given=given, runner_env=runner_env,
                returncode=int(state) if state.lstrip("-").isdigit() else None,
                stdout=stdout, stderr=stderr, log=log)
        return SessionResult(self.layout, containers, batch_rc, timed_out)

    def _image_env(self) -> dict[str, str]:
        env = json.loads(self.engine.docker("image", "inspect", "-f", "{{json .Config.Env}}",
                                            self.image).stdout)
        return dict(item.split("=", 1) for item in env or [])

    def run(self, timeout: float) -> SessionResult:
        """:meth:`start`, then :meth:`wait` ``timeout`` seconds."""
        self.start()
        return self.wait(timeout)


def _read(f: Any) -> str:
    f.seek(0)
    return f.read().decode("utf-8", errors="replace")


def wait_until(check: Any, timeout: float, what: str) -> None:
    """Poll ``check()`` every 0.2 s until true; AssertionError naming ``what`` after
    ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"{what} not within {timeout}s"
        time.sleep(0.2)
