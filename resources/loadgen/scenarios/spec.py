"""What a scenario asks for: one strict object, from the CLI flags or a candidate's YAML.

kinds: `fixed` (the single-request steps of the load config, driven by the generator itself,
so declared here) and one per file `scenarios/<kind>.py` defining `KIND` (kind.py) and
ending with `PLUGIN = KIND` (contract/discovery.py's convention): today `multi_turn`,
`agentic`, `trace`, `batch`, `slo_search`, `schedule`. This module finds those files and
builds `Scenario` from what they declare: a key is a field, its default is its kind's.
Images (`images`, `image_size`) go with the token targets: any kind built from them may carry
them. Unknown keys and kinds are errors that name the key and suggest the nearest valid one.
"""

from __future__ import annotations

from dataclasses import asdict, field, make_dataclass

import servingbench.resources.loadgen.scenarios as _package
from servingbench.resources.contract.discovery import plugins
from servingbench.resources.loadgen.errors import LoadConfigError
from servingbench.resources.loadgen.scenarios.kind import COMMON, SLO_KEYS, Kind, suggest

__all__ = ["COMMON", "KEYS", "KINDS", "SLO_KEYS", "Scenario", "check", "default",
           "default_targets", "discover", "from_mapping", "one_worker", "own_steps", "parse_slo",
           "suggest"]

# the package's modules that are not a kind's file
_NOT_KINDS = frozenset({"spec", "kind", "drive"})


def discover(package=_package) -> dict[str, Kind]:
    """`fixed` and every kind `package`'s files declare, in their order; a file that declares
    none, or a kind already declared, is an ImportError naming the file (a broken kind must
    stop every run, not vanish from the list)."""
    found = {"fixed": Kind("fixed", 0)}
    for kind, module, where in plugins(package.__path__, package.__name__,
                                       lambda v: isinstance(v, Kind), "Kind(...)", _NOT_KINDS):
        if kind.name in found:
            raise ImportError(f"{where}: kind {kind.name!r} is declared twice")
        if not callable(getattr(module, "steady", None)):
            raise ImportError(f"{where}: a workload kind's file must define steady(run)")
        found[kind.name] = kind
    return dict(sorted(found.items(), key=lambda kv: (kv[1].order, kv[0])))


_KINDS = discover()
KINDS = tuple(_KINDS)
# keys a kind accepts besides `kind` (the token targets and dataset belong to every kind
# built from them)
KEYS = {k.name: (*(COMMON if k.targets else ()), *k.keys) for k in _KINDS.values()}
# every key of any kind, in the kinds' order; its default where the kind does not set one
_FIELDS: dict[str, object] = {}
for _kind in _KINDS.values():
    for _name, _key in _kind.keys.items():
        _FIELDS.setdefault(_name, _key)
_UNSET = object()  # a field not given: the scenario's kind (else the first kind) says


def _post_init(self) -> None:
    if self.kind in _KINDS:
        own = _KINDS[self.kind].keys
        for name, key in _FIELDS.items():
            if getattr(self, name) is _UNSET:
                value = own.get(name, key).default
                object.__setattr__(self, name, dict(value) if isinstance(value, dict) else value)
    check(self)


def _describe(self) -> dict:
    """The manifest's view: only the keys this kind uses."""
    d = asdict(self)
    keep = {k for k in KEYS[self.kind] if k not in COMMON}
    out = {"kind": self.kind, **{k: d[k] for k in sorted(keep)}}
    if out.get("trace") is not None:
        out["trace"] = str(out["trace"])
    return out


Scenario = make_dataclass(
    "Scenario",
    [("kind", str, field(default="fixed")),
     *((name, object, field(default=_UNSET)) for name in _FIELDS)],
    namespace={"__post_init__": _post_init, "describe": _describe,
               "own_steps": property(lambda self: own_steps(self.kind)),
               "one_worker": property(lambda self: one_worker(self.kind)),
               "__doc__": "A scenario: its kind and every kind's keys (spec.KINDS)."},
    frozen=True)
Scenario.__module__ = __name__  # pickled by name into the load workers' processes


