"""ssh_config as the OpenSSH that will run reads it: address, port, user, keys, host-key policy."""
