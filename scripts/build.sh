#!/usr/bin/env bash
# Build libmdloader.so for one MPI family: scripts/build.sh openmpi|mpich [cargo args...]
# Each MPI gets its own target directory (target/openmpi, target/mpich): mpi-sys does
# not rebuild when MPICC changes, and a library built for one MPI must never be loaded
# by a program of the other.
set -euo pipefail
cd "$(dirname "$0")/.."
MPI=${1:?usage: scripts/build.sh openmpi|mpich [cargo args...]}
shift
case $MPI in openmpi | mpich) ;; *) echo "unknown MPI '$MPI' (openmpi or mpich)" >&2; exit 2 ;; esac
MPICC=mpicc.$MPI CARGO_TARGET_DIR=target/$MPI cargo build --release --quiet "$@"
# Programs linked with -lmdloader record the SONAME (build.rs); provide it beside the
# library so they run from the build tree.
major=$(sed -n 's/^version = "\([0-9]*\)\..*/\1/p' Cargo.toml | head -n1)
ln -sf libmdloader.so "target/$MPI/release/libmdloader.so.$major"
echo "built target/$MPI/release/libmdloader.so"
