"""/metrics parsing with prometheus_client's parser, and the deltas around a shot."""

from __future__ import annotations

import pytest

from orchestrator.bench import metrics as m

BEFORE = """# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="tiny"} 0.0
# HELP vllm:request_success_total Count of successfully processed requests.
# TYPE vllm:request_success_total counter
vllm:request_success_total{engine="0",finished_reason="stop",model_name="tiny"} 3.0
vllm:request_success_total{engine="0",finished_reason="length",model_name="tiny"} 7.0
vllm:request_success_total{engine="0",finished_reason="abort",model_name="tiny"} 0.0
# HELP vllm:spec_decode_num_drafts_total Number of spec decoding drafts.
# TYPE vllm:spec_decode_num_drafts_total counter
vllm:spec_decode_num_drafts_total{engine="0",model_name="tiny"} 100.0
# HELP vllm:spec_decode_num_draft_tokens_total Number of draft tokens.
# TYPE vllm:spec_decode_num_draft_tokens_total counter
vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="tiny"} 500.0
# HELP vllm:spec_decode_num_accepted_tokens_total Number of accepted tokens.
# TYPE vllm:spec_decode_num_accepted_tokens_total counter
vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="tiny"} 250.0
# HELP vllm:spec_decode_num_accepted_tokens_per_pos_total Accepted tokens per draft position.
# TYPE vllm:spec_decode_num_accepted_tokens_per_pos_total counter
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="tiny",position="0"} 90.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="tiny",position="1"} 70.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="tiny",position="10"} 1.0
# HELP vllm:prefix_cache_hits_total Prefix cache hits.
# TYPE vllm:prefix_cache_hits_total counter
vllm:prefix_cache_hits_total{engine="0",model_name="tiny"} 32.0
"""


def _after(text: str, **changes: str) -> str:
    for old, new in changes.items():
        text = text.replace(old, new)
    return text


def test_parse_sums_label_sets_and_keeps_positions():
    s = m.parse(BEFORE)
    assert s.get(m.SUCCESS) == 10.0  # stop + length + abort
    assert s.get(m.RUNNING) == 0.0
    assert s.get(m.DRAFTS) == 100.0 and s.get(m.ACCEPTED) == 250.0
    assert s.per_pos == {0: 90.0, 1: 70.0, 10: 1.0}


def test_delta_around_a_shot():
    after = BEFORE.replace('finished_reason="length",model_name="tiny"} 7.0', 'finished_reason="length",model_name="tiny"} 8.0')
    after = after.replace("drafts_total{engine=\"0\",model_name=\"tiny\"} 100.0", "drafts_total{engine=\"0\",model_name=\"tiny\"} 300.0")
    after = after.replace("accepted_tokens_total{engine=\"0\",model_name=\"tiny\"} 250.0", "accepted_tokens_total{engine=\"0\",model_name=\"tiny\"} 850.0")
    after = after.replace('position="0"} 90.0', 'position="0"} 280.0')
    d = m.delta(m.parse(BEFORE), m.parse(after))
    assert d.success == 1.0 and d.drafts == 200.0 and d.accepted == 600.0 and d.draft_tokens == 0.0
    assert d.per_pos == (190.0, 0.0, 0.0)
    assert d.cache_hits == 0.0


def test_no_speculation_reads_as_absent_not_zero():
    plain = "\n".join(ln for ln in BEFORE.splitlines() if "spec_decode" not in ln) + "\n"
    d = m.delta(m.parse(plain), m.parse(plain))
    assert d.drafts is None and d.accepted is None and not d.spec and d.per_pos == ()


def test_garbage_is_a_metrics_error():
    with pytest.raises(m.MetricsError):
        m.parse("vllm:num_requests_running{engine=\"0\" 1.0 2 3 4\n")
