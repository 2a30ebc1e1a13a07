"""Listening sockets for the HTTP service and the MCP server, bound before anything is announced.

uvicorn binds its address only once it starts, and a port in use or a host that does not
resolve ends the process with its own log line and exit status 3, after the caller has said
where it serves. :func:`bind` binds the sockets first, as asyncio's ``create_server`` would
(every address of the host, ``SO_REUSEADDR``, IPv6 sockets IPv6-only), and turns a failure into
a :class:`~cortex_pg.errors.ValidationError` naming the caller's host or port; :func:`run` hands
the bound sockets to uvicorn, so nothing else can take the address in between.
"""

from __future__ import annotations

import errno
import socket
from typing import Any

from cortex_pg.errors import ValidationError


def bind(host: str, port: int, *, host_field: str = "host", port_field: str = "port") -> list[socket.socket]:
    """Sockets bound to every address of ``host`` on ``port`` (0: a free port, the same for all),
    not yet listening (uvicorn listens once the application has started).

    Raises:
        ValidationError: ``host_field``: the host does not resolve, or is not an address of this
            machine; ``port_field``: the port is in use, or not allowed to this user.
    """
    try:
        infos = socket.getaddrinfo(
            host or None, port, family=socket.AF_UNSPEC, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )
    except (socket.gaierror, UnicodeError) as exc:
        reason = exc.strerror if isinstance(exc, socket.gaierror) else str(exc)
        raise ValidationError(host_field, f"{host!r} does not resolve to an address ({reason})") from None
    except OverflowError:
        raise ValidationError(port_field, f"{port} is not a port from 0 to 65535") from None
    sockets: list[socket.socket] = []
    try:
        for family, kind, proto, _name, address in dict.fromkeys(infos):  # (once each, in order)
            if port == 0 and sockets:  # the port the first socket was given
                address = (address[0], sockets[0].getsockname()[1], *address[2:])
            sock = socket.socket(family, kind, proto)
            sockets.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6 and hasattr(socket, "IPPROTO_IPV6"):
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            try:
                sock.bind(address)
            except OSError as exc:
                raise _bind_error(exc, host, address[1], host_field, port_field) from None
            sock.set_inheritable(True)
    except BaseException:
        for sock in sockets:
            sock.close()
        raise
    return sockets


def _bind_error(exc: OSError, host: str, port: int, host_field: str, port_field: str) -> ValidationError:
    if exc.errno == errno.EADDRINUSE:
        return ValidationError(port_field, f"{port} is already in use on {host or 'every interface'}")
    if exc.errno in (errno.EACCES, errno.EPERM):
        return ValidationError(port_field, f"{port} may not be bound by this user ({exc.strerror})")
    if exc.errno == errno.EADDRNOTAVAIL:
        return ValidationError(host_field, f"{host!r} is not an address of this machine")
    return ValidationError(port_field, f"cannot listen on {host}:{port} ({exc.strerror or exc})")


def port_of(sockets: list[socket.socket]) -> int:
    """The port the sockets of :func:`bind` listen on (the one chosen for port 0)."""
    return sockets[0].getsockname()[1]


def run(app: Any, sockets: list[socket.socket], **config: Any) -> None:
    """Serve ``app`` with uvicorn on the sockets of :func:`bind` until stopped; closes them.

    Args:
        config: further ``uvicorn.Config`` arguments (``log_level``, ...).
    """
    import uvicorn

    try:
        uvicorn.Server(uvicorn.Config(app, **config)).run(sockets=sockets)
    finally:
        for sock in sockets:
            sock.close()
