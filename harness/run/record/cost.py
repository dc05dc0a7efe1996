"""Dollars per million output tokens, the figure users compare hardware by (as the Azure and
Lambda vLLM studies report it): an hourly price over the tokens that hour produces."""

from __future__ import annotations

from typing import Any


def usd_per_million_tokens(tokens_per_second: float | None, price_per_hour: float) -> float | None:
    """price_per_hour / (tokens_per_second x 3600) x 1e6; None without a throughput."""
    if not tokens_per_second or tokens_per_second <= 0:
        return None
    return price_per_hour / (tokens_per_second * 3600.0) * 1e6


def add_cost(perf: dict[str, Any], price_per_hour: float | None) -> None:
    """Record the price and the cost per million output tokens in a performance result
    (Offline: tokens/s; Server / Interactive: completed tokens/s, LoadGen's result)."""
    if price_per_hour is None:
        return
    perf["price_per_hour"] = price_per_hour
    perf["usd_per_million_tokens"] = usd_per_million_tokens(
        perf.get("tokens_per_second"), price_per_hour
    )
