#!/usr/bin/env bash
# Creates (once) and prints the absolute path of a virtual environment holding torch $1 and the
# test dependencies of requirements-dev.txt (or, with --torch-only, torch and numpy). Used by
# `make test-torch` (torch releases other than the pinned one) and tools/make_compat_archives.py.
#
# The CUDA builds of torch are several GB, so environments are kept outside the clone, in the
# user's cache directory (PT2ONNX_ENV_CACHE, default ${XDG_CACHE_HOME:-~/.cache}/pt2onnx/
# torch-envs), one per key: the torch and torchvision pins, the interpreter's version and, for
# the full environment, requirements-dev.txt's text. A fresh clone on a machine that keeps its
# cache directory (a CI runner) reuses it; a change to the requirements makes a new one.
# Environments of the same torch release unused for 3 days are removed when a new one is made.
# A stamp written last marks one complete; creation is serialized by a lock (flock).
set -euo pipefail
cd "$(dirname "$0")/.."
version="$1"
shift || true
mode="${1:-full}"
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
python="${PYTHON:-python3}"
pyver=$("$python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
cache="${PT2ONNX_ENV_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/pt2onnx/torch-envs}"
mkdir -p "$cache"
cache="$(cd "$cache" && pwd)"
want="torch==$version torchvision==$tv python$pyver $mode"
if [ "$mode" = "--torch-only" ]; then
  want="torch==$version python$pyver $mode"
  # A full environment of that release holds torch too.
  for stamp in "$cache"/torch-"$version"-*/.pt2onnx-stamp; do
    if [ -f "$stamp" ] && grep -q " full$" "$stamp"; then
      touch "$stamp"
      dirname "$stamp"
      exit 0
    fi
  done
fi
key=$({ echo "$want"; [ "$mode" = "--torch-only" ] || cat requirements-dev.txt; } | sha1sum | cut -c1-12)
dir="$cache/torch-$version-$key"
stamp="$dir/.pt2onnx-stamp"

ready() {
  [ -f "$stamp" ] || return 1
  touch "$stamp"
  tools/venv_hook/install.sh "$dir/bin/python"
  echo "$dir"
}
ready && exit 0

exec 9>"$dir.lock"
flock 9
ready && exit 0  # made by another call while this one waited
echo "tools/torch_venv.sh: creating $dir ($want)" >&2
rm -rf "$dir"
"$python" -m venv "$dir" >&2
# By uv with pip's configuration (tools/uv_install.sh: the CUDA packages unpack in parallel).
if [ "$mode" = "--torch-only" ]; then
  # Only torch (+ numpy): enough to save .pt2 archives with that release.
  tools/uv_install.sh "$dir/bin/python" "torch==$version" numpy >&2
else
  # The test dependencies with requirements-dev.txt's two torch pins replaced by this release's,
  # resolved together: nothing can pick another torch.
  grep -v -E '^(torch|torchvision)==' requirements-dev.txt > "$dir/requirements.txt"
  tools/uv_install.sh "$dir/bin/python" -r "$dir/requirements.txt" "torch==$version" \
    "torchvision==$tv" >&2
fi
echo "$want" > "$stamp"
# Older environments of this release nobody has used for 3 days.
for old in "$cache"/torch-"$version"-*/.pt2onnx-stamp; do
  [ "$old" = "$stamp" ] && continue
  if [ -n "$(find "$old" -mtime +3 2>/dev/null)" ]; then
    echo "tools/torch_venv.sh: removing unused $(dirname "$old")" >&2
    rm -rf "$(dirname "$old")" "$(dirname "$old").lock"
  fi
done
ready
