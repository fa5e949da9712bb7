"""An authenticating reverse proxy, as the browser tests play one (``HeaderProxy``)."""

from __future__ import annotations

import contextlib
import socket
import threading


class HeaderProxy:
    """An authenticating reverse proxy, as a test plays it: on a loopback port of its own it
    forwards every connection to ``upstream`` (a base URL), setting ``header: value`` (and
    each of ``more``) on each request it passes on (a client's own header of that name
    dropped, or kept where the proxy ``appends``, as a careless one would), the websocket's
    upgrade request included, then pipes the websocket's bytes both ways. Chromium 150 no
    longer sends Playwright's extra headers on a websocket, as a proxy would. ``via``: the
    app's address it dials (the app then sees the connection come from that address, where
    it is one of this machine's own), loopback by default."""

    def __init__(
        self,
        upstream: str,
        header: str,
        value: str,
        more: dict | None = None,
        appends=False,
        via: str = "127.0.0.1",
    ):
        self.upstream = (via, int(upstream.rsplit(":", 1)[1]))  # ``via``: the address dialled
        fields = {header: value, **(more or {})}
        self.line = b"\r\n".join(f"{k}: {v}".encode() for k, v in fields.items())
        self.names = () if appends else tuple(k.lower().encode() + b":" for k in fields)
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        threading.Thread(target=self._accept, daemon=True).start()

    def close(self) -> None:
        self.listener.close()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return  # closed
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    @staticmethod
    def _pipe(src, dst) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        for sock in (src, dst):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    def _serve(self, client) -> None:
        upstream = socket.create_connection(self.upstream)
        threading.Thread(target=self._pipe, args=(upstream, client), daemon=True).start()
        buf = b""
        try:
            while True:
                while b"\r\n\r\n" not in buf:
                    data = client.recv(65536)
                    if not data:
                        return
                    buf += data
                head, _, buf = buf.partition(b"\r\n\r\n")
                lines = head.split(b"\r\n")
                kept = [x for x in lines[1:] if not x.lower().startswith(self.names)]
                upstream.sendall(b"\r\n".join([lines[0], *kept, self.line]) + b"\r\n\r\n")
                fields = {
                    x.split(b":", 1)[0].strip().lower(): x.split(b":", 1)[-1].strip() for x in kept
                }
                if fields.get(b"upgrade", b"").lower() == b"websocket":
                    upstream.sendall(buf)
                    self._pipe(client, upstream)  # from here on, the websocket's bytes
                    return
                left = int(fields.get(b"content-length", b"0"))
                body, buf = buf[:left], buf[left:]
                upstream.sendall(body)
                while len(body) < left:
                    data = client.recv(min(65536, left - len(body)))
                    if not data:
                        return
                    upstream.sendall(data)
                    body += data
        except OSError:
            return
        finally:
            for sock in (client, upstream):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
