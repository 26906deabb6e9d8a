"""The board server's wire format (``mcf serve-board`` <-> ``host.board.remote``), protocol
``MCF-BOARD/2``: one TCP connection per board, a mutual HMAC-SHA256 handshake, then requests and
answers as authenticated messages; every wait is bounded by a deadline.

Handshake (``K`` = the shared key ``MCF_BOARD_KEY``; ``Ns``, ``Nc``: 32 random bytes each)::

    server -> client   MAGIC Ns
    client -> server   MAGIC Nc HMAC(K, "mcf-client" Ns Nc)
    server -> client   "OK" HMAC(K, "mcf-server" Ns Nc)      (or it closes: wrong key)

Each side checks the other's proof (``hmac.compare_digest``), so a client also refuses a server
that does not know the key; both then use the session key ``S = HMAC(K, "mcf-session" Ns Nc)``.
The whole handshake has one deadline.

A message is a 16-byte prefix ``<QII``: its sequence number, the JSON header's length and the
number of payloads ("blobs"); the blobs' lengths (``<Q`` each); the UTF-8 JSON header (an
object); the blobs; a 32-byte ``HMAC(S, direction, prefix, lengths, header, blobs)`` with
direction ``"mcf-c2s"`` or ``"mcf-s2c"``. Sequence numbers count 0, 1, ... per direction: a
replayed, reordered, reflected or altered message fails the check and closes the connection.
The receiver checks the sequence number and every size against its :class:`Limits` from the
prefix and lengths before it reads (or allocates for) the header and blobs, reads the whole
message within one deadline (not a timeout per read, so a peer trickling bytes is dropped),
verifies the MAC before parsing the header, and parses it strictly (no ``NaN``/``Infinity``, no
runaway nesting): every malformed message is a :class:`ProtocolError`.

With the empty key (``MCF_BOARD_KEY`` unset) the protocol works unchanged but proves nothing, so
the server allows it only on a loopback address (``host.board.board_server``).

Hand-written on ``socket`` rather than ``multiprocessing.connection``: its ``Client`` has no
connect timeout (an unreachable host blocks for the kernel's SYN retries, about two minutes)
and its messages are pickles; here nothing received is executed.
"""
from __future__ import annotations

import dataclasses
import hashlib
import hmac
import ipaddress
import json
import os
import secrets
import socket
import struct
import time

__all__ = ["MAGIC", "DEFAULT_PORT", "MIN_KEY_BYTES", "ProtocolError", "Limits", "Channel",
           "server_handshake", "client_handshake", "board_key", "is_loopback", "parse_address",
           "connect"]

MAGIC = b"MCF-BOARD/2\n"
DEFAULT_PORT = 7820
MIN_KEY_BYTES = 16              #: shortest MCF_BOARD_KEY a server on a non-loopback address accepts
NONCE_BYTES = 32
MAC_BYTES = 32
_PREFIX = struct.Struct("<QII")  # sequence number, header bytes, blob count
_SIZE = struct.Struct("<Q")
_CLIENT, _SERVER, _SESSION = b"mcf-client", b"mcf-server", b"mcf-session"
_C2S, _S2C = b"mcf-c2s", b"mcf-s2c"


class ProtocolError(OSError):
    """The peer broke the wire format or failed authentication (or is not an MCF board server)."""


