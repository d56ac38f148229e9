#!/usr/bin/env bash
# Regenerate include/mdloader.h from the Rust sources (or write it to $1).
set -euo pipefail
cd "$(dirname "$0")/.."
cbindgen --quiet --config cbindgen.toml --crate mdloader --output "${1:-include/mdloader.h}" 2> >(grep -v "MPI_Comm" >&2 || true)
