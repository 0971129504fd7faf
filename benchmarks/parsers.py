"""Cost of each parser at 1 MiB of input, against 256 KiB (issue 15, item 7).

No input may give a traceback, a hang or super-linear cost. Every parser that reads a value
a manager, an operator or an image can make is fed a hostile input of 256 KiB and of 1 MiB
(the bound of every file derive-env reads, ``cli.MAX_INPUT_BYTES``; a variable can be as
large, the kernel's limit being 128 KiB per string only at exec), and timed in process
(``time.process_time``, best of ``--repeat``, so a shared machine's load matters little).
Linear cost makes the ratio 4; a quadratic one 16. A parser may refuse its input (the
hostile ones are refused, with a :class:`derive_env.errors.DeriveEnvError` or the pure
parsers' ``ValueError``): the time to say so is what is measured. Any other exception is
a bug and stops the benchmark.

Cases (the inputs, ``n`` bytes each):

* label values: ``tensorflow-roles`` of ``r0:worker,r1:worker,...`` (all distinct, valid);
  ``frameworks`` of ``pytorch,pytorch,...``; both through ``ImagePolicy.from_labels``;
* a labels file: a JSON object of many image labels that are not derive-env's (each one
  goes through the near-miss check), ``labels.parse_labels_document``;
* Slurm host lists (``expand_hostlist``): plain names ``n1,n2,...``; one bracket of many
  items ``n[1,2,...]``; many bracket groups in one name ``a[1]a[1]...``; the tasks per node
  ``1(x2),1(x2),...`` (``expand_tasks_per_node``);
* a Backend.AI host list: ``check_hosts`` and ``repeated_host`` over ``c1,c2,...``; and a
  whole derivation (``pipeline.derive``, PyTorch) of a session whose HOSTS is that large;
* a Slurm hostfile of ``srun -m arbitrary`` (``expand_hostfile``): one name a line;
* env files (``cli.envfile.parse_env_file``): dotenv lines, NUL-separated entries, and
  ``docker inspect`` JSON;
* a user-set TF_CONFIG compared with the derived one (``merge.same_value``): a cluster of
  many workers.

Usage::

    python benchmarks/parsers.py [--repeat 3] [--json] [--check]

Exit status 0; with ``--check``, 1 when a case's 1 MiB / 256 KiB ratio is above
:data:`LIMIT` (linear: 4); 2 when a parser raised something else than a refusal.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

SMALL, LARGE = 256 * 1024, 1024 * 1024
#: The most a 4-fold input may cost, 4-fold being linear; generous, for a shared machine.
LIMIT = 10.0  # linear is 4, quadratic 16: room for a shared machine's noise


def _fill(unit: Callable[[int], str], size: int, sep: str = ",") -> str:
    """``unit(0) + sep + unit(1) + ...``, cut to ``size`` characters at a separator."""
    parts, total, i = [], 0, 0
    while total < size:
        part = unit(i)
        parts.append(part)
        total += len(part) + len(sep)
        i += 1
    return sep.join(parts)[:size].rpartition(sep)[0] or unit(0)


def _policy(label: str, value: str) -> None:
    from derive_env.labels import PREFIX
    from derive_env.policy import ImagePolicy

    ImagePolicy.from_labels({PREFIX + "frameworks": "pytorch", PREFIX + label: value})


def _labels_file(size: int) -> str:
    text = _fill(lambda i: f'"org.example.image.label-{i}": "v{i}"', size - 2)
    return "{" + text + "}"


def _tf_configs(size: int) -> tuple[str, str]:
    workers = _fill(lambda i: f'"worker{i}:2222"', size - 64).split(",")
    cluster = {"worker": [w.strip('"') for w in workers]}
    user = json.dumps({"cluster": cluster, "task": {"type": "worker", "index": 1}})
    derived = json.dumps({"cluster": cluster, "task": {"type": "worker", "index": 1}},
                         separators=(",", ":"))
    return user, derived


def _backendai(size: int) -> dict[str, str]:
    """A Backend.AI container's variables whose HOSTS is ``size`` bytes: main1, sub1..."""
    hosts = ["main1", *_fill(lambda i: f"sub{i + 1}", size - 6).split(",")]
    return {"BACKENDAI_CLUSTER_SIZE": str(len(hosts)), "BACKENDAI_CLUSTER_HOSTS": ",".join(hosts),
            "BACKENDAI_CLUSTER_HOST": "sub5", "BACKENDAI_CLUSTER_ROLE": "sub",
            "BACKENDAI_CLUSTER_IDX": "5", "BACKENDAI_CLUSTER_LOCAL_RANK": "5",
            "BACKENDAI_CLUSTER_REPLICAS": f"main:1,sub:{len(hosts) - 1}"}