@dataclasses.dataclass(frozen=True)
class Limits:
    """What one received message may be; each is checked before the bytes are read.

    max_header: bytes of JSON header; max_blobs: payloads in one message; max_payload: bytes of
    all its payloads together; message_timeout: seconds to receive a whole message once its
    first byte has arrived (also the bound on sending one)."""
    max_header: int = 1 << 16
    max_blobs: int = 16
    max_payload: int = 1 << 26
    message_timeout: float = 30.0

    def __post_init__(self):
        for name in ("max_header", "max_blobs", "max_payload"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{name}={v!r} must be an integer >= 1")
        if not self.message_timeout > 0:
            raise ValueError(f"message_timeout={self.message_timeout!r} must be > 0 seconds")


def board_key() -> bytes:
    """The shared key of the handshake: environment ``MCF_BOARD_KEY`` (empty if unset)."""
    return os.environ.get("MCF_BOARD_KEY", "").encode()


def is_loopback(host: str) -> bool:
    """Whether ``host`` (an address or a name) reaches this machine only: every address it
    resolves to is a loopback one (127.0.0.0/8, ::1). The wildcard addresses are not."""
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(host, None)
    except OSError:
        return False
    addrs = {ipaddress.ip_address(i[4][0].split("%")[0]) for i in infos}
    return bool(addrs) and all(a.is_loopback for a in addrs)


def parse_address(text: str, what: str = "--boards") -> tuple:
    """``"host:port"`` -> ``(host, port)``; a clear ValueError naming ``what`` otherwise."""
    host, sep, port = text.strip().rpartition(":")
    if not sep or not host or not port.isdigit() or not 1 <= int(port) <= 65535:
        raise ValueError(f"{what}: {text.strip()!r} is not host:port (port 1..65535)")
    return host.strip("[]"), int(port)


def _recv_exact(sock, n: int, deadline: float, what: str) -> bytes:
    """``n`` bytes, all by the monotonic ``deadline`` (TimeoutError naming ``what`` otherwise);
    ConnectionError if the peer closes first. Allocates ``n`` bytes: callers check ``n`` first."""
    buf = bytearray(n)
    view, got = memoryview(buf), 0
    while got < n:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError(f"timed out: {what}: only {got} of {n} bytes arrived within the deadline")
        sock.settimeout(left)
        try:
            k = sock.recv_into(view[got:], min(n - got, 1 << 20))
        except TimeoutError:
            raise TimeoutError(f"timed out: {what}: only {got} of {n} bytes arrived within the "
                               f"deadline") from None
        if not k:
            raise ConnectionError(f"{what}: connection closed after {got} of {n} bytes")
        got += k
    return bytes(buf)


def _send(sock, data: bytes, deadline: float):
    left = deadline - time.monotonic()
    if left <= 0:
        raise TimeoutError("send: deadline passed")
    sock.settimeout(left)                 # sendall: the timeout bounds the whole call
    sock.sendall(data)


def _reject_constant(name):
    raise ValueError(f"{name} is not a JSON number")


def _parse_header(raw: bytes) -> dict:
    """The header's JSON object; ProtocolError on anything else (strict: no NaN/Infinity,
    integers of at most 4300 digits, nesting bounded by the interpreter's recursion limit)."""
    try:
        head = json.loads(raw.decode("utf-8"), parse_constant=_reject_constant)
    except (ValueError, RecursionError, OverflowError, TypeError, MemoryError) as exc:
        raise ProtocolError(f"malformed message header: {type(exc).__name__}: {str(exc)[:200]}") from None
    if not isinstance(head, dict):
        raise ProtocolError(f"malformed message header: a JSON object expected, got {type(head).__name__}")
    return head


class Channel:
    """One authenticated connection's messages (module docstring): ``send`` and ``recv``, with
    this side's sequence numbers and the session key. ``limits`` bound what ``recv`` accepts."""

    def __init__(self, sock, session_key: bytes, *, server: bool, limits: Limits = Limits()):
        self.sock, self.limits = sock, limits
        self._key = session_key
        self._out, self._in = (_S2C, _C2S) if server else (_C2S, _S2C)
        self.sent = self.received = 0          # the next sequence number each way

    def _mac(self, label: bytes, *parts) -> bytes:
        m = hmac.new(self._key, label, hashlib.sha256)
        for p in parts:
            m.update(p)
        return m.digest()

    def send(self, header: dict, blobs=(), *, timeout: float | None = None):
        """Send ``header`` (a JSON-able dict) and ``blobs`` (bytes) as one message, within
        ``timeout`` seconds (default: ``limits.message_timeout``)."""
        self.send_raw(json.dumps(header, allow_nan=False).encode(), blobs, timeout=timeout)

    def send_raw(self, head: bytes, blobs=(), *, timeout: float | None = None):
        """``send`` with the header's bytes as given (the MAC is still right: tests use it to
        send what a peer holding the key could)."""
        blobs = [bytes(b) for b in blobs]
        prefix = _PREFIX.pack(self.sent, len(head), len(blobs))
        sizes = b"".join(_SIZE.pack(len(b)) for b in blobs)
        mac = self._mac(self._out, prefix, sizes, head, *blobs)
        deadline = time.monotonic() + (self.limits.message_timeout if timeout is None else timeout)
        self.sent += 1
        _send(self.sock, b"".join([prefix, sizes, head, *blobs, mac]), deadline)

    def recv(self, wait: float | None, *, deadline: float | None = None) -> tuple:
        """The next message ``(header dict, list of blobs)``. Waits up to ``wait`` seconds for its
        first byte (None: forever; TimeoutError after), then the whole message must arrive by
        ``deadline`` (monotonic; default: ``limits.message_timeout`` after its first byte).
        ConnectionError if the peer closed between messages; ProtocolError if the message is
        malformed, too large, out of sequence or fails its MAC."""
        lim = self.limits
        self.sock.settimeout(wait)
        if not self.sock.recv(1, socket.MSG_PEEK):
            raise ConnectionError("the peer closed the connection")
        if deadline is None:
            deadline = time.monotonic() + lim.message_timeout
        prefix = _recv_exact(self.sock, _PREFIX.size, deadline, "message prefix")
        seq, nhead, nblobs = _PREFIX.unpack(prefix)
        if seq != self.received:
            raise ProtocolError(f"message sequence number {seq}, expected {self.received}: "
                                f"replayed, reordered or lost message")
        if nhead > lim.max_header:
            raise ProtocolError(f"message header of {nhead} bytes exceeds max_header={lim.max_header}")
        if nblobs > lim.max_blobs:
            raise ProtocolError(f"message with {nblobs} payloads exceeds max_blobs={lim.max_blobs}")
        sizes_raw = _recv_exact(self.sock, _SIZE.size * nblobs, deadline, "payload sizes")
        sizes = [_SIZE.unpack_from(sizes_raw, _SIZE.size * k)[0] for k in range(nblobs)]
        if sum(sizes) > lim.max_payload:
            raise ProtocolError(f"message payloads of {sum(sizes)} bytes exceed max_payload={lim.max_payload}")
        head = _recv_exact(self.sock, nhead, deadline, "message header")
        blobs = [_recv_exact(self.sock, k, deadline, "message payload") for k in sizes]
        mac = _recv_exact(self.sock, MAC_BYTES, deadline, "message MAC")
        if not hmac.compare_digest(mac, self._mac(self._in, prefix, sizes_raw, head, *blobs)):
            raise ProtocolError("message authentication failed (altered, replayed or not from the "
                                "session's peer)")
        self.received += 1
        return _parse_header(head), blobs

    def close(self):
        self.sock.close()


def _proofs(key: bytes, ns: bytes, nc: bytes) -> tuple:
    mac = lambda label: hmac.new(key, label + ns + nc, hashlib.sha256).digest()  # noqa: E731
    return mac(_CLIENT), mac(_SERVER), mac(_SESSION)


def server_handshake(sock, key: bytes, timeout: float, limits: Limits = Limits()) -> Channel:
    """The server's side of the handshake (module docstring), all within ``timeout`` seconds:
    a :class:`Channel`, or ProtocolError if the client is not an ``MCF-BOARD/2`` client or does
    not know the key (nothing is sent to it then but the magic and the nonce)."""
    deadline = time.monotonic() + timeout
    ns = secrets.token_bytes(NONCE_BYTES)
    _send(sock, MAGIC + ns, deadline)
    magic = _recv_exact(sock, len(MAGIC), deadline, "handshake")
    if magic != MAGIC:
        raise ProtocolError(f"not an {MAGIC.strip().decode()} client (it sent {magic!r})")
    nc = _recv_exact(sock, NONCE_BYTES, deadline, "handshake")
    proof = _recv_exact(sock, MAC_BYTES, deadline, "handshake")
    client, server, session = _proofs(key, ns, nc)
    if not hmac.compare_digest(proof, client):
        raise ProtocolError("client failed the key check (MCF_BOARD_KEY differs)")
    _send(sock, b"OK" + server, deadline)
    return Channel(sock, session, server=True, limits=limits)


def client_handshake(sock, key: bytes, timeout: float, limits: Limits = Limits()) -> Channel:
    """The client's side of the handshake, all within ``timeout`` seconds: a :class:`Channel`, or
    ProtocolError if the peer is not an ``MCF-BOARD/2`` server, refuses the key or does not prove
    that it knows the key itself."""
    deadline = time.monotonic() + timeout
    try:
        magic = _recv_exact(sock, len(MAGIC), deadline, "handshake")
    except ConnectionError:
        raise ProtocolError("the server closed the connection before the handshake (its connection "
                            "limit is reached, or it is not an MCF board server)") from None
    if magic != MAGIC:
        if magic.startswith(b"MCF-BOARD/"):
            raise ProtocolError(f"the board server speaks {magic.strip().decode(errors='replace')}, this "
                                f"client {MAGIC.strip().decode()}: run the same mcf version on both")
        raise ProtocolError(f"not an MCF board server (it sent {magic[:16]!r}, expected {MAGIC!r})")
    ns = _recv_exact(sock, NONCE_BYTES, deadline, "handshake")
    nc = secrets.token_bytes(NONCE_BYTES)
    client, server, session = _proofs(key, ns, nc)
    _send(sock, MAGIC + nc + client, deadline)
    try:
        answer = _recv_exact(sock, 2 + MAC_BYTES, deadline, "handshake")
    except ConnectionError:
        answer = b""
    if answer[:2] != b"OK":
        raise ProtocolError("the board server refused the key (MCF_BOARD_KEY differs)")
    if not hmac.compare_digest(answer[2:], server):
        raise ProtocolError("the board server failed the key check: it does not know MCF_BOARD_KEY "
                            "(not the board server you meant?)")
    return Channel(sock, session, server=False, limits=limits)


def connect(host: str, port: int, timeout: float):
    """A TCP connection made within ``timeout`` seconds (no Nagle delay: requests and answers
    are small and alternate)."""
    sock = socket.create_connection((host, port), timeout=timeout)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock
