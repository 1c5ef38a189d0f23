"""One dedicated inference thread per loaded model, fed by a priority queue.

llama.cpp contexts and MLX streams are not thread-safe (MLX streams are even thread-local),
so the engine object is created *on* this thread and only ever touched from it. Callers
submit work and get a Future (or a stream of items for generation). Lower priority numbers
run first: foreground (an agent waiting) is 0, background work is 10.
"""

from __future__ import annotations

import itertools
import queue
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from typing import Any

FOREGROUND = 0
BACKGROUND = 10

_STOP = object()
_END = object()


class EngineThread:
    def __init__(self, name: str, factory: Callable[[], Any]):
        self._queue: queue.PriorityQueue = queue.PriorityQueue()
        self._seq = itertools.count()
        self._ready: Future = Future()
        self._thread = threading.Thread(target=self._run, args=(factory,), name=name, daemon=True)
        self._thread.start()
        self.engine = self._ready.result()  # re-raises a load failure in the caller

    def _run(self, factory: Callable[[], Any]) -> None:
        try:
            engine = factory()
        except BaseException as exc:  # noqa: BLE001 - handed to the caller
            self._ready.set_exception(exc)
            return
        self._ready.set_result(engine)
        while True:
            _prio, _seq, job = self._queue.get()
            if job is _STOP:
                self._cancel_pending()
                return
            fn, fut = job
            if not fut.set_running_or_notify_cancel():
                continue
            try:
                fut.set_result(fn(engine))
            except BaseException as exc:  # noqa: BLE001
                fut.set_exception(exc)

    def _cancel_pending(self) -> None:
        while True:
            try:
                _prio, _seq, job = self._queue.get_nowait()
            except queue.Empty:
                return
            if job is not _STOP:
                job[1].cancel()

    def pending(self) -> int:
        return self._queue.qsize()

    def submit(self, fn: Callable[[Any], Any], priority: int = FOREGROUND) -> Future:
        fut: Future = Future()
        self._queue.put((priority, next(self._seq), (fn, fut)))
        return fut

    def call(self, fn: Callable[[Any], Any], priority: int = FOREGROUND) -> Any:
        return self.submit(fn, priority).result()

    def stream(self, producer: Callable[[Any], Iterator[Any]], priority: int = FOREGROUND) -> Iterator[Any]:
        """Run a generator on the engine thread and yield its items here as they come.
        Closing the returned iterator early asks the producer to stop at its next item."""
        items: queue.Queue = queue.Queue()
        cancelled = threading.Event()

        def job(engine: Any) -> None:
            try:
                for item in producer(engine):
                    items.put(item)
                    if cancelled.is_set():
                        break
            except BaseException as exc:  # noqa: BLE001
                items.put(exc)
            finally:
                items.put(_END)

        fut = self.submit(job, priority)
        fut.add_done_callback(lambda f: items.put(_END) if f.cancelled() else None)
        try:
            while True:
                item = items.get()
                if item is _END:
                    return
                if isinstance(item, BaseException):
                    raise item
                yield item
        finally:
            cancelled.set()

    def close(self) -> None:
        if self._thread.is_alive():
            self._queue.put((-1, next(self._seq), _STOP))
            self._thread.join(timeout=30)
