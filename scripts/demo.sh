#!/usr/bin/env bash
# The README's main job: installs what is missing, builds, and runs `stoker demo`
# (a PyTorch DataLoader diagnosed by the doctor, then the same job on stoker's pipeline).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$ROOT/scripts/install-deps.sh"
"$ROOT/scripts/build.sh"
exec "$ROOT/build/stoker" demo "$@"
