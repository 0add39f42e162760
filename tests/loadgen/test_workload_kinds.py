"""Reasoning models, image prompts, speculative decoding and agentic sessions, against the
emulator as a real process on 127.0.0.1: what the load generator records is checked against
the emulator's own ground truth."""

from __future__ import annotations

import pyarrow.parquet as pq
import pytest
from servingbench.emulator import vision
from servingbench.resources.analysis.analyze import analyze_run
from servingbench.resources.contract import manifest as mf
from servingbench.resources.loadgen import run_load
from servingbench.resources.loadgen.scenarios.spec import Scenario
from servingbench.resources.telemetry import Sampler, sources_from

from tests.support.emulator import FIXED_MODEL
from tests.support.loadgen import config, ns, rows, run_cli


def _chunks_by_request(run_dir) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for c in rows(run_dir, "chunk_log"):
        out.setdefault(c["request_id"], []).append(c)
    return {k: sorted(v, key=lambda c: c["seq"]) for k, v in out.items()}


@pytest.mark.parametrize(("api", "flags"), [
    ("chat", ()),                                           # reasoning_content, usage details
    ("completions", ("--reasoning-field", "reasoning")),    # newer spelling, beside the text
    ("chat", ("--no-reasoning-details", "--no-continuous-usage")),  # counted from chunks
])
def test_reasoning_split_is_exact_against_the_ground_truth(start_server, tmp_path, api, flags):
    # 10 ms between tokens: the first answer token is written 20 ms or more after the first
    # token, so a loaded client that reads several chunks at once (they then share one
    # arrival time) cannot make the two medians equal; at 1 ms it did, in the parallel pass
    server = start_server("--reasoning-tokens", "2:9", "--seed", "4", *flags, ttft_ms=5,
                          itl_ms=10)
    run_dir = tmp_path / "run"
    run_load(config(server.base_url, api=api, output_tokens=12, requests_per_step=8),
             run_dir, progress=False)
    truth = server.truth()
    chunks = _chunks_by_request(run_dir)
    steady = rows(run_dir)
    assert len(steady) == 8 and {r["status"] for r in steady} == {"ok"}
    thought = []
    for r in steady:
        gt = truth[r["request_id"]]
        assert r["reasoning_tokens"] == gt["reasoning_tokens"]
        thought.append(gt["reasoning_tokens"])
        mine = chunks[r["request_id"]]
        # the chunk kinds, chunk by chunk, are the emulator's
        assert [c["kind"] for c in mine] == gt["chunk_kinds"]
        assert sum(c["tokens"] for c in mine if c["kind"] == "reasoning") == gt["reasoning_tokens"]
        first_answer = next(c for c in mine if c["kind"] == "answer")
        assert r["first_answer_at"] == first_answer["at"]
        # reasoning came first (two chunks read at once share their arrival time)
        assert first_answer["seq"] > 0 and ns(r["first_answer_at"]) >= ns(r["first_token_at"])
    assert len(set(thought)) > 1  # the 2..9 distribution was drawn, not one value
    analysis = analyze_run(run_dir)
    assert analysis.exit_code == 0, analysis.message
    m = analysis.metrics.to_pylist()[0]
    assert m["reasoning_tokens"] == sum(thought)
    assert m["ttfat_s_n"] == 8 and m["ttfat_s_p50"] > m["ttft_s_p50"]


def test_a_model_that_does_not_reason_has_its_first_answer_at_its_first_token(server, tmp_path):
    run_dir = tmp_path / "run"
    run_load(config(server.base_url, requests_per_step=4), run_dir, progress=False)
    for r in rows(run_dir):
        assert r["first_answer_at"] == r["first_token_at"] and r["reasoning_tokens"] is None
    assert {c["kind"] for c in rows(run_dir, "chunk_log")} == {None}
    m = analyze_run(run_dir).metrics.to_pylist()[0]
    assert m["ttfat_s_p50"] == m["ttft_s_p50"] and m["reasoning_tokens"] is None


