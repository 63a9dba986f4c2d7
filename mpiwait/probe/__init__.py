"""One attempt at one host: name lookup, TCP connect, SSH login (stages/, put together by
attempt.py). The only place paramiko is used."""
