"""Every line of the source table, by the same two properties (a new manager gets them by
its table line, and by a job builder in tests/support/jobs.py for the second):

* arbitrary text in its variables (and in the files it asks for) gives a topology or a
  ``TopologyError``, never another exception; a topology's ranks are below its counts;
* every node (or process) of a job of random size derives one ``MASTER_ADDR``, the
  ``NODE_RANK`` values 0..n-1 (n the job's node count; process ranks 0..world-1 when the
  job is one process each), and one job digest.

Read through the program's own door, ``topology_from`` with the line forced (as
``--source NAME``) and ``pipeline.derive``, so they hold whatever module reads the line.
The variables fuzzed are the line's own (``detect``, ``states``, ``counts``, ``unless``)
and every other one its reader looks up, found by a probe of what it reads.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Mapping

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from derive_env.digest import digest_of, facts_of
from derive_env.errors import TopologyError
from derive_env.pipeline import derive
from derive_env.sources import BY_NAME, SOURCE_NAMES, states_of
from derive_env.sources.compose import topology_from
from derive_env.topology import ClusterTopology
from support.jobs import JOBS

TEXT = st.text(st.characters(codec="utf-8"), max_size=12) | st.sampled_from(
    ["0", "1", "2", "3", "-1", "01", "1(x2)", "a,b", "n1", "n[1-3]", "::1", "10.0.0.1",
     "99999999999999999999", "", " ", "{}", "[]", '{"a": 1}'])
FILE = st.none() | st.text(st.characters(codec="utf-8"), max_size=60) | st.sampled_from(
    ["n1\nn2\n", "n1 2\nn2 2\n", "{}", '{"hosts": ["a", "b"]}', "\n"])
SETTINGS = settings(max_examples=60, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


class _Probe(dict):
    """An environment that records every variable name looked up in it."""

    def __init__(self, values: Mapping[str, str], seen: set[str]) -> None:
        super().__init__(values)
        self.seen = seen

    def __getitem__(self, key: str) -> str:
        self.seen.add(key)
        return super().__getitem__(key)

    def get(self, key, default=None):
        self.seen.add(key)
        return super().get(key, default)

    def __contains__(self, key: object) -> bool:
        if isinstance(key, str):
            self.seen.add(key)
        return super().__contains__(key)


def _own(name: str) -> set[str]:
    """The variables the table names for the line."""
    line = BY_NAME[name]
    named = {v for v in (line.roles or {}).values()
             if isinstance(v, str) and re.fullmatch(r"[A-Z_][A-Z0-9_]*", v)}
    return {*line.detect, *(v for v, _ in states_of(line)), *line.counts, *line.unless, *named}


def _looked_up(environ: Mapping[str, str], choice: str) -> set[str]:
    seen: set[str] = set()
    with contextlib.suppress(TopologyError):
        topology_from(_Probe(environ, seen), choice, lambda paths: dict.fromkeys(paths, "n1\n"))
    return seen


#: What detection and the refusals look up in any environment (every line's variables).
_EVERYWHERE = _looked_up({}, "auto")


def variables_of(name: str) -> list[str]:
    """The line's variables, and every other one read when the line is read (probed with
    its variables set to a few values, all alike and one at a time), but the lookups
    every environment gets."""
    own = sorted(_own(name))
    probes = [dict.fromkeys(own, value) for value in ("1", "0", "2", "x", "n1,n2")]
    probes += [{**dict.fromkeys(own, "2"), variable: value}
               for variable in own for value in ("0", "1", "4")]
    seen = set().union(*(_looked_up(probe, name) for probe in probes))
    return sorted(_own(name) | (seen - _EVERYWHERE - {"DERIVE_ENV_SOURCE"}))


@pytest.mark.parametrize("name", SOURCE_NAMES)
def test_arbitrary_text_gives_a_topology_or_a_topology_error(name: str) -> None:
    names = variables_of(name)

    @SETTINGS
    @given(values=st.fixed_dictionaries({n: st.none() | TEXT for n in names}),
           data=st.data())
    def check(values: dict[str, str | None], data: st.DataObject) -> None:
        env = {k: v for k, v in values.items() if v is not None}
        files: dict[str, str | None] = {}

        def read(paths):
            for path in paths:
                if path not in files:
                    files[path] = data.draw(FILE, label=path)
            return {p: files[p] for p in paths}

        try:
            topology = topology_from(env, name, read)
        except TopologyError:
            return
        assert isinstance(topology, ClusterTopology)
        if topology.node_rank is not None and topology.num_nodes is not None:
            assert 0 <= topology.node_rank < topology.num_nodes
        if topology.processes is not None:
            assert 0 <= topology.processes.rank < topology.processes.world_size

    check()


LABELS = {"ai.backend.distributed.frameworks": "pytorch"}


#: Lines whose jobs no builder of tests/support/jobs.py makes yet: their own property tests
#: in tests/sources/ and tests/properties/ hold the agreement. The list must only shrink.
WITHOUT_BUILDER = frozenset({
    "torchrun", "openmpi", "mvapich2", "hydra", "pals", "slurm-allocation", "kubeflow-elastic",
    "kubeflow-pytorchjob-classic", "jsrun", "jobset", "sagemaker", "aws-batch",
    "sagemaker-platform", "vertex", "gke-tpu", "determined", "kubeflow-jax", "kubeflow-jaxjob",
    "kubeflow-xgboost", "pbs", "torque-task", "lsf", "gridengine", "mpi-operator-launcher",
    "ray-train"})


def test_every_line_has_a_builder_or_is_listed_without_one() -> None:
    assert set(SOURCE_NAMES) - set(JOBS) == WITHOUT_BUILDER


@pytest.mark.parametrize("name", sorted(JOBS))
def test_every_node_of_a_job_derives_one_job(name: str) -> None:

    @SETTINGS
    @given(job=JOBS[name])
    def check(job: list[tuple[dict[str, str], dict[str, str | None]]]) -> None:
        masters, digests, ranks, counts, processes = set(), set(), set(), set(), []
        run_ids = set()
        for env, files in job:
            derivation = derive(env, LABELS, files=lambda paths, f=files: {
                p: f.get(p) for p in paths})
            assert derivation is not None
            topology = derivation.topology
            assert topology.source == name
            derived = {v.name: v.value for v in derivation.variables}
            masters.add(derived.get("MASTER_ADDR") or env.get("MASTER_ADDR"))
            digests.add(digest_of(facts_of(topology, derivation)))
            # the node rank the frameworks get: derived, a launcher's own, or the topology's
            ranks.add(derived.get("NODE_RANK") or env.get("NODE_RANK")
                      or (None if topology.node_rank is None else str(topology.node_rank)))
            counts.add(topology.num_nodes)
            run_ids.add(derived.get("DERIVE_ENV_RUN_ID"))
            if topology.processes is not None:
                processes.append((topology.processes.rank, topology.processes.world_size))
        assert len(masters) == 1 and None not in masters
        assert len(digests) == 1
        assert len(run_ids) == 1 and None not in run_ids  # one run id, derived from the job
        (count,) = counts
        if ranks != {None}:  # a launcher that states only its processes: their ranks below
            assert ranks == {str(rank) for rank in range(count)}
        if len(processes) == len(job):  # one process each: ranks 0..world-1, once each
            assert sorted(processes) == [(r, len(job)) for r in range(len(job))]

    check()


def test_every_builder_is_a_line_of_the_table() -> None:
    assert set(JOBS) <= set(SOURCE_NAMES)