def test_image_prompts_cost_their_llama4_tiles(server, tmp_path):
    text_only, with_images = tmp_path / "text", tmp_path / "images"
    common = dict(api="chat", input_tokens=32, requests_per_step=3, concurrency=[1])
    run_load(config(server.base_url, **common), text_only, progress=False)
    run_load(config(server.base_url, images=2, image_size=(1024, 768), **common), with_images,
             progress=False)
    plain = {r["input_tokens"] for r in rows(text_only)}
    assert len(plain) == 1  # the prompts are sized to the same token count
    tiles = vision.image_tokens(1024, 768)
    assert tiles == 147 + 12 * 145  # a 3 x 4 tile grid, by hand
    text_tokens = plain.pop()
    for r in rows(with_images):
        assert r["input_images"] == 2 and r["status"] == "ok"
        assert r["input_tokens"] == text_tokens + 2 * tiles
    assert {r["input_images"] for r in rows(text_only)} == {None}
    m = mf.load(with_images / "manifest.json")
    assert m["scenario"]["images"] == 2 and m["scenario"]["image_size"] == "1024x768"


def test_speculative_decoding_acceptance_rate_from_the_engine_counters(start_server, tmp_path):
    k, p = 4, 0.6
    server = start_server("--spec-draft-tokens", str(k), "--spec-acceptance", str(p),
                          "--seed", "2", ttft_ms=5, itl_ms=2)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    sampler = Sampler(run_dir, "spec-run", sources_from(
        [{"kind": "engine_metrics", "url": f"{server.base_url}/metrics"}]), interval_s=0.05)
    with sampler:
        run_load(config(server.base_url, output_tokens=128, requests_per_step=32,
                        concurrency=[4], run_id="spec-run"), run_dir, progress=False)
    analysis = analyze_run(run_dir)
    assert analysis.exit_code == 0, analysis.message
    m = analysis.metrics.to_pylist()[0]
    telemetry = pq.read_table(run_dir / "telemetry.parquet").to_pylist()
    drafted = [r["value"] for r in telemetry if r["metric"] == "spec_draft_tokens"]
    steps = (max(drafted) - min(drafted)) / k  # verify steps seen by the counters
    assert steps > 500
    expected = sum(p ** i for i in range(1, k + 1)) / k  # 0.3264: the first reject ends it
    # accepted per step lies in [0, k]: variance at most k²/4, so the rate's standard error
    # over n steps is at most (k / 2) / (k √n)
    sigma = 0.5 / steps ** 0.5
    assert abs(m["spec_acceptance_rate"] - expected) < 4 * sigma
    assert m["itl_multi_token_share"] > 0.3  # a step emits 1 + accepted tokens in one chunk
    assert analysis.metrics.schema.field("spec_acceptance_rate").type == "double"


def test_cli_image_reaches_the_server_with_a_default_sized_prompt(server, tmp_path):
    """`servingbench load --api chat --images 1 --image-size 672x672` with the default
    512-token prompt: its text ends in a cached filler, which the body builder splices in
    as pre-escaped JSON; the image part must survive that splice. The emulator's own
    ground truth is the witness that the image arrived (not the load generator's count)."""
    common = ["--endpoint", server.base_url, "--model", FIXED_MODEL, "--api", "chat",
              "--concurrency", "1", "--requests", "3", "--warmup-requests", "0",
              "--output-tokens", "4", "--no-progress"]
    text_only, with_image = tmp_path / "text", tmp_path / "image"
    for out, extra in ((text_only, []), (with_image, ["--images", "1", "--image-size", "672x672"])):
        p = run_cli([*common, *extra, "--out", str(out)])
        assert p.returncode == 0, p.stderr
    plain = {r["input_tokens"] for r in rows(text_only)}
    assert len(plain) == 1 and plain.pop() > 500  # the default prompt: 512 tokens of text
    text_tokens = rows(text_only)[0]["input_tokens"]
    tiles = vision.image_tokens(672, 672)
    assert tiles == 147 + 4 * 145  # a 2 x 2 grid of 336 px tiles, by hand
    truth = server.truth()
    for r in rows(with_image):
        assert r["input_images"] == 1 and r["status"] == "ok"
        assert r["input_tokens"] == text_tokens + tiles
        assert truth[r["request_id"]]["input_images"] == 1
        assert truth[r["request_id"]]["prompt_tokens"] == text_tokens + tiles


