"""Smaller parts of `lpxtop load`: the server's counters, prompt calibration, reports, the command line."""

from __future__ import annotations

import csv
import io
import json
from dataclasses import replace

import pytest

from lpxtop.checks import ConfigError
from lpxtop.cli.entry import main
from lpxtop.cli.load import build_parser, is_local, plan_from_args
from lpxtop.load.plan import LoadPlan
from lpxtop.load.prompts import FILLER_WORDS, HEAD_WORDS, Calibration, FreshStarts, filler_text
from lpxtop.load.report import report_json, steps_csv, write_text
from lpxtop.load.server_window import ServerWatch, parse_counters
from lpxtop.model.endpoint import EndpointConfig
from lpxtop.model.events import ScrapeEvent
from lpxtop.model.server import ServerMetrics
from lpxtop.sim.text import chat_prompt_tokens
from tests.support.load_snapshot_data import done_state
from tests.support.paths import FIXTURES


def test_vllm_counters_from_a_real_capture():
    text = (FIXTURES / "metrics" / "vllm-0.32.0-cpu-local-capture-after-load.txt").read_text()
    r = parse_counters(text, 1.0)
    assert r is not None and r.kind == "vllm"
    assert (r.prefix_queries, r.prefix_hits, r.preemptions, r.generation_tokens) == (519.0, 0.0, 0.0, 2784.0)
    assert r.ttft_count == 18.0 and r.ttft_sum == pytest.approx(182.39879608154297)  # ms
    assert r.queue_count == 18.0 and (r.running, r.waiting, r.kv_usage) == (0.0, 0.0, 0.0)


def test_llamacpp_cached_tokens_are_left_out_of_its_prompt_counter():
    text = (FIXTURES / "metrics" / "llamacpp-server-0c1e5709-local-capture-after-load.txt").read_text()
    r = parse_counters(text, 1.0)
    assert r is not None and r.kind == "llamacpp"
    assert (r.prefix_hits, r.prefix_queries) == (206.0, 273.0 + 206.0)


def test_not_metrics_of_a_known_server():
    assert parse_counters("just some text", 1.0) is None


def test_step_server_figures_are_window_deltas_and_scrape_peaks():
    text = (FIXTURES / "metrics" / "vllm-0.32.0-cpu-local-capture-after-load.txt").read_text()
    first = parse_counters(text, 10.0)
    last = replace(first, wall_time=20.0, preemptions=3.0, prefix_hits=50.0, prefix_queries=1019.0,
                   ttft_sum=first.ttft_sum + 400.0, ttft_count=first.ttft_count + 10, generation_tokens=3784.0)
    watch = ServerWatch("load", "http://127.0.0.1:1/metrics")
    for t, waiting, kv in ((9.0, 9.0, 0.9), (12.0, 3.0, 0.5), (15.0, 7.0, 0.6), (21.0, 11.0, 0.95)):
        watch.on_engine_event(ScrapeEvent("load", t, ServerMetrics(kind="vllm", requests_waiting=waiting,
                                                                   requests_running=4.0, kv_cache_usage=kv)))
    watch.on_engine_event(ScrapeEvent("other", 13.0, ServerMetrics(kind="vllm", requests_waiting=99.0)))
    d = watch.during(10.0, 20.0, first, last)
    assert (d.peak_requests_waiting, d.peak_kv_cache_usage, d.peak_requests_running) == (7.0, 0.6, 4.0)
    assert (d.preemptions, d.generation_tokens) == (3.0, 1000.0)
    assert d.prefix_cache_hit_rate == pytest.approx(50 / 500)
    assert d.mean_ttft_ms == pytest.approx(40.0)


def test_calibration_aims_at_the_servers_token_count():
    # the simulator's tokenizer: one token per word plus the chat template; calibrated without a prefix
    def server_tokens(text: str) -> int:
        return len(chat_prompt_tokens([{"role": "user", "content": text}]))

    cal = Calibration.from_points(64, server_tokens(filler_text(64)), 128, server_tokens(filler_text(128)))
    plan = LoadPlan(endpoint=EndpointConfig(name="t", url="http://127.0.0.1:9/v1"), mode="concurrency", levels=(1.0,))
    for target in (16, 128, 1024, 4096):
        endpoint = plan.step_endpoint(target, cal)
        head = plan.head_words(target, cal)
        assert 0 < head <= HEAD_WORDS and not endpoint.random_prefix
        # every request as sent: its first words shuffled, the same words; the length never varies
        starts = FreshStarts(endpoint.prompt, head)
        prompts = {starts.next() for _ in range(20)}
        # a short prompt has few orders (16 tokens: 7 words shuffled, 5040 orders): two of 20 draws are the
        # same in ~3 % of runs, and three or more almost never
        assert len(prompts) >= 18 and {server_tokens(p) for p in prompts} == {target}
        assert all(sorted(p.split()) == sorted(endpoint.prompt.split()) for p in prompts)
        assert all(p.split()[0] == endpoint.prompt.split()[0] for p in prompts)
    assert all(len(w) <= 5 for w in FILLER_WORDS)


