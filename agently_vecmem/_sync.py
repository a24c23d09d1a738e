"""Bridges between sync and async code.

One rule, borrowed from Agently's ``FunctionShifter``: the async function is the implementation, and the
sync spelling runs it with :func:`run_sync`. When no event loop runs in the calling thread the coroutine is
run with :func:`asyncio.run`; inside a running loop (a notebook, an async web handler) it runs on a fresh
loop in a worker thread, so a sync call never deadlocks the caller's loop.

Because every sync call may get a fresh loop, never cache loop-bound resources across calls.
"""

from __future__ import annotations

import asyncio
import inspect
import threading
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TypeVar

from .errors import ConfigurationTypeError

__all__ = ["run_sync", "maybe_await", "is_async_callable"]

T = TypeVar("T")


def run_sync(coro: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine to completion from sync code.

    Args:
        coro: the coroutine object to run.

    Returns:
        Whatever the coroutine returns; its exception is re-raised unchanged.

    Example:
        >>> async def answer() -> int:
        ...     return 42
        >>> run_sync(answer())
        42
    """
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)

    outcome: dict[str, Any] = {}

    def runner() -> None:
        try:
            outcome["value"] = asyncio.run(coro)
        except BaseException as exc:  # re-raised in the caller's thread
            outcome["error"] = exc

    thread = threading.Thread(target=runner, name="agently-vecmem-run-sync", daemon=True)
    thread.start()
    thread.join()
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]


def is_async_callable(fn: Any) -> bool:
    """Tell whether calling ``fn`` returns a coroutine (plain async function or async ``__call__``)."""
    if inspect.iscoroutinefunction(fn):
        return True
    call = getattr(fn, "__call__", None)  # noqa: B004 - we want the bound __call__ itself
    return call is not None and inspect.iscoroutinefunction(call)


async def maybe_await(fn: Callable[..., T | Awaitable[T]], *args: Any, **kwargs: Any) -> T:
    """Call a sync or async callable from async code.

    Async callables are awaited on the current loop. Sync callables run in :func:`asyncio.to_thread`
    (as Agently does for handlers) so a slow handler does not block the loop; if a sync callable returns
    an awaitable, that is awaited too.

    Args:
        fn: the callable.
        *args: positional arguments for ``fn``.
        **kwargs: keyword arguments for ``fn``.

    Returns:
        The callable's result.

    Raises:
        TypeError: ``fn`` is not callable.
    """
    if not callable(fn):
        raise ConfigurationTypeError(f"Expected a callable, got {type(fn).__name__}.")
    if is_async_callable(fn):
        return await fn(*args, **kwargs)  # type: ignore[misc]
    result = await asyncio.to_thread(fn, *args, **kwargs)
    if inspect.isawaitable(result):
        return await result
    return result