def test_multi_turn_history_keeps_its_images(server, tmp_path):
    run_dir = tmp_path / "run"
    run_load(config(server.base_url, api="chat", images=1, image_size=(336, 336),
                    requests_per_step=4, concurrency=[2],
                    scenario=Scenario("multi_turn", turns=2)), run_dir, progress=False)
    turns = sorted((r["session_id"], r["turn"], r["input_images"], r["input_tokens"])
                   for r in rows(run_dir))
    assert [t[2] for t in turns] == [1, 2, 1, 2]  # every turn resends the earlier images
    for first, second in zip(turns[::2], turns[1::2], strict=True):
        assert second[3] > first[3] + 147  # the history, a new message and one more tile


def _kinds(*payloads: bytes) -> tuple[list[int], bytearray | None, list[int]]:
    from servingbench.resources.loadgen import sse
    from servingbench.resources.loadgen.records import Request

    req = Request("r", "steady", "c=1", "concurrency", 1.0, 0)
    for at, p in enumerate(payloads, 1):
        sse._on_data(req, p, at)
    return req.chunk_tokens, req.chunk_reasoning, req.chunk_at


USAGE = b',"usage":{"prompt_tokens":3,"completion_tokens":%d}}'


@pytest.mark.parametrize(("payloads", "tokens", "flags"), [
    # vLLM chat (exclude_unset), then the answer: the fast path tells them apart
    ([b'{"choices":[{"index":0,"delta":{"reasoning_content":" a b"}}]' + USAGE % 2,
      b'{"choices":[{"index":0,"delta":{"content":" c"}}]' + USAGE % 3], [2, 1], [1, 0]),
    # SGLang's nulls, and a completion's reasoning beside its empty text (newer spelling)
    ([b'{"choices":[{"delta":{"role":null,"content":null,"reasoning_content":" a"}}]' + USAGE % 1,
      b'{"choices":[{"index":0,"text":"","reasoning":" b"}]' + USAGE % 2,
      b'{"choices":[{"delta":{"content":" c","reasoning_content":null}}]' + USAGE % 3],
     [1, 1, 1], [1, 1, 0]),
    # both kinds in one delta: an answer chunk (its first answer token is in it)
    ([b'{"choices":[{"delta":{"reasoning_content":" a","content":" b"}}]' + USAGE % 2],
     [2], None),
    # no usage streamed: one token a chunk, the kind from the JSON
    ([b'{"choices":[{"delta":{"reasoning_content":" a"}}]}',
      b'{"choices":[{"delta":{"content":" b"}}]}'], [1, 1], [1, 0]),
    # SGLang's answer chunks carry `"reasoning_content": null`: answers, on the fast path
    ([b'{"choices":[{"delta":{"role":null,"content":" a","reasoning_content":null}}]' + USAGE % 1],
     [1], None),
    # an answer that quotes the word "reasoning" is still an answer
    ([b'{"choices":[{"delta":{"content":" \\"reasoning\\": no"}}]' + USAGE % 1], [1], None),
])
def test_reasoning_and_answer_chunks_are_told_apart(payloads, tokens, flags):
    got_tokens, got_flags, _ = _kinds(*payloads)
    assert got_tokens == tokens
    assert (None if got_flags is None else list(got_flags)) == flags


@pytest.mark.parametrize(("flags", "message"), [
    (["--images", "1"], "images: image prompts need the chat API"),
    (["--api", "chat", "--images", "1", "--image-size", "10x"], "--image-size: expected WIDTHxHEIGHT"),
    (["--max-context-tokens", "4096"], "--max-context-tokens: needs --scenario agentic"),
    (["--api", "chat", "--scenario", "agentic", "--tool-result-tokens", "0"],
     "tool_result_tokens: must be a positive integer"),
])
def test_bad_workload_flags_exit_2_naming_the_flag(tmp_path, capsys, flags, message):
    from servingbench.pipelines.cli.load import main

    try:
        code = main(["--endpoint", "http://127.0.0.1:9", "--model", "m",
                     "--out", str(tmp_path / "run"), *flags])
    except SystemExit as exc:  # argparse refuses a malformed value itself
        code = exc.code
    assert code == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "run").exists()


