#!/usr/bin/env bash
# Creates (once) and prints the path of a virtual environment holding torch $1 and the test
# dependencies of requirements-dev.txt, under build/torch-$1/venv. Used by `make test-torch`
# (torch releases other than the pinned one) and tools/make_compat_archives.py. The CUDA builds
# of torch are several GB, so the environment is cached: a later call only checks the stamp.
set -euo pipefail
cd "$(dirname "$0")/.."
version="$1"
shift || true
# torchvision releases that declare each torch release.
case "$version" in
  2.10.*) tv=0.25.0 ;;
  2.11.*) tv=0.26.0 ;;
  2.12.0) tv=0.27.0 ;;
  2.12.1) tv=0.27.1 ;;
  2.13.*) tv=0.28.0 ;;
  2.14.0) tv=0.29.0 ;;
  2.14.1) tv=0.29.1 ;;
  *) echo "tools/torch_venv.sh: no torchvision release known for torch $version" >&2; exit 2 ;;
esac
dir="build/torch-$version/venv"
stamp="$dir/.pt2onnx-stamp"
want="torch==$version torchvision==$tv $(sha1sum requirements-dev.txt | cut -c1-12) ${*:-full}"
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then echo "$dir"; exit 0; fi
# A venv with this torch already (requirements-dev.txt changed since) is updated in place: pip
# then installs only what is new; anything else starts over.
if ! "$dir/bin/python" -c "import torch, sys; sys.exit(torch.__version__.split('+')[0] != '$version')" 2>/dev/null; then
  rm -rf "$dir"
  "${PYTHON:-python3}" -m venv "$dir" >&2
fi
if [ "${1:-}" = "--torch-only" ]; then
  # Only torch (+ numpy): enough to save .pt2 archives with that release.
  "$dir/bin/python" -m pip install -q "torch==$version" numpy >&2
else
  # torch first, so that nothing below can pick another release; then the rest of the test
  # dependencies with the two torch pins left out.
  "$dir/bin/python" -m pip install -q "torch==$version" "torchvision==$tv" >&2
  grep -v -E '^(torch|torchvision)==' requirements-dev.txt > "$dir/requirements.txt"
  "$dir/bin/python" -m pip install -q -r "$dir/requirements.txt" "torch==$version" "torchvision==$tv" >&2
fi
echo "$want" > "$stamp"
echo "$dir"
