"""The pages about sources follow the source table (``derive_env.sources.SOURCES``).

docs/sources/README.md, section 1, has one row per line a module reads, and section 4
names the lines without a module; the refusals in the errors index of
docs/operator-guide.md ("Another launcher") are what derive-env prints for those
environments, so a manager that gains a source cannot stay documented as refused.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from derive_env.errors import TopologyError
from derive_env.labels import PREFIX
from derive_env.pipeline import derive
from derive_env.sources import SOURCE_NAMES, SOURCES

DOCS = Path(__file__).resolve().parents[1] / "docs"
INDEX = (DOCS / "sources" / "README.md").read_text(encoding="utf-8")
GUIDE = (DOCS / "operator-guide.md").read_text(encoding="utf-8")
LABELS = {PREFIX + "frameworks": "pytorch"}


def _section(text: str, title: str) -> str:
    """The text of the ``## title`` section of a page, up to the next ``## ``."""
    start = text.index(f"\n## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start:end if end != -1 else None]


def test_the_index_has_one_row_per_source() -> None:
    rows = re.findall(r"^\| `([a-z0-9-]+)` \|",
                      _section(INDEX, "1. Detection and priority"), re.M)
    assert sorted(rows) == sorted(SOURCE_NAMES)


def test_the_lines_without_a_module_are_the_refused_ones() -> None:
    """A line no module reads (and that is not part of a line one reads) is named in
    section 4, "Launchers without a source"; the lines a module reads are not there as
    refused managers."""
    refused = [s.name for s in SOURCES if s.module is None and s.part_of is None]
    section = _section(INDEX, "4. Launchers without a source")
    assert refused == ["gridengine-task"]
    assert all(f"`{name}`" in section for name in refused)


#: Each environment and the start of the refusal the errors index of the operator guide has.
REFUSED = [
    ({"JOB_ID": "5", "PE": "mpi", "QRSH_PORT": "sge-n2:35867"}, "QRSH_PORT='sge-n2:35867'"),
    ({"PMIX_RANK": "0", "PMIX_NAMESPACE": "slurm.pmix.7.0"}, "PMIX_RANK='0'"),
    ({"SKYPILOT_NUM_NODES": "2", "SKYPILOT_NODE_RANK": "1"}, "SKYPILOT_NUM_NODES='2'"),
    ({"OMPI_COMM_WORLD_SIZE": "6", "OMPI_COMM_WORLD_RANK": "1"},
     "OMPI_COMM_WORLD_SIZE='6'"),
    ({"BACKENDAI_SESSION_ID": "s", "BACKENDAI_CLUSTER_SIZE": "1",
      "BACKENDAI_CLUSTER_HOSTS": "main1", "BACKENDAI_CLUSTER_REPLICAS": "main:1",
      "BACKENDAI_CLUSTER_HOST": "main1", "BACKENDAI_CLUSTER_ROLE": "main",
      "BACKENDAI_CLUSTER_IDX": "1", "BACKENDAI_CLUSTER_LOCAL_RANK": "0", "HOSTNAME": "main1",
      "TF_CONFIG": '{"cluster": {"chief": ["c:2222"], "worker": ["w0:2222", "w1:2222"]}, '
                   '"task": {"type": "worker", "index": 1}}'},
     "TF_CONFIG='{\"cluster\": {\"chief\": "),
]


@pytest.mark.parametrize(("environ", "start"), REFUSED,
                         ids=[s.partition("=")[0] for _, s in REFUSED])
def test_the_guide_quotes_the_refusals_derive_env_prints(
        environ: dict[str, str], start: str) -> None:
    with pytest.raises(TopologyError) as info:
        derive(environ, LABELS)
    message = str(info.value)
    assert message.startswith(start)
    # The errors index (section 4) has a row for it: the message's first words, "…" for
    # any text, matching what derive-env prints.
    name = start.partition("=")[0]
    rows = re.findall(r"^\| `(" + re.escape(name) + r"='[^`]*)` \| 3 \|", GUIDE, re.M)
    assert rows, start
    patterns = ["".join(".*?" if p == "…" else re.escape(p) for p in re.split("(…)", row))
                for row in rows]
    assert any(re.match(pattern, message, re.S) for pattern in patterns), (rows, message)


def test_the_guide_no_longer_refuses_managers_that_are_read() -> None:
    """Refusals the guide once quoted for managers a module now reads."""
    section = GUIDE[GUIDE.index("### Another launcher"):GUIDE.index("### Slurm, schedulers")]
    for stale in ("NHOSTS='2': expected 1 or unset",
                  "a SkyPilot task states a job of more than one node, and derive-env cannot",
                  "a TF_CONFIG (Kubeflow TFJob, Volcano, Vertex AI) states a job of more than "
                  "one task, and derive-env cannot"):
        assert stale not in section
