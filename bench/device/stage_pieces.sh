#!/usr/bin/env bash
# The staged vLLM payload (the gpu-stage kit's .gpu-stage/c1, c2, ...: pieces of 62 MB) re-cut so
# that each piece fits a device call beside this repository's tree. A call carries 64 MiB, tree
# included: a 62 MB piece leaves 5.1 MB for the tree, and the tree has grown past that (results
# under bench/record/results). The kit's own checks still apply: the device puts its pieces back
# as they were and runs the kit's unpack.sh, which checks them against the kit's checksums.
#   here    bash bench/device/stage_pieces.sh cut [BYTES]
#               .gpu-stage/c*/part.* -> .gpu-stage/v1 .. vN (default: what a call leaves beside
#               the tree, less 1 MB)
#   device  bash bench/device/stage_pieces.sh recv .gpu-stage/vK
#               one call per piece (carry it and .gpu-stage/bin); the last one puts the kit's
#               pieces back and unpacks them
# With .gpu-stage/ray/ray-site.tar.xz (bench/device/stage_ray.sh) the pieces carry Ray after
# vLLM, and the last `recv` unpacks it into the same site folder, with a `ray` command in
# $HOME/site/bin.
set -euo pipefail
cd "$(dirname "$0")/../.."
STAGE=.gpu-stage
CALL_BYTES=$((64 * 1024 * 1024))

cut_pieces() {
  local parts=("$STAGE"/c*/part.*)
  [ -f "${parts[0]}" ] || { echo "no $STAGE/c*/part.*: build the payload with the gpu-stage kit first" >&2; exit 2; }
  local tree; tree=$(git ls-files -z | du -cb --files0-from=- | tail -1 | cut -f1)
  local bytes=${1:-$((CALL_BYTES - tree - 1000000 - $(du -cb "$STAGE/bin" | tail -1 | cut -f1)))}
  [ "$bytes" -gt 1000000 ] || { echo "the tree ($tree bytes) leaves no room in a call" >&2; exit 2; }
  rm -rf "$STAGE"/v[0-9]* "$STAGE/vparts"; mkdir -p "$STAGE/vparts"
  local extra=(); [ -f "$STAGE/ray/ray-site.tar.xz" ] && extra=("$STAGE/ray/ray-site.tar.xz")
  cat "${parts[@]}" "${extra[@]}" | split -b "$bytes" -d -a 2 - "$STAGE/vparts/v."
  local n; n=$(ls "$STAGE"/vparts/v.* | wc -l)
  # the kit's piece size (every piece but the last has it) and count, to put them back as they
  # were, and the kit's bytes (what follows them is Ray's site)
  local kit; kit=$(cat "${parts[@]}" | wc -c)
  printf '%s %s %s %s\n' "$(stat -c %s "${parts[0]}")" "${#parts[@]}" "$n" "$kit" > "$STAGE/vparts/manifest"
  local i=0
  for f in "$STAGE"/vparts/v.*; do
    i=$((i + 1)); mkdir -p "$STAGE/v$i"; mv "$f" "$STAGE/v$i/"; cp "$STAGE/vparts/manifest" "$STAGE/v$i/"
  done
  rm -rf "$STAGE/vparts"
  echo "cut into $n pieces of <= $bytes bytes (tree $tree bytes); on the device, one call each:"
  for k in $(seq 1 "$n"); do echo "  bash bench/device/stage_pieces.sh recv $STAGE/v$k   (carry $STAGE/v$k, $STAGE/bin)"; done
}

recv() {  # device
  local dir=${1:?usage: recv DIR}; local keep=$HOME/vstage; mkdir -p "$keep"
  mv "$dir"/v.* "$dir"/manifest "$keep/"
  local size count n kit; read -r size count n kit < "$keep/manifest"
  local have; have=$(ls "$keep"/v.* | wc -l)
  if [ "$have" -lt "$n" ]; then echo "recv: $have of $n pieces"; return 0; fi
  mkdir -p "$HOME/stage"; rm -f "$HOME"/stage/part.*
  cat "$keep"/v.* > "$keep/all"  # (a pipe into `head -c` would end in SIGPIPE under pipefail)
  local total; total=$(stat -c %s "$keep/all"); kit=${kit:-$total}
  head -c "$kit" "$keep/all" | split -b "$size" -d -a 2 - "$HOME/stage/part."
  [ "$(ls "$HOME"/stage/part.* | wc -l)" -eq "$count" ] || { echo "recv: expected $count kit pieces" >&2; exit 1; }
  if [ "$total" -gt "$kit" ]; then tail -c "$((total - kit))" "$keep/all" > "$HOME/ray-site.tar.xz"; fi
  rm -rf "$keep"
  bash "$STAGE/bin/unpack.sh"
  if [ -f "$HOME/ray-site.tar.xz" ]; then
    if command -v xz >/dev/null; then xz -dc "$HOME/ray-site.tar.xz" | tar -x -C "$HOME/site"
    else python3 -c "import sys, tarfile; tarfile.open(sys.argv[1], 'r:xz').extractall(sys.argv[2])" \
      "$HOME/ray-site.tar.xz" "$HOME/site"; fi
    rm -f "$HOME/ray-site.tar.xz"
    mkdir -p "$HOME/site/bin"
    printf '#!/usr/bin/env python3\nimport sys\nfrom ray.scripts.scripts import main\nsys.exit(main())\n' \
      > "$HOME/site/bin/ray"
    chmod +x "$HOME/site/bin/ray"
    PYTHONPATH=$HOME/site python3 -c 'import ray; print("[recv] ray", ray.__version__)'
  fi
}

case "${1:-}" in
  cut) shift; cut_pieces "$@" ;;
  recv) shift; recv "$@" ;;
  *) echo "usage: $0 {cut [BYTES]|recv DIR}" >&2; exit 2 ;;
esac
