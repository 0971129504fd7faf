"""derive_env/__init__.py: the public API, re-exported lazily."""

from __future__ import annotations

import subprocess
import sys
from importlib import import_module
from importlib.metadata import version

import pytest

import derive_env
from derive_env.pipeline import Derivation, derive

#: The public names, as the user guide names them (README, docs/architecture.md).
PUBLIC = ("derive", "Derivation", "ClusterTopology", "Node", "DerivedVariable", "ImagePolicy",
          "DeriveEnvError", "TopologyError", "LabelError")


@pytest.mark.parametrize("name", PUBLIC)
def test_each_public_name_is_the_defining_modules_object(name: str) -> None:
    """Re-exported, not copied: the object of the module that defines it (a lower stage)."""
    value = getattr(derive_env, name)
    assert value.__module__.startswith("derive_env.")
    assert getattr(import_module(value.__module__), name) is value


def test_all_lists_exactly_the_public_names() -> None:
    assert sorted(derive_env.__all__) == sorted([*PUBLIC, "__version__"])


def test_version_is_the_installed_distributions() -> None:
    assert derive_env.__version__ == version("derive-env")


def test_unknown_attribute_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError) as info:
        derive_env.no_such_name  # noqa: B018
    assert str(info.value) == "module 'derive_env' has no attribute 'no_such_name'"


def test_importing_the_package_loads_nothing_else() -> None:
    """``import derive_env`` is on every container start: no typing, no pydantic, no stage."""
    code = ("import sys; before = set(sys.modules); import derive_env; "
            "print(sorted(set(sys.modules) - before))")
    out = subprocess.run([sys.executable, "-I", "-c", code], capture_output=True, text=True,
                         check=True, timeout=60)
    assert out.stdout.strip() == "['__future__', 'derive_env']"


def test_public_api() -> None:
    assert derive_env.derive is derive
    assert derive_env.Derivation is Derivation
    assert issubclass(derive_env.TopologyError, derive_env.DeriveEnvError)
    assert issubclass(derive_env.LabelError, derive_env.DeriveEnvError)
    with pytest.raises(AttributeError):
        _ = derive_env.no_such_name
