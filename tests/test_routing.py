"""Our data-parallel router's policy (sut/routing.py), on its own: where requests go as the SUT
books and releases them. The engine side of it (the engine a request was sent to is the one vLLM
says served it) is checked end to end in tests/test_parallel_e2e.py."""

from __future__ import annotations

import types

import pytest

from sut.routing import LeastWorkRouter, RoutingError, check_routing, engines_to_route


def test_a_burst_into_empty_engines_is_spread_evenly():
    router = LeastWorkRouter(4, mean_prompt_tokens=100)
    ranks = [router.pick(100) for _ in range(40)]  # nothing comes back in between
    assert [ranks.count(r) for r in range(4)] == [10, 10, 10, 10]
    assert ranks[:4] == [0, 1, 2, 3]  # ties go round the engines, not all to engine 0


def test_prompts_awaiting_prefill_weigh_more_than_decodes():
    router = LeastWorkRouter(2, mean_prompt_tokens=100, prefill_weight=8)
    # engine 0: three streams decoding (first tokens back); engine 1: one prompt not started
    for _ in range(3):
        router.loads[0].in_flight += 1
    assert router.pick(100) == 1  # the idle engine
    # engine 1 now holds a waiting prompt (1 + 8) against engine 0's three decodes (3)
    assert router.score(1) == pytest.approx(9.0) and router.score(0) == pytest.approx(3.0)
    assert router.pick(100) == 0
    router.first_token(1, 100)  # engine 1's prompt got its first token: it only decodes now
    assert router.score(1) == pytest.approx(1.0)
    assert router.pick(100) == 1


def test_long_prompts_count_by_their_length():
    router = LeastWorkRouter(2, mean_prompt_tokens=100)
    assert router.pick(1000) == 0  # ten mean prompts' worth of prefill on engine 0
    assert [router.pick(100) for _ in range(5)] == [1, 1, 1, 1, 1]


def test_finished_requests_release_their_engine():
    router = LeastWorkRouter(2, mean_prompt_tokens=50)
    a, b = router.pick(50), router.pick(50)
    assert (a, b) == (0, 1)
    router.first_token(a, 50)
    router.finished(a, 50, had_first=True)
    router.finished(b, 50, had_first=False)  # final-only outputs: no first token seen
    assert router.gauge() == ((0, 0), (0, 0))
    assert [x.prefill_tokens for x in router.loads] == [0, 0]
    assert [s["sent"] for s in router.summary()] == [1, 1]
    router.reset_counts()
    assert [s["sent"] for s in router.summary()] == [0, 0]


def test_a_slow_engine_gets_less_of_a_stream():
    router = LeastWorkRouter(2, mean_prompt_tokens=100)
    open_on_0: list[int] = []
    for _ in range(200):
        rank = router.pick(100)
        router.first_token(rank, 100)
        if rank == 1:  # engine 1 answers at once, engine 0 never does
            router.finished(rank, 100, had_first=True)
        else:
            open_on_0.append(rank)
    assert len(open_on_0) == 1  # one request held there, the rest went to the free engine


def test_routing_names_and_layouts():
    assert check_routing("ours") == "ours" and check_routing("vllm") == "vllm"
    with pytest.raises(RoutingError, match="choose ours or vllm"):
        check_routing("random")
    one = types.SimpleNamespace(parallel_config=types.SimpleNamespace(data_parallel_size=1))
    assert engines_to_route(one) == 1 and engines_to_route(None) == 1
    two = types.SimpleNamespace(parallel_config=types.SimpleNamespace(data_parallel_size=2))
    assert engines_to_route(two) == 2
    hybrid = types.SimpleNamespace(
        parallel_config=types.SimpleNamespace(data_parallel_size=4, data_parallel_hybrid_lb=True)
    )
    with pytest.raises(RoutingError, match="--dp-routing vllm"):
        engines_to_route(hybrid)
