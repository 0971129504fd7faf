"""Image labels: labels files (flat JSON, docker image inspect) and --label parsing."""

from __future__ import annotations

import json

import pytest

from derive_env.errors import LabelError
from derive_env.labels import (
    OPT_IN,
    PREFIX,
    check_not_opted_in,
    distributed_labels,
    is_opted_in,
    parse_label_option,
    parse_labels_document,
)

FW = PREFIX + "frameworks"
PORT = PREFIX + "master-port"


def label_error(text: str, origin: str = "labels.json") -> str:
    with pytest.raises(LabelError) as info:
        parse_labels_document(text, origin)
    assert info.value.exit_code == 4
    return str(info.value)


def test_prefix_and_opt_in_names() -> None:
    assert PREFIX == "ai.backend.distributed."
    assert OPT_IN == "ai.backend.distributed.frameworks"


def test_flat_object() -> None:
    text = json.dumps({FW: "pytorch,tensorflow", PORT: "23456"})
    assert parse_labels_document(text, "f") == {FW: "pytorch,tensorflow", PORT: "23456"}


def test_non_prefixed_labels_dropped() -> None:
    text = json.dumps({
        "maintainer": "me", "ai.backend.kernelspec": "1", "ai.backend.distributed": "x",
        "org.opencontainers.image.version": 3, FW: "pytorch",
    })
    assert parse_labels_document(text, "f") == {FW: "pytorch"}


def test_docker_image_inspect_list() -> None:
    text = json.dumps([{
        "Id": "sha256:abc",
        "Config": {"Env": ["PATH=/bin"], "Labels": {"maintainer": "me", FW: "jax",
                                                    PORT: "1"}},
    }])
    assert parse_labels_document(text, "f") == {FW: "jax", PORT: "1"}


def test_docker_image_inspect_single_object() -> None:
    text = json.dumps({"Id": "sha256:abc", "Config": {"Labels": {FW: "pytorch"}}})
    assert parse_labels_document(text, "f") == {FW: "pytorch"}


@pytest.mark.parametrize("text", [
    '[{"Config": {"Labels": null}}]',
    '{"Config": {"Labels": null}}',
    '[{"Config": {}}]',
    "{}",
])
def test_no_labels(text: str) -> None:
    assert parse_labels_document(text, "f") == {}


def test_empty_string_value_kept() -> None:
    assert parse_labels_document(json.dumps({FW: ""}), "f") == {FW: ""}


@pytest.mark.parametrize(("value", "shown", "hint"), [
    (29500, "29500", "29500"),
    (1.5, "1.5", "1.5"),
])
def test_non_string_value(value: object, shown: str, hint: str) -> None:
    assert label_error(json.dumps({PORT: value})) == (
        f"labels file labels.json: label {PORT} = {shown}: expected a JSON string (Docker "
        f'label values are strings, write "{hint}")'
    )


def test_non_string_value_in_inspect_output() -> None:
    text = json.dumps([{"Config": {"Labels": {FW: ["pytorch"]}}}])
    assert label_error(text, "img.json").startswith(
        f'labels file img.json: label {FW} = ["pytorch"]: expected a JSON string'
    )


def test_boolean_value_hint_is_json_not_python() -> None:
    """The hint must show the JSON spelling (``"true"``), not Python's ``True``."""
    message = label_error(json.dumps({PREFIX + "on-error": True}))
    assert message == (
        f"labels file labels.json: label {PREFIX}on-error = true: expected a JSON string "
        '(Docker label values are strings, write "true")'
    )


def test_non_string_value_of_other_label_is_ignored() -> None:
    assert parse_labels_document(json.dumps({"version": 3, FW: "pytorch"}), "f") == {
        FW: "pytorch"
    }


def test_invalid_json() -> None:
    assert label_error("{nope", "/etc/derive-env/labels.json") == (
        "labels file /etc/derive-env/labels.json: not valid JSON (Expecting property name "
        "enclosed in double quotes: line 1 column 2 (char 1))"
    )


