#!/usr/bin/env bash
# Ray for the GPU machine (the Ray recipes of scripts/multinode.sh run there; the gpu-stage kit
# stages vLLM, not Ray): the pinned `ray` extra and what the machine lacks of its dependencies
# (jsonschema and its own), installed here for the machine's Python 3.12, then trimmed to what
# vLLM's Ray executor loads (no Java jars, no RLlib / Serve / Data / Tune / Train) and stripped
# of symbols: ~29 MB of xz instead of a 79 MB wheel. `bench/device/stage_pieces.sh cut` sends it
# after the vLLM pieces; `recv` unpacks it into the same site folder and puts a `ray` command in
# $HOME/site/bin.
#   here    bash bench/device/stage_ray.sh          -> .gpu-stage/ray/ray-site.tar.xz
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${PY:-.venv/bin/python}
RAY=$(grep -oE '"ray==[0-9.]+"' pyproject.toml | tr -d '"')
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
"$PY" -m pip download -q -d "$work/whl" --only-binary=:all: --python-version 3.12 \
  --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux_2_28_x86_64 \
  "$RAY" jsonschema==4.26.0
# the GPU machine has the rest (click, filelock, msgpack, packaging, protobuf, pyyaml, requests, ...)
"$PY" -m pip install -q --no-deps --target "$work/site" --only-binary=:all: --python-version 3.12 \
  --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux_2_28_x86_64 \
  "$work"/whl/ray-*.whl "$work"/whl/jsonschema-*.whl "$work"/whl/jsonschema_specifications-*.whl \
  "$work"/whl/referencing-*.whl "$work"/whl/rpds_py-*.whl
rm -rf "$work"/site/bin "$work"/site/ray/{jars,rllib,serve,data,tune,train,llm}
find "$work/site" -type f \( -name '*.so' -o -path '*/core/src/*' \) -print0 |
  while IFS= read -r -d '' f; do file "$f" | grep -q ELF && strip --strip-unneeded "$f"; done
mkdir -p .gpu-stage/ray
tar -C "$work/site" -c . | xz -T0 -6 > .gpu-stage/ray/ray-site.tar.xz.tmp
mv .gpu-stage/ray/ray-site.tar.xz.tmp .gpu-stage/ray/ray-site.tar.xz
ls -la .gpu-stage/ray/ray-site.tar.xz
