"""The stages of one attempt, one small module each, in the order they run (probe/attempt.py
puts them together): dns.py → tcp.py → turned_away.py → ssh.py, which runs handshake.py,
host_key.py, login.py, remote_command.py and daemon.py on one paramiko transport. Each returns
what the next needs, or the Outcome that ends the attempt; none knows about the others or about
retries."""
