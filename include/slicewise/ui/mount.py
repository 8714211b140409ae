"""An ASGI app that builds the real one on its first request.

Every Airflow component that loads plugins (scheduler, DAG processor, workers, the API server) imports the plugin
module; only the API server ever serves it. Deferring FastAPI, Jinja2 and the Slicewise modules behind the pages
to the first request keeps that import at a few milliseconds everywhere else.
"""

from __future__ import annotations

import importlib
import threading
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
AsgiApp = Callable[[Scope, Receive, Send], Awaitable[None]]


class LazyApp:
    """Calls ``factory`` ("package.module:function", returning an ASGI app) once, on the first request, and
    hands every request to what it returned."""

    def __init__(self, factory: str) -> None:
        self.factory = factory
        self._app: AsgiApp | None = None
        self._lock = threading.Lock()

    def build(self) -> AsgiApp:
        """The real app, built on the first call (thread-safe); later calls return the same one."""
        if self._app is None:
            with self._lock:
                if self._app is None:
                    module, _, name = self.factory.partition(":")
                    self._app = getattr(importlib.import_module(module), name)()
        return self._app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self.build()(scope, receive, send)

    def __repr__(self) -> str:
        return f"LazyApp({self.factory!r})"
