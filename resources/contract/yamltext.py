"""YAML as servingbench reads it: safe types only, and no anchors or aliases.

An alias repeats a node without repeating its text, so a few hundred bytes of nested
aliases stand for gigabytes once anything walks the result (ten levels of ten: 10^10
elements). No config or peer file the project reads needs them, so the first anchor or
alias is refused before anything is built, and a document nested deeper than any config
is refused rather than left to exhaust the stack. `short` cuts a value echoed back in a
message, so a huge or hostile value never floods a terminal or a log."""

from __future__ import annotations

import yaml

MAX_DEPTH = 64


class YamlError(ValueError):
    """The text is not YAML this project reads; the message says why (no file name: the
    caller adds it)."""


class _Loader(yaml.SafeLoader):
    def __init__(self, stream) -> None:
        super().__init__(stream)
        self._depth = 0

    def compose_node(self, parent, index):
        event = self.peek_event()
        if isinstance(event, yaml.AliasEvent):
            raise YamlError(f"line {event.start_mark.line + 1}: an alias (*{short(event.anchor, 40)}); "
                            "anchors and aliases are not accepted")
        if getattr(event, "anchor", None) is not None:
            raise YamlError(f"line {event.start_mark.line + 1}: an anchor "
                            f"(&{short(event.anchor, 40)}); anchors and aliases are not accepted")
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                raise YamlError(f"nested too deeply (more than {MAX_DEPTH} levels, line "
                                f"{event.start_mark.line + 1})")
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


def load(text: str):
    """The one document in `text`; YamlError for invalid YAML, an anchor or alias, or
    nesting past MAX_DEPTH."""
    loader = None
    try:
        loader = _Loader(text)  # the reader checks the characters here already
        return loader.get_single_data()
    except yaml.YAMLError as exc:
        raise YamlError(f"not valid YAML ({short(str(exc), 300)})") from None
    except RecursionError:
        raise YamlError(f"nested too deeply (more than {MAX_DEPTH} levels)") from None
    finally:
        if loader is not None:
            loader.dispose()


def short(value, limit: int = 60) -> str:
    """`value` as text (a string as it is, anything else its repr), cut to `limit`."""
    text = value if isinstance(value, str) else repr(value)
    return text if len(text) <= limit else text[:limit - 3] + "..."
