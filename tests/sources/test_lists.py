"""The host-list forms (sources/lists.py): the schedulers' slot lists (first appearance,
slots summed), the IPv4 lists, JSON, the pod hostname."""

from __future__ import annotations

import pytest

from derive_env.sources.lists import (
    HostSlots,
    all_ipv4,
    host_list,
    json_value,
    one_per_slot,
    pe_hostfile,
    pod_hostname,
    word_pairs,
)


def test_one_per_slot_sums_lines_per_host_in_first_appearance_order() -> None:
    # openpbs/openpbs src/resmom/start_exec.c generate_pbs_nodefile: a line per vnode entry.
    got = one_per_slot("n2\nn2\nn1\nn2\nn3\n")
    assert got == HostSlots(("n2", "n1", "n3"), (3, 1, 1))
    assert got.total() == 5


def test_one_per_slot_ignores_blank_lines_and_blanks_around_names() -> None:
    assert one_per_slot("  n1 \n\nn1\n") == HostSlots(("n1",), (2,))


def test_one_per_slot_folds_case_and_keeps_the_first_spelling() -> None:
    assert one_per_slot("Node1\nnode1\nnode2") == HostSlots(("Node1", "node2"), (2, 1))


@pytest.mark.parametrize(("text", "message"), [
    ("", "one host per line: at least one host"),
    ("\n \n", "one host per line: at least one host"),
    ("n1\nn_2\n", "one host per line: entry 2 ('n_2'): a host name (letters, digits, '-' "
     "and '.') or an IP address"),
])
def test_one_per_slot_refuses(text: str, message: str) -> None:
    with pytest.raises(ValueError) as caught:
        one_per_slot(text)
    assert str(caught.value) == message


def test_word_pairs_reads_lsf_mcpu_hosts() -> None:
    assert word_pairs("hostA 4 hostB 2 hostA 1", "LSF") == HostSlots(("hostA", "hostB"), (5, 2))


@pytest.mark.parametrize(("text", "message"), [
    ("hostA 4 hostB", "pairs: an even number of words (a count after each host), not 3"),
    ("hostA 0", "pairs: entry 1 ('hostA'): a slot count >= 1, not '0'"),
    ("hostA x4", "pairs: entry 1 ('hostA'): a slot count >= 1, not 'x4'"),
    ("hostA 1234567890", "pairs: entry 1 ('hostA'): a slot count >= 1, not '1234567890'"),
    ("", "pairs: at least one host"),
])
def test_word_pairs_refuses(text: str, message: str) -> None:
    with pytest.raises(ValueError) as caught:
        word_pairs(text, "pairs")
    assert str(caught.value) == message


def test_pe_hostfile_reads_a_host_in_two_queues() -> None:
    # hpc-gridware/clusterscheduler source/daemons/execd/exec_job.cc: a line per queue instance.
    text = "n1 2 all.q@n1 UNDEFINED\nn2 4 all.q@n2 UNDEFINED\nN1 1 gpu.q@n1 UNDEFINED\n"
    assert pe_hostfile(text, "PE") == HostSlots(("n1", "n2"), (3, 4))


def test_pe_hostfile_refuses_a_line_without_count() -> None:
    with pytest.raises(ValueError) as caught:
        pe_hostfile("n1 2 q\nn2\n", "PE")
    assert str(caught.value) == "PE; line 2 ('n2') has no slot count >= 1 after its host"


@pytest.mark.parametrize(("text", "separator", "expected"), [
    ("10.0.0.1\n10.0.0.2", "\n", True), ("10.0.0.1,10.0.0.255", ",", True),
    ("10.0.0.1,10.0.0.2", "\n", False), ("10.0.0.01", "\n", False),
    ("10.0.0.256", ",", False), ("10.0.0.1\n", "\n", False), ("", "\n", False)])
def test_all_ipv4_is_one_match_for_the_list(text: str, separator: str, expected: bool) -> None:
    assert all_ipv4(text, separator) is expected


def test_json_value_is_none_for_what_is_not_json() -> None:
    assert json_value('["a"]') == ["a"]
    assert [json_value(t) for t in (None, "", "[", "[" * 100_000)] == [None] * 4


def test_pod_hostname_is_the_kubelets_cut() -> None:
    assert pod_hostname("a" * 62 + "-b") == "a" * 62
    assert pod_hostname("job-worker-1") == "job-worker-1"


def test_word_pairs_names_a_bad_host() -> None:
    with pytest.raises(ValueError) as caught:
        word_pairs("n1 1 -x 1", "pairs")
    assert str(caught.value).startswith("pairs: entry 2 ('-x'): a host name")


def test_host_list_keeps_the_order_and_refuses_a_repeat() -> None:
    assert host_list("10.0.0.2\n10.0.0.1") == ("10.0.0.2", "10.0.0.1")
    assert host_list(" n1 , n2", ",") == ("n1", "n2")
    with pytest.raises(ValueError) as caught:
        host_list("10.0.0.1\n10.0.0.1")
    assert str(caught.value) == "distinct hosts, one per node: '10.0.0.1' is listed twice"
