# mpiwait as the ENTRYPOINT of an Intel MPI image, in place of the operator's entrypoint.sh.
#
# mpi-operator's Intel images start with /entrypoint.sh, which sources setvars.sh and, on the
# launcher, loops over nslookup of its own name and each worker's (10 tries, then carries on
# anyway), because Intel MPI's hydra proxies on the workers call back to the launcher by its
# name. mpiwait replaces both: it waits until every worker accepts the job's key, then execs
# mpirun with I_MPI_HYDRA_IFACE set to the interface the workers answered on, so the call-back
# goes to the launcher's address and its name no longer matters (logged as `launch: ...`).
#
# Intel MPI's mpirun loads its own environment (its env/vars.sh) when I_MPI_ROOT is unset, so
# putting its bin directory on PATH is all setvars.sh was needed for.
#
# Build: docker build -f intel-entrypoint.Dockerfile -t ghcr.io/mpiwait/pi-intel-mpiwait:0.1.0 .
FROM ghcr.io/mpiwait/mpiwait:0.1.0 AS mpiwait

FROM mpioperator/mpi-pi:intel

COPY --from=mpiwait /opt/mpiwait /opt/mpiwait

ENV PATH=/opt/intel/oneapi/mpi/latest/bin:$PATH
ENTRYPOINT ["/opt/mpiwait/bin/mpiwait"]
