#!/usr/bin/env bash
# Install the benchmark peers, each into its own cached virtualenv, never into the project's:
#   ~/.cache/servingbench/peers/<name>-<version>/
# A peer already installed (its stamp file present) is left as it is, so `make test` pays the
# minutes once per machine. A peer that cannot be installed prints one line and the tests that
# run it skip with their reason; the script itself never fails the build for it.
set -u
ROOT="${SERVINGBENCH_PEERS:-$HOME/.cache/servingbench/peers}"
mkdir -p "$ROOT"

# inference-perf needs Python >= 3.12; the project's own runs on 3.11. Take the first 3.12+
# interpreter this machine has (on PATH or under pyenv), never download one.
py312() {
  local c
  for c in python3.13 python3.12; do
    if command -v "$c" >/dev/null 2>&1 && "$c" -c 'import sys; assert sys.version_info >= (3, 12)' 2>/dev/null; then
      command -v "$c"; return 0
    fi
  done
  for c in "$(pyenv root 2>/dev/null)"/versions/3.1[23]*/bin/python3; do
    if [ -x "$c" ]; then echo "$c"; return 0; fi
  done
  return 1
}

install_peer() {  # name version python [extra packages...]
  local name="$1" version="$2" python="$3"; shift 3
  local dir="$ROOT/$name-$version"
  if [ -f "$dir/.servingbench-installed" ]; then return 0; fi
  echo "peers: installing $name==$version into $dir"
  rm -rf "$dir"
  if "$python" -m venv "$dir" \
     && "$dir/bin/pip" install --quiet --disable-pip-version-check "$name==$version" "$@" \
        2> >(grep -v "is ignored: it is neither a file nor a directory" >&2); then
    "$dir/bin/python" -c "import sys; print(sys.version.split()[0])" > "$dir/.servingbench-installed"
  else
    echo "note: could not install $name==$version; the tests that run it will skip"
    rm -rf "$dir"
  fi
}

install_peer aiperf 0.13.0 "${PYTHON:-python3}"
# guidellm asks for torch, any version: 2.13.0 is the CPU build this machine keeps on disk
# (a plain `torch` would take a CUDA build of several GB; nothing here needs a GPU).
install_peer guidellm 0.8.1 "${PYTHON:-python3}" torch==2.13.0
if P312="$(py312)"; then
  install_peer inference-perf 0.7.0 "$P312"
else
  echo "note: inference-perf 0.7.0 needs Python >= 3.12 and none is on this machine; its tests will skip"
fi
exit 0
