"""The documentation holds: every relative link (and #anchor) resolves, every option is in the
reference, every shell block a user would run is either run by a named test or marked as not
runnable here (with why), and the reference's JSON examples fit the published schema."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import testbed

from mpiwait.cli import command_line
from mpiwait.openssh import keywords

REPO = Path(__file__).resolve().parents[2]
DOCS = sorted(
    {
        REPO / "README.md",
        REPO / "CONTRIBUTING.md",
        REPO / "CHANGELOG.md",
        *(REPO / "docs").glob("*.md"),
        *(REPO / "examples").rglob("*.md"),
        *(REPO / "benchmarks").glob("*.md"),
    }
)
SHELL = {"sh", "bash", "shell", "console"}
FENCE = re.compile(r"^(```+|~~~+)\s*([\w-]*)[^\n]*\n(.*?)^\1\s*$", re.M | re.S)
LINK = re.compile(r"\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
MARKER = re.compile(r"<!--\s*(run by|not runnable here):\s*(.*?)\s*-->")


def _rel(path: Path) -> str:
    return str(path.relative_to(REPO))


def _prose(text: str) -> str:
    """The text without fenced blocks and inline code (links there are examples, not links)."""
    text = FENCE.sub(lambda m: "\n" * m.group(0).count("\n"), text)
    return re.sub(r"(`+)(?!`).*?\1", "", text)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"<[^>]+>", "", heading).strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    found: set[str] = set()
    counts: dict[str, int] = {}
    for line in _prose(path.read_text()).splitlines():
        m = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if m:
            base = slug(m.group(1))
            n = counts.get(base, 0)
            counts[base] = n + 1
            found.add(base if n == 0 else f"{base}-{n}")
    return found


def links(path: Path) -> list[str]:
    return [m.group(1) for m in LINK.finditer(_prose(path.read_text()))]


@pytest.mark.parametrize("doc", DOCS, ids=_rel)
def test_every_relative_link_resolves(doc: Path) -> None:
    broken = []
    for target in links(doc):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # https:, mailto: ...
            continue
        file_part, _, anchor = target.partition("#")
        dest = (doc.parent / file_part).resolve() if file_part else doc
        if not dest.exists():
            broken.append(f"{target}: no such file")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            broken.append(f"{target}: no heading #{anchor} in {_rel(dest)}")
    assert broken == [], f"{_rel(doc)}: broken links:\n" + "\n".join(broken)


def shell_blocks(path: Path) -> list[tuple[int, str | None, str]]:
    """(line, marker, block) of every shell block; marker: the comment right before it."""
    text = path.read_text()
    out = []
    for m in FENCE.finditer(text):
        if m.group(2).lower() not in SHELL:
            continue
        before = [ln for ln in text[: m.start()].splitlines() if ln.strip()]
        marker = before[-1].strip() if before and MARKER.fullmatch(before[-1].strip()) else None
        out.append((text[: m.start()].count("\n") + 1, marker, m.group(3)))
    return out


@pytest.mark.parametrize("doc", DOCS, ids=_rel)
def test_every_command_block_is_run_by_a_test_or_says_why_not(doc: Path) -> None:
    problems = []
    for line, marker, _ in shell_blocks(doc):
        where = f"{_rel(doc)}:{line}"
        if marker is None:
            problems.append(f"{where}: no <!-- run by: ... --> or <!-- not runnable here: ... -->")
            continue
        kind, what = MARKER.fullmatch(marker).groups()  # type: ignore[union-attr]
        if kind == "not runnable here":
            if len(what) < 10:
                problems.append(f"{where}: say why it is not runnable here")
            continue
        for ref in re.split(r",\s*", what):
            path, _, test = ref.partition("::")
            if not (REPO / path).is_file():
                problems.append(f"{where}: {path} does not exist")
            elif test and not re.search(
                rf"^\s*def {re.escape(test.split('[')[0])}\(", (REPO / path).read_text(), re.M
            ):
                problems.append(f"{where}: no test {test} in {path}")
    assert problems == [], "\n".join(problems)


def test_the_checks_catch_what_they_should(tmp_path: Path) -> None:
    doc = tmp_path / "x.md"
    doc.write_text(
        "# Title: one\n\n[ok](#title-one) [bad](#nope) `[code](nowhere)`\n\n"
        "```sh\nrm -rf /\n```\n\n"
        "<!-- not runnable here: needs a real cluster -->\n```bash\nx\n```\n"
    )
    assert links(doc) == ["#title-one", "#nope"]
    assert anchors(doc) == {"title-one"}
    assert [marker for _, marker, _ in shell_blocks(doc)] == [
        None,
        "<!-- not runnable here: needs a real cluster -->",
    ]


def test_the_reference_names_every_option() -> None:
    reference = (REPO / "docs/reference.md").read_text()
    missing = []
    for param in command_line.params:
        names = [o for o in (*param.opts, *param.secondary_opts) if o.startswith("--")]
        if names and not any(n in reference or n.replace("--", "--[no-]") in reference
                             for n in names):  # fmt: skip
            missing.append("/".join(names))
        if names and names[0] == "--launch-env" and "--[no-]launch-env" not in reference:
            missing.append(names[0])
    assert missing == []


def test_the_references_json_examples_fit_the_schema() -> None:
    text = (REPO / "docs/reference.md").read_text()
    blocks = [m.group(3) for m in FENCE.finditer(text) if m.group(2) == "json"]
    assert blocks
    for block in blocks:
        for line in block.splitlines():
            assert testbed.json_log_problems(json.loads(line)) == [], line


def test_every_test_the_docs_name_exists() -> None:
    """The compatibility matrix and the markers name tests as proof: each must exist."""
    missing = []
    for doc in DOCS:
        for path, test in re.findall(r"(tests/[\w/]+\.py)::(\w+)", doc.read_text()):
            file = REPO / path
            if not file.is_file() or not re.search(rf"^\s*def {test}\(", file.read_text(), re.M):
                missing.append(f"{_rel(doc)}: {path}::{test}")
    # "`tests/e2e/test_e2e_mpi.py::a`, `::b`": the second test is in the same file
    for doc in DOCS:
        for path, rest in re.findall(
            r"(tests/[\w/]+\.py)::\w+`((?:,\s*`::\w+`)+)", doc.read_text()
        ):
            for test in re.findall(r"::(\w+)", rest):
                if not re.search(rf"^\s*def {test}\(", (REPO / path).read_text(), re.M):
                    missing.append(f"{_rel(doc)}: {path}::{test}")
    assert missing == []


def _blocks(doc: Path, lang: str) -> list[str]:
    return [m.group(3) for m in FENCE.finditer(doc.read_text()) if m.group(2) == lang]


def test_the_readmes_snippets_are_the_tested_examples() -> None:
    """The quick start's initContainer is initcontainer.yaml's (run against real sshd by
    tests/integration/test_examples.py) and its Dockerfile is entrypoint.Dockerfile's (built and
    run by tests/containers/test_containers.py), but for the image names."""
    testbed.require("pyyaml")
    import yaml

    readme = REPO / "README.md"
    (snippet,) = yaml.safe_load(_blocks(readme, "yaml")[0])["initContainers"]
    job = yaml.safe_load((REPO / "examples/kubernetes/initcontainer.yaml").read_text())
    pod = job["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]
    (example,) = pod["initContainers"]

    def but_timeout(args: list[str]) -> set[str]:
        return {a for a in args if not a.startswith("--timeout=")}

    assert but_timeout(snippet["args"]) == but_timeout(example["args"])
    assert snippet["securityContext"] == example["securityContext"]
    mounts = [(m["name"], m["mountPath"]) for m in snippet["volumeMounts"]]
    assert mounts == [(m["name"], m["mountPath"]) for m in example["volumeMounts"]]

    (dockerfile,) = _blocks(readme, "dockerfile")
    ours = dockerfile.replace("your-mpi-image", "mpioperator/mpi-pi:mpich")
    tested = (REPO / "examples/kubernetes/entrypoint.Dockerfile").read_text()
    code = [ln for ln in tested.splitlines() if ln.strip() and not ln.startswith("#")]
    assert ours.splitlines() == code
    assert len(code) == 4


ENV_NAME = re.compile(
    r"\"((?:MPIWAIT_|K_MPI_|I_MPI_|HYDRA_|OMPI_MCA_|PRTE_MCA_|SLURM_|PBS_|LSB_|COBALT_|XDG_|SSH_AUTH)"
    r"[A-Z0-9_]*|JOB_ID|HOME|SHELL|TMPDIR|PATH)\""
)


def test_the_reference_names_every_environment_variable_the_code_names() -> None:
    reference = (REPO / "docs/reference.md").read_text()
    named = {
        m.group(1)
        for f in (REPO / "mpiwait").rglob("*.py")
        for m in ENV_NAME.finditer(f.read_text())
    }
    assert "K_MPI_JOB_ROLE" in named and "XDG_RUNTIME_DIR" in named  # the pattern finds them
    assert sorted(v for v in named if v not in reference) == []


def test_the_readme_stays_short() -> None:
    """A newcomer's page: the rest lives in docs/ (issue 24: at most 250 lines)."""
    assert len((REPO / "README.md").read_text().splitlines()) <= 250