def _derive(environ: object) -> object:
    from derive_env.labels import PREFIX
    from derive_env.pipeline import derive

    return derive(environ, {PREFIX + "frameworks": "pytorch"})  # type: ignore[arg-type]


def cases() -> dict[str, tuple[Callable[[int], object], Callable[[object], object]]]:
    """name -> (make the input of n bytes, parse it)."""
    from derive_env.cli.envfile import parse_env_file
    from derive_env.hosts import check_hosts, host_problem, repeated_host
    from derive_env.labels import parse_labels_document
    from derive_env.merge import same_value
    from derive_env.sources.managers import slurm_hostlist as grammar

    def hosts_check(value: object) -> object:
        hosts = str(value).split(",")
        return check_hosts(hosts), repeated_host(hosts)

    def tf_same(value: object) -> object:
        user, derived = value  # type: ignore[misc]
        return same_value("json", user, derived)

    return {
        "label tensorflow-roles": (lambda n: _fill(lambda i: f"r{i}:worker", n),
                                   lambda v: _policy("tensorflow-roles", str(v))),
        "label frameworks": (lambda n: _fill(lambda i: "pytorch", n),
                             lambda v: _policy("frameworks", str(v))),
        "labels file": (_labels_file, lambda v: parse_labels_document(str(v), "labels.json")),
        "slurm host list, names": (lambda n: _fill(lambda i: f"n{i}", n),
                                   lambda v: grammar.expand_hostlist(str(v))),
        "slurm host list, one bracket": (
            lambda n: "n[" + _fill(lambda i: str(i % 60000), n - 3) + "]",
            lambda v: grammar.expand_hostlist(str(v))),
        "slurm host list, bracket groups": (lambda n: "a[1]" * (n // 4),
                                            lambda v: grammar.expand_hostlist(str(v))),
        "slurm host list, brackets unclosed": (lambda n: "a[" * (n // 2),
                                               lambda v: grammar.expand_hostlist(str(v))),
        "slurm tasks per node": (lambda n: _fill(lambda i: "1(x2)", n),
                                 lambda v: grammar.expand_tasks_per_node(str(v))),
        "slurm hostfile": (lambda n: _fill(lambda i: f"node{i % 5000}", n, "\n"),
                           lambda v: grammar.expand_hostfile(str(v), host_problem)),
        "backend.ai host list": (lambda n: _fill(lambda i: f"c{i}", n), hosts_check),
        "backend.ai session, whole derivation": (_backendai, _derive),
        "env file, dotenv lines": (lambda n: _fill(lambda i: f"VAR_{i}=value {i}", n, "\n"),
                                   lambda v: parse_env_file(str(v), "env")),
        "env file, NUL entries": (lambda n: _fill(lambda i: f"VAR_{i}=v\n{i}", n, "\0") + "\0",
                                  lambda v: parse_env_file(str(v), "env")),
        "env file, docker inspect": (
            lambda n: '[{"Config": {"Env": [' + _fill(lambda i: f'"VAR_{i}=v{i}"', n - 30)
            + "]}}]", lambda v: parse_env_file(str(v), "inspect.json")),
        "TF_CONFIG": (_tf_configs, tf_same),
    }


def measure(repeat: int = 3, only: str | None = None) -> dict[str, dict[str, float]]:
    """Each case's best CPU time at 256 KiB and 1 MiB, and their ratio.

    :raises RuntimeError: a parser raised something else than a refusal.
    """
    from derive_env.errors import DeriveEnvError

    results = {}
    for name, (make, parse) in cases().items():
        if only is not None and only not in name:
            continue
        seconds = []
        for size in (SMALL, LARGE):
            data = make(size)
            best = float("inf")
            for _ in range(repeat):
                start = time.process_time()
                try:
                    parse(data)
                except (ValueError, DeriveEnvError):
                    pass  # a refusal: what it costs to say so is measured
                except Exception as exc:
                    raise RuntimeError(f"{name}: {type(exc).__name__}: {exc}") from None
                best = min(best, time.process_time() - start)
            seconds.append(best)
        small, large = seconds
        results[name] = {"256KiB_s": small, "1MiB_s": large,
                         "ratio": large / max(small, 1e-4)}
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--check", action="store_true")
    args = parser.parse_args(argv)
    try:
        results = measure(args.repeat)
    except RuntimeError as exc:
        print(f"parsers.py: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(results, indent=2))
    else:
        print(f"{'parser':<36} {'256 KiB':>9} {'1 MiB':>9} {'ratio':>6}")
        for name, row in results.items():
            print(f"{name:<36} {row['256KiB_s'] * 1000:>7.1f}ms {row['1MiB_s'] * 1000:>7.1f}ms "
                  f"{row['ratio']:>6.1f}")
    missed = [name for name, row in results.items() if row["ratio"] > LIMIT]
    if args.check and missed:
        print(f"parsers.py: above {LIMIT}: {', '.join(missed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
