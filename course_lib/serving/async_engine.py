"""AsyncEngine: one background thread owns the Engine; asyncio code submits requests and reads.

    >>> import asyncio
    >>> from course_lib.model import load_model, load_tokenizer
    >>> from course_lib.sampling import SamplingParams
    >>> from course_lib.serving.engine import Engine
    >>> engine = Engine(load_model("tinychat", device="cpu"), load_tokenizer("tinychat"))
    >>> async def ask(prompt_ids):
    ...     async_engine = AsyncEngine(engine)
    ...     async_engine.start()
    ...     stream = await async_engine.submit([Submission(prompt_ids, SamplingParams(temperature=0))])
    ...     reasons = [output.finish_reason async for _, output in stream if output.finished]
    ...     async_engine.stop()
    ...     return reasons
    >>> asyncio.run(ask(engine.tokenizer.encode("<|user|>Hi<|end|><|assistant|>", allowed_special="all")))
    ['stop']

Why a thread: ``Engine`` is not thread-safe, and ``step()`` blocks for a whole forward pass.
Run on the event loop, every step would stall every HTTP connection; called from several
threads, the scheduler's queues would be corrupted. So exactly one thread calls
``add_request`` / ``step`` / ``abort``, and the event loop talks to it through a queue. Each
turn of the thread's loop:

1. take every command in the inbox (waiting for one when the engine is idle): admit new
   requests (or refuse them: ``QueueFull``), abort requests whose clients left;
2. one ``engine.step()`` if any request is unfinished;
3. hand that step's outputs to the event loop in one ``call_soon_threadsafe``; there each
   lands in its request's ``asyncio.Queue``;
4. publish an ``EngineSnapshot`` for ``/metrics``: an immutable object swapped in by one
   assignment, so readers on other threads need no lock and never see a half-updated count.

Admission control keeps memory bounded: a submission is refused when the engine already holds
``max_num_seqs`` running requests plus ``max_waiting`` waiting ones (requests beyond the free
running slots wait; at most ``max_waiting`` of them).
"""
from __future__ import annotations

import asyncio
import itertools
import logging
import queue
import threading
from collections.abc import Hashable, Sequence
from dataclasses import dataclass

from course_lib.sampling.params import SamplingParams
from course_lib.serving.engine import Engine
from course_lib.serving.request import RequestOutput
from course_lib.validation import non_negative_int

__all__ = ["AsyncEngine", "EngineSnapshot", "EngineStopped", "OutputStream", "QueueFull", "Submission"]

logger = logging.getLogger(__name__)


class QueueFull(Exception):
    """The waiting queue is full: the client should retry later (HTTP 429)."""


class EngineStopped(Exception):
    """The engine is shutting down (or failed) and takes no more requests (HTTP 503)."""


@dataclass(frozen=True)
class Submission:
    """One request for the engine: arguments of ``Engine.add_request``."""

    prompt_ids: Sequence[int]
    params: SamplingParams
    guide: object = None                       # a course_lib.structured guide, or None
    logprobs: int | None = None                # None: not asked for
    eos_ids: tuple[int, ...] | None = None     # None: the tokenizer's end tokens; (): none
    xray: object = None                        # a fresh serving.xray.RequestXray to fill in, or None


@dataclass(frozen=True)
class EngineSnapshot:
    """The engine's counters after the loop's last turn."""

    num_running: int = 0
    num_waiting: int = 0
    num_used_blocks: int = 0
    num_free_blocks: int = 0
    prefix_cache_hit_rate: float = 0.0


_ACCEPTED = object()  # the first item of a stream whose requests were all admitted