def test_the_keyword_table_is_the_codes() -> None:
    text = (REPO / "docs" / "ssh-settings.md").read_text()
    found = re.search(r"<!-- keywords: generated -->\n(.*?)<!-- /keywords -->", text, re.S)
    assert found is not None
    assert found.group(1) == keywords.markdown_table(), "rewrite it: keywords.markdown_table()"


# "8.4 to 10.6", "8.4p1 to 10.6p1", "OpenSSH_10.6p1": the supported range has one place.
_RANGE = re.compile(r"\b(\d+\.\d+(?:p\d+)?) to (\d+\.\d+(?:p\d+)?)\b|OpenSSH_(\d+\.\d+p\d+)")


@pytest.mark.parametrize("doc", ["README.md", "docs/ssh-settings.md", "docs/compatibility.md"])
def test_the_supported_openssh_range_is_the_codes(doc: str) -> None:
    wanted = {keywords.SUPPORTED, keywords.SUPPORTED_RELEASES, keywords.NEWEST_RELEASE}
    for m in _RANGE.finditer((REPO / doc).read_text()):
        if m.group(3):
            assert m.group(3) == keywords.NEWEST_RELEASE, m.group(0)
        elif m.group(1).split(".")[0] in ("8", "9", "10"):
            assert m.group(0) in wanted, m.group(0)
