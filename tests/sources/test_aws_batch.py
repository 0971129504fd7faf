"""The AWS Batch source (sources/managers/aws_batch.py): a node of a multi-node parallel (MNP) job.

No emulator exists: the nodes' variables are TYPED from AWS's own documents and samples:

- awsdocs/aws-batch-user-guide ``doc_source/multi-node-parallel-jobs.md`` ("Environment
  Variables"): ``AWS_BATCH_JOB_NUM_NODES``, ``AWS_BATCH_JOB_NODE_INDEX`` (0-based, unique),
  ``AWS_BATCH_JOB_MAIN_NODE_INDEX``, and ``AWS_BATCH_JOB_MAIN_NODE_PRIVATE_IPV4_ADDRESS`` "only
  set in multi-node parallel job child nodes (it is not present on the main node)"; nodes
  "are addressed using #N notation" (``<job id>#2``); each container gets its own network
  interface and primary private IP (``awsvpc``);
- AWS's sample ``mpi-run.sh`` ("Copyright 2019 Amazon.com", copies in the index; its
  ``report_to_master``): children read the main node's IP from the variable, the main node
  has none and writes its own ``eth0`` address into the hostfile;
- aws/aws-parallelcluster ``docs/tutorials/code_samples/batch_mpi/submit_mpi.sh`` (a copy:
  CMASCenter/pcluster-cmaq ``submit_mpi.sh``): ``AWS_BATCH_JOB_NODE_INDEX -eq
  AWS_BATCH_JOB_MAIN_NODE_INDEX`` for the main node, ``${AWS_BATCH_JOB_ID%#*}`` for the job;
- user scripts in the index: ``AWS_BATCH_JOB_MAIN_NODE_PRIVATE_IPV4_ADDRESS=$(hostname -i)``
  exported on the main node (a NeMo fine-tuning script), ``${AWS_BATCH_JOB_ID%%#*}`` ("In
  multi-node Batch jobs, AWS_BATCH_JOB_ID includes "#<node_index>" suffix").

The main node's routes are those of an ``awsvpc`` task: ``eth0`` (the ENI, default route via
the subnet's router) and ``ecs-eth0`` (the link-local task metadata network, 169.254.172.0/22).
"""

from __future__ import annotations

import ipaddress

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from derive_env.digest import digest_of, facts_of
from derive_env.errors import TopologyError
from derive_env.hostnet import own_address
from derive_env.labels import PREFIX
from derive_env.pipeline import derive
from derive_env.sources import BY_NAME, seen_sources
from derive_env.sources.compose import topology_from
from derive_env.sources.managers import aws_batch
from derive_env.sources.report import Report

JOB = "b5a37a8f-1a22-4a1d-9a36-3b1e0a6a7c3d"
FIX = ("AWS Batch sets it in every node of a multi-node parallel job (AWS Batch User Guide, "
       "\"Environment variables\" of multi-node parallel jobs); do not set it by hand")
ALL = {PREFIX + "frameworks": "pytorch,jax"}


def _hex(address: str) -> str:
    """An IPv4 address as /proc/net/route prints it (host-order hex)."""
    return int(ipaddress.IPv4Address(address)).to_bytes(4, "little").hex().upper()


def routes(*lines: tuple[str, str, str, int, str]) -> str:
    """``/proc/net/route``: (interface, destination, gateway, flags, mask) per line."""
    head = ("Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow"
            "\tIRTT\n")
    return head + "".join(f"{i}\t{_hex(d)}\t{_hex(g)}\t{f:04X}\t0\t0\t0\t{_hex(m)}\t0\t0\t0\n"
                          for i, d, g, f, m in lines)


def fib_trie(*own: str) -> str:
    """``/proc/net/fib_trie``'s local table: loopback and ``own`` as ``/32 host LOCAL``."""
    leaves = "".join(f"     |-- {a}\n        /32 host LOCAL\n" for a in ("127.0.0.1", *own))
    return f"Local:\n  +-- 0.0.0.0/0 3 0 5\n{leaves}"