class OutputStream:
    """``async for index, output in stream``: the outputs of one submission's requests, tagged
    with each request's position in the submission; ends when every request has finished.

    ``abort()`` stops the unfinished ones (a client that went away); it is safe to call twice.
    """

    def __init__(self, async_engine: AsyncEngine, request_ids: list[str]):
        self.request_ids = request_ids
        self._index = {rid: i for i, rid in enumerate(request_ids)}
        self._unfinished = set(request_ids)
        self._queue: asyncio.Queue = asyncio.Queue()
        self._async_engine = async_engine

    @property
    def finished(self) -> bool:
        return not self._unfinished

    def abort(self) -> None:
        if self._unfinished:
            self._async_engine._send(_Abort(tuple(self._unfinished)))
            self._unfinished.clear()

    def __aiter__(self) -> OutputStream:
        return self

    async def __anext__(self) -> tuple[int, RequestOutput]:
        while self._unfinished:
            item = await self._queue.get()
            if isinstance(item, BaseException):
                self._unfinished.clear()
                raise item
            if item is _ACCEPTED or item.request_id not in self._unfinished:
                continue
            if item.finished:
                self._unfinished.discard(item.request_id)
            return self._index[item.request_id], item
        raise StopAsyncIteration


@dataclass(frozen=True)
class _Add:
    stream: OutputStream
    submissions: tuple[Submission, ...]


@dataclass(frozen=True)
class _Abort:
    request_ids: tuple[Hashable, ...]


class _AbortAll:
    pass


class _Stop:
    pass


