"""An engine is one file: `engines/<engine>.py` ends with `PLUGIN = Engine(...)` and the
package finds it.
Checked on a package of dropped-in files."""

from __future__ import annotations

import pytest
from servingbench.resources.model_server import engines

from tests.support.droppedin import package

TGI = '''
from servingbench.resources.model_server.engines import Engine, flag

PLUGIN = Engine("tgi", accelerator="nvidia", where="eks", family="tgi",
                settings={"max_num_seqs": flag("--max-concurrent-requests")})
'''


def test_a_dropped_in_engine_file_is_found_by_its_name(tmp_path, monkeypatch):
    pkg = package(tmp_path, monkeypatch, {"tgi.py": TGI})
    found = engines.discover(pkg.__path__, pkg.__name__)
    assert list(found) == ["tgi"]
    assert found["tgi"].setting_args({"max_num_seqs": 8}) == ["--max-concurrent-requests", "8"]


@pytest.mark.parametrize(("source", "says"), [
    (TGI.replace("PLUGIN = ", "engine = "), r"must end with PLUGIN = Engine\(\.\.\.\) \(got nothing\)"),
    (TGI.replace('"tgi", accelerator', '"vllm", accelerator'), "engine 'vllm' is already defined in"),
])
def test_a_malformed_engine_file_fails_loudly_naming_the_file(tmp_path, monkeypatch, source, says):
    files = {"tgi.py": source, "aaa.py": TGI.replace('"tgi", accelerator', '"vllm", accelerator')}
    pkg = package(tmp_path, monkeypatch, files)
    with pytest.raises(ImportError, match=says) as err:
        engines.discover(pkg.__path__, pkg.__name__)
    assert "tgi.py" in str(err.value)
