"""Prompt sizing, uniqueness, the shared-prefix scenario, the dataset mode, the API key."""

from __future__ import annotations

import json

import pytest
from servingbench.resources.contract import manifest as mf
from servingbench.resources.loadgen import LoadConfig, LoadConfigError, run_load
from servingbench.resources.loadgen.prompts import Prompts, Tokenizer, load_dataset
from servingbench.resources.loadgen.scenarios.trace import read_trace

from tests.support.emulator import FIXED_MODEL
from tests.support.loadgen import config, rows


def test_prompts_are_sized_with_tokenize_and_unique(server, tmp_path):
    result = run_load(config(server.base_url, input_tokens=100, requests_per_step=10),
                      tmp_path / "run", progress=False)
    steady = rows(tmp_path / "run")
    assert {r["input_tokens"] for r in steady} == {100} and result.prompt_token_mismatches == 0
    assert mf.load(tmp_path / "run" / "manifest.json")["scenario"]["prompt_sizing"] == "tokenize"
    wl = Prompts(config(server.base_url, input_tokens=100),
                  Tokenizer(server.base_url, FIXED_MODEL, {}, True))
    prompts = [wl.next_item().prompt for _ in range(200)]
    assert len(set(prompts)) == 200
    assert len({p.split()[0:8].__repr__() for p in prompts}) == 200  # unique from the first words


def test_without_tokenize_the_size_is_an_estimate(start_server, tmp_path):
    srv = start_server("--no-tokenize", itl_ms=1)
    run_load(config(srv.base_url, input_tokens=50), tmp_path / "run", progress=False)
    assert mf.load(tmp_path / "run" / "manifest.json")["scenario"]["prompt_sizing"] == "estimate"


def test_shared_prefix_scenario(server, tmp_path):
    cfg = config(server.base_url, input_tokens=64, prefix="shared", shared_prefix_tokens=40)
    wl = Prompts(cfg, Tokenizer(server.base_url, FIXED_MODEL, {}, True))
    prompts = [wl.next_item().prompt.split() for _ in range(20)]
    assert all(p[:40] == prompts[0][:40] for p in prompts)
    assert len({tuple(p[40:48]) for p in prompts}) == 20
    run_load(cfg, tmp_path / "run", progress=False)
    scenario = mf.load(tmp_path / "run" / "manifest.json")["scenario"]
    assert (scenario["prefix"], scenario["shared_prefix_tokens"]) == ("shared", 40)
    assert {r["input_tokens"] for r in rows(tmp_path / "run")} == {64}


def test_dataset_of_length_pairs_and_prompts(server, tmp_path):
    ds = tmp_path / "mix.jsonl"
    ds.write_text("\n".join(json.dumps(x) for x in [
        {"input_tokens": 30, "output_tokens": 3}, {"input_tokens": 200, "output_tokens": 6},
        {"prompt": "one two three four", "output_tokens": 2}]) + "\n")
    run_load(config(server.base_url, dataset=ds, requests_per_step=6, concurrency=[1]),
             tmp_path / "run", progress=False)
    got = sorted((r["input_tokens"], r["output_tokens"]) for r in rows(tmp_path / "run"))
    assert got == [(12, 2), (12, 2), (30, 3), (30, 3), (200, 6), (200, 6)]  # 8 prefix words + 4


def test_a_bad_dataset_line_is_named(tmp_path):
    ds = tmp_path / "bad.jsonl"
    ds.write_text('{"input_tokens": 5, "output_tokens": 1}\n{"text": 3}\n')
    cfg = LoadConfig(endpoint="http://127.0.0.1:1", model="m", dataset=ds)
    with pytest.raises(LoadConfigError, match=r"bad.jsonl:2"):
        Prompts(cfg, Tokenizer("http://127.0.0.1:1", "m", {}, False))


@pytest.mark.parametrize("kind", ["dataset", "mooncake trace"])
def test_a_line_that_is_not_json_is_named_by_file_and_line(tmp_path, kind):
    # a dataset and a trace read JSON lines one way: blank lines skipped, the line counted
    path = tmp_path / "rows.jsonl"
    good = {"input_tokens": 5, "output_tokens": 1, "timestamp": 0, "input_length": 5,
            "output_length": 1}  # a row both readers take
    path.write_text(json.dumps(good) + '\n\n{"oops"\n')
    with pytest.raises(LoadConfigError, match=r"rows\.jsonl:3: not a JSON line$"):
        if kind == "dataset":
            load_dataset(path)
        else:
            read_trace(path, "mooncake")