class AsyncEngine:
    """The only owner of an ``Engine``: ``start()``, ``await submit(...)``, ``abort_all()``,
    ``stop()``. ``submit``, ``stop`` and the streams belong to one event loop (the one running
    when ``start()`` was called); ``abort_all`` may be called from any thread (a signal handler)."""

    def __init__(self, engine: Engine, *, max_waiting: int = 128):
        if not isinstance(engine, Engine):
            raise TypeError(f"AsyncEngine drives a course Engine, got {type(engine).__name__}")
        self.engine = engine
        self.max_waiting = non_negative_int("max_waiting", max_waiting)
        self.capacity = engine.scheduler.max_num_seqs + self.max_waiting
        self.snapshot = EngineSnapshot()
        self._inbox: queue.SimpleQueue = queue.SimpleQueue()
        self._routes: dict[Hashable, OutputStream] = {}  # touched only by the engine thread
        self._ids = itertools.count()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._closed = False

    # --- the event loop's side ------------------------------------------------------------------

    def start(self) -> None:
        if self._thread is not None:
            raise RuntimeError("this AsyncEngine has already been started; build a new one to restart")
        self._loop = asyncio.get_running_loop()  # raises outside a coroutine: call start() from one
        self._thread = threading.Thread(target=self._run, name="course-engine", daemon=True)
        self._thread.start()

    @property
    def running(self) -> bool:
        """True while the engine thread is taking requests."""
        return self._thread is not None and self._thread.is_alive() and not self._closed

    async def submit(self, submissions: Sequence[Submission]) -> OutputStream:
        """Queue the submissions as one unit (all admitted or none); return their stream once
        the engine thread has admitted them. Raises ``QueueFull``, ``EngineStopped``, or the
        ``ValueError`` that ``Engine.add_request`` raised."""
        if self._thread is None:
            raise RuntimeError("call start() before submit()")
        if self._closed:
            raise EngineStopped("the server is shutting down; retry against another instance")
        if not submissions:
            raise ValueError("submit at least one Submission")
        request_id = f"r{next(self._ids)}"
        stream = OutputStream(self, [f"{request_id}-{i}" for i in range(len(submissions))])
        self._send(_Add(stream, tuple(submissions)))
        try:
            item = await stream._queue.get()
        except asyncio.CancelledError:  # the caller went away before admission: undo it
            stream.abort()
            raise
        if isinstance(item, BaseException):
            stream._unfinished.clear()
            raise item
        return stream

    def abort_all(self) -> None:
        """Abort every request in flight (thread-safe); their streams end with "abort"."""
        self._send(_AbortAll())

    def stop(self, timeout: float = 10.0) -> None:
        """Abort everything in flight, refuse later submissions, and join the thread."""
        self._closed = True
        if self._thread is not None and self._thread.is_alive():
            self._send(_Stop())
            self._thread.join(timeout)

    def _send(self, command) -> None:
        self._inbox.put(command)

    # --- the engine thread's side ---------------------------------------------------------------

    def _run(self) -> None:
        try:
            self._serve_forever()
        finally:  # however the thread ends, later submissions fail at once instead of waiting forever
            self._closed = True

    def _serve_forever(self) -> None:
        engine = self.engine
        while True:
            # Block only when there is nothing to compute; otherwise take what is there and step.
            commands = [self._inbox.get()] if not engine.has_unfinished() else []
            while True:
                try:
                    commands.append(self._inbox.get_nowait())
                except queue.Empty:
                    break
            outputs: list[tuple[OutputStream, object]] = []
            for i, command in enumerate(commands):
                if isinstance(command, _Stop):
                    self._shut_down(commands[i + 1:], outputs)
                    self._deliver(outputs)
                    self._publish()
                    return
                self._handle(command, outputs)
            if engine.has_unfinished():
                try:
                    step_outputs = engine.step()
                except Exception as error:  # a bug must not kill the loop and strand every client
                    logger.exception("engine.step() failed; failing the requests in flight")
                    failure = EngineStopped(f"the engine failed during a step ({type(error).__name__}: "
                                            f"{error}); the request was aborted, retry it")
                    self._abort(list(self._routes), outputs, failure)
                else:
                    for output in step_outputs:
                        stream = self._routes[output.request_id]
                        if output.finished:
                            del self._routes[output.request_id]
                        outputs.append((stream, output))
            self._deliver(outputs)
            self._publish()

    def _handle(self, command, outputs: list) -> None:
        if isinstance(command, _Add):
            self._admit(command, outputs)
        elif isinstance(command, _Abort):
            self._abort([rid for rid in command.request_ids if rid in self._routes], outputs)
        elif isinstance(command, _AbortAll):
            self._abort(list(self._routes), outputs)

    def _admit(self, command: _Add, outputs: list) -> None:
        engine, stream = self.engine, command.stream
        scheduler = engine.scheduler
        if scheduler.num_running + scheduler.num_waiting + len(command.submissions) > self.capacity:
            outputs.append((stream, QueueFull(
                f"the server is at capacity ({scheduler.num_running} running, {scheduler.num_waiting} "
                f"waiting, max_waiting={self.max_waiting}); retry after a short wait")))
            return
        added = []
        try:
            for rid, s in zip(stream.request_ids, command.submissions):
                engine.add_request(list(s.prompt_ids), s.params, request_id=rid, guide=s.guide,
                                   eos_ids=s.eos_ids, logprobs=s.logprobs, xray=s.xray)
                added.append(rid)
        except Exception as error:  # add_request validates: hand its message to the caller
            for rid in added:
                engine.abort(rid)
            outputs.append((stream, error))
            return
        for rid in added:
            self._routes[rid] = stream
        outputs.append((stream, _ACCEPTED))

    def _abort(self, request_ids: list, outputs: list, failure: Exception | None = None) -> None:
        for rid in request_ids:
            stream = self._routes.pop(rid)
            final = RequestOutput(rid, (), "", True, "abort")
            try:
                final = self.engine.abort(rid)
            except ValueError:  # finished in the same turn; nothing left to free
                pass
            except Exception:  # an engine broken by a failed step: report, keep serving the rest
                logger.exception("aborting request %r failed", rid)
            outputs.append((stream, final if failure is None else failure))

    def _shut_down(self, later: list, outputs: list) -> None:
        """Abort everything in flight; refuse the submissions that raced the shutdown (``later``
        and whatever is still in the inbox) rather than leave their callers waiting forever."""
        self._abort(list(self._routes), outputs)
        while True:
            try:
                later.append(self._inbox.get_nowait())
            except queue.Empty:
                break
        for command in later:
            if isinstance(command, _Add):
                outputs.append((command.stream, EngineStopped("the server is shutting down")))

    def _deliver(self, outputs: list) -> None:
        if outputs:
            try:
                self._loop.call_soon_threadsafe(_put_all, outputs)
            except RuntimeError:  # the event loop has closed: nobody is left to read them
                pass

    def _publish(self) -> None:
        scheduler, stats = self.engine.scheduler, self.engine.stats()
        self.snapshot = EngineSnapshot(scheduler.num_running, scheduler.num_waiting, stats.num_used_blocks,
                                       stats.num_free_blocks, stats.hit_rate)


def _put_all(outputs: list) -> None:
    """On the event loop: each output (or error) into its stream's queue."""
    for stream, item in outputs:
        stream._queue.put_nowait(item)
