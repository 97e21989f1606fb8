#!/usr/bin/env bash
# Install torch into the given Python only if it has none, choosing the build by the machine:
# - torch already importable (a GPU user's own build, say): keep it;
# - an NVIDIA GPU present: PyPI's default (CUDA) build;
# - CPU only: the CPU build, never the multi-GB CUDA one. A CPU wheel that pip already finds
#   through its configured find-links is used as is; otherwise PyTorch's CPU index is added
#   (override with TORCH_CPU_INDEX, pin with TORCH_CPU_VERSION).
# Usage: scripts/install_torch.sh PYTHON
set -euo pipefail
py=${1:-python3}
if "$py" -c "import torch" 2>/dev/null; then
  echo "torch already installed: $("$py" -c 'import torch; print(torch.__version__)')"
  exit 0
fi
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
  exec "$py" -m pip install -q torch
fi
version=${TORCH_CPU_VERSION:-}
if [ -z "$version" ] && [ -z "${TORCH_CPU_INDEX:-}" ]; then
  # Look for a local CPU wheel in pip's find-links (pip config list prints "...find-links='DIR'").
  for dir in $("$py" -m pip config list 2>/dev/null | sed -n "s/.*find-links='\(.*\)'/\1/p"); do
    wheel=$(ls "$dir"/torch-*+cpu-*.whl 2>/dev/null | sort -V | tail -n 1 || true)
    if [ -n "$wheel" ]; then
      version=$(basename "$wheel" | cut -d- -f2 | cut -d+ -f1)
      break
    fi
  done
fi
if [ -n "$version" ] && [ -z "${TORCH_CPU_INDEX:-}" ]; then
  exec "$py" -m pip install -q "torch==$version"
fi
index=${TORCH_CPU_INDEX:-https://download.pytorch.org/whl/cpu}
exec "$py" -m pip install -q --extra-index-url "$index" "torch${version:+==$version}"