def default(kind: str, key: str):
    """What `key` is for a scenario of `kind` that does not set it."""
    return _KINDS[kind].keys[key].default


def choices(kind: str, key: str) -> tuple[str, ...]:
    """The values `key` of a scenario of `kind` takes, when its kind names them (the schedule's
    shapes); () otherwise."""
    return _KINDS[kind].keys[key].choices or ()


def own_steps(kind: str | None) -> bool:
    """Whether a scenario of `kind` schedules its own steps (no concurrency / rates apply)."""
    return kind in _KINDS and _KINDS[kind].own_steps


def one_worker(kind: str | None) -> bool:
    """Whether a scenario of `kind` runs in one load worker only."""
    return kind in _KINDS and _KINDS[kind].one_worker


def default_targets(kind: str) -> dict[str, int]:
    """The token targets a scenario of `kind` takes when neither it nor the flags set them."""
    return dict(_KINDS[kind].default_targets) if kind in _KINDS else {}


def _kind_error(kind, where: str) -> LoadConfigError:
    return LoadConfigError(f"{where}.kind: {kind!r} is not one of {', '.join(KINDS)}"
                           + suggest(kind, KINDS))


def check(s, where: str = "scenario") -> None:
    if s.kind not in KINDS:
        raise _kind_error(s.kind, where)
    own = _KINDS[s.kind].keys
    for name, key in _FIELDS.items():
        key = own.get(name, key)
        if key.check is not None:
            key.check(f"{where}.{name}", getattr(s, name))
    if _KINDS[s.kind].check is not None:
        _KINDS[s.kind].check(s, where)


def from_mapping(obj: dict, where: str = "scenario") -> tuple[object, dict]:
    """A YAML scenario mapping → (Scenario, the token targets {input_tokens, output_tokens,
    dataset} it sets). Every key is checked against its kind."""
    if not isinstance(obj, dict):
        raise LoadConfigError(f"{where}: expected a mapping, got {type(obj).__name__}")
    kind = obj.get("kind", "fixed")
    if kind not in KINDS:
        raise _kind_error(kind, where)
    allowed = ("kind", *KEYS[kind])
    for key in obj:
        if key not in allowed:
            other = [k for k, ks in KEYS.items() if key in ks]
            hint = suggest(key, allowed) or (f" (a key of kind {other[0]!r})" if other else "")
            raise LoadConfigError(f"{where}.{key}: unknown key for kind {kind!r}{hint}")
    if "images" in obj and (isinstance(obj["images"], bool) or not isinstance(obj["images"], int)
                            or not 0 <= obj["images"] <= 64):
        raise LoadConfigError(f"{where}.images: expected an integer 0..64, got {obj['images']!r}")
    if obj.get("image_size") is not None:
        from servingbench.resources.loadgen.images import parse_size

        parse_size(obj["image_size"], f"{where}.image_size")
    fields = {k: v for k, v in obj.items() if k not in COMMON}
    own = _KINDS[kind].keys
    for name in list(fields):
        convert = own[name].convert if name in own else None
        if convert is not None and fields[name] is not None:
            fields[name] = convert(f"{where}.{name}", fields[name])
    try:
        scenario = Scenario(**fields)
    except LoadConfigError as exc:
        raise LoadConfigError(str(exc).replace("scenario", where, 1)) from None
    return scenario, {k: obj[k] for k in COMMON if k in obj}


def parse_slo(text: str) -> dict[str, float]:
    """`ttft_p99_s=2,tpot_p99_s=0.1` → {"ttft_p99_s": 2.0, "tpot_p99_s": 0.1}."""
    out: dict[str, float] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        key, sep, value = part.partition("=")
        if not sep:
            raise LoadConfigError(f"--slo-search: expected KEY=SECONDS, got {part!r}")
        if key not in SLO_KEYS:
            raise LoadConfigError(f"--slo-search: unknown key {key!r}" + suggest(key, SLO_KEYS))
        try:
            out[key] = float(value)
        except ValueError:
            raise LoadConfigError(f"--slo-search: {key}: {value!r} is not a number") from None
    return out
