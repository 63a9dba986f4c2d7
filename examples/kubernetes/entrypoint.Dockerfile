# mpiwait added to an existing MPI image, as its ENTRYPOINT for both roles: on the launcher it
# waits for the workers and then execs the pod's args (mpirun ...); on a worker (mpi-operator
# sets K_MPI_JOB_ROLE=worker) it execs them at once (sshd).
#
# Base: mpi-operator's MPICH pi example (user mpiuser, uid 1000; sshd and ssh on port 2222 via
# /etc/ssh/ssh_config). Its own entrypoint only runs nslookup on the hosts; mpiwait replaces it.
# For an Intel MPI image, whose entrypoint also sources /opt/intel/oneapi/setvars.sh, keep it
# behind mpiwait instead: ENTRYPOINT ["/opt/mpiwait/bin/mpiwait", "/entrypoint.sh"].
#
# Build: docker build -f entrypoint.Dockerfile -t ghcr.io/mpiwait/pi-mpich-mpiwait:0.1.0 .
FROM ghcr.io/mpiwait/mpiwait:0.1.0 AS mpiwait

FROM mpioperator/mpi-pi:mpich

# One self-contained directory (its own Python); the image's own Python, if any, is not touched.
COPY --from=mpiwait /opt/mpiwait /opt/mpiwait

ENTRYPOINT ["/opt/mpiwait/bin/mpiwait"]