# awsvpc mode (multi-node-parallel-jobs.md, "Compute Environment Considerations": "Each
# multi-node parallel job container gets its own elastic network interface, a primary private
# IP address"): eth0 the ENI, ecs-eth0 the task metadata link (excluded by the mpiexec
# samples' "--mca btl_tcp_if_exclude lo,ecs-eth0", AWS's MPI entrypoint.sh sample).
def awsvpc(address: str, router: str = "10.0.0.1", prefix: str = "10.0.0.0",
           mask: str = "255.255.240.0") -> dict[str, str]:
    """The files of an awsvpc task whose ENI has ``address`` (a /20 by default)."""
    return {aws_batch.ROUTES: routes(("eth0", "0.0.0.0", router, 3, "0.0.0.0"),
                                     ("eth0", prefix, "0.0.0.0", 1, mask),
                                     ("ecs-eth0", "169.254.172.0", "0.0.0.0", 1,
                                      "255.255.252.0")),
            aws_batch.LOCAL: fib_trie(address, "169.254.172.2")}


# multi-node-parallel-jobs.md "Environment Variables" (the four MNP variables, the address on
# children only), "#N notation" (AWS_BATCH_JOB_ID), job_env_vars.md (AWS_BATCH_JOB_ATTEMPT,
# AWS_BATCH_CE_NAME, AWS_BATCH_JQ_NAME in every Batch container).
def node(index: int, count: int, main: int = 0, main_ip: str = "10.0.1.17",
         suffix: bool = True) -> dict[str, str]:
    """What AWS Batch sets in node ``index`` of a ``count``-node job (module docstring): the
    main node's address on children only."""
    environ = {"AWS_BATCH_JOB_ID": f"{JOB}#{index}" if suffix else JOB,
               "AWS_BATCH_JOB_NUM_NODES": str(count), "AWS_BATCH_JOB_NODE_INDEX": str(index),
               "AWS_BATCH_JOB_MAIN_NODE_INDEX": str(main), "AWS_BATCH_JOB_ATTEMPT": "1",
               "AWS_BATCH_CE_NAME": "mnp-ce", "AWS_BATCH_JQ_NAME": "mnp-queue"}
    if index != main:
        environ[aws_batch.MAIN_ADDRESS] = main_ip
    return environ


def read(environ: dict[str, str], files: dict[str, str | None] | None = None) -> Report:
    return aws_batch.read(environ, BY_NAME["aws-batch"], files)


def reader(files: dict[str, str]):
    return lambda paths: {path: files.get(path) for path in paths}


# -- the main node and the children: one job --------------------------------------------------


def test_a_child_reads_the_main_nodes_address() -> None:
    report = read(node(2, 4))
    assert (report.num_nodes, report.node_rank, report.master) == (4, 2, "10.0.1.17")
    assert (report.session_id, report.job) == (JOB, ("aws-batch", JOB, "4"))
    assert report.inputs["master"] == ("AWS_BATCH_JOB_MAIN_NODE_PRIVATE_IPV4_ADDRESS",)
    assert report.nodes == ()


def test_the_main_node_uses_its_default_routes_source_address() -> None:
    """Not loopback, not the link-local metadata address: the ENI's, which children get."""
    report = read(node(0, 4), awsvpc("10.0.1.17"))
    assert (report.node_rank, report.master) == (0, "10.0.1.17")
    assert report.inputs["master"] == ("/proc/net/route", "/proc/net/fib_trie")
    assert report.notes[1] == (
        "this is the main node: master = its own address, the source address of the default "
        "route (via eth0) (AWS Batch gives it to the child nodes as "
        "AWS_BATCH_JOB_MAIN_NODE_PRIVATE_IPV4_ADDRESS)")


def test_files_are_asked_on_the_main_node_only() -> None:
    assert aws_batch.files_needed(node(0, 4), "aws-batch") == (
        "/proc/net/route", "/proc/net/fib_trie")
    assert aws_batch.files_needed(node(1, 4), "aws-batch") == ()
    assert aws_batch.files_needed(node(0, 1), "aws-batch") == ()
    by_hand = {**node(0, 4), aws_batch.MAIN_ADDRESS: "10.0.1.17"}
    assert aws_batch.files_needed(by_hand, "aws-batch") == ("/proc/net/fib_trie",)


