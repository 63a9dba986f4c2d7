"""mpiwait's benchmarks: every scenario of the performance issue against real sshd hosts.

Run ``benchmarks/run --help`` (or ``python3 -m benchmarks --help``) from the repository root, as
root. The worker hosts come from the test bed library (tests/testbed/): network namespaces
with a real sshd each, or, for hundreds of hosts, one sshd serving many loopback addresses in a
namespace of its own (testbed.LoopBed). No traffic leaves the machine and no name lookup
reaches a DNS server: every process under test resolves names from a hosts file only.
"""
