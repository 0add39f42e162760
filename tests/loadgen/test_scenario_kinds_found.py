"""A workload is one file: `scenarios/<kind>.py` declares its kind, keys and check (`KIND`,
declared to the package as `PLUGIN`) beside its `steady(run)`, and spec.py finds it. Checked on a package of dropped-in files."""

from __future__ import annotations

import pytest
from servingbench.resources.loadgen.errors import LoadConfigError
from servingbench.resources.loadgen.scenarios import spec

from tests.support.droppedin import package

BURST = '''
from servingbench.resources.loadgen.scenarios.kind import Key, Kind, pos_int

KIND = Kind("burst", order=9, keys={"bursts": Key(3, pos_int)},
            default_targets={"input_tokens": 16, "output_tokens": 8})


async def steady(run):
    pass


PLUGIN = KIND
'''


def test_a_dropped_in_kind_file_is_found_with_its_keys_and_defaults(tmp_path, monkeypatch):
    kinds = spec.discover(package(tmp_path, monkeypatch, {"burst.py": BURST}))
    assert list(kinds) == ["fixed", "burst"]
    assert kinds["burst"].keys["bursts"].default == 3
    assert dict(kinds["burst"].default_targets) == {"input_tokens": 16, "output_tokens": 8}
    with pytest.raises(LoadConfigError, match=r"scenario.bursts: must be a positive integer"):
        kinds["burst"].keys["bursts"].check("scenario.bursts", 0)


@pytest.mark.parametrize(("source", "says"), [
    ("async def steady(run):\n    pass\n", r"must end with PLUGIN = Kind\(\.\.\.\)"),
    (BURST.replace("async def steady", "async def drive"), "must define steady"),
    (BURST.replace('"burst"', '"batch"'), None),  # a name declared twice
])
def test_a_malformed_kind_file_fails_loudly_naming_the_file(tmp_path, monkeypatch, source, says):
    files = {"burst.py": source}
    if says is None:
        files["batch.py"] = BURST.replace('"burst"', '"batch"')
        says = "kind 'batch' is declared twice"
    with pytest.raises(ImportError, match=says) as err:
        spec.discover(package(tmp_path, monkeypatch, files))
    assert "burst.py" in str(err.value)


def test_the_real_kinds_keep_the_contract_names_and_order():
    # contract §2.1's scenario.kind values, in the order the messages list them
    assert spec.KINDS == ("fixed", "multi_turn", "agentic", "trace", "batch", "slo_search",
                          "schedule")
    with pytest.raises(LoadConfigError, match=r"^c.scenario.kind: 'bach' is not one of fixed, "
                       r"multi_turn, agentic, trace, batch, slo_search, schedule \(did you mean 'batch'\?\)$"):
        spec.from_mapping({"kind": "bach"}, "c.scenario")
    with pytest.raises(LoadConfigError, match=r"^c.scenario.turns: unknown key for kind 'batch' "
                       r"\(a key of kind 'multi_turn'\)$"):
        spec.from_mapping({"kind": "batch", "turns": 2}, "c.scenario")
    # a kind's own default: an agent's session is long, a chat's is short
    assert spec.Scenario("agentic").turns == 64 and spec.Scenario("multi_turn").turns == 3
    # what the load config asks of a kind comes from its KIND too
    assert [k for k in spec.KINDS if spec.own_steps(k)] == ["trace", "batch", "slo_search",
                                                            "schedule"]
    assert [k for k in spec.KINDS if spec.one_worker(k)] == ["batch", "slo_search"]