@pytest.mark.parametrize("main", [0, 2, 3])
def test_node_ranks_start_at_the_main_node(main: int) -> None:
    """The main node need not be node 0: ranks = the main node, then node-index order."""
    ranks = []
    for index in range(4):
        files = awsvpc("10.0.1.17") if index == main else None
        ranks.append(read(node(index, 4, main), files).node_rank)
    assert ranks == [(i - main) % 4 for i in range(4)]
    assert ranks[main] == 0


def test_main_and_children_derive_one_digest() -> None:
    """The asymmetric views (the address on children only) give one job: same master,
    ports and digest on every node."""
    derivations = [derive(node(i, 3, 1), ALL, files=reader(awsvpc("10.0.1.17")))
                   for i in range(3)]
    assert [d.topology.node_rank for d in derivations] == [2, 0, 1]
    assert {d.topology.master_addr for d in derivations} == {"10.0.1.17"}
    assert len({digest_of(facts_of(d.topology, d)) for d in derivations}) == 1
    assert derivations[1].changes()["MASTER_ADDR"] == "10.0.1.17"
    assert derivations[0].changes()["NODE_RANK"] == "2"


def test_the_job_id_without_the_node_suffix_is_the_session() -> None:
    assert read(node(1, 2, suffix=False)).session_id == JOB
    with pytest.raises(TopologyError) as info:
        read({**node(1, 2), "AWS_BATCH_JOB_ID": f"{JOB}#0"})
    assert str(info.value) == (
        f"AWS_BATCH_JOB_ID='{JOB}#0': expected <job id> or <job id>#1 (this node's "
        "AWS_BATCH_JOB_NODE_INDEX): AWS Batch addresses a node of a multi-node parallel job "
        f"as <job id>#<node index>; {FIX}")


def test_tf_config_is_refused_with_the_reason() -> None:
    with pytest.raises(TopologyError) as info:
        derive(node(1, 2), {PREFIX + "frameworks": "tensorflow"})
    assert str(info.value).startswith(
        "TF_CONFIG cannot be built: it lists every task's host:port, and no source states "
        "the hosts of every node.")
    assert read(node(1, 2)).notes[-1] == (
        "no host list (AWS Batch states none): TF_CONFIG cannot be built")


def test_a_job_of_one_node_needs_no_address() -> None:
    topology = topology_from(node(0, 1), files=reader({}))
    assert (topology.num_nodes, topology.node_rank, topology.multi_node) == (1, 0, False)


# -- the main node's address: found, given by hand, or refused with what to set ---------------


def test_an_address_exported_by_hand_on_the_main_node_is_used_when_it_is_its_own() -> None:
    environ = {**node(0, 2), aws_batch.MAIN_ADDRESS: "10.0.1.17"}
    assert read(environ).master == "10.0.1.17"
    assert read(environ, {aws_batch.LOCAL: fib_trie("10.0.1.17")}).master == "10.0.1.17"
    with pytest.raises(TopologyError) as info:
        read(environ, {aws_batch.LOCAL: fib_trie("10.0.9.9")})
    assert str(info.value) == (
        "AWS_BATCH_JOB_MAIN_NODE_PRIVATE_IPV4_ADDRESS='10.0.1.17': expected one of this main "
        "node's own addresses (10.0.9.9; /proc/net/fib_trie): AWS Batch sets it on child "
        "nodes only, so here it was exported by hand, and the child nodes would connect to "
        "another host")


MAIN_REFUSED = (
    "AWS Batch multi-node parallel job, main node (AWS_BATCH_JOB_NODE_INDEX = "
    "AWS_BATCH_JOB_MAIN_NODE_INDEX = '0'): AWS Batch gives the main node's address to the "
    "child nodes only, and its own address cannot be told: {}. Export "
    "AWS_BATCH_JOB_MAIN_NODE_PRIVATE_IPV4_ADDRESS on the main node to its private IPv4 "
    "address (the address the child nodes get: AWS_BATCH_JOB_MAIN_NODE_PRIVATE_IPV4_ADDRESS="
    "$(hostname -i) derive-env ...)")