def test_a_tokenizer_that_is_not_linear_in_words_is_met_by_checking_the_targets():
    # like the real-server kit's 481-token tokenizer: most filler words are 2-3 tokens, the first ones fewer,
    # so the line from 64 and 128 words misses a short target (45 for 50 there; 46 for 38 here)
    cost = [1 if i < 30 else 2 + (i * 7) % 2 for i in range(5000)]

    def server_tokens(words: int) -> int:
        return 22 + sum(cost[:words])

    cal = Calibration.from_points(64, server_tokens(64), 128, server_tokens(128))
    line_miss = abs(server_tokens(cal.words_for(38)) - 38)
    for target in (38, 50, 128, 1000):
        words, seen, tried = cal.words_for(target), [], []
        for _ in range(4):  # what LoadController._refine does, with the server's count
            seen.append((abs(server_tokens(words) - target), words))
            if seen[-1][0] == 0:
                break
            tried.append((words, server_tokens(words)))
            words = cal.next_guess(target, tried)
        best = min(seen)
        cal = cal.refined(target, best[1])
        assert abs(server_tokens(cal.words_for(target)) - target) <= 2, (target, seen)
    assert line_miss > 2 >= abs(server_tokens(cal.words_for(38)) - 38)  # within a word's tokens, where the line was not


def test_report_json_and_csv():
    state = done_state()
    report = report_json(state, plan_summary={"api": "chat"}, outcome="done")
    assert report["schema"] == "lpxtop-load/1"
    assert set(report) >= {"target", "slo", "steps", "capacity", "partial"}
    assert report["capacity"]["concurrency"] is None and report["capacity"]["reason"] == "no --slo given"
    rows = list(csv.DictReader(io.StringIO(steps_csv(state.steps))))
    assert len(rows) == 1
    assert rows[0]["concurrency"] == "1" and rows[0]["errors"] == "http_5xx:1"
    assert rows[0]["output_throughput"] == "16.0" and rows[0]["server_peak_requests_waiting"] == "2.0"
    assert rows[0]["median_ttft_ms"] == ""


def test_write_text_replaces_the_file_whole(tmp_path):
    path = tmp_path / "r.json"
    path.write_text("old")
    write_text(str(path), json.dumps({"a": 1}))
    assert json.loads(path.read_text()) == {"a": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["r.json"]


def args(*argv: str):
    return build_parser("load").parse_args(list(argv))


def test_plans_from_flags():
    plan = plan_from_args(args("127.0.0.1:9", "--concurrency", "1,5,10", "--duration", "3"))
    assert (plan.mode, plan.levels, plan.search, plan.duration_s) == ("concurrency", (1, 5, 10), False, 3.0)
    plan = plan_from_args(args("127.0.0.1:9", "--rate", "2", "--input-tokens", "128,1024", "--ignore-eos"))
    assert (plan.mode, plan.levels, plan.rate, plan.concurrency) == ("input_tokens", (128, 1024), 2.0, None)
    assert dict(plan.step_endpoint(128, None).extra_body) == {"ignore_eos": True}
    plan = plan_from_args(args("127.0.0.1:9", "--sweep", "rate", "--rate", "4", "--slo", "ttft_p95<=1s"))
    assert (plan.mode, plan.levels, plan.search, plan.max_level) == ("rate", (4.0,), True, 1000.0)


@pytest.mark.parametrize("argv, words", [
    (("--concurrency", "1,2", "--rate", "3"), "not both"),
    (("--concurrency", "1,2", "--input-tokens", "5,6"), "only one of"),
    (("--sweep", "concurrency",), "give --slo"),
    (("--sweep", "concurrency", "--slo", "ttft_p95<=1s", "--concurrency", "1,2"), "one starting value"),
    (("--slo", "ttft_p95>=1s", "--concurrency", "1"), "upper bounds"),
    ((), "say what load to run"),
])
def test_usage_mistakes(argv, words):
    with pytest.raises(ConfigError, match=words):
        plan_from_args(args("127.0.0.1:9", *argv))


def test_usage_mistakes_exit_2_before_any_request(capsys):
    assert main(["load", "127.0.0.1:9", "--concurrency", "0"]) == 2
    assert "--concurrency '0' must be" in capsys.readouterr().err


def test_only_this_machine_is_loaded_without_asking():
    assert is_local("http://127.0.0.1:8000/v1") and is_local("http://localhost:1/v1") and is_local("http://[::1]:8/v1")
    assert not is_local("http://10.0.0.5:8000/v1") and not is_local("https://api.example.com/v1")


def test_a_remote_target_needs_yes_when_nobody_can_answer(capsys, monkeypatch):
    monkeypatch.setattr("sys.stdin", io.StringIO(""))
    assert main(["load", "10.255.255.1:8000", "--concurrency", "1,2", "--duration", "5"]) == 2
    err = capsys.readouterr().err
    assert "will send 2 step(s): 1 concurrent, 2 concurrent to http://10.255.255.1:8000/v1" in err
    assert "pass --yes" in err
