"""Results the server keeps for every session, bounded in bytes, not in entries.

``@shared()`` keeps what a function returns, keyed by its arguments (those whose names start
with ``_`` are left out of the key, as in Streamlit's own caches), for every session of this
server: ten students asking the same question get one computation, and the others wait for
it instead of repeating it. Each result's size is measured (``core.runs.budget.sizeof``);
one larger than ``CACHE_ITEM_BYTES`` is returned but not kept, and past the cache's bytes
the least recently used results go. Results are shared objects: never mutate one.

Two pools: ``RESULTS`` (translations, maps, attributions...: ATTENTION_STUDIO_SERVER_CACHE_MB)
and ``MODELS`` (loaded models: ``budget.MODELS_CACHE_BYTES``): one resident copy per model,
as large as the largest model the server opens (``budget.OPEN_BYTES``), so no model the
picker offers is loaded again at every rerun.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable

import streamlit as st
from streamlit.runtime.scriptrunner import get_script_run_ctx

from core.runs import budget


class SharedCache:
    """A least-recently-used map of results with a limit on their bytes, safe across threads."""

    def __init__(self, limit: int, item_limit: int = budget.CACHE_ITEM_BYTES):
        self.limit, self.item_limit = limit, item_limit
        self.entries: OrderedDict[Hashable, tuple[object, int]] = OrderedDict()
        self.total = 0  # bytes of the results kept
        self.lock = threading.Lock()
        self.busy: dict[Hashable, threading.Lock] = {}  # a lock per key being computed

    def get(self, key: Hashable) -> tuple[bool, object]:
        """(True, the result) when ``key`` is kept (it becomes the most recently used)."""
        with self.lock:
            if key not in self.entries:
                return False, None
            self.entries.move_to_end(key)
            return True, self.entries[key][0]

    def put(self, key: Hashable, value: object, size: int) -> bool:
        """Keep a result of ``size`` bytes, the least recently used going past the limit;
        False (nothing kept) when it alone is larger than the item limit or the cache."""
        if size > min(self.item_limit, self.limit):
            return False
        with self.lock:
            if key in self.entries:
                self.total -= self.entries.pop(key)[1]
            self.entries[key] = (value, size)
            self.total += size
            while self.total > self.limit:
                self.total -= self.entries.popitem(last=False)[1][1]
        return True

    @contextlib.contextmanager
    def computing(self, key: Hashable):
        """Held while ``key`` is computed: a second caller waits for the first's result."""
        with self.lock:
            lock = self.busy.setdefault(key, threading.Lock())
        with lock:
            yield
        with self.lock:
            if self.busy.get(key) is lock and not lock.locked():
                del self.busy[key]

    def clear(self, prefix: str | None = None) -> None:
        """Forget every result (of the function named ``prefix`` only, when given)."""
        with self.lock:
            for key in [k for k in self.entries if prefix is None or k[0] == prefix]:
                self.total -= self.entries.pop(key)[1]


RESULTS = SharedCache(budget.server_cache_bytes())
MODELS = SharedCache(budget.MODELS_CACHE_BYTES, item_limit=max(budget.OPEN_BYTES.values()))


def _key_part(value) -> Hashable:
    """An argument as part of a key: itself when hashable, else its type and repr."""
    try:
        hash(value)
    except TypeError:
        return (type(value).__name__, repr(value))
    return value


def shared(spinner: str | None = None, pool: SharedCache = RESULTS):
    """Cache a function's results in ``pool`` for every session (see the module's text);
    ``spinner``: what the page says while it computes."""

    def decorate(fn: Callable) -> Callable:
        signature = inspect.signature(fn)
        name = f"{fn.__module__}.{fn.__qualname__}"

        def key_of(args, kwargs) -> tuple:
            bound = signature.bind(*args, **kwargs)
            bound.apply_defaults()
            parts = tuple(
                (k, _key_part(v)) for k, v in bound.arguments.items() if not k.startswith("_")
            )
            return (name, parts)

        @functools.wraps(fn)
        def cached(*args, **kwargs):
            key = key_of(args, kwargs)
            found, value = pool.get(key)
            if found:
                return value
            with pool.computing(key):
                found, value = pool.get(key)  # computed by the session we waited for
                if found:
                    return value
                shown = (
                    spinner and get_script_run_ctx(suppress_warning=True) is not None
                )  # a page to say it on
                with st.spinner(spinner) if shown else contextlib.nullcontext():
                    value = fn(*args, **kwargs)
                pool.put(key, value, budget.sizeof(value))
            return value

        cached.clear = lambda: pool.clear(name)
        cached.peek = lambda *args, **kwargs: pool.get(key_of(args, kwargs))  # (found, value)
        return cached

    return decorate
