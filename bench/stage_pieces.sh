#!/usr/bin/env bash
# The staged vLLM payload (the gpu-stage kit's .gpu-stage/c1, c2, ...: pieces of 62 MB) re-cut so
# that each piece fits a device call beside this repository's tree. A call carries 64 MiB, tree
# included: a 62 MB piece leaves 5.1 MB for the tree, and the tree has grown past that (results
# under bench/results). The kit's own checks still apply: the device puts its pieces back as they
# were and runs the kit's unpack.sh, which checks them against the kit's checksums.
#   here    bash bench/stage_pieces.sh cut [BYTES]     .gpu-stage/c*/part.* -> .gpu-stage/v1 .. vN
#                                                      (default: what a call leaves beside the
#                                                      tree, less 1 MB)
#   device  bash bench/stage_pieces.sh recv .gpu-stage/vK   one call per piece (carry it and
#                                                      .gpu-stage/bin); the last one puts the
#                                                      kit's pieces back and unpacks them
set -euo pipefail
cd "$(dirname "$0")/.."
STAGE=.gpu-stage
CALL_BYTES=$((64 * 1024 * 1024))

cut_pieces() {
  local parts=("$STAGE"/c*/part.*)
  [ -f "${parts[0]}" ] || { echo "no $STAGE/c*/part.*: build the payload with the gpu-stage kit first" >&2; exit 2; }
  local tree; tree=$(git ls-files -z | du -cb --files0-from=- | tail -1 | cut -f1)
  local bytes=${1:-$((CALL_BYTES - tree - 1000000 - $(du -cb "$STAGE/bin" | tail -1 | cut -f1)))}
  [ "$bytes" -gt 1000000 ] || { echo "the tree ($tree bytes) leaves no room in a call" >&2; exit 2; }
  rm -rf "$STAGE"/v[0-9]* "$STAGE/vparts"; mkdir -p "$STAGE/vparts"
  cat "${parts[@]}" | split -b "$bytes" -d -a 2 - "$STAGE/vparts/v."
  local n; n=$(ls "$STAGE"/vparts/v.* | wc -l)
  # the kit's piece size (every piece but the last has it) and count, to put them back as they were
  printf '%s %s %s\n' "$(stat -c %s "${parts[0]}")" "${#parts[@]}" "$n" > "$STAGE/vparts/manifest"
  local i=0
  for f in "$STAGE"/vparts/v.*; do
    i=$((i + 1)); mkdir -p "$STAGE/v$i"; mv "$f" "$STAGE/v$i/"; cp "$STAGE/vparts/manifest" "$STAGE/v$i/"
  done
  rm -rf "$STAGE/vparts"
  echo "cut into $n pieces of <= $bytes bytes (tree $tree bytes); on the device, one call each:"
  for k in $(seq 1 "$n"); do echo "  bash bench/stage_pieces.sh recv $STAGE/v$k   (carry $STAGE/v$k, $STAGE/bin)"; done
}

recv() {  # device
  local dir=${1:?usage: recv DIR}; local keep=$HOME/vstage; mkdir -p "$keep"
  mv "$dir"/v.* "$dir"/manifest "$keep/"
  local size count n; read -r size count n < "$keep/manifest"
  local have; have=$(ls "$keep"/v.* | wc -l)
  if [ "$have" -lt "$n" ]; then echo "recv: $have of $n pieces"; return 0; fi
  mkdir -p "$HOME/stage"; rm -f "$HOME"/stage/part.*
  cat "$keep"/v.* | split -b "$size" -d -a 2 - "$HOME/stage/part."
  [ "$(ls "$HOME"/stage/part.* | wc -l)" -eq "$count" ] || { echo "recv: expected $count kit pieces" >&2; exit 1; }
  rm -rf "$keep"
  bash "$STAGE/bin/unpack.sh"
}

case "${1:-}" in
  cut) shift; cut_pieces "$@" ;;
  recv) shift; recv "$@" ;;
  *) echo "usage: $0 {cut [BYTES]|recv DIR}" >&2; exit 2 ;;
esac