@pytest.mark.parametrize(("files", "why"), [
    ({}, "/proc/net/route and /proc/net/fib_trie cannot be read here"),
    ({aws_batch.ROUTES: routes(("eth0", "10.0.0.0", "0.0.0.0", 1, "255.255.240.0")),
      aws_batch.LOCAL: fib_trie("10.0.1.17")}, "no default route in /proc/net/route"),
    ({aws_batch.ROUTES: routes(("eth0", "0.0.0.0", "10.0.0.1", 3, "0.0.0.0"),
                               ("eth0", "10.0.0.0", "0.0.0.0", 1, "255.255.240.0")),
      aws_batch.LOCAL: fib_trie()},
     "the default route's interface eth0 has 0 own addresses on its subnets (none; "
     "/proc/net/route, /proc/net/fib_trie)"),
], ids=["unreadable", "no-default-route", "only-loopback"])
def test_the_main_node_without_its_address_is_refused_naming_what_to_set(files, why) -> None:
    with pytest.raises(TopologyError) as info:
        read(node(0, 2), files)
    assert str(info.value) == MAIN_REFUSED.format(why)


# -- a child's variables -------------------------------------------------------------------


@pytest.mark.parametrize(("change", "message"), [
    ({aws_batch.MAIN_ADDRESS: ""},
     "AWS_BATCH_JOB_MAIN_NODE_PRIVATE_IPV4_ADDRESS='': expected the main node's private IPv4 "
     "address: this is child node 1 (AWS_BATCH_JOB_MAIN_NODE_INDEX=0), where AWS Batch sets "
     f"it; {FIX}"),
    ({aws_batch.MAIN_ADDRESS: "ip-10-0-1-17"},
     "AWS_BATCH_JOB_MAIN_NODE_PRIVATE_IPV4_ADDRESS='ip-10-0-1-17': expected an IPv4 address "
     f"(the main node's private IPv4 address); {FIX}"),
    ({aws_batch.MAIN_ADDRESS: "127.0.0.1"},
     "AWS_BATCH_JOB_MAIN_NODE_PRIVATE_IPV4_ADDRESS='127.0.0.1': expected the main node's "
     "private IPv4 address, not a loopback one: the child nodes connect to it"),
    ({"AWS_BATCH_JOB_NODE_INDEX": "2", "AWS_BATCH_JOB_ID": f"{JOB}#2"},
     "AWS_BATCH_JOB_NODE_INDEX='2': expected a node rank below AWS_BATCH_JOB_NUM_NODES='2'"
     f": {FIX}"),
    ({"AWS_BATCH_JOB_MAIN_NODE_INDEX": "5"},
     "AWS_BATCH_JOB_MAIN_NODE_INDEX='5': expected an index below AWS_BATCH_JOB_NUM_NODES='2'"
     f": {FIX}"),
    ({"AWS_BATCH_JOB_NUM_NODES": "two"},
     "AWS_BATCH_JOB_NUM_NODES='two': expected an integer >= 1 (the node count)"),
], ids=["missing", "name", "loopback", "index", "main-index", "count"])
def test_bad_variables_name_the_variable_value_and_fix(change, message) -> None:
    with pytest.raises(TopologyError) as info:
        read({**node(1, 2), **change})
    assert str(info.value) == message


def test_seen_with_its_four_variables_only() -> None:
    """A single-node Batch job (AWS_BATCH_JOB_ID alone) is not this source."""
    assert [s.name for s in seen_sources(node(1, 2))] == ["aws-batch"]
    assert seen_sources({"AWS_BATCH_JOB_ID": JOB, "AWS_BATCH_JOB_ATTEMPT": "1"}) == []
    assert topology_from({"AWS_BATCH_JOB_ID": JOB}).num_nodes == 1


# -- properties ---------------------------------------------------------------------------

OCTET = st.integers(1, 254)


@settings(max_examples=60, deadline=None)
@given(count=st.integers(2, 64), data=st.data(),
       frameworks=st.sampled_from(["pytorch", "jax", "pytorch,jax"]),
       address=st.tuples(OCTET, OCTET).map(lambda o: f"10.0.{o[0] % 16}.{o[1]}"))
