#!/usr/bin/env bash
# Formats: WebDataset and TFRecord read speed vs raw reads of the same bytes.
# Generates a synthetic ImageNet-like set (cached by stoker gen's manifest), converts it to
# tfrecord, then runs `stoker bench read` sequential and random for both formats.
# Usage: bench/formats_read/run.sh [STOKER_BINARY] [WORKDIR] [COUNT]
set -euo pipefail
STOKER=${1:-build/stoker}
WORK=${2:-/tmp/stoker-bench-formats-read}
COUNT=${3:-1000}
mkdir -p "$WORK"
"$STOKER" gen images --out "$WORK/wds" --count "$COUNT" --format wds --shard-samples 250
if [ ! -f "$WORK/tfr/stoker-manifest.json" ]; then
  "$STOKER" convert "$WORK/wds" "tfrecord:$WORK/tfr/train-%05d.tfrecord" --samples-per-shard 250
fi
# tfrecord-nocrc: the same files without the data CRC check (what the CRC costs).
for spec in "wds:$WORK/wds" "tfrecord:$WORK/tfr" "tfrecord-nocrc:$WORK/tfr"; do
  echo "== $spec sequential"
  "$STOKER" bench read --data "$spec" --repeat 5
  echo "== $spec random"
  "$STOKER" bench read --data "$spec" --random --repeat 5
done
