"""A refusal's fix carries the opt-in of the start that printed it (render/fixes.py)."""

from __future__ import annotations

import pytest

from derive_env.labels import OPT_IN, Labels
from derive_env.render.fixes import (
    FILE,
    NONE,
    OPTION,
    PLACEHOLDER,
    VARIABLE,
    fixed,
    opt_in_of,
    with_opt_in,
)
from derive_env.sources.managers.slurm import RUN_IN_SRUN

FIX = ("run it inside srun: srun --ntasks-per-node=1 derive-env -- torchrun ... "
       "(derive-env -- srun ... runs it there too)")


def labels_of(values: dict[str, str], *, image: bool = True,
              variables: tuple[str, ...] = (), from_image: dict[str, str] | None = None) -> Labels:
    """Gathered labels; an image file gave all ``values`` unless ``from_image`` says."""
    labels = Labels(values)
    labels.image = image
    labels.from_image = dict(values if from_image is None and image else from_image or {})
    labels.variables.update({key: "DERIVE_ENV_X" for key in variables})
    return labels


def test_an_option_is_echoed_in_every_recipe_but_not_in_the_wrong_place() -> None:
    assert with_opt_in(FIX, OPTION, "pytorch") == (
        "run it inside srun: srun --ntasks-per-node=1 derive-env --frameworks pytorch -- "
        "torchrun ... (derive-env -- srun ... runs it there too)")


def test_an_image_label_adds_nothing() -> None:
    assert with_opt_in(FIX, FILE, "pytorch") == FIX


def test_a_variable_is_named_once_and_the_commands_stay() -> None:
    assert with_opt_in(RUN_IN_SRUN, VARIABLE, "jax") == RUN_IN_SRUN + (
        " (DERIVE_ENV_FRAMEWORKS=jax opted this start in: the derive-env of the fix needs it "
        "too, in its environment or as --frameworks jax)")


def test_no_opt_in_gets_pytorch_before_torchrun_or_python_and_a_placeholder_else() -> None:
    message = ("srun derive-env -- torchrun ..., srun derive-env -- python3 train.py, "
               "srun --het-group=0 derive-env -- ...")
    assert with_opt_in(message, NONE, "") == (
        "srun derive-env --frameworks pytorch -- torchrun ..., srun derive-env --frameworks "
        "pytorch -- python3 train.py, srun --het-group=0 derive-env --frameworks "
        "<pytorch|tensorflow|jax> -- ...")
    assert PLACEHOLDER == "--frameworks <pytorch|tensorflow|jax>"


@pytest.mark.parametrize(("value", "names"), [
    ("pytorch, jax", "pytorch,jax"), (" PyTorch", "pytorch"), ("pytorch\n", "pytorch"),
    ("JAX,jax, pytorch", "jax,pytorch"),
])
def test_the_value_is_echoed_as_the_policy_reads_it(value: str, names: str) -> None:
    assert with_opt_in("x derive-env -- python t.py", OPTION, value) == (
        f"x derive-env --frameworks {names} -- python t.py")
    assert with_opt_in("x derive-env -- python t.py", VARIABLE, value) == (
        f"x derive-env -- python t.py (DERIVE_ENV_FRAMEWORKS={names} opted this start in: the "
        f"derive-env of the fix needs it too, in its environment or as --frameworks {names})")


@pytest.mark.parametrize("how", [OPTION, VARIABLE])
def test_a_value_the_policy_refuses_is_never_echoed(how: str) -> None:
    assert with_opt_in("x derive-env -- python t.py", how, "bogus\nx") == (
        "x derive-env --frameworks <pytorch|tensorflow|jax> -- python t.py")


@pytest.mark.parametrize("how", [OPTION, VARIABLE, NONE])
def test_a_quoted_value_is_never_rewritten(how: str) -> None:
    """Values are quoted as Python quotes them: '...', "..." around one holding ', escapes."""
    for message in (
        "SLURM_JOB_NODELIST='n[1-2]derive-env -- x': expected a host name",
        "label ai.backend.distributed.on-error=\"it's derive-env -- x\": expected fail or warn",
        "X='a\\'\"derive-env -- x': bad",
    ):
        assert with_opt_in(message, how, "pytorch") == message


def test_only_the_recipe_beside_a_quoted_value_is_rewritten() -> None:
    message = ("the job's X='derive-env -- x' and the nodes' hosts: srun derive-env -- "
               "torchrun ... (SLURM_JOB_NUM_NODES='2')")
    assert with_opt_in(message, OPTION, "jax") == (
        "the job's X='derive-env -- x' and the nodes' hosts: srun derive-env --frameworks jax "
        "-- torchrun ... (SLURM_JOB_NUM_NODES='2')")


def test_a_message_without_a_recipe_is_unchanged() -> None:
    message = "SLURM_NODEID='x': expected a number"
    for how in (OPTION, VARIABLE, NONE):
        assert with_opt_in(message, how, "pytorch") == message


@pytest.mark.parametrize(("labels", "items", "expected"), [
    (labels_of({}), (), (NONE, "")),
    (labels_of({OPT_IN: "pytorch"}), (), (FILE, "pytorch")),
    (labels_of({OPT_IN: "pytorch"}, image=False), (), (OPTION, "pytorch")),  # --labels-file
    # an image file without the label, the opt-in from --labels-file (or changed by one)
    (labels_of({OPT_IN: "jax"}, from_image={}), (), (OPTION, "jax")),
    (labels_of({OPT_IN: "jax"}, from_image={OPT_IN: "pytorch"}), (), (OPTION, "jax")),
    (labels_of({OPT_IN: "jax"}), (f"{OPT_IN}=jax",), (OPTION, "jax")),
    (labels_of({OPT_IN: "jax"}), (f" {OPT_IN} =jax", "bad"), (OPTION, "jax")),
    (labels_of({OPT_IN: "tensorflow"}, variables=(OPT_IN,)), (), (VARIABLE, "tensorflow")),
])
def test_how_this_start_opted_in(labels: Labels, items: tuple[str, ...],
                                 expected: tuple[str, str]) -> None:
    assert opt_in_of(labels, items) == expected


def test_fixed_reads_the_opt_in_from_the_labels_and_leaves_unread_labels_alone() -> None:
    assert fixed(FIX, None, (f"{OPT_IN}=jax",)) == FIX  # the labels could not be read
    assert fixed(FIX, labels_of({OPT_IN: "jax"}), (f"{OPT_IN}=jax",)) == with_opt_in(
        FIX, OPTION, "jax")