def test_dataset_rows_name_image_sizes_or_files(tmp_path):
    import base64
    import json

    from servingbench.emulator.vision import data_url_size
    from servingbench.resources.loadgen.errors import LoadConfigError
    from servingbench.resources.loadgen.images import png
    from servingbench.resources.loadgen.prompts import Prompts, Tokenizer

    (tmp_path / "cat.png").write_bytes(png(640, 480, (1, 2, 3)))
    data = tmp_path / "rows.jsonl"
    data.write_text(json.dumps({"prompt": "describe", "output_tokens": 8,
                                "images": ["1024x768", "cat.png"]}) + "\n")
    wl = Prompts(config("http://127.0.0.1:1", api="chat", dataset=data),
                  Tokenizer("http://127.0.0.1:1", "m", {}, False))
    item = wl.next_item()
    body = json.loads(wl.body(item, None))
    parts = body["messages"][0]["content"]
    assert parts[0]["type"] == "text" and parts[0]["text"].endswith("describe")
    urls = [p["image_url"]["url"] for p in parts[1:]]
    assert [data_url_size(u) for u in urls] == [(1024, 768), (640, 480)]
    assert base64.b64decode(urls[1][22:]) == (tmp_path / "cat.png").read_bytes()
    data.write_text(json.dumps({"prompt": "x", "images": ["missing.png"]}) + "\n")
    with pytest.raises(LoadConfigError, match=r"rows\.jsonl:1: images: cannot read"):
        Prompts(config("http://127.0.0.1:1", api="chat", dataset=data),
                 Tokenizer("http://127.0.0.1:1", "m", {}, False))


def test_dataset_image_files_stay_inside_its_folder_are_read_once_and_capped(tmp_path,
                                                                              monkeypatch):
    import json

    from servingbench.resources.loadgen import images, prompts
    from servingbench.resources.loadgen.errors import LoadConfigError
    from servingbench.resources.loadgen.images import png

    ds = tmp_path / "ds"
    ds.mkdir()
    (tmp_path / "outside.png").write_bytes(png(8, 8, (9, 9, 9)))
    (ds / "link.png").symlink_to(tmp_path / "outside.png")
    data = ds / "rows.jsonl"
    for bad in ("../outside.png", str(tmp_path / "outside.png"), "link.png"):
        data.write_text(json.dumps({"prompt": "x", "images": [bad]}) + "\n")
        with pytest.raises(LoadConfigError, match=r"rows\.jsonl:1: images: .* outside the "
                                                  r"dataset's folder"):
            prompts.load_dataset(data)
    # 200 rows naming one file: read once, one string in memory for all of them
    (ds / "a.png").write_bytes(png(64, 64, (1, 2, 3)))
    data.write_text("".join(json.dumps({"prompt": f"p{i}", "images": ["a.png"]}) + "\n"
                            for i in range(200)))
    rows = prompts.load_dataset(data)
    assert len({id(r["images"][0]) for r in rows}) == 1
    # the files' total is capped (distinct files; a repeat costs nothing more)
    (ds / "b.png").write_bytes(png(64, 64, (4, 5, 6)))
    size = (ds / "a.png").stat().st_size
    monkeypatch.setattr(images, "MAX_TOTAL_BYTES", size + 1)
    data.write_text(json.dumps({"prompt": "1", "images": ["a.png", "a.png"]}) + "\n"
                    + json.dumps({"prompt": "2", "images": ["b.png"]}) + "\n")
    with pytest.raises(LoadConfigError, match=r"rows\.jsonl:2: images: .*b\.png.* total"):
        prompts.load_dataset(data)
