"""The sdist and wheel as a release makes them (scripts/build-dist: `python -m build`), installed
into a clean virtualenv of Debian's python3, then run: `mpiwait --version` and a real wait for
two loopback sshd (tests/testbed's Lab) from that install, not from this checkout.

The wheels of mpiwait's dependencies and the build backend come from a cache of the locked wheels
(requirements/bundle-linux-amd64.lock and build.lock, downloaded once with their hashes checked,
under MPIWAIT_TEST_CACHE), so the build and the install reach no index.
"""

from __future__ import annotations

import email.parser
import hashlib
import os
import platform
import shutil
import subprocess
import sys
import tarfile
import time
import zipfile
from pathlib import Path

import pytest
import testbed
from testbed import containers

import mpiwait

REPO = Path(__file__).resolve().parents[2]
LOCKS = [REPO / "requirements/bundle-linux-amd64.lock", REPO / "requirements/build.lock"]
A, B = "127.0.0.2", "127.0.0.3"

pytestmark = [
    pytest.mark.slow,  # builds the sdist and the wheel
    testbed.needs("loopback", "git", "build"),
    pytest.mark.skipif(
        platform.machine() != "x86_64", reason="the wheel cache is the amd64 lock's"
    ),
]


def locked_wheels() -> Path:
    """The locked wheels for this machine, downloaded once (pip checks every hash)."""
    key = hashlib.sha256(b"".join(p.read_bytes() for p in LOCKS)).hexdigest()[:16]
    cache = containers.CACHE / f"wheels-{key}"
    with containers._lock(cache.with_suffix(".lock")):
        if not cache.exists():
            part = Path(f"{cache}.part")
            shutil.rmtree(part, ignore_errors=True)
            argv = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
                    "--only-binary=:all:", "--require-hashes", "--dest", str(part)]  # fmt: skip
            for lock in LOCKS:
                argv += ["-r", str(lock)]
            subprocess.run(argv, check=True, capture_output=True, timeout=600)
            os.replace(part, cache)
    return cache


def offline(wheels: Path) -> dict[str, str]:
    return {**os.environ, "PIP_NO_INDEX": "1", "PIP_FIND_LINKS": str(wheels)}


@pytest.fixture(scope="module")
def wheels() -> Path:
    return locked_wheels()


@pytest.fixture(scope="module")
def dist(wheels: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    p = subprocess.run(
        [str(REPO / "scripts/build-dist"), str(out), sys.executable],
        env=offline(wheels), capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    return out


def test_sdist_and_wheel_carry_the_licence_and_metadata(dist: Path) -> None:
    version = mpiwait.__version__
    wheel = dist / f"mpiwait-{version}-py3-none-any.whl"
    sdist = dist / f"mpiwait-{version}.tar.gz"
    assert sorted(p.name for p in dist.iterdir()) == sorted([wheel.name, sdist.name])
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
        meta = email.parser.HeaderParser().parsestr(
            z.read(f"mpiwait-{version}.dist-info/METADATA").decode()
        )
        stamp = z.read("mpiwait/_build.py").decode()
    assert f"mpiwait-{version}.dist-info/licenses/LICENSE" in names
    assert "mpiwait/py.typed" in names
    assert meta["License-Expression"] == "Apache-2.0"
    assert "License" not in meta  # PEP 639: the expression only, no free text
    urls = dict(u.split(", ", 1) for u in meta.get_all("Project-URL"))
    assert urls["Source"] == "https://github.com/mpiwait/mpiwait"
    assert "Changelog" in urls and "Issues" in urls
    assert "Programming Language :: Python :: 3.11" in meta.get_all("Classifier")
    assert "Typing :: Typed" in meta.get_all("Classifier")
    commit = testbed.built_commit()
    if commit:
        assert f'COMMIT: str | None = "{commit}"' in stamp
    else:
        assert "COMMIT: str | None = None" in stamp
    with tarfile.open(sdist) as t:
        members = {m.name.split("/", 1)[1] for m in t.getmembers() if "/" in m.name}
    assert {"LICENSE", "README.md", "pyproject.toml", "mpiwait/cli.py"} <= members


def test_wheel_in_a_clean_venv_reports_its_build_and_waits_for_real_sshd(
    dist: Path, wheels: Path, lab: testbed.Lab, tmp_path: Path
) -> None:
    venv = tmp_path / "venv"
    subprocess.run(["/usr/bin/python3", "-m", "venv", str(venv)], check=True, timeout=300)
    wheel = dist / f"mpiwait-{mpiwait.__version__}-py3-none-any.whl"
    p = subprocess.run(
        [str(venv / "bin/pip"), "install", "--quiet", "--disable-pip-version-check", str(wheel)],
        env=offline(wheels), capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert p.returncode == 0, p.stderr[-3000:]
    # Nothing of this checkout on the path: the environment of a user who installed it.
    env = {k: v for k, v in testbed.mpiwait_env().items() if k != "PYTHONPATH"}
    installed = subprocess.run(
        [str(venv / "bin/python"), "-c", "import mpiwait; print(mpiwait.__file__)"],
        env=env, cwd=tmp_path, capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    assert installed.startswith(str(venv / "lib")), installed

    version = subprocess.run(
        [str(venv / "bin/mpiwait"), "--version"], env=env, cwd=tmp_path,
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert version.returncode == 0, version.stderr
    lines = version.stdout.splitlines()
    assert lines[0] == f"mpiwait, version {mpiwait.__version__}"
    if commit := testbed.built_commit():
        assert lines[1].startswith(f"commit: {commit} (")
    assert lines[2].endswith(f"({venv}/bin/python3)"), lines  # the script's interpreter

    key = lab.key("id_ed25519")
    port = lab.free_port(A, B)
    for address in (A, B):
        lab.sshd(address, port, authorized=[key])
    config = tmp_path / "ssh_config"
    config.write_text(
        f"Host *\n  Port {port}\n  User root\n  IdentityFile {key}\n"
        "  StrictHostKeyChecking no\n  UserKnownHostsFile /dev/null\n"
    )
    argv = [str(venv / "bin/mpiwait"), "-F", str(config), "--hosts", f"{A},{B}", "--timeout=60"]
    testbed.register_key(key)
    popen = subprocess.Popen(
        argv, env=env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    run = testbed.Proc(popen, argv, time.monotonic()).finish(120)
    assert run.returncode == 0, run
    assert "all 2 hosts ready" in run.stderr, run
