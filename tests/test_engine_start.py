"""sut.lifecycle.start_engine: the one wait for an engine start, for both SUTs (the Offline SUT
builds on a thread of its own, the Server SUT on its event loop's thread). A build that takes
too long is given up on with one line naming the flag to raise; a build's own error, a
TimeoutError among them, is the build's, not a timeout of the start. Real threads and a real
event loop; the factories stand in for vLLM's (a start that never ends cannot be had from it
in a unit test's time)."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from sut.lifecycle import ENGINE_START_THREAD, EngineStartTimeout, start_engine


def _slow(release: threading.Event):
    def factory() -> str:
        release.wait(10)
        return "engine"

    return factory


def test_a_start_past_its_limit_is_given_up_on_in_one_line() -> None:
    release = threading.Event()
    t0 = time.monotonic()
    try:
        with pytest.raises(EngineStartTimeout) as err:
            start_engine(_slow(release), 0.3, "Offline")
    finally:
        release.set()
    assert time.monotonic() - t0 < 2
    assert str(err.value) == (
        "the Offline engine did not start within 0.3 s: raise --engine-start-timeout if a cold "
        "start legitimately takes longer"
    )


def test_a_start_returns_the_engine_built_on_its_own_thread() -> None:
    seen: list[str] = []

    def factory() -> str:
        seen.append(threading.current_thread().name)
        return "engine"

    engine, procs = start_engine(factory, None, "Offline")
    assert engine == "engine" and procs == [] and seen == [ENGINE_START_THREAD]


def test_the_builds_own_timeout_error_is_the_builds() -> None:
    def factory() -> str:
        raise TimeoutError("handshake with the engine core timed out")

    with pytest.raises(TimeoutError, match="handshake") as err:
        start_engine(factory, 30, "Server")
    assert not isinstance(err.value, EngineStartTimeout)


def test_the_server_builds_on_its_event_loop_with_the_same_limit() -> None:
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    release = threading.Event()

    def on_loop(factory):
        async def build():
            return factory()

        return asyncio.run_coroutine_threadsafe(build(), loop)

    try:
        with pytest.raises(
            EngineStartTimeout, match="the Server engine did not start within 0.3 s"
        ):
            start_engine(_slow(release), 0.3, "Server", launch=on_loop)
        release.set()
        engine, _ = start_engine(lambda: "engine", 5, "Server", launch=on_loop)
        assert engine == "engine"
    finally:
        release.set()
        loop.call_soon_threadsafe(loop.stop)
        thread.join(5)
        loop.close()
