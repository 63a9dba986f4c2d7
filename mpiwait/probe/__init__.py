"""One attempt at one host: name lookup, TCP connect, SSH login. The only place paramiko is used."""
