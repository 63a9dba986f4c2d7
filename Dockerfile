# mpiwait: wait until every MPI worker accepts an SSH login, then exec the real command.
#
# The image holds mpiwait as one self-contained directory, /opt/mpiwait: Debian's Python 3.11,
# mpiwait and its dependencies (wheels), byte-compiled, plus the dynamic loader and every shared
# library they load (glibc included). It needs nothing from the image it runs in, so it serves both
# uses:
#   - as the launcher's initContainer:  image: ghcr.io/mpiwait/mpiwait:0.1.0
#   - inside your own MPI image (any libc or none, with or without Python; the image's own Python
#     and libraries are not touched, and what mpiwait execs runs with the image's own libc):
#       FROM ghcr.io/mpiwait/mpiwait:0.1.0 AS mpiwait
#       FROM your-mpi-image
#       COPY --from=mpiwait /opt/mpiwait /opt/mpiwait
#       ENTRYPOINT ["/opt/mpiwait/bin/mpiwait"]
#     It must stay at /opt/mpiwait (its interpreter names its loader by that absolute path).
# See scripts/make-bundle for how the directory is made, and docs/deploy.md.
#
# Build: scripts/build-image --tag REF [--platform linux/arm64] (it passes the version, commit
# and commit time below, and copies the SBOM out); plain `docker build .` works too, unlabelled.
# Any Debian 12 base works as BASE (amd64, arm64: Debian's Python plus locked wheels, no compiler).

ARG BASE=debian:bookworm-slim

FROM ${BASE} AS builder

ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_ROOT_USER_ACTION=ignore

# Versions come from the pinned Debian release; pinning each one would only break the build.
# hadolint ignore=DL3008
RUN apt-get update \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
        python3.11-minimal libpython3.11-stdlib python3.11-venv patchelf \
    && rm -rf /var/lib/apt/lists/*

COPY scripts/make-bundle scripts/stamp-build scripts/sbom /usr/local/bin/
COPY pyproject.toml README.md LICENSE /src/
COPY requirements /src/requirements
COPY mpiwait /src/mpiwait

# The commit (written into the package for --version) and its time (the SBOM's, the stamp's).
ARG REVISION=""
ARG SOURCE_DATE_EPOCH=""

# The final stage has no shell: its /etc (root's passwd entry, so root's ~ is /root as in any
# image; no entry for other uids, which take ~ from $HOME) and /tmp are made here.
RUN MPIWAIT_REVISION="$REVISION" make-bundle /src \
    && /opt/mpiwait/bin/mpiwait --version \
    && mkdir -p /rootfs/etc /rootfs/tmp \
    && chmod 1777 /rootfs/tmp \
    && echo 'root:x:0:0:root:/root:/sbin/nologin' >/rootfs/etc/passwd \
    && echo 'root:x:0:' >/rootfs/etc/group

# Nothing but the bundle: no shell, no package manager, no libc of the image's own. The bundle
# comes first: its layer differs by architecture, so a classic builder's cache never hands an
# arm64 build the amd64 layers of the steps below.
FROM scratch

COPY --from=builder /opt/mpiwait /opt/mpiwait
COPY --from=builder /rootfs/ /

ARG VERSION=""
ARG REVISION=""
LABEL org.opencontainers.image.title="mpiwait" \
      org.opencontainers.image.description="Wait until every MPI worker accepts an SSH login, then exec mpirun." \
      org.opencontainers.image.source="https://github.com/mpiwait/mpiwait" \
      org.opencontainers.image.url="https://github.com/mpiwait/mpiwait" \
      org.opencontainers.image.documentation="https://github.com/mpiwait/mpiwait/tree/main/docs" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.version="$VERSION" \
      org.opencontainers.image.revision="$REVISION"

# Any uid works (OpenShift assigns one; runAsUser: 1000 is typical). A uid without a passwd entry
# takes its home from $HOME, so ~/.ssh is /home/mpiuser/.ssh, where mpi-operator mounts the job's
# key for non-root images; as root (passwd home /root) it is /root/.ssh, the operator's default.
# Nothing is written at run time: no __pycache__, no known_hosts.
ENV PATH=/opt/mpiwait/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    HOME=/home/mpiuser

USER 1000

# Exec form: no shell between the runtime and mpiwait, which execs COMMAND in turn (same PID, so
# COMMAND receives the pod's signals and its exit status is the container's).
ENTRYPOINT ["/opt/mpiwait/bin/mpiwait"]
