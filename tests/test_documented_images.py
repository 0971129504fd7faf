"""The image builds the docs document name only build arguments their Dockerfile declares.

BuildKit ignores a build argument no ``ARG`` declares: docs/backendai.md once said
``ARG FRAMEWORKS=tensorflow`` where the Dockerfile reads ``DE_FRAMEWORKS``, and the build made
a PyTorch image without a word. The builds are read from the docs by
tests/support/image_docs.py; tests/e2e/test_e2e_image_variants.py builds each variant with
the real engine and checks its labels and frameworks.
"""

from __future__ import annotations

from support.image_docs import (
    BACKENDAI_DOCKERFILE,
    Documented,
    builds_of,
    documented_builds,
    documented_frameworks,
    undeclared,
    variants,
)


def test_every_documented_build_argument_is_declared() -> None:
    assert [m for build in documented_builds() for m in undeclared(build)] == []


def test_the_docs_document_an_image_of_every_framework() -> None:
    """PyTorch, TensorFlow and JAX each have a documented image; docs/backendai.md's image
    has its TensorFlow variant, built with DE_FRAMEWORKS."""
    found = variants(documented_builds())
    assert {documented_frameworks(*variant) for variant in found} >= {
        "pytorch", "tensorflow", "jax"}
    assert (BACKENDAI_DOCKERFILE, (("DE_FRAMEWORKS", "tensorflow"),)) in found


def test_the_reader_finds_commands_inline_arguments_and_the_old_mistake() -> None:
    """A continued command with -f, one without (the Backend.AI image), inline code over
    a line break, a placeholder left out; the old ``ARG FRAMEWORKS=tensorflow`` is named."""
    text = ("```sh\nDOCKER_BUILDKIT=1 docker build -f docker/jax.Dockerfile \\\n"
            "    --build-arg DE_FRAMEWORKS=jax,pytorch -t x .\ndocker build -t y .\n```\n"
            "The image above with `ARG FRAMEWORKS=tensorflow`, or `--build-arg\n"
            "  DE_MASTER_PORT=29400`; `--build-arg BASE_IMAGE=...` for another base.\n"
            "```dockerfile\nARG DE_FRAMEWORKS=pytorch\n```\n")
    builds = builds_of("docs/backendai.md", text)
    assert builds == [
        Documented("docs/backendai.md:2", "docker/jax.Dockerfile",
                   (("DE_FRAMEWORKS", "jax,pytorch"),)),
        Documented("docs/backendai.md:4", BACKENDAI_DOCKERFILE, ()),
        Documented("docs/backendai.md:6", BACKENDAI_DOCKERFILE, (("FRAMEWORKS", "tensorflow"),)),
        Documented("docs/backendai.md:6", BACKENDAI_DOCKERFILE, (("DE_MASTER_PORT", "29400"),)),
    ]
    assert [m for build in builds for m in undeclared(build)] == [
        f"docs/backendai.md:6: FRAMEWORKS=tensorflow: {BACKENDAI_DOCKERFILE} declares no ARG "
        "FRAMEWORKS (its ARGs: DE_FRAMEWORKS, DE_MASTER_PORT)"]
