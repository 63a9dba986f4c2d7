"""Host sources: hostfiles (every format), discover_hosts.sh, --hosts; which entry is us."""