def test_api_key_is_sent_and_never_stored(start_server, tmp_path, monkeypatch):
    key = "sk-test-0123456789abcdef"
    srv = start_server("--api-key", key, itl_ms=1)
    monkeypatch.setenv("SB_TEST_KEY", key)
    result = run_load(config(srv.base_url, api_key_env="SB_TEST_KEY"), tmp_path / "run", progress=False)
    assert result.statuses == {"ok": 6}
    for f in (tmp_path / "run").iterdir():
        assert key.encode() not in f.read_bytes(), f
    monkeypatch.setenv("SB_TEST_KEY", "sk-wrong-0123456789")
    with pytest.raises(Exception, match="refused the credentials") as exc:
        run_load(config(srv.base_url, api_key_env="SB_TEST_KEY"), tmp_path / "run2", progress=False)
    assert "sk-wrong" not in str(exc.value)
    monkeypatch.delenv("SB_TEST_KEY")
    with pytest.raises(LoadConfigError, match="SB_TEST_KEY"):
        run_load(config(srv.base_url, api_key_env="SB_TEST_KEY"), tmp_path / "run3", progress=False)


def test_long_input_scenario(server, tmp_path):
    result = run_load(config(server.base_url, input_tokens=8192, output_tokens=2, requests_per_step=2,
                             concurrency=[2]), tmp_path / "run", progress=False)
    assert {r["input_tokens"] for r in rows(tmp_path / "run")} == {8192}
    assert result.prompt_token_mismatches == 0


@pytest.mark.parametrize(("text", "what"), [
    ('{"input_tokens": 99999999999, "output_tokens": 1}', "input_tokens"),
    ('{"input_tokens": 5, "output_tokens": 20000000}', "output_tokens"),
    ('{"input_tokens": 5, "output_tokens": 0}', "output_tokens"),
    ('{"input_tokens": true, "output_tokens": 1}', "input_tokens"),
])
def test_dataset_lengths_are_bounded_and_named(tmp_path, text, what):
    path = tmp_path / "ds.jsonl"
    path.write_text('{"input_tokens": 5, "output_tokens": 1}\n' + text + "\n")
    with pytest.raises(LoadConfigError, match=rf"ds\.jsonl:2: {what}: expected an integer from 1"):
        load_dataset(path)


@pytest.mark.parametrize("length", ["99999999999", '"²"', '"٣"', "-3"])
def test_trace_lengths_are_bounded_ascii_integers(tmp_path, length):
    mooncake = tmp_path / "t.jsonl"
    mooncake.write_text('{"timestamp": 0, "input_length": 5, "output_length": 1}\n'
                        f'{{"timestamp": 1, "input_length": {length}, "output_length": 1}}\n')
    with pytest.raises(LoadConfigError, match=r"t\.jsonl:2: input_length: expected an integer"):
        read_trace(mooncake, "mooncake")
    azure = tmp_path / "t.csv"
    azure.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n"
                     f"2023-11-16 18:15:46.6805900,5,{length.strip(chr(34))}\n")
    with pytest.raises(LoadConfigError, match=r"t\.csv:2: GeneratedTokens"):
        read_trace(azure, "azure")


def test_ascii_digits_only():
    from servingbench.resources.contract.digits import is_digits

    assert is_digits("0123") and not is_digits("") and not is_digits("²")
    assert not is_digits("٣") and not is_digits("1 ") and not is_digits(None)
    assert "²".isdigit()  # what str.isdigit() would have let through to int()


def test_a_meeting_arrival_with_non_ascii_digits_is_ignored_not_a_crash():
    from servingbench.resources.loadgen.workers.podsync import Arrival

    assert Arrival.parse("1.pod-1.1764381600000000000") == Arrival(1, "pod-1", 1764381600000000000)
    assert Arrival.parse("².pod-1.5") is None and Arrival.parse("1.pod-1.٣") is None


@pytest.mark.parametrize("api", ["completions", "chat"])
def test_a_body_spliced_from_the_escaped_filler_is_the_body_json_encodes(api):
    """Bodies of long prompts reuse the filler's JSON (escaped once) and escape only each
    request's own head; what goes out decodes to exactly the request the plain encoding
    gives, characters JSON must escape included."""
    wl = Prompts(config("http://127.0.0.1:1", api=api, input_tokens=400, ignore_eos=True),
                  Tokenizer("http://127.0.0.1:1", "m", {}, False))
    options = {"include_usage": True, "continuous_usage_stats": True}
    item = wl.next_item()
    assert wl._tail(item.prompt) is not None  # the spliced path is the one taken
    head = 'quote " back \\ tab \t nl \n é 漢 \x01 '
    for prompt in (item.prompt, head + item.prompt, "short prompt"):
        sent = json.loads(wl.body(item.__class__(prompt, item.output_tokens), options))
        plain = {"model": FIXED_MODEL, "max_tokens": item.output_tokens, "stream": True, "temperature": 0,
                 **({"messages": [{"role": "user", "content": prompt}]} if api == "chat" else {"prompt": prompt}),
                 "stream_options": options, "ignore_eos": True, "min_tokens": item.output_tokens}
        assert sent == plain
