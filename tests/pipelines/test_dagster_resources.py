"""The profile's resources as Dagster shows them: ConfigurableResources whose config names
the SERVINGBENCH_* variable a value came from (EnvVar), handing the assets the plain objects
of resources/; S3 through dagster-aws's S3Resource, whose boto3 client the run store
publishes through (moto's server on 127.0.0.1, read back with pyarrow's own S3 filesystem)."""

from __future__ import annotations

import json

import dagster as dg
import pyarrow.fs as pafs
import pytest
from dagster_aws.s3 import S3Resource
from servingbench.pipelines import resources as dagster_resources
from servingbench.pipelines.config import ConfigError
from servingbench.pipelines.definitions import build_definitions
from servingbench.pipelines.profiles import Settings
from servingbench.resources.model_server.local import LocalModelServers
from servingbench.resources.storage import runstore
from servingbench.resources.storage.store import Storage

from tests.support.eks.aws import fresh_s3_bucket


@pytest.fixture
def s3_bucket(moto_server, monkeypatch):
    return fresh_s3_bucket(moto_server, monkeypatch)


def test_values_read_from_the_environment_are_env_vars(tmp_path):
    env = {"SERVINGBENCH_DATA_DIR": str(tmp_path / "d"), "SERVINGBENCH_EMULATOR_TIME_SCALE": "4"}
    settings = Settings.from_env(env)
    assert settings.read_from == frozenset(env)
    storage = dagster_resources.storage(settings.data_dir, settings.data_uri, settings.read_from)
    assert storage.data_dir == dg.EnvVar("SERVINGBENCH_DATA_DIR")
    assert storage.data_uri is None  # not set: a plain value
    emu = dagster_resources.emulator(settings.time_scale, settings.cold_start_s, settings.read_from)
    assert emu.time_scale == dg.EnvVar("SERVINGBENCH_EMULATOR_TIME_SCALE")
    # settings passed in (the demo, tests) stay plain values, whatever the environment says
    plain = dagster_resources.storage(tmp_path, None, Settings(data_dir=tmp_path).read_from)
    assert plain.data_dir == str(tmp_path)


def test_the_definitions_resources_are_configurable_and_hand_over_plain_objects(tmp_path,
                                                                                 monkeypatch):
    monkeypatch.setenv("SERVINGBENCH_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("SERVINGBENCH_EMULATOR_TIME_SCALE", "3")
    defs = build_definitions(Settings.from_env())
    res = defs.resources
    assert isinstance(res["storage"], dagster_resources.StorageResource)
    assert isinstance(res["storage"].s3, S3Resource)
    assert isinstance(res["model_server"], dagster_resources.EmulatorResource)
    with dg.build_resources({"storage": res["storage"],
                             "model_server": res["model_server"]}) as built:
        assert isinstance(built.storage, Storage) and built.storage.s3 is None
        assert str(built.storage.data_dir) == str(tmp_path / "data")
        assert isinstance(built.model_server, LocalModelServers)
        assert built.model_server.emulator.time_scale == 3.0


def test_a_bad_number_names_its_variable():
    emu = dagster_resources.EmulatorResource(time_scale="fast")
    with pytest.raises(dg.DagsterResourceFunctionError) as exc, dg.build_resources({"m": emu}):
        pass
    assert isinstance(exc.value.__cause__, ConfigError)
    assert "SERVINGBENCH_EMULATOR_TIME_SCALE='fast': expected a number" in str(exc.value.__cause__)


def test_the_run_store_publishes_through_the_s3_resources_client(s3_bucket, tmp_path):
    run = tmp_path / "run-1"
    (run / "plots").mkdir(parents=True)
    (run / "manifest.json").write_text(json.dumps({"run_id": "run-1"}))
    (run / "plots" / "a.png").write_bytes(b"\x89PNG" + bytes(range(256)) * 64)
    res = dagster_resources.storage(tmp_path / "data", s3_bucket)
    with dg.build_resources({"storage": res}) as built:
        storage = built.storage
        assert storage.s3 is not None  # the S3Resource's boto3 client, a plain client
        uri = storage.publish_folder(run, status="rejected")
    # read back with pyarrow's own S3 filesystem: the same objects, the marker last
    assert runstore.marker(uri)["status"] == "rejected"
    assert sorted(runstore.marker(uri)["files"]) == ["manifest.json", "plots/a.png"]
    back = runstore.fetch(uri, tmp_path / "back")
    assert (back / "plots" / "a.png").read_bytes() == (run / "plots" / "a.png").read_bytes()
    # and through the client: info, listings, put/get, a missing object
    client = storage.s3
    assert runstore.is_complete(uri, client=client)
    assert runstore.get(uri, ["manifest.json", "nope.json"], tmp_path / "g", client=client) == [
        "manifest.json"]
    runstore.put(run, uri, {"manifest.json": "copy/manifest.json"}, client=client)
    fs, base = runstore.filesystem(uri)
    assert fs.get_file_info(f"{base}/copy/manifest.json").type == pafs.FileType.File
    runstore.publish(run, uri, status="accepted", drop=["copy/manifest.json"], client=client)
    assert fs.get_file_info(f"{base}/copy/manifest.json").type == pafs.FileType.NotFound
    assert runstore.marker(uri, client=client)["status"] == "accepted"
    assert not any("_tmp" in k for k in runstore.marker(uri)["files"])
