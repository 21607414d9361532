"""The only module that speaks HTTP (to model servers, and the digest's webhook): one pooled
client for single calls, one event loop for calls side by side, JSON POSTs and the reachability
probe; every failure becomes ProviderError."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import os
import queue
import ssl
import threading
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from functools import partial
from urllib.parse import urlsplit

import h11
import httpx
import orjson
from django.conf import settings

from memory.guard import ensure_outside_transaction

log = logging.getLogger(__name__)


class ProviderError(RuntimeError):
    """A model server failed: refused, timed out, answered 4xx/5xx, or returned an unusable body."""


@dataclass(frozen=True)
class Post:
    """One JSON POST to a model server, as a provider asks for it."""

    url: str
    payload: dict
    timeout: float
    headers: dict | None = None


_shared: dict[int, httpx.Client] = {}


def _client() -> httpx.Client:
    """One pooled client per process (created after any fork): no TLS setup per model call."""
    client = _shared.get(os.getpid())
    if client is None:
        client = _shared[os.getpid()] = httpx.Client()
    return client


def _vectors_loads(content: bytes):
    """An embedding answer's JSON, at orjson's speed: ten facts' 768 floats (120 kB) took 1.6 ms
    to read with json and 0.2 with orjson, on the path from the embedding's return to the
    decisions. What orjson refuses and json reads (NaN, a byte order mark, UTF-16, a lone
    surrogate) is read by json. The one other difference, an integer past 64 bits read as a float,
    does not reach a vector: every number of one becomes a float32."""
    try:
        return orjson.loads(content)
    except orjson.JSONDecodeError:
        return json.loads(content)


def shown_url(url: str, *, path: bool = True) -> str:
    """A URL as an error says it (errors are logged and shown on pages viewers read): without a
    user or password and without its query (tokens live there); with `path` False without its
    path too (a chat hook's path is its secret)."""
    parts = urlsplit(url if "//" in url else f"//{url}")  # "u:p@host:11434" has no scheme
    if _password_spills(parts):
        return f"{parts.scheme or 'a'} URL (not shown: it looks like it holds a password)"
    host = parts.netloc.rpartition("@")[2]
    rest = parts.path if path else ("/…" if parts.path.strip("/") else "")
    scheme = f"{parts.scheme}://" if parts.scheme else ""
    return f"{scheme}{host}{rest}" + ("?…" if parts.query else "")


def _password_spills(parts) -> bool:
    """Whether a password with "/", "?", "#" or "@" in it, not encoded, runs past the host part:
    an "@" after it (a QA pass saw "u:S3cr", a review "ss/word@host" of "pa@ss/word", shown)."""
    return "@" in f"{parts.path}?{parts.query}#{parts.fragment}"


def _decoded(url: str, status: int, content: bytes, *, vectors: bool = False) -> dict:
    """The answer's JSON object, or ProviderError saying what was wrong with it (`vectors`: an
    embedding answer, read by _vectors_loads)."""
    if status >= 400:
        text = content.decode("utf-8", "replace")
        raise ProviderError(f"{shown_url(url)} answered {status}: {text[:300]}")
    if not content.strip():
        raise ProviderError(f"{shown_url(url)} answered with an empty body")
    try:
        body = (_vectors_loads if vectors else json.loads)(content)
    except ValueError as exc:
        text = content.decode("utf-8", "replace")
        raise ProviderError(f"{shown_url(url)} answered with invalid JSON: {text[:200]}") from exc
    if not isinstance(body, dict):
        raise ProviderError(f"{shown_url(url)} answered with JSON that is not an object")
    return body


def valid_url(url: str) -> str:
    """The URL as it is, or ProviderError when no request can be made of it (an unencoded "#" or
    "?" in its password cuts the host short, and a port is then read from the password: the
    parser's own message would quote it)."""
    if not _parses(url):
        raise ProviderError(
            f"{shown_url(url)} is not a valid URL (a password holding /, ?, # or @ must be "
            "percent-encoded)"
        )
    return url


@functools.lru_cache(maxsize=64)  # a job posts to the same few URLs: parsed once each
def _parses(url: str) -> bool:
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError for a port that is no number
        httpx.URL(url)
    except (ValueError, httpx.InvalidURL):
        return False
    # Its host would be a piece of the password ("u:pa@ss/word@host" goes to "ss").
    return not _password_spills(parts)


def post_json(
    url: str, payload: dict, *, timeout: float, headers: dict | None = None, vectors: bool = False
) -> dict:
    """POST JSON and return the decoded object, turning every failure into ProviderError
    (`vectors`: the answer is an embedding call's)."""
    ensure_outside_transaction(f"POST {shown_url(url)}")
    valid_url(url)
    try:
        response = _client().post(url, json=payload, timeout=timeout, headers=headers)
    except httpx.TimeoutException as exc:
        raise ProviderError(f"{shown_url(url)} timed out after {timeout:g}s") from exc
    except httpx.HTTPError as exc:
        raise ProviderError(f"{shown_url(url)} unreachable: {exc}") from exc
    return _decoded(url, response.status_code, response.content, vectors=vectors)


# --- calls side by side -------------------------------------------------------------------------
# httpx's async client costs 1.1 ms of CPU per call here (1.7 ms each with ten in flight: anyio's
# socket attributes, looked up on every pool check), against 0.5 ms for its sync client in a
# thread; asyncio's own streams with h11 (the HTTP/1.1 parser httpx uses underneath) cost 0.2 ms.
# So the calls side by side are plain HTTP/1.1 over asyncio streams, keep-alive, with httpx's TLS
# settings; a URL that goes through a proxy is sent by the sync client in a thread instead.

_MAX_IDLE = 16  # kept-alive connections per server


class _Stale(Exception):
    """A kept-alive connection the server had closed: the call is sent again on a new one."""


class _Connection:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        self.reader, self.writer = reader, writer
        self.http = h11.Connection(h11.CLIENT)

    def close(self) -> None:
        self.writer.close()

    async def exchange(self, request: h11.Request, body: bytes, reused: bool) -> tuple[int, bytes]:
        """(status, body) of one request; _Stale when a reused connection turns out closed
        before the first byte of the answer."""
        for event in (request, h11.Data(data=body), h11.EndOfMessage()):
            self.writer.write(self.http.send(event))
        status, chunks, answered = 0, [], False
        while True:
            event = self.http.next_event()
            if event is h11.NEED_DATA:
                try:
                    await self.writer.drain()
                    data = await self.reader.read(65536)
                except ConnectionError:
                    if reused and not answered:
                        raise _Stale() from None
                    raise
                if not data and reused and not answered:
                    raise _Stale()
                answered = answered or bool(data)
                self.http.receive_data(data)
            elif isinstance(event, h11.Response):
                status = event.status_code
            elif isinstance(event, h11.Data):
                chunks.append(bytes(event.data))
            elif isinstance(event, h11.EndOfMessage):
                return status, b"".join(chunks)

    def reusable(self) -> bool:
        if self.http.our_state is h11.DONE and self.http.their_state is h11.DONE:
            self.http.start_next_cycle()
            return True
        return False


def _proxied(url: str) -> bool:
    """Whether the environment sends this URL through a proxy (HTTP_PROXY, NO_PROXY...)."""
    parts = urlsplit(url)
    proxies = urllib.request.getproxies()
    if not (proxies.get(parts.scheme) or proxies.get("all")):
        return False
    return not urllib.request.proxy_bypass(parts.hostname or "")


class _Loop:
    """This process's event loop, in a thread of its own, with its kept-alive connections: calls
    side by side cost one thread, not one each, and no GIL hand-offs between them. Limits
    (asyncio semaphores) are kept by lane and size, like memory.threads' pools."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.idle: dict[tuple[str, str, int], list[_Connection]] = {}
        self.limits: dict[tuple[str, int], asyncio.Semaphore] = {}
        self.tls: ssl.SSLContext | None = None
        self.thread = threading.Thread(target=self.loop.run_forever, name="model-http", daemon=True)
        self.thread.start()

    async def post_all(
        self, posts: list[Post], lane: str, parallel: int, answers: queue.SimpleQueue
    ) -> None:
        """Every post side by side (`post`), each put on `answers` when it ends: (position,
        (answer, milliseconds)), or (position, the exception it raised). Cancelled, it cancels
        the posts not answered yet."""
        # One hand-over from the caller's thread for the whole batch (one each woke the loop for
        # each), and the environment's proxy settings read once a URL, not once a post: ten
        # decision calls took 3.1-3.7 ms of this process's time instead of 4.3-4.7.
        proxied: dict[str, bool] = {}

        async def one(position: int, post: Post) -> None:
            try:
                if post.url not in proxied:
                    proxied[post.url] = _proxied(post.url)
                answers.put((position, await self.post(post, lane, parallel, proxied[post.url])))
            except Exception as exc:  # noqa: BLE001 - raised in the caller's thread instead
                answers.put((position, exc))

        await asyncio.gather(*(one(position, post) for position, post in enumerate(posts)))

    async def post(
        self, post: Post, lane: str, parallel: int, proxied: bool
    ) -> tuple[dict | ProviderError, float]:
        """The decoded answer (or its ProviderError) and the call's milliseconds, counted from
        the moment it may start (the lane's limit) to its answer; `proxied`: the URL goes through
        a proxy (`_proxied`)."""
        limit = self.limits.setdefault((lane, parallel), asyncio.Semaphore(parallel))
        async with limit:
            started = time.perf_counter()
            try:
                if proxied:
                    send = partial(post_json, post.url, post.payload, timeout=post.timeout)
                    answer = await self.loop.run_in_executor(
                        None, partial(send, headers=post.headers)
                    )
                else:
                    async with asyncio.timeout(post.timeout):
                        answer = _decoded(post.url, *await self._exchange(post))
            except TimeoutError:
                answer = ProviderError(f"{shown_url(post.url)} timed out after {post.timeout:g}s")
            except (OSError, h11.ProtocolError) as exc:
                answer = ProviderError(f"{shown_url(post.url)} unreachable: {exc!r}")
            except ProviderError as exc:
                answer = exc
            return answer, (time.perf_counter() - started) * 1000

    async def _exchange(self, post: Post) -> tuple[int, bytes]:
        url = urlsplit(post.url)
        secure = url.scheme == "https"
        host = url.hostname or ""
        key = (url.scheme, host, url.port or (443 if secure else 80))
        body = json.dumps(post.payload, ensure_ascii=False, separators=(",", ":")).encode()
        headers = {
            "Host": url.netloc.rpartition("@")[2],
            "Accept": "application/json",
            "User-Agent": f"memory-dashboard h11/{h11.__version__}",
            "Content-Type": "application/json",
            "Content-Length": str(len(body)),
            **(post.headers or {}),
        }
        target = (url.path or "/") + (f"?{url.query}" if url.query else "")
        request = h11.Request(method="POST", target=target, headers=list(headers.items()))
        while True:
            idle = self.idle.setdefault(key, [])
            while idle and idle[-1].reader.at_eof():
                idle.pop().close()
            reused = bool(idle)
            if reused:
                connection = idle.pop()
            else:
                if secure and self.tls is None:
                    self.tls = httpx.create_ssl_context()
                streams = await asyncio.open_connection(
                    host, key[2], ssl=self.tls if secure else None
                )
                connection = _Connection(*streams)
            try:
                answer = await connection.exchange(request, body, reused)
            except _Stale:
                connection.close()
                continue
            except BaseException:
                connection.close()
                raise
            if connection.reusable() and len(idle) < _MAX_IDLE:
                idle.append(connection)
            else:
                connection.close()
            return answer

    def close_stopped(self) -> None:
        """Let go of what a loop whose thread stopped still holds: its unfinished posts are
        cancelled, its kept-alive connections closed, then the loop itself (its selector). Run in
        a thread of its own: the caller's may have an event loop of its own running."""
        if self.thread.is_alive() or self.loop.is_closed():
            return

        async def cancel_and_close() -> None:
            current = asyncio.current_task()
            async with asyncio.timeout(LOOP_CLOSE_SECONDS):
                # Again until none is left: a post handed over meanwhile starts a task of its own.
                while unfinished := [t for t in asyncio.all_tasks() if t is not current]:
                    for task in unfinished:
                        task.cancel()
                    await asyncio.gather(*unfinished, return_exceptions=True)
                connections = [c for idle in self.idle.values() for c in idle]
                self.idle.clear()
                for connection in connections:
                    connection.close()
                await asyncio.gather(
                    *(c.writer.wait_closed() for c in connections), return_exceptions=True
                )

        try:
            self.loop.run_until_complete(cancel_and_close())
        except Exception:  # noqa: BLE001 - best effort: the loop is closed below all the same
            log.warning("a stopped model-call loop did not close cleanly", exc_info=True)
        finally:
            with contextlib.suppress(RuntimeError):  # still running somewhere: left as it is
                self.loop.close()


_loops: dict[int, _Loop] = {}
_loops_lock = threading.Lock()


def _lock_of_our_own() -> None:
    """A forked child's lock is its own: a parent thread may have held it at the fork (while
    starting a loop), and that thread is not in the child to let it go."""
    global _loops_lock
    _loops_lock = threading.Lock()


os.register_at_fork(after_in_child=_lock_of_our_own)


# How often a caller waiting on answers checks that the loop's thread is still there.
LOOP_CHECK_SECONDS = 1.0
# How long a stopped loop's posts and connections are given to finish closing.
LOOP_CLOSE_SECONDS = 5.0


def _loop() -> _Loop:
    """This process's loop (made again after a fork: the parent's thread is not in the child; and
    after its thread stopped)."""
    with _loops_lock:
        found = _loops.get(os.getpid())
        if found is not None and found.thread.is_alive():
            return found
        _loops[os.getpid()] = fresh = _Loop()
    if found is not None:  # this process's loop, whose thread stopped
        closer = threading.Thread(target=found.close_stopped, name="model-http-close", daemon=True)
        try:
            closer.start()
        except RuntimeError:  # the thread limit: left open, as before, rather than fail the call
            log.warning("a stopped model-call loop was left open: no thread to close it")
    return fresh


def _next_answer(answers: queue.SimpleQueue, shared: _Loop):
    """The next (position, (answer, milliseconds) or the exception raised) of a post_json_each;
    ProviderError when the loop's thread stopped first: its posts would never answer, and the
    caller would wait for ever."""
    while True:
        try:
            return answers.get(timeout=LOOP_CHECK_SECONDS)
        except queue.Empty:
            if not shared.thread.is_alive():
                # An answer queued between the wait and the check still counts.
                with contextlib.suppress(queue.Empty):
                    return answers.get_nowait()
                raise ProviderError(
                    "the model calls' event loop stopped before answering"
                ) from None


def post_json_each(
    posts: list[Post], *, parallel: int, lane: str = "model"
) -> Iterator[tuple[int, dict | ProviderError, float]]:
    """Every post side by side, at most `parallel` of this process's posts in `lane` at a time:
    (position, decoded object or ProviderError, milliseconds) of each, as each answers. Nothing
    is sent before the first answer is asked for; closing the iterator early cancels the posts
    not answered yet."""
    if not posts:
        return
    ensure_outside_transaction(f"POST {shown_url(posts[0].url)}")  # the caller's may hold one
    for post in posts:
        valid_url(post.url)
    shared = _loop()
    answers: queue.SimpleQueue = queue.SimpleQueue()
    batch = shared.post_all(posts, lane, parallel, answers)
    try:
        future = asyncio.run_coroutine_threadsafe(batch, shared.loop)
    except RuntimeError as exc:  # closed since: its thread stopped after _loop() was read
        batch.close()
        raise ProviderError("the model calls' event loop stopped before sending") from exc
    # Whatever ends the batch without an answer for each post (an error outside a post) reaches
    # the caller too, who would otherwise wait for answers that never come.
    future.add_done_callback(
        lambda done: (
            done.cancelled() or done.exception() is None or answers.put((-1, done.exception()))
        )
    )
    try:
        for _ in posts:
            position, answered = _next_answer(answers, shared)
            if isinstance(answered, BaseException):
                raise answered
            answer, elapsed_ms = answered
            yield position, answer, elapsed_ms
    finally:
        future.cancel()


def post_notice(url: str, payload: dict, *, timeout: float) -> int:
    """POST JSON to a notification hook (the staleness digest's webhook) and return the status;
    ProviderError when it times out, is unreachable or answers 4xx/5xx. The body is not read."""
    hook = shown_url(url, path=False)
    ensure_outside_transaction(f"POST {hook}")
    valid_url(url)
    try:
        response = _client().post(url, json=payload, timeout=timeout)
    except httpx.TimeoutException as exc:
        raise ProviderError(f"{hook} timed out after {timeout:g}s") from exc
    except httpx.HTTPError as exc:
        raise ProviderError(f"{hook} unreachable: {exc}") from exc
    if response.status_code >= 400:
        raise ProviderError(f"{hook} answered {response.status_code}: {response.text[:300]}")
    return response.status_code


_probe_cache: dict[str, tuple[float, bool]] = {}


def reachable(url: str, *, max_age: float = 30.0) -> bool:
    """Whether GET url succeeds; remembered for max_age seconds per URL so a page or a job
    that asks often costs one probe."""
    cached = _probe_cache.get(url)
    if cached and time.monotonic() - cached[0] < max_age:
        return cached[1]
    try:
        valid_url(url)
        ok = _client().get(url, timeout=settings.MEMORY_PROBE_TIMEOUT_SECONDS).is_success
    except (httpx.HTTPError, ProviderError):  # an invalid URL answers no probe (it killed it)
        ok = False
    _probe_cache[url] = (time.monotonic(), ok)
    return ok
