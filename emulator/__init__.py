"""servingbench's local engine emulator: a vLLM-compatible server whose numbers are EMULATED."""

__version__ = "0.1.0"
VERSION = f"servingbench-emulator {__version__} (EMULATED)"
