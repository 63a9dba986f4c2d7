"""Events to text or JSON lines, the summary, the termination log, the dry-run plans."""
