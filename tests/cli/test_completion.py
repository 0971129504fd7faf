"""Shell completion (click's protocol, as the bash script calls it): the ``--source`` names,
the frameworks, the ``check`` subcommand as the first word only, files for paths."""

from __future__ import annotations

import os
import subprocess

import pytest

from derive_env.sources import SOURCE_NAMES
from helpers import console_script


def complete(words: str, index: int) -> list[str]:
    out = subprocess.run([console_script()], capture_output=True, text=True, timeout=60,
                         env={"PATH": os.environ["PATH"], "_DERIVE_ENV_COMPLETE": "bash_complete",
                              "COMP_WORDS": words, "COMP_CWORD": str(index)})
    assert (out.returncode, out.stderr) == (0, "")
    return out.stdout.splitlines()


def test_source_offers_every_name_of_the_source_table() -> None:
    assert complete("derive-env --source ", 2) == [
        f"plain,{name}" for name in ("auto", "none", *SOURCE_NAMES)]
    assert complete("derive-env --dry-run --source slurm", 3) == [
        "plain,slurm-step", "plain,slurm-allocation"]


def test_frameworks_offers_the_next_name_of_the_list() -> None:
    assert complete("derive-env --frameworks ", 2) == [
        "plain,pytorch", "plain,tensorflow", "plain,jax"]
    assert complete("derive-env --frameworks pytorch,", 2) == [
        "plain,pytorch,tensorflow", "plain,pytorch,jax"]


@pytest.mark.parametrize(("words", "index", "expected"), [
    ("derive-env ch", 1, ["plain,check"]),
    ("derive-env ", 1, ["plain,check", "plain,--"]),
    # after --, or after an option, the word is a command: check would run a command so named
    ("derive-env -- ch", 2, ["file,ch"]),
    ("derive-env --dry-run ch", 2, ["file,ch"]),
    ("derive-env --env-file /tm", 2, ["file,/tm"]),
    ("derive-env --labels-file x", 2, ["file,x"]),
])
def test_the_first_word_offers_check(words: str, index: int, expected: list[str]) -> None:
    assert complete(words, index) == expected


@pytest.mark.parametrize(("words", "index", "expected"), [
    # check's own options, not the start's --format/--dry-run it rejects (adversarial trial)
    ("derive-env check --", 2, ["plain,--timeout", "plain,--label", "plain,--labels-file",
                                "plain,--frameworks", "plain,--source", "plain,--help"]),
    ("derive-env check --t", 2, ["plain,--timeout"]),
    ("derive-env check --timeout 3 --fr", 4, ["plain,--frameworks"]),
    ("derive-env check --frameworks jax,", 3, ["plain,jax,pytorch", "plain,jax,tensorflow"]),
    ("derive-env check --source slurm", 3, ["plain,slurm-step", "plain,slurm-allocation"]),
    ("derive-env check --labels-file x", 3, ["file,x"]),
    # after --, check is the user's command: its words are files
    ("derive-env -- check --", 3, ["file,--"]),
])
def test_after_check_the_check_s_options(words: str, index: int, expected: list[str]) -> None:
    assert complete(words, index) == expected
