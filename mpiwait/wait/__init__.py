"""The wait: per-host schedule, deadline, parallelism and rate, re-checks; emits events."""
