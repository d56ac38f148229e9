#!/usr/bin/env bash
# Build libmdloader.so for SimGrid's SMPI into target/smpi, with mpi-sys patched for
# SMPI (benches/smpi/mpi-sys.patch, see README.md). The patch reaches this build alone,
# through `cargo --config`: the product's own builds never see it.
set -euo pipefail
cd "$(dirname "$0")/../.."
command -v smpicc >/dev/null || apt-get install -y --no-install-recommends libsimgrid-dev
out=target/smpi
version=$(awk '/^name = "mpi-sys"/{getline; print $3}' Cargo.lock | tr -d '"')
# The registry's copy of the version Cargo.lock pins, patched afresh each time.
cargo fetch --quiet
src=$(ls -d "${CARGO_HOME:-$HOME/.cargo}"/registry/src/*/mpi-sys-"$version" | head -n1)
rm -rf "$out/mpi-sys" && mkdir -p "$out" && cp -r "$src" "$out/mpi-sys"
patch --quiet -d "$out/mpi-sys" -p1 < benches/smpi/mpi-sys.patch
# The patch drops mpi-sys's registry checksum from Cargo.lock: keep the product's lock.
cp Cargo.lock "$out/Cargo.lock.product"
trap 'cp "$out/Cargo.lock.product" Cargo.lock' EXIT
MPICC=smpicc CARGO_TARGET_DIR=$out cargo build --release --quiet \
    --config "patch.crates-io.mpi-sys.path='$out/mpi-sys'"
major=$(sed -n 's/^version = "\([0-9]*\)\..*/\1/p' Cargo.toml | head -n1)
ln -sf libmdloader.so "$out/release/libmdloader.so.$major"
# The commit the library was built from, for run.sh's output (src may change after).
echo "$(git rev-parse --short HEAD)$(git diff --quiet HEAD -- src Cargo.toml || echo '+uncommitted')" >"$out/release/BUILD_COMMIT"
echo "built $out/release/libmdloader.so (SMPI) at $(cat "$out/release/BUILD_COMMIT")"
