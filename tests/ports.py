"""Free loopback ports for servers the tests start.

Ports are taken below the kernel's ephemeral range: a port from that range
(what ``bind(("127.0.0.1", 0))`` hands out) can be taken by any outgoing
connection of the parallel test processes between the moment it is picked
and the moment a server binds it, which made a Galera joiner's state
transfer fail now and then.
"""

import random
import socket

_LOWEST = 20000


def _ephemeral_start():
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def free_ports(count):
    """``count`` distinct ports on 127.0.0.1 that nothing listens on now,
    outside the ephemeral range."""
    top = max(_ephemeral_start(), _LOWEST + 1000)
    ports = []
    while len(ports) < count:
        port = random.randrange(_LOWEST, top)
        if port in ports:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        ports.append(port)
    return ports


def free_port():
    return free_ports(1)[0]
