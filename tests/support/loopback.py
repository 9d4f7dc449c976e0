"""Servers on loopback that misbehave on purpose, for clients that must not."""

from __future__ import annotations

import socket
import struct
import threading


class LoopbackServer:
    """A socket server on loopback that answers each connection with `reply` bytes, then closes it with a reset
    (SO_LINGER 0) or a plain close; counts the connections it took."""

    def __init__(self, reply: bytes = b"", *, reset: bool = True) -> None:
        self.reply, self.reset, self.taken = reply, reset, 0
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.taken += 1
            conn.recv(65536)  # the request
            if self.reply:
                conn.sendall(self.reply)
            if self.reset:
                conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            conn.close()

    def close(self) -> None:
        self.sock.close()
