"""The modes, one entry function each: wait then exec (wait.py), --list-ready (list_ready.py),
--dry-run (dry_run.py)."""
