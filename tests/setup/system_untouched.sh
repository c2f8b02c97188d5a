#!/usr/bin/env bash
# Setup test (issue 22): `make demo` (on a clean checkout: the first one, which creates .venv and
# installs every dependency) leaves the interpreter that ran make as it was: the same packages at
# the same versions (pip's list before and after), and pt2onnx importable from .venv. CI runs it
# first, on its clean checkout. PYTHON: the interpreter checked (default python3, as make's).
set -euo pipefail
cd "$(dirname "$0")/../.."
py="${PYTHON:-python3}"
before=$(mktemp) after=$(mktemp)
trap 'rm -f "$before" "$after"' EXIT
"$py" -m pip list --format=freeze 2>/dev/null | sort > "$before"
make demo PYTHON="$py"
"$py" -m pip list --format=freeze 2>/dev/null | sort > "$after"
if ! diff -u "$before" "$after"; then
  echo "FAIL: make demo changed the packages of $("$py" -c 'import sys; print(sys.executable)')" >&2
  exit 1
fi
where=$(.venv/bin/python -c 'import pt2onnx, os; print(os.path.realpath(pt2onnx.__file__))')
case "$where" in
  "$(pwd -P)"/*) ;;
  *) echo "FAIL: .venv's pt2onnx is $where, not this checkout's" >&2; exit 1 ;;
esac
# A plain interpreter of .venv, started outside the clone, imports transformers' models and
# torchvision (PyPI's torchvision is a CUDA build: the start-up hook tools/venv_hook makes its
# Python side import with the CPU torch; issue 35).
venv_py="$(pwd)/.venv/bin/python"
if ! imported=$(cd / && "$venv_py" -c '
from transformers import LlamaConfig, BertModel
import torchvision
torchvision.models.resnet18()
print(torchvision.__version__)' 2>&1); then
  echo "$imported" >&2
  echo "FAIL: .venv cannot import transformers' models and torchvision" >&2
  exit 1
fi
echo "ok: .venv imports transformers (LlamaConfig, BertModel) and torchvision $(echo "$imported" | tail -n 1)"
echo "ok: $(wc -l < "$before") packages of $py unchanged by make demo; .venv imports $where"
