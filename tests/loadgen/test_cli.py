"""`servingbench load`: a run folder on success, a clear message and exit 2 on user errors."""

from __future__ import annotations

from servingbench.pipelines.cli import load as cli
from servingbench.pipelines.cli import load_workload
from servingbench.resources.contract import manifest as mf

from tests.support.emulator import FIXED_MODEL
from tests.support.loadgen import rows, run_cli
from tests.support.net import free_port


def test_cli_writes_a_run_folder_and_refuses_to_overwrite_it(server, tmp_path, capsys):
    out = tmp_path / "run"
    args = ["--endpoint", server.base_url, "--model", FIXED_MODEL, "--concurrency", "1,2",
            "--requests", "3", "--warmup-requests", "1", "--input-tokens", "8",
            "--output-tokens", "4", "--out", str(out)]
    p = run_cli(args)
    assert p.returncode == 0, p.stderr
    assert "EMULATED" in p.stdout and "6 steady requests" in p.stdout
    assert sorted(x.name for x in out.iterdir()) == [
        "chunk_log.parquet", "manifest.json", "server_metrics.json", "steady_state_request_log.parquet",
        "warmup_log.parquet"]
    assert len(rows(out)) == 6 and len(rows(out, "warmup_log")) == 1
    assert [s["step"] for s in mf.load(out / "manifest.json")["steps"]] == ["c=1", "c=2"]
    assert "c=2" in p.stderr  # the plain (non-TTY) progress lines
    before = (out / "steady_state_request_log.parquet").read_bytes()
    assert cli.main(args) == 2  # in-process this time: the same entry point, no process start
    assert "never overwritten" in capsys.readouterr().err
    assert (out / "steady_state_request_log.parquet").read_bytes() == before


def test_bad_url_is_a_clear_error(tmp_path, capsys):
    code = cli.main(["--endpoint", "localhost:8000", "--model", "m", "--out", str(tmp_path / "r")])
    err = capsys.readouterr().err
    assert code == 2 and "is not an http(s) URL" in err
    assert not (tmp_path / "r").exists()


def test_unreachable_server_is_a_clear_error(tmp_path, capsys):
    port = free_port()
    code = cli.main(["--endpoint", f"http://127.0.0.1:{port}", "--model", "m", "--out", str(tmp_path / "r")])
    err = capsys.readouterr().err
    assert code == 2 and "cannot connect to" in err
    assert not (tmp_path / "r").exists()


def test_bad_option_values_exit_2(tmp_path, capsys):
    base = ["--endpoint", "http://127.0.0.1:1", "--model", "m", "--out", str(tmp_path / "r")]
    try:
        cli.main([*base, "--concurrency", "1,x"])
        raise AssertionError("argparse should exit")
    except SystemExit as exc:
        assert exc.code == 2
    assert "comma-separated integers" in capsys.readouterr().err
    assert cli.main([*base, "--concurrency", "0"]) == 2
    assert "concurrency" in capsys.readouterr().err
    assert cli.main([*base, "--rate", "5,5"]) == 2
    assert "unique" in capsys.readouterr().err
    # a profile is the schedule kind's segments: one workload, not two
    assert cli.main([*base, "--profile", "5:10,5:20", "--schedule", "spike"]) == 2
    assert "--schedule and --profile: choose one workload" in capsys.readouterr().err


def test_slo_search_flags_are_checked(tmp_path, capsys):
    base = ["--endpoint", "http://127.0.0.1:1", "--model", "m", "--out", str(tmp_path / "r")]
    assert cli.main([*base, "--slo-search-over", "concurrency"]) == 2
    assert "--slo-search-over: needs --slo-search" in capsys.readouterr().err
    assert cli.main([*base, "--slo-search", "ttft_p99_s=2", "--slo-search-over", "concurrency",
                     "--start-rate", "4"]) == 2
    assert "--start-rate: not for --slo-search-over concurrency" in capsys.readouterr().err
    assert cli.main([*base, "--slo-search", "ttft_p99_s=2", "--start-concurrency", "0",
                     "--slo-search-over", "concurrency"]) == 2
    assert "start_concurrency: must be a positive integer" in capsys.readouterr().err
    assert not (tmp_path / "r").exists()
    args = cli.parser().parse_args([*base, "--slo-search", "ttft_p99_s=2", "--slo-search-over",
                                    "concurrency", "--start-concurrency", "4"])
    s = load_workload.scenario_from_args(args)
    assert (s.kind, s.over, s.start_concurrency) == ("slo_search", "concurrency", 4)