def test_every_node_of_a_job_derives_one_job(count: int, data, frameworks: str,
                                             address: str) -> None:
    main = data.draw(st.integers(0, count - 1))
    derivations = [derive(node(i, count, main, address), {PREFIX + "frameworks": frameworks},
                          files=reader(awsvpc(address))) for i in range(count)]
    topologies = [d.topology for d in derivations]
    assert sorted(t.node_rank for t in topologies) == list(range(count))
    assert topologies[main].node_rank == 0
    assert {t.master_addr for t in topologies} == {address}
    assert len({digest_of(facts_of(d.topology, d)) for d in derivations}) == 1
    ports = {tuple(v.value for v in d.variables if v.name.endswith("PORT")) for d in derivations}
    assert len(ports) == 1
    assert all(t.multi_node for t in topologies)


TEXT = st.text(st.characters(codec="utf-8"), max_size=16) | st.sampled_from(
    ["0", "1", "2", "3", "-1", "01", "10.0.1.17", "127.0.0.1", "::1", "j#1", "j#0", ""])
NAMES = ["AWS_BATCH_JOB_ID", "AWS_BATCH_JOB_NUM_NODES", "AWS_BATCH_JOB_NODE_INDEX",
         "AWS_BATCH_JOB_MAIN_NODE_INDEX", aws_batch.MAIN_ADDRESS]
HEX = st.text(alphabet="0123456789ABCDEFx-", max_size=12)
ROUTE_TEXT = st.lists(st.tuples(st.sampled_from(["eth0", "lo", "ecs-eth0"]), HEX, HEX, HEX,
                                HEX, HEX), max_size=4).map(
    lambda rows: "Iface\tDestination\n" + "".join(
        f"{i}\t{d}\t{g}\t{f}\t0\t0\t{m}\t{k}\n" for i, d, g, f, m, k in rows))
FILE_TEXT = st.none() | st.text(max_size=200) | ROUTE_TEXT | st.sampled_from(
    [awsvpc("10.0.1.17")[aws_batch.ROUTES], awsvpc("10.0.1.17")[aws_batch.LOCAL]])


@settings(max_examples=300, deadline=None)
@given(values=st.fixed_dictionaries({n: TEXT for n in NAMES}),
       files=st.fixed_dictionaries({aws_batch.ROUTES: FILE_TEXT, aws_batch.LOCAL: FILE_TEXT}))
def test_arbitrary_text_gives_a_report_or_a_topology_error(values, files) -> None:
    try:
        report = read(values, files)
    except TopologyError:
        return
    assert 0 <= report.node_rank < report.num_nodes
    if report.num_nodes > 1:
        assert report.master is not None
        assert not ipaddress.IPv4Address(report.master).is_loopback


@settings(max_examples=100, deadline=None)
@given(count=st.integers(2, 64), data=st.data(), drop=st.booleans())
def test_no_job_of_more_than_one_node_derives_one_node(count: int, data, drop: bool) -> None:
    """Main or child, with or without the address and the route files: read as a job of
    ``count`` nodes, or refused (exit 3): never a single node with exit 0."""
    index = data.draw(st.integers(0, count - 1))
    main = data.draw(st.integers(0, count - 1))
    environ = node(index, count, main)
    if drop:
        environ.pop(aws_batch.MAIN_ADDRESS, None)
    files = data.draw(st.sampled_from([{}, awsvpc("10.0.1.17")]))
    try:
        derivation = derive(environ, ALL, files=reader(files))
    except TopologyError as exc:
        assert exc.exit_code == 3
        return
    assert derivation is not None
    assert (derivation.topology.num_nodes, derivation.topology.multi_node) == (count, True)


@settings(max_examples=300, deadline=None)
@given(route=ROUTE_TEXT | st.text(max_size=200), trie=st.text(max_size=200) | st.sampled_from(
    [fib_trie("10.0.1.17"), fib_trie("999.1.1.1"), fib_trie()]))
def test_any_route_and_address_text_gives_an_address_or_the_reason(route, trie) -> None:
    """The main node's tables, however malformed: an own, non-loopback address or why not."""
    address, how = own_address(route, trie)
    assert how
    if address is not None:
        assert not ipaddress.IPv4Address(address).is_loopback
