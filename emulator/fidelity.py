"""How wrong the emulator is, where it says a number: the cross-validated error of its
performance model per accelerator and per engine (calibration.yaml `error_bands:`, written by
`servingbench calibrate`), as the band an EMULATED figure carries.

A band is the mean absolute percentage error of output tokens/s on published rows the fit
did not see (k-fold, whole curves held out), over that accelerator's rows and that engine's;
the wider of the two is the figure's band. An accelerator or engine no published row
measured has no band: its figures are the model's priors and say "uncalibrated".
"""

from __future__ import annotations

from dataclasses import dataclass

from servingbench.emulator.engines import calibration_file


@dataclass(frozen=True)
class Band:
    accelerator: str
    engine: str
    mape: float | None  # the wider of the two, as a fraction; None: uncalibrated
    accelerator_mape: float | None
    accelerator_rows: int
    engine_mape: float | None
    engine_rows: int
    fitted_on: str  # the table and day the figures were fitted

    @property
    def calibrated(self) -> bool:
        return self.mape is not None

    def text(self) -> str:
        """'±12 % vs 38 published H100-SXM-80GB measurements (vllm ±18 %, 48)'."""
        if self.mape is None:
            return (f"uncalibrated: no published {self.accelerator} measurement"
                    if self.accelerator_mape is None else
                    f"±{100 * self.accelerator_mape:.0f} % vs {self.accelerator_rows} published "
                    f"{self.accelerator} measurements (engine {self.engine}: uncalibrated)")
        return (f"±{100 * self.mape:.0f} % vs {self.accelerator_rows} published {self.accelerator} "
                f"measurements ({self.engine} ±{100 * self.engine_mape:.0f} %, {self.engine_rows})")

    def as_dict(self) -> dict:
        return {"accelerator": self.accelerator, "engine": self.engine, "mape": self.mape,
                "accelerator_mape": self.accelerator_mape, "accelerator_rows": self.accelerator_rows,
                "engine_mape": self.engine_mape, "engine_rows": self.engine_rows,
                "fitted_on": self.fitted_on, "text": self.text()}


def band(accelerator: str, engine: str) -> Band:
    """The band of an accelerator (hardware.yaml name; one calibrated as another takes that
    one's band) and an engine profile (engines.yaml name)."""
    from servingbench.emulator import specs
    try:
        accelerator = specs.accelerator(accelerator).calibration_name
    except specs.SpecError:
        pass
    cal = calibration_file()
    bands = cal.get("error_bands") or {}
    acc = (bands.get("accelerators") or {}).get(accelerator, {}).get("tok_s")
    eng = (bands.get("engines") or {}).get(engine, {}).get("tok_s")
    acc_mape = acc["mape"] if acc else None
    eng_mape = eng["mape"] if eng else None
    mape = max(acc_mape, eng_mape) if acc and eng else None
    return Band(accelerator, engine, mape, acc_mape, acc["rows"] if acc else 0, eng_mape,
                eng["rows"] if eng else 0, str((cal.get("provenance") or {}).get("fitted_on", "")))
