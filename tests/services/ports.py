"""Loopback port helpers for the throwaway test servers."""

from __future__ import annotations

import socket

LOOPBACK = "127.0.0.1"


def free_port(host: str = LOOPBACK) -> int:
    """Returns a TCP port on ``host`` that nothing listens on right now.

    The kernel picks the port; the socket is closed before returning, so another process could
    take it in between. Callers that start a server retry with a new port when the bind fails.

    Args:
        host: Address to bind on.

    Returns:
        The port number.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        port: int = sock.getsockname()[1]
        return port


def port_open(port: int, host: str = LOOPBACK, timeout: float = 0.5) -> bool:
    """Tells whether something accepts TCP connections on ``host:port``.

    Args:
        port: Port to probe.
        host: Address to probe.
        timeout: Connect timeout in seconds.

    Returns:
        True when a connection was accepted.
    """
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False