@pytest.mark.parametrize("text", ["[" * 100_000, '{"a":' * 100_000])
def test_deeply_nested_json_is_a_label_error(text: str) -> None:
    """json.loads raises RecursionError (not ValueError) here: it must not become a traceback."""
    assert label_error(text).startswith("labels file labels.json: ")


@pytest.mark.parametrize("text", ["[]", "[1]", '["x"]'])
def test_list_not_inspect_output(text: str) -> None:
    assert label_error(text) == (
        "labels file labels.json: a JSON list must be `docker image inspect` output (a list "
        "whose first item is an object with Config.Labels)"
    )


@pytest.mark.parametrize(("text", "kind"), [('"x"', "string"), ("3", "number"), ("1.5", "number"),
                                            ("true", "boolean"), ("null", "null"),
                                            ('{"Config": {"Labels": [1]}}', "array")])
def test_not_an_object(text: str, kind: str) -> None:
    assert label_error(text) == (
        "labels file labels.json: expected a JSON object of labels or `docker image inspect` "
        f"output, got a JSON {kind}"
    )


@pytest.mark.parametrize(("item", "pair"), [
    ("ai.backend.distributed.frameworks=pytorch", (FW, "pytorch")),
    ("k=a=b", ("k", "a=b")),
    (" k =v ", ("k", "v ")),
    ("k=", ("k", "")),
])
def test_label_option(item: str, pair: tuple[str, str]) -> None:
    assert parse_label_option(item) == pair


@pytest.mark.parametrize("item", ["k", "=v", " =v", ""])
def test_label_option_bad(item: str) -> None:
    with pytest.raises(LabelError) as info:
        parse_label_option(item)
    assert str(info.value) == f"--label {item!r}: expected KEY=VALUE"


def test_distributed_labels_and_opt_in() -> None:
    labels = {"maintainer": "me", FW: "pytorch", PORT: "1"}
    assert distributed_labels(labels) == {FW: "pytorch", PORT: "1"}
    assert is_opted_in(labels)
    assert not is_opted_in({PORT: "1"})
    assert not is_opted_in({})
    assert is_opted_in({FW: ""})  # empty is "opted in with a bad value", never "off"


# --- empty labels files ------------------------------------------------------------------------


@pytest.mark.parametrize("text", ["", " ", "\n", "\t\r\n \n"])
def test_empty_document_is_an_error(text: str) -> None:
    assert label_error(text, "/etc/derive-env/labels.json") == (
        "labels file /etc/derive-env/labels.json: empty (expected a JSON object of labels)"
    )


# --- distributed labels without the opt-in label ---------------------------------------------


def stray_message(shown_label: str, shown_value: str) -> str:
    return (
        f"label {shown_label}={shown_value!r} is set but ai.backend.distributed.frameworks is "
        "not, so the image did not opt in and nothing would be derived: is the frameworks "
        "label misspelt? Set ai.backend.distributed.frameworks, or remove the "
        "ai.backend.distributed.* labels"
    )


@pytest.mark.parametrize("labels", [{}, {"maintainer": "me", "ai.backend.kernelspec": "1"}])
def test_check_not_opted_in_accepts_no_distributed_labels(labels: dict[str, str]) -> None:
    assert check_not_opted_in(labels) is None


@pytest.mark.parametrize(
    ("labels", "label", "value"),
    [
        ({PREFIX + "framework": "pytorch"}, PREFIX + "framework", "pytorch"),
        ({PREFIX + "Frameworks": "jax"}, PREFIX + "Frameworks", "jax"),
        ({PORT: "1234", PREFIX + "on-error": "warn", PREFIX + "frameworks ": "tensorflow"},
         PREFIX + "frameworks ", "tensorflow"),
        ({PORT: "1234", PREFIX + "on-error": "warn"}, PORT, "1234"),
        ({PREFIX + "on-error": "warn"}, PREFIX + "on-error", "warn"),
    ],
)
def test_check_not_opted_in_names_the_first_stray_label_in_sorted_order(
    labels: dict[str, str], label: str, value: str
) -> None:
    assert not is_opted_in(labels)
    with pytest.raises(LabelError) as info:
        check_not_opted_in(labels)
    assert str(info.value) == stray_message(label, value)
    assert info.value.exit_code == 4


