"""The image builds the docs document, read from the docs themselves.

Read by tests/test_documented_images.py (every documented build argument is one the
Dockerfile declares) and tests/e2e/test_e2e_image_variants.py (each documented variant built
with the real engine, its labels and frameworks asserted), so that a wrong build argument in
the docs fails a test: BuildKit ignores an argument no ``ARG`` declares, and docs/backendai.md
once said ``ARG FRAMEWORKS=tensorflow`` where the Dockerfile reads ``DE_FRAMEWORKS``: the
build made a PyTorch image without a word.

What is read (paths from the repository root):

* every ``docker build`` command, in a code block or inline code, of README.md, docs/**/*.md,
  examples/**/*.md and the comments of docker/*.Dockerfile (lines joined at a trailing
  ``\\``): its ``-f FILE`` and ``--build-arg NAME=VALUE``s. A command without ``-f`` in
  :data:`BACKENDAI_DOCS` builds :data:`BACKENDAI_DOCKERFILE` (the image docs/backendai.md
  shows, from a folder holding it); elsewhere it builds the reader's own Dockerfile and is
  not read;
* inline code ``--build-arg NAME=VALUE`` or ``ARG NAME=VALUE`` outside code blocks: in
  :data:`BACKENDAI_DOCS` a variant of :data:`BACKENDAI_DOCKERFILE` ("the image above built
  with ..."), in a Dockerfile's comment one of that Dockerfile, elsewhere (README.md,
  docs/integration.md's general advice) checked only against the ARGs of every Dockerfile.

A value containing ``...`` is a placeholder and is left out; a value in prose loses the
sentence's punctuation after it (``wheelhouse.``, ``cu126),``).
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass

from support import REPO

#: The Dockerfile of docs/backendai.md's worked example (the docs show it verbatim).
BACKENDAI_DOCKERFILE = "examples/backendai/Dockerfile"
#: The pages whose commands without ``-f``, and whose inline build arguments, are builds
#: of :data:`BACKENDAI_DOCKERFILE`.
BACKENDAI_DOCS = ("docs/backendai.md", "examples/README.md")
#: The opt-in label and the build argument the example Dockerfiles feed it from.
FRAMEWORKS_LABEL = "ai.backend.distributed.frameworks"
FRAMEWORKS_ARG = "DE_FRAMEWORKS"

_NAME = r"[A-Za-z_][A-Za-z0-9_]*"
_INLINE_ARG = re.compile(rf"(?:--build-arg|ARG)\s+({_NAME})=(\S+)")
_ARG_LINE = re.compile(rf"^\s*ARG\s+({_NAME})(?:=(\S*))?\s*$", re.M)
_LABEL = re.compile(r'([a-z][a-z0-9.-]*)="\$\{(' + _NAME + r')\}"')


@dataclass(frozen=True)
class Documented:
    """One documented build: where (``path:line``), the Dockerfile it builds (from the
    repository root) and the build arguments it names, in order."""

    where: str
    dockerfile: str
    args: tuple[tuple[str, str], ...]


def declared_args(dockerfile: str) -> dict[str, str | None]:
    """``ARG`` name -> its default (None without one; the first default of a name wins)
    of the Dockerfile at ``dockerfile`` (from the repository root)."""
    found: dict[str, str | None] = {}
    for name, default in _ARG_LINE.findall((REPO / dockerfile).read_text()):
        if found.get(name) is None:
            found[name] = default.strip('"') if default else None
    return found


def label_args(dockerfile: str) -> dict[str, str]:
    """Label -> the build argument its ``LABEL`` instruction takes the value from
    (``LABEL ai.backend.distributed.frameworks="${DE_FRAMEWORKS}"``)."""
    text = (REPO / dockerfile).read_text()
    return dict(_LABEL.findall("\n".join(line for line in text.splitlines()
                                         if not line.lstrip().startswith("#"))))


def dockerfiles() -> list[str]:
    """Every Dockerfile of the repository (docker/*.Dockerfile, examples/**/Dockerfile)."""
    paths = [*REPO.glob("docker/*.Dockerfile"), *REPO.glob("examples/**/Dockerfile")]
    return sorted(str(p.relative_to(REPO)) for p in paths)


def _pages() -> list[tuple[str, str]]:
    """(path, text) of every page read: markdown as it is, a Dockerfile's comments only
    (``#`` and one space removed; other lines blank, so line numbers stay)."""
    pages = [REPO / "README.md", *sorted(REPO.glob("docs/**/*.md")),
             *sorted(REPO.glob("examples/**/*.md"))]
    found = [(str(p.relative_to(REPO)), p.read_text()) for p in pages
             if p.name != "CHANGELOG.md"]
    for path in dockerfiles():
        if path.startswith("docker/"):
            lines = (REPO / path).read_text().splitlines()
            found.append((path, "\n".join(re.sub(r"^# ?", "", x) if x.startswith("#") else ""
                                          for x in lines)))
    return found


def _command(text: str, start: int) -> str:
    """The command from ``start`` (a ``docker build``) to its end: the closing backtick of
    inline code, or the end of its line after any ``\\``-continued lines."""
    rest = text[start:]
    tick = rest.find("`")
    line_end = 0
    while True:
        end = rest.find("\n", line_end)
        end = len(rest) if end < 0 else end
        if not rest[:end].rstrip().endswith("\\"):
            break
        line_end = end + 1
    end = tick if 0 <= tick < end else end
    return rest[:end].replace("\\\n", " ")


def _parse_build(command: str) -> tuple[str | None, tuple[tuple[str, str], ...]]:
    """(``-f`` file or None, build arguments) of one ``docker build`` command."""
    try:
        words = shlex.split(command)
    except ValueError:
        words = command.split()
    dockerfile, args = None, []
    for flag, value in zip(words, [*words[1:], ""], strict=True):
        if flag in ("-f", "--file"):
            dockerfile = value
        elif flag == "--build-arg" and "=" in value and "..." not in value:
            name, _, arg = value.partition("=")
            args.append((name, arg))
    return dockerfile, tuple(args)


def _line(text: str, offset: int) -> int:
    return text.count("\n", 0, offset) + 1


def _outside_fences(text: str) -> str:
    """``text`` with every fenced code block blanked (newlines kept)."""
    out, fenced = [], False
    for line in text.split("\n"):
        if line.lstrip().startswith("```"):
            fenced = not fenced
            out.append("")
        else:
            out.append("" if fenced else line)
    return "\n".join(out)


def builds_of(path: str, text: str) -> list[Documented]:
    """The documented builds of one page (``path`` from the repository root; a Dockerfile's
    ``text`` is its comments, as :func:`_pages` gives them), in order. ``dockerfile`` is
    ``""`` for a general one (prose outside :data:`BACKENDAI_DOCS`)."""
    found = []
    for match in re.finditer(r"docker build\b", text):
        dockerfile, args = _parse_build(_command(text, match.start()))
        if dockerfile is None and path in BACKENDAI_DOCS:
            dockerfile = BACKENDAI_DOCKERFILE
        if dockerfile is not None:
            found.append(Documented(f"{path}:{_line(text, match.start())}", dockerfile, args))
    prose = _outside_fences(text)
    target = (BACKENDAI_DOCKERFILE if path in BACKENDAI_DOCS
              else path if path.endswith("Dockerfile") else "")
    for code in re.finditer(r"`([^`]+)`", prose):
        if "docker build" in code.group(1):
            continue
        for name, value in _INLINE_ARG.findall(" ".join(code.group(1).split())):
            if "..." not in value:
                found.append(Documented(f"{path}:{_line(prose, code.start())}", target,
                                        ((name, value.rstrip(".,;:)")),)))
    if path.endswith("Dockerfile"):
        for match in re.finditer(rf"--build-arg\s+({_NAME})=(\S+)", text):
            line = _line(text, match.start())
            if "docker build" not in text.split("\n")[line - 1] and "..." not in match.group(2):
                found.append(Documented(f"{path}:{line}", path,
                                        ((match.group(1), match.group(2).rstrip(".,;:)")),)))
    return found


def documented_builds() -> list[Documented]:
    """Every documented build of the repository's pages (see the module docstring)."""
    return [build for path, text in _pages() for build in builds_of(path, text)]


#: The framework a Dockerfile's docs promise when no DE_FRAMEWORKS is given: each docker/
#: image its own, docs/backendai.md's "a 3-container PyTorch job".
DOCUMENTED_DEFAULT = {BACKENDAI_DOCKERFILE: "pytorch",
                      **{f"docker/{f}.Dockerfile": f for f in ("pytorch", "tensorflow", "jax")}}


def documented_frameworks(dockerfile: str, args: tuple[tuple[str, str], ...]) -> str:
    """The frameworks label the docs promise for ``dockerfile`` built with ``args``."""
    return dict(args).get(FRAMEWORKS_ARG) or DOCUMENTED_DEFAULT[dockerfile]


def undeclared(build: Documented) -> list[str]:
    """The build arguments of ``build`` that its Dockerfile (any Dockerfile of the
    repository, for a general one) declares no ``ARG`` for, each as a sentence."""
    files = [build.dockerfile] if build.dockerfile else dockerfiles()
    known = {name for f in files for name in declared_args(f)}
    return [f"{build.where}: {name}={value}: {' or '.join(files)} declares no "
            f"ARG {name} (its ARGs: {', '.join(sorted(known))})"
            for name, value in build.args if name not in known]


def variants(builds: list[Documented], ignored: frozenset[str] = frozenset()
             ) -> dict[tuple[str, tuple[tuple[str, str], ...]], list[str]]:
    """(Dockerfile, build arguments but the ``ignored`` names) -> where each is documented:
    the distinct images the docs tell to build (general prose left out)."""
    found: dict[tuple[str, tuple[tuple[str, str], ...]], list[str]] = {}
    for build in builds:
        if build.dockerfile:
            args = tuple((n, v) for n, v in build.args if n not in ignored)
            found.setdefault((build.dockerfile, args), []).append(build.where)
    return found
