"""mpiwait: wait until every MPI worker accepts an SSH login, then exec the real command."""

__version__ = "0.1.0"
