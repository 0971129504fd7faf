"""cli/formats.py: the dry-run outputs beyond render(), each exactly (the digest line, a
hostfile, every node's view), and loaded only by the options that ask for them."""

from __future__ import annotations

import subprocess
import sys

from derive_env.cli import formats
from derive_env.digest import digest_of, facts_of
from derive_env.labels import PREFIX
from derive_env.pipeline import derive
from derive_env.topology import Inputs

ALL = {PREFIX + "frameworks": "pytorch"}


def test_the_digest_line_is_this_nodes(backendai_env) -> None:
    env = backendai_env(["main1", "sub1", "sub2"], "sub2")
    derivation = derive(env, ALL)
    expected = digest_of(facts_of(derivation.topology, derivation))
    assert formats.digest(Inputs(env, ALL), "digest") == f"{expected} 2 sub2\n"


def test_the_host_formats_list_the_canonical_order(backendai_env) -> None:
    env = {**backendai_env(["sub1", "main1", "sub2"], "sub1"), "GPU_COUNT": "2"}
    assert formats.host_list(Inputs(env, ALL), "openmpi-hostfile") == (
        "main1 slots=2\nsub1 slots=2\nsub2 slots=2\n")


def test_every_nodes_view_names_each_node(backendai_env) -> None:
    env = backendai_env(["main1", "sub1", "sub2"], "sub1")
    text = formats.picture(Inputs(env, ALL), derive(env, ALL))
    assert text.startswith("all nodes, each derived here from what every node shares "
                           "(source backendai, 3 nodes):\n")
    assert "  1          sub1   1                        (this node)\n" in text


def test_not_loaded_on_the_start_paths() -> None:
    code = ("import sys; from derive_env import cli; "
            "print('derive_env.cli.formats' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert out == "False\n"
