"""The peer import job's `source` comes from a run's config, which anyone with the UI can
write: it reads only under its import roots (SERVINGBENCH_IMPORT_ROOTS, by default
`<data folder>/imports`). `/`, `../..`, a symlink out, a sibling prefix and `..` in an S3
key are refused with a message naming the setting; a result file linking out of an allowed
folder is its own outcome, never read."""

from __future__ import annotations

import shutil
from pathlib import Path

import dagster as dg
import pytest
from servingbench.assets.peer_import import PeerImportConfig, import_results
from servingbench.assets.peer_prefix import check_source, import_roots
from servingbench.pipelines.definitions import build_definitions
from servingbench.pipelines.profiles import Settings

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "peers" / "vllm_bench_serve_0.33.0.json"


def test_the_default_root_is_the_data_folders_imports(tmp_path):
    assert import_roots(None, tmp_path) == (str((tmp_path / "imports").resolve()),)
    assert import_roots("", tmp_path) == (str((tmp_path / "imports").resolve()),)


@pytest.mark.parametrize("text", ["relative/drop", "s3://", "s3://b/../x", "s3://b//x"])
def test_a_bad_root_names_the_setting(tmp_path, text):
    with pytest.raises(ValueError, match="SERVINGBENCH_IMPORT_ROOTS"):
        import_roots(text, tmp_path)


def test_sources_outside_the_roots_are_refused(tmp_path):
    root = tmp_path / "imports"
    (root / "team").mkdir(parents=True)
    (tmp_path / "secret").mkdir()
    (root / "link").symlink_to(tmp_path / "secret")
    roots = import_roots(f"{root},s3://bucket/drops", tmp_path)
    for source in ("/", str(root / ".." / "secret"), str(root / "link"), str(tmp_path),
                   "imports/team", "s3://bucket/drops-x", "s3://bucket", "s3://other/drops",
                   "s3://bucket/drops/../x", "s3://bucket/drops//x"):
        with pytest.raises(ValueError, match="source: "):
            check_source(source, roots)
    for source in (str(root), str(root / "team"), str(root / "team" / ".." / "team"),
                   "s3://bucket/drops", "s3://bucket/drops/team/"):
        check_source(source, roots)  # inside: no error


def test_the_job_refuses_the_hosts_root_folder_naming_the_setting(tmp_path, monkeypatch):
    monkeypatch.delenv("SERVINGBENCH_IMPORT_ROOTS", raising=False)
    defs = build_definitions(Settings(data_dir=tmp_path / "data"))
    result = defs.resolve_job_def("peer_import_job").execute_in_process(
        run_config={"ops": {"import_peer_results": {"config": {"peer": "vllm", "source": "/"}}}},
        instance=dg.DagsterInstance.ephemeral(), raise_on_error=False)
    assert not result.success
    (failure,) = [e for e in result.all_events if e.event_type_value == "STEP_FAILURE"]
    text = str(failure.event_specific_data.error)
    assert "outside the import roots" in text and "SERVINGBENCH_IMPORT_ROOTS" in text
    assert not (tmp_path / "data" / "runs").exists()  # nothing read, nothing written


def test_a_result_linking_out_of_the_source_folder_is_not_read(tmp_path):
    drop, outside = tmp_path / "drop", tmp_path / "outside"
    drop.mkdir()
    outside.mkdir()
    shutil.copy(FIXTURE, outside / "theirs.json")
    (drop / "a.json").symlink_to(outside / "theirs.json")
    rows = import_results(drop, PeerImportConfig(peer="vllm", source=str(drop)), tmp_path / "runs")
    assert rows == [{"result": "a.json", "run_id": None,
                     "outcome": "not imported: a link that leaves the source folder"}]
    assert not (tmp_path / "runs").exists()
