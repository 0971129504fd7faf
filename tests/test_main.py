"""``derive_env.__main__``: derive-env's own imports ignore the image's PYTHONPATH."""

from __future__ import annotations

import os

from derive_env.__main__ import drop_pythonpath

SITE = "/opt/derive-env/lib/python3.12/site-packages"
STDLIB = ["/usr/lib/python312.zip", "/usr/lib/python3.12", "/usr/lib/python3.12/lib-dynload"]


def test_pythonpath_entries_are_dropped_the_rest_kept_in_order() -> None:
    path = ["/opt/derive-env/bin", "/workspace", "/opt/train/site", *STDLIB, SITE]
    pythonpath = os.pathsep.join(["/workspace", "/opt/train/site/"])
    assert drop_pythonpath(path, pythonpath, SITE) == ["/opt/derive-env/bin", *STDLIB, SITE]


def test_relative_entries_match_as_python_3_10_leaves_them(tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    path = ["/opt/derive-env/bin", "lib", str(tmp_path / "other"), SITE]
    assert drop_pythonpath(path, f"lib{os.pathsep}other", SITE) == ["/opt/derive-env/bin", SITE]


def test_nothing_dropped_without_pythonpath_or_when_derive_env_lives_there() -> None:
    path = ["/opt/derive-env/bin", "/opt/target", *STDLIB]
    assert drop_pythonpath(path, None, SITE) is path
    assert drop_pythonpath(path, "", SITE) is path
    # installed with `pip install --target /opt/target`: its dependencies are there too
    assert drop_pythonpath(path, "/opt/target", "/opt/target") is path


def test_the_script_folder_is_never_dropped() -> None:
    path = ["/opt/derive-env/bin", *STDLIB]
    assert drop_pythonpath(path, "/opt/derive-env/bin", SITE) == path
