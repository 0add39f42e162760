"""Settings you can find: every SERVINGBENCH_* variable is listed once, with its default and
meaning (resources/contract/settings.py); docs/settings.md is that list; every name the
code, the docs or the build spell is listed; no name is built from pieces; and no product
module reads one from the environment but through the list."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from servingbench.pipelines.eks_profile import EksSettings
from servingbench.pipelines.profiles import Settings
from servingbench.resources.contract import settings

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = ("pipelines", "assets", "resources", "emulator")
HOME = "resources/contract/settings.py"
NAME = re.compile(r"(?<![A-Za-z0-9_])SERVINGBENCH_[A-Z0-9_]*[A-Z0-9]\b(?!_?\*)")
# a name built from pieces: an f-string field or a `+` right after a prefix of one
BUILT = re.compile(r"SERVINGBENCH_[A-Z0-9_]*(?:\{|[\"']\s*\+)")
READ = re.compile(r"(?:environ\.get|getenv|environ\.setdefault|\benv\.get)\(\s*([^,)]+)"
                  r"|environ\[\s*([^\]]+)\](?!\s*=[^=])")
CONST = re.compile(r"^([A-Z][A-Z0-9_]*)\s*=\s*[\"'](SERVINGBENCH_[A-Z0-9_]+)[\"']", re.M)


def files(tops, suffixes=(".py",)):
    for top in tops:
        base = ROOT / top
        paths = [base] if base.is_file() else sorted(base.rglob("*"))
        for p in paths:
            if p.is_file() and p.suffix in suffixes:
                yield p.relative_to(ROOT).as_posix(), p.read_text(errors="replace")


def test_docs_settings_is_the_list():
    assert (ROOT / "docs" / "settings.md").read_text() == settings.markdown(), (
        "docs/settings.md is stale: python -m servingbench.resources.contract.settings "
        "> docs/settings.md")


def test_every_name_spelt_anywhere_is_listed():
    places = [*files(PRODUCT), *files(("tests", "scripts", "benchmarks"), (".py", ".sh")),
              *files(("README.md", "docs"), (".md",)),
              *files(("Makefile", "Dockerfile", "deploy"), ("", ".yaml", ".yml"))]
    unknown = sorted({f"{rel}: {n}" for rel, text in places for n in NAME.findall(text)
                      if n not in settings.BY_NAME and n != "SERVINGBENCH_TEST_KEY"
                      and rel != "tests/pipelines/test_settings.py"})
    assert not unknown, "not in resources/contract/settings.py:\n" + "\n".join(unknown)


def test_no_name_is_built_from_pieces():
    built = [f"{rel}: {m.group(0)}" for rel, text in files(PRODUCT) for m in BUILT.finditer(text)]
    assert not built, built


def direct_reads(rel: str, text: str) -> list[str]:
    consts = dict(CONST.findall(text))
    out = []
    for m in READ.finditer(text):
        arg = (m.group(1) or m.group(2)).strip()
        if "SERVINGBENCH_" in arg or arg in consts:
            out.append(f"{rel}: {m.group(0)}")
    return out


def test_every_read_goes_through_the_list():
    reads = [r for rel, text in files(PRODUCT) if rel != HOME for r in direct_reads(rel, text)]
    assert not reads, "read these through resources/contract/settings.py:\n" + "\n".join(reads)


def test_the_read_check_can_fail():
    assert direct_reads("a.py", 'x = os.environ.get("SERVINGBENCH_DATA_DIR", "d")')
    assert direct_reads("b.py", 'SCALE_ENV = "SERVINGBENCH_MEETING_SCALE"\n'
                                "raw = environ.get(SCALE_ENV, '')")
    assert direct_reads("c.py", 'v = os.environ["SERVINGBENCH_PROFILE"]')
    assert not direct_reads("d.py", 'os.environ["SERVINGBENCH_ENGINE_API_KEY"] = key')
    assert BUILT.search('env.get(f"SERVINGBENCH_EKS_{name}")')
    assert not NAME.search("configured by SERVINGBENCH_EKS_* (docs/eks.md)")


def test_every_listed_setting_is_used():
    product = "".join(t for rel, t in files(PRODUCT) if rel != HOME)
    tests = "".join(t for _, t in files(("tests",)))
    unused = [s.name for s in settings.SETTINGS
              if s.name not in (tests if s.scope == "tests" else product)]
    assert not unused, unused


def test_unset_or_empty_is_the_default_and_an_unlisted_name_is_refused():
    env = {"SERVINGBENCH_ANALYZE_MEMORY": "", "SERVINGBENCH_PROFILE": "eks"}
    assert settings.get("SERVINGBENCH_ANALYZE_MEMORY", env) == "4GB"
    assert settings.get("SERVINGBENCH_PROFILE", env) == "eks"
    assert settings.get("SERVINGBENCH_DATA_URI", env) is None
    with pytest.raises(KeyError, match="SERVINGBENCH_DATA_DIRS is not a servingbench setting"):
        settings.get("SERVINGBENCH_DATA_DIRS", env)


def test_the_profiles_defaults_are_the_lists():
    assert Settings.from_env({}) == Settings()
    assert Settings().profile == settings.default("SERVINGBENCH_PROFILE")
    assert Settings().time_scale == float(settings.default("SERVINGBENCH_EMULATOR_TIME_SCALE"))
    eks = EksSettings.from_env({"SERVINGBENCH_EKS_CLUSTER": "c", "SERVINGBENCH_EKS_REGION": "r",
                                "SERVINGBENCH_EKS_NODE_ROLE_ARN": "arn:aws:iam::1:role/n",
                                "SERVINGBENCH_EKS_OWNER": "sb-test"})
    assert eks == EksSettings("c", "r", "arn:aws:iam::1:role/n", "sb-test")
    assert eks.load_start_delay_s == float(settings.default("SERVINGBENCH_EKS_LOAD_START_DELAY_S"))
