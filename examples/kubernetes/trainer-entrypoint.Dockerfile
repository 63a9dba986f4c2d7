# mpiwait as the ENTRYPOINT of Trainer v2's Open MPI image (mpioperator/mpi-pi:openmpi, Open
# MPI 5.0.7), for trainer-v2-entrypoint.yaml (and, under mpi-operator, bash-entrypoint.yaml,
# whose launcher runs mpirun from a bash script). On the launcher it waits for every node, then execs
# mpirun with the PRRTE names of the OMPI_MCA_orte_* variables Trainer sets, which Open MPI 5
# ignores (without them it runs every rank on the launcher: trainer #4028). On a node (no
# hostfile, no role variable, COMMAND sshd) it execs sshd at once.
#
# Build: docker build -f trainer-entrypoint.Dockerfile -t ghcr.io/mpiwait/pi-openmpi-mpiwait:0.1.0 .
FROM ghcr.io/mpiwait/mpiwait:0.1.0 AS mpiwait

FROM mpioperator/mpi-pi:openmpi

COPY --from=mpiwait /opt/mpiwait /opt/mpiwait

ENTRYPOINT ["/opt/mpiwait/bin/mpiwait"]
