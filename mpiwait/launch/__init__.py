"""After the wait: which MPI COMMAND starts, what to hand it, and the exec."""
