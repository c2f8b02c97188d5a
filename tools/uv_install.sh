#!/usr/bin/env bash
# tools/uv_install.sh PYTHON ARGS...: `pip install ARGS` into PYTHON's virtual environment, done
# by uv (PyPI's `uv`, installed into that environment by its pip the first time unless UV names
# one), with the environment's byte code compiled on every core.
#
# Why not pip: uv downloads, unpacks and links in parallel. Measured on 2 cores, empty caches:
# requirements-dev.txt into a new environment 22.7 s with pip (+ 29 s of compileall) and 6.1 s
# with uv; torch 2.14.1 + torchvision with their CUDA packages 56 s wall / 53 CPU-s with pip,
# 24 s / 20 CPU-s with uv from its cache. Both resolve the same releases (checked: the same
# 71 packages and versions for requirements-dev.txt).
#
# uv does not read pip's configuration, so what decides where packages come from is passed on
# from `pip config list` (PIP_* variables over site, user and global files, as pip ranks them):
# index-url, extra-index-url, find-links and constraint (a location that does not exist is
# skipped, as pip skips it with a warning), and every index is searched for the best release as
# pip does (uv's default takes the first index that has the package).
set -euo pipefail
py="$1"
shift
venv="$(cd "$(dirname "$py")/.." && pwd)"
# UV=path: an existing uv (e.g. .venv's), so the environment gets nothing but what was asked for;
# where it is not there, the environment's own, as without UV.
uv="${UV:-}"
if [ ! -x "$uv" ]; then
  uv="$venv/bin/uv"
  [ -x "$uv" ] || "$py" -m pip install -q "uv==0.13.9"
fi

# The highest-ranked value of each pip option: :env: (PIP_*) over site, user and global files.
declare -A value rank
while IFS= read -r line; do
  scope=${line%%.*}
  rest=${line#*.}
  key=${rest%%=*}
  val=${rest#*=}
  val=${val#\'}
  val=${val%\'}
  case "$scope" in
    :env:) r=4 ;; site) r=3 ;; user) r=2 ;; *) r=1 ;;
  esac
  if [ "${rank[$key]:-0}" -le "$r" ]; then
    value[$key]=$val
    rank[$key]=$r
  fi
done < <("$py" -m pip config list 2>/dev/null || true)

exists() {  # a file:// URL or a path that is there; any other URL
  case "$1" in
    file://*) [ -e "${1#file://}" ] ;;
    *://*) true ;;
    *) [ -e "$1" ] ;;
  esac
}
opts=(--index-strategy unsafe-best-match)
[ -n "${value[index-url]:-}" ] && opts+=(--index-url "${value[index-url]}")
for option in extra-index-url find-links constraint; do
  for v in ${value[$option]:-}; do
    exists "$v" && opts+=("--$option" "$v")
  done
done
exec "$uv" pip install -q --python "$py" --compile-bytecode "${opts[@]}" "$@"
