"""Where a report's sections come from: every file of `resources/report/` but the helpers
(`HELPERS`) ends with `PLUGIN = (Section(...), ..., Plots(...), ...)` (contract/discovery.py's
convention), each Section naming the report it goes in (`run`: one run's page,
`comparison`: the page across runs), its place in that report's order, its title and anchor,
and `body(page) -> str | None` (None: the section does not apply to this page and is left
out), each Plots what the file draws. The two reports ask `sections(report)` and render what
it returns in order, so adding a section is adding one file (or one entry in the file whose
data it shows).

Orders are spaced by ten so that a new section slots between two without renumbering.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType

from servingbench.resources.contract.discovery import plugins

REPORTS = ("run", "comparison")
# the package's modules that declare no section: what the sections' files draw with
HELPERS = frozenset({"cdf", "frontier_plots", "html", "plots", "registry", "regression",
                     "repeatability", "rundata", "sections"})


@dataclass(frozen=True)
class RunPage:
    """What one run's sections are drawn from."""

    run: object  # RunData
    plots: dict[str, Path]
    reconciliation: dict | None


@dataclass(frozen=True)
class ComparisonPage:
    """What the comparison's sections are drawn from."""

    runs: list  # every RunData given
    latest: list  # the latest run of each candidate
    spreads: object  # step_spreads(runs)
    plots: dict[str, Path]
    slo: tuple[float, float]
    levels: object  # frontier_levels (pyarrow Table) or None
    page_dir: Path | None


@dataclass(frozen=True)
class Section:
    report: str  # "run" | "comparison"
    order: int
    title: str
    anchor: str
    body: Callable[[object], str | None]  # RunPage | ComparisonPage -> HTML, None: not shown


@dataclass(frozen=True)
class Plots:
    """PNGs a file draws for a report before the page is rendered. `run`: `draw(run, out_dir,
    slo_ttft_s, slo_tpot_s)`; `comparison`: `draw(runs, out_dir, slo, levels)`; either returns
    {name: path} of what it drew ({} when the data is not there). `captions`: name ->
    (title, caption) for the run report's Plots section."""

    report: str
    order: int
    draw: Callable[..., dict[str, Path]]
    captions: Mapping[str, tuple[str, str]] = field(default_factory=dict)


def discover(package: ModuleType) -> dict[str, list]:
    """Every section `package`'s files declare, per report, in order, and (under "<report>
    plots") every Plots they declare. A file that is no helper and lacks `PLUGIN`, or a
    malformed one (not Sections and Plots, an unknown report, an order or anchor taken twice
    in one report) is an ImportError naming the file: a broken section must stop the report,
    never vanish."""
    found: dict[str, list[tuple]] = {r: [] for r in REPORTS} | {f"{r} plots": [] for r in REPORTS}

    def is_one(v) -> bool:
        return (isinstance(v, Sequence) and len(v) > 0
                and all(isinstance(x, Section | Plots) for x in v))

    for declared, _, where in plugins(package.__path__, package.__name__, is_one,
                                      "(Section(...), ..., Plots(...), ...)", HELPERS):
        for s in (x for x in declared if isinstance(x, Section)):
            if s.report not in REPORTS:
                raise ImportError(f"{where}: section {s.anchor!r}: report {s.report!r} is not "
                                  f"one of {', '.join(REPORTS)}")
            for other, at in found[s.report]:
                if other.order == s.order or other.anchor == s.anchor:
                    raise ImportError(f"{where}: section {s.anchor!r} (order {s.order}) takes "
                                      f"the place of {at}'s {other.anchor!r} (order {other.order}) "
                                      f"in the {s.report} report")
            found[s.report].append((s, where))
        for p in (x for x in declared if isinstance(x, Plots)):
            if p.report not in REPORTS:
                raise ImportError(f"{where}: plots for report {p.report!r}, not one of "
                                  f"{', '.join(REPORTS)}")
            found[f"{p.report} plots"].append((p, where))
    return {r: [s for s, _ in sorted(v, key=lambda sw: sw[0].order)] for r, v in found.items()}


_FOUND: dict[str, list] | None = None


def _found() -> dict[str, list]:
    # the package's files are read on the first call: the report modules themselves
    # declare sections, so they cannot be read while they are being imported
    global _FOUND
    if _FOUND is None:
        import servingbench.resources.report as package

        _FOUND = discover(package)
    return _FOUND


def sections(report: str) -> list[Section]:
    """The sections of `report`, in order."""
    return _found()[report]


def plots(report: str) -> list[Plots]:
    """What the files draw for `report`, in order."""
    return _found()[f"{report} plots"]


def render(report: str, page) -> list[str]:
    """Each section of `report` that applies to `page`, as HTML, in order."""
    from servingbench.resources.report.html import section

    out = []
    for s in sections(report):
        body = s.body(page)
        if body is not None:
            out.append(section(s.title, body, s.anchor))
    return out
