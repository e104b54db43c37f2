"""A player's gRPC client: unary calls over one HTTP/2 connection on a plain socket.

grpcio's Python client spends about 0.2 ms of interpreter time per call, and a player makes
one call per step, so the player writes the few frames a unary call needs itself: HEADERS
and DATA out; DATA and trailers back; SETTINGS, PING and WINDOW_UPDATE answered and flow
control honoured. Response headers are not decoded (HPACK): a call succeeded when one whole
gRPC message arrived before its stream ended. Any other ending is a ``ConnectionLost``.
"""

from __future__ import annotations

import socket
import struct
import time

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
DATA, HEADERS, RST_STREAM, SETTINGS, PING, GOAWAY, WINDOW_UPDATE = 0, 1, 3, 4, 6, 7, 8
END_STREAM = ACK = 0x1
END_HEADERS = 0x4
ENABLE_PUSH, INITIAL_WINDOW, MAX_FRAME = 2, 4, 5
MAX_WINDOW = 2**31 - 1
DEFAULT_WINDOW, DEFAULT_FRAME = 65535, 16384


class ConnectionLost(ConnectionError):
    """The trainer closed the connection, or ended a call without an answer."""


def frame(kind: int, flags: int, stream: int, payload: bytes = b"") -> bytes:
    """One HTTP/2 frame."""
    return (
        len(payload).to_bytes(3, "big") + bytes((kind, flags)) + stream.to_bytes(4, "big") + payload
    )


def _literal(value: bytes) -> bytes:
    """An HPACK string literal (no Huffman coding), length as a 7-bit-prefix integer."""
    if len(value) < 0x7F:
        return bytes((len(value),)) + value
    rest, out = len(value) - 0x7F, bytearray((0x7F,))
    while rest >= 0x80:
        out.append(rest & 0x7F | 0x80)
        rest >>= 7
    return bytes(out) + bytes((rest,)) + value


def request_headers(authority: str, path: str) -> bytes:
    """HPACK block of a gRPC request (static-table names, nothing added to the table)."""
    return (
        b"\x83\x86"  # :method POST, :scheme http (static table entries 3 and 6)
        + b"\x04"
        + _literal(path.encode())  # :path, literal value, not indexed
        + b"\x01"
        + _literal(authority.encode())  # :authority
        + b"\x0f\x10"
        + _literal(b"application/grpc")  # content-type (entry 31)
        + b"\x00"
        + _literal(b"te")
        + _literal(b"trailers")
    )


class UnaryChannel:
    """One connection to a gRPC server making one unary call at a time."""

    def __init__(self, host: str, port: int, method: str, connect_timeout: float) -> None:
        deadline = time.monotonic() + connect_timeout
        while True:
            try:
                self._sock = socket.create_connection((host, port), timeout=connect_timeout)
                break
            except OSError as error:
                if time.monotonic() > deadline:
                    raise ConnectionLost(f"no gRPC server on {host}:{port}: {error}") from None
                time.sleep(0.05)
        self._sock.settimeout(None)
        self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._headers = request_headers(f"{host}:{port}", method)
        self._buffer = bytearray()
        self._next_stream = 1
        self._max_frame, self._initial_window = DEFAULT_FRAME, DEFAULT_WINDOW
        self._window, self._stream_window = DEFAULT_WINDOW, DEFAULT_WINDOW
        self._received = 0
        settings = struct.pack(">HIHI", ENABLE_PUSH, 0, INITIAL_WINDOW, MAX_WINDOW)
        grow = struct.pack(">I", MAX_WINDOW - DEFAULT_WINDOW)
        self._send(PREFACE + frame(SETTINGS, 0, 0, settings) + frame(WINDOW_UPDATE, 0, 0, grow))

    def call(self, message: bytes) -> bytes:
        """Send one request message and return the response message."""
        stream, self._next_stream = self._next_stream, self._next_stream + 2
        self._stream_window = self._initial_window
        body = memoryview(b"\0" + len(message).to_bytes(4, "big") + message)
        out = frame(HEADERS, END_HEADERS, stream, self._headers)
        while True:
            size = min(self._max_frame, self._window, self._stream_window, len(body))
            if size == 0 and len(body):
                self._send(out)
                out = b""
                self._control(*self._read_frame())  # wait for the server to open the window
                continue
            self._window -= size
            self._stream_window -= size
            last = size == len(body)
            out += frame(DATA, END_STREAM if last else 0, stream, bytes(body[:size]))
            body = body[size:]
            if last:
                break
        self._send(out)
        return self._response(stream)

    def close(self) -> None:
        """Close the connection."""
        self._sock.close()

    def _response(self, stream: int) -> bytes:
        data = bytearray()
        while True:
            kind, flags, sid, payload = self._read_frame()
            if sid != stream:
                self._control(kind, flags, sid, payload)
                continue
            if kind == RST_STREAM:
                raise ConnectionLost("the trainer reset the call")
            if kind == DATA:
                data += payload
                self._received += len(payload)
            if flags & END_STREAM:
                break
        if self._received > MAX_WINDOW // 2:
            self._send(frame(WINDOW_UPDATE, 0, 0, struct.pack(">I", self._received)))
            self._received = 0
        if len(data) < 5 or data[0] != 0 or len(data) != 5 + int.from_bytes(data[1:5], "big"):
            raise ConnectionLost("the trainer ended the call without an answer")
        return bytes(data[5:])

    def _control(self, kind: int, flags: int, stream: int, payload: bytes) -> None:
        """Connection-level frames (and frames of finished streams, which are dropped)."""
        if kind == SETTINGS and not flags & ACK:
            for offset in range(0, len(payload) - 5, 6):
                key, value = struct.unpack_from(">HI", payload, offset)
                if key == MAX_FRAME:
                    self._max_frame = value
                elif key == INITIAL_WINDOW:
                    self._stream_window += value - self._initial_window
                    self._initial_window = value
            self._send(frame(SETTINGS, ACK, 0))
        elif kind == PING and not flags & ACK:
            self._send(frame(PING, ACK, 0, payload))
        elif kind == WINDOW_UPDATE:
            increment = struct.unpack(">I", payload)[0] & MAX_WINDOW
            if stream == 0:
                self._window += increment
            elif stream == self._next_stream - 2:
                self._stream_window += increment
        elif kind == GOAWAY:
            raise ConnectionLost("the trainer closed the connection (GOAWAY)")
        elif kind == RST_STREAM and stream == self._next_stream - 2:
            raise ConnectionLost("the trainer reset the call")

    def _read_frame(self) -> tuple[int, int, int, bytes]:
        header = self._read(9)
        length = int.from_bytes(header[:3], "big")
        stream = int.from_bytes(header[5:9], "big") & MAX_WINDOW
        return header[3], header[4], stream, self._read(length)

    def _read(self, size: int) -> bytes:
        while len(self._buffer) < size:
            try:
                chunk = self._sock.recv(1 << 18)
            except OSError as error:
                raise ConnectionLost(f"connection to the trainer failed: {error}") from None
            if not chunk:
                raise ConnectionLost("the trainer closed the connection")
            self._buffer += chunk
        data = bytes(self._buffer[:size])
        del self._buffer[:size]
        return data

    def _send(self, data: bytes) -> None:
        try:
            self._sock.sendall(data)
        except OSError as error:
            raise ConnectionLost(f"connection to the trainer failed: {error}") from None
