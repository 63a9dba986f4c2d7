"""The release's own files, offline: one place for the version, the locks, the build stamp, the
SBOM generator, the release workflow (its build steps the repo's scripts; actionlint checks it in
tests/lint/).

The builds themselves run in tests/integration/test_dist.py (sdist and wheel) and
tests/containers/test_containers.py (the image, twice, on both architectures).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import testbed
import tomllib
import yaml
from packaging.requirements import Requirement

import mpiwait

REPO = Path(__file__).resolve().parents[2]
SCRIPTS = REPO / "scripts"
LOCKS = {arch: REPO / f"requirements/bundle-linux-{arch}.lock" for arch in ("amd64", "arm64")}
WORKFLOW = REPO / ".github/workflows/release.yml"
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())

# Lines that record a past run of a given version (the benchmarks' results), not a copy to keep
# in step: they stay true when the version moves on.
RECORDS = re.compile(r"mpiwait \S+ (at|\(commit) [0-9a-f]{7}")


def _run(*argv: str | Path, **kw: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(a) for a in argv], capture_output=True, text=True, timeout=120, **kw)  # type: ignore[call-overload]


# --- the version ------------------------------------------------------------------------------


def test_version_script_prints_the_package_version() -> None:
    assert _run(sys.executable, SCRIPTS / "version").stdout == f"{mpiwait.__version__}\n"


def test_no_copy_of_the_version_is_stale() -> None:
    p = _run(sys.executable, SCRIPTS / "version", "--check")
    assert p.returncode == 0, p.stdout


def _tree_copy(dest: Path) -> Path:
    # What .gitignore leaves out, benchmark results included: they record the version they ran.
    ignore = shutil.ignore_patterns(
        ".git", ".venv", "build", "dist", "__pycache__", "*.egg-info", ".*_cache", ".hypothesis"
    )
    shutil.copytree(REPO, dest, ignore=ignore, symlinks=True)
    shutil.rmtree(dest / "benchmarks" / "results", ignore_errors=True)
    return dest


def test_a_new_version_reaches_every_copy(tmp_path: Path) -> None:
    """In a copy of the tree: __version__ moved on, --check names the stale copies, --write
    fixes all of them, and the old version is then named nowhere but in history."""
    tree = _tree_copy(tmp_path / "tree")
    old = mpiwait.__version__
    init = tree / "mpiwait/__init__.py"
    init.write_text(init.read_text().replace(f'"{old}"', '"98.76.5"'))
    script = [sys.executable, SCRIPTS / "version", "--root", tree]

    stale = _run(*script, "--check")
    assert stale.returncode == 1
    named = {line.split(":", 1)[0] for line in stale.stdout.splitlines()}
    assert {"Dockerfile", "docs/deploy.md", "examples/kubernetes/initcontainer.yaml"} <= named

    assert _run(*script, "--write").returncode == 0
    assert _run(*script, "--check").returncode == 0
    pattern = re.compile(rf"(?<![\w.]){re.escape(old)}(?![\w.])")
    left = []
    for path in sorted(tree.rglob("*")):
        rel = path.relative_to(tree)
        if not path.is_file() or rel.parts[0] == "requirements" or str(rel) == "CHANGELOG.md":
            continue  # the locks pin other projects' versions; the changelog is history
        try:
            text = path.read_text()
        except UnicodeDecodeError:
            continue
        left += [
            f"{rel}:{n}: {line.strip()}"
            for n, line in enumerate(text.splitlines(), 1)
            if pattern.search(line) and not RECORDS.search(line)
        ]
    assert left == []


def test_changelog_has_unreleased_on_top_and_a_section_for_this_version() -> None:
    headings = re.findall(r"^## \[([^\]]+)\]", (REPO / "CHANGELOG.md").read_text(), re.M)
    assert headings[0] == "Unreleased"
    assert mpiwait.__version__ in headings


# --- the locks --------------------------------------------------------------------------------


def _pins(lock: Path) -> dict[str, tuple[str, str]]:
    """name -> (version, sha256); every requirement line must carry exactly one hash."""
    text = lock.read_text()
    entries = re.findall(
        r"^([a-z0-9._-]+)==(\S+) \\\n\s+--hash=sha256:([0-9a-f]{64})\n", text, re.M
    )
    names = re.findall(r"^[a-z0-9._-]+==", text, re.M)
    assert len(entries) == len(names), f"{lock.name}: a pin without its hash"
    return {name: (version, sha) for name, version, sha in entries}


@pytest.mark.parametrize("arch", sorted(LOCKS))
def test_lock_pins_every_dependency_within_pyproject(arch: str) -> None:
    pins = _pins(LOCKS[arch])
    for spec in PYPROJECT["project"]["dependencies"]:
        req = Requirement(spec)
        assert req.name in pins, f"{req.name} is not in {LOCKS[arch].name} (run scripts/lock)"
        version = pins[req.name][0]
        assert req.specifier.contains(version), f"{req.name}=={version} is outside {spec}"
    # paramiko's own dependencies came with it (the lock is a closure, resolved by pip)
    assert {"cryptography", "bcrypt", "pynacl"} <= set(pins)


def test_locks_of_both_architectures_pin_the_same_versions() -> None:
    amd64, arm64 = (_pins(LOCKS[a]) for a in ("amd64", "arm64"))
    assert {n: v for n, (v, _) in amd64.items()} == {n: v for n, (v, _) in arm64.items()}
    # the compiled wheels differ by architecture, the pure ones do not
    assert amd64["cryptography"][1] != arm64["cryptography"][1]
    assert amd64["click"][1] == arm64["click"][1]


def test_build_lock_pins_the_build_backend() -> None:
    pins = _pins(REPO / "requirements/build.lock")
    for spec in PYPROJECT["build-system"]["requires"]:
        req = Requirement(spec)
        assert req.specifier.contains(pins[req.name][0])


# --- the commit stamp -------------------------------------------------------------------------


def test_stamp_build_writes_the_commit_version_reports(tmp_path: Path) -> None:
    (tmp_path / "mpiwait").mkdir()
    shutil.copy(REPO / "mpiwait/_build.py", tmp_path / "mpiwait/_build.py")
    commit = "0123456789abcdef0123456789abcdef01234567"
    p = _run(SCRIPTS / "stamp-build", tmp_path, commit, "1764597600")
    assert p.returncode == 0, p.stderr
    namespace: dict[str, object] = {}
    exec((tmp_path / "mpiwait/_build.py").read_text(), namespace)
    assert namespace["COMMIT"] == commit
    assert namespace["COMMIT_DATE"] == "2025-12-01T14:00:00Z"


def test_stamp_build_refuses_what_is_not_a_commit(tmp_path: Path) -> None:
    (tmp_path / "mpiwait").mkdir()
    p = _run(SCRIPTS / "stamp-build", tmp_path, "main; rm -rf /")
    assert p.returncode == 2
    assert p.stderr.startswith("stamp-build: REVISION must be a commit id")
    assert not (tmp_path / "mpiwait/_build.py").exists()


def test_the_checkout_is_not_stamped() -> None:
    """_build.py is stamped only in a build's copy: committed, it says nothing."""
    from mpiwait import _build

    assert _build.COMMIT is None and _build.COMMIT_DATE is None


# --- the SBOM generator -----------------------------------------------------------------------


def _fake_site(site: Path, dists: dict[str, str]) -> None:
    for name, meta in dists.items():
        info = site / f"{name}.dist-info"
        info.mkdir(parents=True)
        (info / "METADATA").write_text(meta)


def test_sbom_lists_wheels_with_hashes_and_debian_packages(tmp_path: Path) -> None:
    site = tmp_path / "site"
    _fake_site(
        site,
        {
            "mpiwait-1.2.3": "Metadata-Version: 2.4\nName: mpiwait\nVersion: 1.2.3\n"
            "License-Expression: Apache-2.0\n",
            "paramiko-4.0.0": "Metadata-Version: 2.1\nName: paramiko\nVersion: 4.0.0\n"
            "License: LGPL-2.1\n",
            "PyNaCl-1.6.2": "Metadata-Version: 2.1\nName: PyNaCl\nVersion: 1.6.2\n"
            "Classifier: License :: OSI Approved :: Apache Software License\n",
        },
    )
    sha = {"paramiko": "a" * 64, "pynacl": "b" * 64}
    lock = tmp_path / "lock"
    lock.write_text(
        f"paramiko==4.0.0 \\\n    --hash=sha256:{sha['paramiko']}\n"
        f"pynacl==1.6.2 \\\n    --hash=sha256:{sha['pynacl']}\n"
    )
    debs = tmp_path / "debs"
    debs.write_text("libc6 2.36-9+deb12u14 arm64\nzlib1g 1:1.2.13.dfsg-1 arm64\n")
    out = tmp_path / "sbom.json"
    env = {**os.environ, "SOURCE_DATE_EPOCH": "1764597600"}
    argv = [sys.executable, SCRIPTS / "sbom", "--site", site, "--lock", lock, "--debs", debs]
    assert _run(*argv, "--out", out, env=env).returncode == 0

    bom = json.loads(out.read_text())
    assert (bom["bomFormat"], bom["specVersion"]) == ("CycloneDX", "1.5")
    assert bom["metadata"]["timestamp"] == "2025-12-01T14:00:00Z"
    assert bom["metadata"]["component"]["purl"] == "pkg:pypi/mpiwait@1.2.3"
    by_purl = {c["purl"]: c for c in bom["components"]}
    assert set(by_purl) == {
        "pkg:pypi/paramiko@4.0.0",
        "pkg:pypi/pynacl@1.6.2",
        "pkg:deb/debian/libc6@2.36-9+deb12u14?arch=arm64&distro=debian-12",
        "pkg:deb/debian/zlib1g@1:1.2.13.dfsg-1?arch=arm64&distro=debian-12",
    }
    assert by_purl["pkg:pypi/paramiko@4.0.0"]["hashes"] == [
        {"alg": "SHA-256", "content": sha["paramiko"]}
    ]
    assert by_purl["pkg:pypi/paramiko@4.0.0"]["licenses"] == [{"license": {"name": "LGPL-2.1"}}]
    # the same inputs give the same file, serial number included (no clock, no random)
    again = tmp_path / "again.json"
    assert _run(*argv, "--out", again, env=env).returncode == 0
    assert again.read_bytes() == out.read_bytes()
    _validate_cyclonedx(out.read_text())


def _validate_cyclonedx(text: str) -> None:
    """Against CycloneDX 1.5's JSON schema, as cyclonedx-python-lib ships it."""
    testbed.require("cyclonedx")
    from cyclonedx.schema import SchemaVersion
    from cyclonedx.validation.json import JsonStrictValidator

    error = JsonStrictValidator(SchemaVersion.V1_5).validate_str(text)
    assert error is None, error


# --- the release workflow ---------------------------------------------------------------------


def _run_steps() -> dict[str, list[str]]:
    jobs = yaml.safe_load(WORKFLOW.read_text())["jobs"]
    return {name: [s["run"] for s in job["steps"] if "run" in s] for name, job in jobs.items()}


def test_release_workflow_builds_with_the_scripts_the_tests_run() -> None:
    runs = _run_steps()
    assert any("scripts/build-image --platform" in r for r in runs["image"])
    assert any("scripts/build-dist dist" in r for r in runs["dist"])
    assert any("bash .ci/run" in r for r in runs["test"])
    assert any("scripts/version --check" in r for r in runs["version"])
    image = yaml.safe_load(WORKFLOW.read_text())["jobs"]["image"]
    assert image["strategy"]["matrix"]["arch"] == ["amd64", "arm64"]
    every_run = "\n".join(r for job in runs.values() for r in job)
    for script in re.findall(r"scripts/[a-z-]+", every_run):
        assert (REPO / script).is_file() and os.access(REPO / script, os.X_OK), script


def test_release_workflow_leaves_the_cluster_tier_out_saying_why() -> None:
    """GitHub's runners mount cgroup v2 only, where the tier cannot run (testbed.cluster.host):
    .ci/run deselects it there, rather than failing on its strict-mode skip."""
    steps = yaml.safe_load(WORKFLOW.read_text())["jobs"]["test"]["steps"]
    run = next(s for s in steps if "bash .ci/run" in s.get("run", ""))
    assert run["env"]["MPIWAIT_TEST_LEAVE_OUT"] == "cluster"
    text = WORKFLOW.read_text()
    assert "The cluster tier is left out here" in text and "cgroup v2 only" in text


def test_release_workflow_pushes_where_the_examples_pull_from() -> None:
    workflow = yaml.safe_load(WORKFLOW.read_text())
    registry = workflow["env"]["IMAGE"]
    assert registry == "ghcr.io/mpiwait/mpiwait"
    examples = workflow["jobs"]["examples"]["strategy"]["matrix"]["example"]
    pushed = {registry} | {f"ghcr.io/mpiwait/{e['image']}" for e in examples}
    for e in examples:
        assert (REPO / "examples/kubernetes" / e["dockerfile"]).is_file()
    pulled = set()
    for path in [*REPO.glob("examples/**/*"), REPO / "Dockerfile", *REPO.glob("docs/*.md")]:
        if path.is_file():
            pulled |= set(re.findall(r"ghcr\.io/mpiwait/[a-z0-9-]+", path.read_text()))
    assert pulled and pulled <= pushed, pulled - pushed


# --- the package index's page -----------------------------------------------------------------


def test_readme_links_work_on_a_package_index() -> None:
    """README.md is the package's description on PyPI, where a relative link leads nowhere:
    every link is absolute, or an anchor of one of README's own headings."""
    text = (REPO / "README.md").read_text()
    anchors = {
        re.sub(r"[^\w\- ]", "", h).strip().lower().replace(" ", "-")
        for h in re.findall(r"^#+ (.+)$", text, re.M)
    }
    broken = [
        target
        for target in re.findall(r"\]\(([^)\s]+)\)", text)
        if not target.startswith(("https://", "http://"))
        and not (target.startswith("#") and target[1:] in anchors)
    ]
    assert broken == []
    # the absolute links into this repository must still name files and folders it has
    repo_link = r"\]\(https://github\.com/mpiwait/mpiwait/(?:blob|tree)/main/([^)#\s]+)"
    ours = re.findall(repo_link, text)
    assert ours and [path for path in ours if not (REPO / path).exists()] == []
