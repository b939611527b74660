"""A threaded HTTP server on 127.0.0.1 (a free port) that hands every request to its owner's
``_handle(handler, method)``: the scaffold of the GCP and Azure fakes."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class LocalServer:
    """Subclasses define ``_handle(self, handler, method)``; ``with Fake() as fake:`` starts and stops it."""

    name = "fake"
    methods: tuple[str, ...] = ("GET",)
    _server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        assert self._server is not None, "start the fake first"
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> Any:  # noqa: ANN401 - the subclass itself
        owner = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
                return None

        for method in self.methods:
            setattr(Handler, f"do_{method}", lambda handler, m=method: owner._handle(handler, m))
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.02},
                                        name=self.name, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> Any:  # noqa: ANN401
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _handle(self, handler: BaseHTTPRequestHandler, method: str) -> None:
        raise NotImplementedError
