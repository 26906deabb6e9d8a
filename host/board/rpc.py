"""The board server's wire format (``mcf serve-board`` <-> ``host.board.remote``): one TCP
connection per board, requests and answers as messages, every wait bounded by a timeout.

A message is a 4-byte little-endian header length, a UTF-8 JSON header, then the raw bytes
payloads ("blobs") whose lengths the header lists under ``"blobs"``. On connect the server
sends ``MAGIC`` and a 32-byte nonce; the client answers HMAC-SHA256(key, nonce); the server
answers ``b"OK"`` or closes. The key is ``MCF_BOARD_KEY`` (empty when unset: then the check
only tells an MCF board server from another service).

Hand-written on ``socket`` rather than ``multiprocessing.connection``: its ``Client`` has no
connect timeout (an unreachable host blocks for the kernel's SYN retries, about two minutes)
and its messages are pickles; here ``socket.settimeout`` bounds every connect, send and
receive, and nothing received is executed.
"""
from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
import socket
import struct

__all__ = ["MAGIC", "DEFAULT_PORT", "ProtocolError", "send_msg", "recv_msg", "server_handshake",
           "client_handshake", "board_key", "parse_address", "connect"]

MAGIC = b"MCF-BOARD/1\n"
DEFAULT_PORT = 7820
MAX_HEADER = 1 << 20            #: bytes of JSON in one message
MAX_BLOBS = 1 << 28             #: payload bytes in one message
_LEN = struct.Struct("<I")


class ProtocolError(OSError):
    """The peer broke the wire format (or is not an MCF board server)."""


def board_key() -> bytes:
    """The shared key of the HMAC handshake: environment ``MCF_BOARD_KEY`` (empty if unset)."""
    return os.environ.get("MCF_BOARD_KEY", "").encode()


def parse_address(text: str, what: str = "--boards") -> tuple:
    """``"host:port"`` -> ``(host, port)``; a clear ValueError naming ``what`` otherwise."""
    host, sep, port = text.strip().rpartition(":")
    if not sep or not host or not port.isdigit() or not 1 <= int(port) <= 65535:
        raise ValueError(f"{what}: {text.strip()!r} is not host:port (port 1..65535)")
    return host.strip("[]"), int(port)


def _recv_exact(sock, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(min(n - len(buf), 1 << 20))
        if not chunk:
            raise ConnectionError(f"connection closed after {len(buf)} of {n} bytes")
        buf += chunk
    return bytes(buf)


def send_msg(sock, header: dict, blobs=()):
    """Send ``header`` (JSON-able; ``"blobs"`` is set here) and the ``blobs`` (bytes) as one write."""
    blobs = [bytes(b) for b in blobs]
    head = json.dumps(dict(header, blobs=[len(b) for b in blobs])).encode()
    sock.sendall(b"".join([_LEN.pack(len(head)), head, *blobs]))


def recv_msg(sock) -> tuple:
    """One message: ``(header dict, list of blobs)``; ProtocolError on a malformed one."""
    n, = _LEN.unpack(_recv_exact(sock, 4))
    if n > MAX_HEADER:
        raise ProtocolError(f"message header of {n} bytes exceeds {MAX_HEADER}")
    try:
        head = json.loads(_recv_exact(sock, n))
        sizes = [int(k) for k in head.pop("blobs")]
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise ProtocolError(f"malformed message header: {exc}") from None
    if any(k < 0 for k in sizes) or sum(sizes) > MAX_BLOBS:
        raise ProtocolError(f"message payload sizes {sizes[:8]} out of range (at most {MAX_BLOBS} bytes)")
    return head, [_recv_exact(sock, k) for k in sizes]


def server_handshake(sock, key: bytes):
    """Send the magic and a nonce; accept the client only if it answers the nonce's HMAC."""
    nonce = secrets.token_bytes(32)
    sock.sendall(MAGIC + nonce)
    answer = _recv_exact(sock, 32)
    if not hmac.compare_digest(answer, hmac.new(key, nonce, hashlib.sha256).digest()):
        raise ProtocolError("client failed the key check (MCF_BOARD_KEY differs)")
    sock.sendall(b"OK")


def client_handshake(sock, key: bytes):
    """Check the server's magic, answer its nonce; ProtocolError if it is not an MCF board
    server or refuses the key."""
    magic = _recv_exact(sock, len(MAGIC))
    if magic != MAGIC:
        raise ProtocolError(f"not an MCF board server (it sent {magic[:16]!r}, expected {MAGIC!r})")
    nonce = _recv_exact(sock, 32)
    sock.sendall(hmac.new(key, nonce, hashlib.sha256).digest())
    try:
        ok = _recv_exact(sock, 2)
    except ConnectionError:
        ok = b""
    if ok != b"OK":
        raise ProtocolError("the board server refused the key (MCF_BOARD_KEY differs)")


def connect(host: str, port: int, timeout: float):
    """A TCP connection with ``timeout`` on connect and every later send/receive (no Nagle
    delay: requests and answers are small and alternate)."""
    sock = socket.create_connection((host, port), timeout=timeout)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock
