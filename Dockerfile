# mpiwait: wait until every MPI worker accepts an SSH login, then exec the real command.
#
# The image holds mpiwait as one self-contained directory, /opt/mpiwait: a private CPython,
# mpiwait and its dependencies, byte-compiled, nothing else. That one directory serves both uses:
#   - as the launcher's initContainer:  image: ghcr.io/mpiwait/mpiwait:0.1.0
#   - inside your own MPI image (no Python needed there, the app's Python is not touched):
#       FROM ghcr.io/mpiwait/mpiwait:0.1.0 AS mpiwait
#       FROM your-mpi-image
#       COPY --from=mpiwait /opt/mpiwait /opt/mpiwait
#       ENTRYPOINT ["/opt/mpiwait/bin/mpiwait"]
#     The MPI image needs glibc >= 2.36 (Debian 12, Ubuntu 24.04, RHEL 10 or newer) and zlib.
# See examples/ and the README's Deploy section.
#
# Build: docker build -t ghcr.io/mpiwait/mpiwait:0.1.0 .   (amd64 and arm64: every dependency
# has a wheel there, so no compiler is needed in either stage)

FROM python:3.12-slim-bookworm AS builder

ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_ROOT_USER_ACTION=ignore

# The official image's Python finds libpython through an $ORIGIN-relative rpath and its stdlib
# relative to the executable: copied out of /usr/local, it still runs.
RUN mkdir -p /opt/mpiwait/bin /opt/mpiwait/lib \
    && cp -a /usr/local/bin/python3 /usr/local/bin/python3.12 /opt/mpiwait/bin/ \
    && cp -a /usr/local/lib/libpython3.12.so* /usr/local/lib/python3.12 /opt/mpiwait/lib/

WORKDIR /src
COPY pyproject.toml README.md ./
COPY mpiwait ./mpiwait

# Install with the private interpreter (so the console script's #! points at it), then drop what
# nothing uses at run time: pip, and the GUI, test and build parts of the stdlib. The official
# image ships the stdlib without .pyc files; compile them now, since an arbitrary uid cannot write
# __pycache__ at run time and would recompile on every start.
RUN /opt/mpiwait/bin/python3 -m pip install --no-compile . \
    && rm -rf /opt/mpiwait/lib/python3.12/site-packages/pip \
        /opt/mpiwait/lib/python3.12/site-packages/pip-*.dist-info \
        /opt/mpiwait/lib/python3.12/ensurepip /opt/mpiwait/lib/python3.12/idlelib \
        /opt/mpiwait/lib/python3.12/tkinter /opt/mpiwait/lib/python3.12/turtledemo \
        /opt/mpiwait/lib/python3.12/lib2to3 /opt/mpiwait/lib/python3.12/pydoc_data \
        /opt/mpiwait/lib/python3.12/config-3.12-* \
    && find /opt/mpiwait -depth -name __pycache__ -type d -exec rm -rf {} + \
    && /opt/mpiwait/bin/python3 -m compileall -q -j 0 /opt/mpiwait/lib/python3.12 \
    && /opt/mpiwait/bin/mpiwait --version

# The final stage is plain Debian without Python, the same release the builder was made from:
# if mpiwait runs here, it runs when copied into an MPI image the same way.
FROM debian:bookworm-slim

COPY --from=builder /opt/mpiwait /opt/mpiwait

# Any uid works (OpenShift assigns one; runAsUser: 1000 is typical). A uid without a passwd entry
# takes its home from $HOME, so ~/.ssh is /home/mpiuser/.ssh, where mpi-operator mounts the job's
# key for non-root images; as root (passwd home /root) it is /root/.ssh, the operator's default.
# Nothing is written at run time: no __pycache__, no known_hosts.
ENV PATH=/opt/mpiwait/bin:$PATH \
    HOME=/home/mpiuser \
    PYTHONDONTWRITEBYTECODE=1

USER 1000

# Exec form: no shell between the runtime and mpiwait, which execs COMMAND in turn (same PID, so
# COMMAND receives the pod's signals and its exit status is the container's).
ENTRYPOINT ["/opt/mpiwait/bin/mpiwait"]
