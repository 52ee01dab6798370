"""``python -m benchmarks inference --endpoint``: the load goes through the serving endpoint,
and the probe port's ``/metrics`` counts it (the scrape's parsing and differences, and a small
end-to-end run with real processes, sockets and certificates)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks import _inference_endpoint as endpoint
from benchmarks import inference
from tests.serving.test_inference_benchmark import tiny_vertical

__all__ = ["tiny_vertical"]  # the fixture, used by name below

BEFORE = """\
# HELP p2pboost_serve_requests_total Scoring requests received
# TYPE p2pboost_serve_requests_total counter
p2pboost_serve_requests_total 10.0
# HELP p2pboost_serve_errors_total Requests answered with an error, by kind
# TYPE p2pboost_serve_errors_total counter
p2pboost_serve_errors_total{kind="UnknownIdError"} 1.0
# HELP p2pboost_node_sent_messages_total Messages sent
# TYPE p2pboost_node_sent_messages_total counter
p2pboost_node_sent_messages_total{peer="host1"} 4.0
"""
AFTER = """\
# HELP p2pboost_serve_requests_total Scoring requests received
# TYPE p2pboost_serve_requests_total counter
p2pboost_serve_requests_total 25.0
# HELP p2pboost_serve_errors_total Requests answered with an error, by kind
# TYPE p2pboost_serve_errors_total counter
p2pboost_serve_errors_total{kind="UnknownIdError"} 1.0
p2pboost_serve_errors_total{kind="InputError"} 2.0
# HELP p2pboost_node_sent_messages_total Messages sent
# TYPE p2pboost_node_sent_messages_total counter
p2pboost_node_sent_messages_total{peer="host1"} 7.0
"""


def test_deltas_of_two_scrapes() -> None:
    deltas = endpoint.metric_deltas(endpoint.parse_samples(BEFORE), endpoint.parse_samples(AFTER))
    assert deltas["requests"] == 15
    assert deltas["errors"] == {"InputError": 2, "UnknownIdError": 0}
    assert deltas["errors_total"] == 2
    assert deltas["node_sent_messages"] == {"host1": 3}
    assert deltas["batches"] == 0  # absent from both: nothing moved


def test_counters_moved_needs_every_request_counted() -> None:
    deltas = {
        "requests": 12,
        "messages": 5,
        "request_seconds_count": 5,
        "errors_total": 0,
        "batches": 3,
        "batch_rows": 11,
        "received_bytes": 900,
        "sent_bytes": 300,
    }
    health = ({"batches": 2, "rows": 4}, {"batches": 5, "rows": 15})
    assert endpoint.counters_moved(deltas, 12, 5, health)
    assert not endpoint.counters_moved(deltas, 13, 5, health)  # a request not counted
    assert not endpoint.counters_moved({**deltas, "errors_total": 1}, 12, 5, health)
    assert not endpoint.counters_moved({**deltas, "batches": 2}, 12, 5, health)
    assert not endpoint.counters_moved(deltas, 12, 5, (health[0], {"batches": 5, "rows": 14}))


def test_unparsable_text_is_refused() -> None:
    with pytest.raises(ValueError, match="one"):
        endpoint.parse_samples("p2pboost_serve_requests_total one\n")


@pytest.mark.slow
def test_endpoint_mode_counts_every_request(
    tiny_vertical: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["--dataset", "breast", "--data-dir", str(tiny_vertical), "--repeats", "2"]
    argv += ["--clients", "4", "--requests", "3", "--warmup", "1", "--group", "50"]
    argv += ["--trees", "2", "--depth", "2", "--bins", "8", "--workers", "1", "--endpoint"]
    assert inference.main(argv) == 0
    out = capsys.readouterr().out.strip().splitlines()
    result = json.loads(out[-1])
    assert result["mode"] == "endpoint"
    assert result["counters_moved"] is True
    sent = 2 * 240 + 4 * 3
    assert result["requests_sent"] == sent
    metrics = result["metrics"]
    assert metrics["requests"] == sent
    assert metrics["messages"] == 2 * 5 + 4 * 3  # 240 rows in messages of 50, then singles
    assert metrics["errors_total"] == 0
    assert metrics["batches"] > 0
    assert metrics["node_sent_messages"]["host1"] > 0
    assert result["max_abs_diff"] <= 1e-9
    for key in ("rows_per_s", "p50_ms", "p99_ms", "requests_per_s"):
        assert result[key] > 0