def test_check_not_opted_in_shortens_a_huge_label() -> None:
    key, value = PREFIX + "k" * 200, "v" * 500
    with pytest.raises(LabelError) as info:
        check_not_opted_in({key: value})
    shown_key = key[:120] + f"... ({len(key)} characters)"
    assert str(info.value) == stray_message(shown_key, "v" * 200 + "... (500 characters)")


def test_the_session_variable_of_each_label() -> None:
    """Contract section 9: DERIVE_ENV_ + the name upper-cased, - as _."""
    from derive_env.labels import label_names, session_labels, variable_of

    assert [variable_of(name) for name in label_names()] == [
        "DERIVE_ENV_FRAMEWORKS", "DERIVE_ENV_MASTER_PORT", "DERIVE_ENV_TENSORFLOW_PORT",
        "DERIVE_ENV_JAX_PORT", "DERIVE_ENV_PYTORCH_MODE", "DERIVE_ENV_NPROC_PER_NODE",
        "DERIVE_ENV_TENSORFLOW_ROLES", "DERIVE_ENV_SOCKET_IFNAME", "DERIVE_ENV_ON_ERROR"]
    assert variable_of("ai.backend.distributed.tensorflow-roles") == (
        "DERIVE_ENV_TENSORFLOW_ROLES")
    assert session_labels({"DERIVE_ENV_JAX_PORT": "5000", "HOME": "/root"}) == (
        {"ai.backend.distributed.jax-port": "5000"}, [])


@pytest.mark.parametrize(("text", "expected"), [
    ("[{}]", "a JSON list must be `docker image inspect` output (a list whose first item is "
             "an object with Config.Labels); its first item has no Config object"),
    ('[{"Id": "sha256:1"}]', "a JSON list must be `docker image inspect` output (a list "
     "whose first item is an object with Config.Labels); its first item has no Config object"),
    ('[{"Config": {"Labels": {"' + FW + '": "pytorch"}}}, {"Config": {"Labels": {"' + FW
     + '": "jax"}}}]', "holds 2 images; inspect one (docker image inspect IMAGE > FILE)"),
    ('{"Labels": "x"}', "Labels must be a JSON object of labels or null, not a JSON string"),
    ('{"Labels": 3}', "Labels must be a JSON object of labels or null, not a JSON number"),
    ('{"a": "1", "a": "2"}',
     "the key 'a' appears twice in one JSON object (which value is meant?); keep one"),
    ('{"Config": {"Labels": {"' + FW + '": "pytorch", "' + FW + '": "jax"}}}',
     f"the key '{FW}' appears twice in one JSON object (which value is meant?); keep one"),
])
def test_shapes_that_are_not_no_labels(text: str, expected: str) -> None:
    """Issue 15, item 7: these read as "no labels" (the image silently not opted in), and a
    duplicated key silently kept its last value."""
    assert label_error(text) == "labels file labels.json: " + expected


@pytest.mark.parametrize("text", ['[{"Config": {"Labels": null}}]', '{"Labels": null}',
                                  '{"Config": {}}', '{"Labels": {}}'])
def test_shapes_of_an_image_without_labels(text: str) -> None:
    assert parse_labels_document(text, "labels.json") == {}


@pytest.mark.parametrize(("files", "image"), [({}, False), ({"/etc/l.json": "{}"}, True)])
def test_labels_know_whether_a_labels_file_was_read(files: dict[str, str], image: bool) -> None:
    """The fact "there is an image" is whether the default labels file exists (read at the
    edge): the messages of a start that did not opt in follow it."""
    from derive_env.labels import gather

    labels = gather({}, (None, "/etc/l.json"), ((), ()),
                    lambda path, what, missing: files.get(path))
    assert (dict(labels), labels.image) == ({}, image)
