#!/usr/bin/env bash
# Installs the start-up hook _pt2onnx_torchvision_hook (see its docstring) into the environment
# of the interpreter $1: a module and a .pth file that imports it, in its site-packages.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
site=$("$1" -c 'import sysconfig; print(sysconfig.get_path("purelib"))')
case "$site" in
  */site-packages) ;;
  *) echo "tools/venv_hook/install.sh: $1 is not a virtual environment's interpreter" >&2; exit 2 ;;
esac
"$1" -c 'import sys; sys.exit(sys.prefix == sys.base_prefix)' || {
  echo "tools/venv_hook/install.sh: $1 is not a virtual environment's interpreter" >&2; exit 2; }
cp "$here/_pt2onnx_torchvision_hook.py" "$here/_pt2onnx_torchvision_hook.pth" "$site/"
