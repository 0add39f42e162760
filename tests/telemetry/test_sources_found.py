"""A telemetry source is one file: `sources/<source>.py` ends with `PLUGIN`, the
`Deployment.telemetry` kinds it serves, and the package finds it. Checked on a package of
dropped-in files."""

from __future__ import annotations

import pytest
from servingbench.resources.telemetry import sources

from tests.support.droppedin import package

RAPL = '''
class RaplSource:
    def __init__(self, path):
        self.path = path

    def sample(self):
        return []


PLUGIN = {"rapl": lambda s, t: RaplSource(s["path"])}
'''


def test_a_dropped_in_source_file_is_found_by_its_kind(tmp_path, monkeypatch):
    pkg = package(tmp_path, monkeypatch, {"rapl.py": RAPL})
    found = sources.discover(pkg.__path__, pkg.__name__)
    assert list(found) == ["rapl"]
    assert found["rapl"]({"kind": "rapl", "path": "/sys"}, {}).path == "/sys"


@pytest.mark.parametrize(("source", "says"), [
    (RAPL.replace("PLUGIN = ", "KINDS = "), "must end with PLUGIN = "),
    (RAPL.replace('"rapl"', '"host"'), "kind 'host' is already served by"),
])
def test_a_malformed_source_file_fails_loudly_naming_the_file(tmp_path, monkeypatch, source, says):
    files = {"rapl.py": source, "aaa_host.py": RAPL.replace('"rapl"', '"host"')}
    pkg = package(tmp_path, monkeypatch, files)
    with pytest.raises(ImportError, match=says) as err:
        sources.discover(pkg.__path__, pkg.__name__)
    assert "rapl.py" in str(err.value)


def test_the_real_sources_serve_their_kinds():
    assert {"host", "neuron_monitor"} <= set(sources.KINDS)
    with pytest.raises(ValueError, match="telemetry source kind 'rapl': expected"):
        sources.build([{"kind": "rapl"}])
