"""A peer is one file: `peers/<peer>.py` ends with `PLUGIN = Peer(...)` and the package finds
it: `servingbench import`, the import job and the folder scan need nothing more. Checked on
a package of dropped-in files, and on the real peers."""

from __future__ import annotations

import pytest
from servingbench.resources import peers
from servingbench.resources.peers.discover import results_in

from tests.support.droppedin import package

GENAI = '''
from servingbench.resources.peers import Peer


def read(path):
    return {"read": str(path)}


PLUGIN = Peer("genai-perf", read, marker="genai_perf.json", result_is_folder=True)
'''


def test_a_dropped_in_peer_file_is_found_by_its_name(tmp_path, monkeypatch):
    found = peers.discover_peers(package(tmp_path, monkeypatch, {"genai_perf.py": GENAI}))
    assert list(found) == ["genai-perf"]
    peer = found["genai-perf"]
    assert peer.read(tmp_path) == {"read": str(tmp_path)} and not peer.relative_clock


@pytest.mark.parametrize(("source", "says"), [
    (GENAI.replace("PLUGIN = ", "peer = "), r"must end with PLUGIN = Peer\(\.\.\.\) \(got nothing\)"),
    (GENAI.replace("PLUGIN = Peer(", "PLUGIN = (").replace(", marker=", ", ").replace(
        ", result_is_folder=", ", "), r"\(got tuple\)"),
    (GENAI.replace('"genai-perf"', '"aiperf"'), "peer 'aiperf' is already declared in"),
])
def test_a_malformed_peer_file_fails_loudly_naming_the_file(tmp_path, monkeypatch, source, says):
    files = {"genai_perf.py": source, "aiperf.py": GENAI.replace('"genai-perf"', '"aiperf"')}
    with pytest.raises(ImportError, match=says) as err:
        peers.discover_peers(package(tmp_path, monkeypatch, files))
    assert "genai_perf.py" in str(err.value)


def test_the_real_peers_and_how_their_results_are_found(tmp_path):
    assert peers.names() == ("aiperf", "guidellm", "inference-perf", "vllm")
    assert [n for n in peers.names() if peers.get(n).relative_clock] == ["inference-perf", "vllm"]
    with pytest.raises(ValueError, match="peer 'genai-perf': expected one of aiperf, "):
        peers.get("genai-perf")
    (tmp_path / "a" / "run1").mkdir(parents=True)
    (tmp_path / "a" / "run1" / "profile_export.jsonl").write_text("")
    (tmp_path / "g.json").write_text("{}")
    (tmp_path / "benchmarks.json").write_text("{}")
    assert results_in(tmp_path, "aiperf") == [tmp_path / "a" / "run1"]
    assert results_in(tmp_path, "guidellm") == [tmp_path / "benchmarks.json"]
    assert results_in(tmp_path, "vllm") == [tmp_path / "benchmarks.json", tmp_path / "g.json"]
