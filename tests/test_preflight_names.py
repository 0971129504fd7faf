"""``derive-env check`` in a Backend.AI session: a name that may reach another session's
container (every Backend.AI session on a project's persistent network registers the same
main1, sub1 ... aliases: lablup/backend.ai#14133) fails the ``peers`` check, saying why
(hostnet.name_problems; preflight.check_peers; cli/check.py passes the subnets only when
the source is Backend.AI)."""

from __future__ import annotations

import ipaddress

from derive_env.hostnet import name_problem, name_problems
from derive_env.preflight import check_peers, failed, passed

SUBNETS = [ipaddress.ip_network("10.20.0.0/24")]
SHARED = ("sub1 resolves main1 to 2 addresses (10.20.0.5, 10.20.0.9): several containers "
          "answer to that name, as when Backend.AI sessions share a project's persistent "
          "network and each registers the same main1, sub1 ... names, so gloo and NCCL may "
          "reach another Backend.AI session's container; start the Backend.AI session on a "
          "network of its own")
OUTSIDE = ("sub1 resolves main1 to 172.30.0.5, outside this container's subnets "
           "(10.20.0.0/24): not a container of this Backend.AI session's network")


def test_two_addresses_of_one_family() -> None:
    assert name_problem("main1", "sub1", ("10.20.0.5", "10.20.0.9"), SUBNETS) == SHARED


def test_one_address_per_family_is_fine() -> None:
    """A dual-stack container: one IPv4 and one IPv6 address, inside the subnets."""
    subnets = [*SUBNETS, ipaddress.ip_network("fd00:20::/64")]
    assert name_problem("main1", "sub1", ("10.20.0.5", "fd00:20::5"), subnets) is None


def test_outside_the_sessions_subnets() -> None:
    assert name_problem("main1", "sub1", ("172.30.0.5",), SUBNETS) == OUTSIDE


def test_unknown_subnets_or_unresolved_name_are_left_to_the_other_checks() -> None:
    assert name_problem("main1", "sub1", ("172.30.0.5",), []) is None
    assert name_problem("main1", "sub1", (), SUBNETS) is None


def test_check_peers_fails_with_the_reason_in_a_backendai_session() -> None:
    resolved = {"sub1": ("10.20.0.6",), "main1": ("10.20.0.5", "10.20.0.9"),
                "sub2": ("10.20.0.7",)}
    assert check_peers("sub1", ["main1", "sub2"], resolved, SUBNETS) == failed(SHARED)
    assert check_peers("sub1", ["main1", "sub2"], resolved) == passed("ok")


def test_own_name_shared_is_flagged_too() -> None:
    resolved = {"sub1": ("10.20.0.6", "10.20.0.16"), "main1": ("10.20.0.5",)}
    assert name_problems("sub1", ["sub1", "main1"], resolved, SUBNETS) == [
        "sub1 resolves sub1 to 2 addresses (10.20.0.6, 10.20.0.16): several containers answer "
        "to that name, as when Backend.AI sessions share a project's persistent network and "
        "each registers the same main1, sub1 ... names, so gloo and NCCL may reach another "
        "Backend.AI session's container; start the Backend.AI session on a network of its own"]


def test_every_problem_of_the_row_is_said() -> None:
    resolved = {"sub1": ("10.20.0.6",), "main1": ("172.30.0.5",), "sub2": ()}
    cell = check_peers("sub1", ["main1", "sub2"], resolved, SUBNETS)
    assert cell == failed(f"{OUTSIDE}; sub2 does not resolve on sub1")
