#!/usr/bin/env bash
# Install what building and testing MDLoader needs on a fresh Debian machine:
# both MPI families, compilers, CMake, libclang (for mpi-sys' bindgen) and cbindgen.
# Installs only what is missing, so it is cheap to call again.
set -euo pipefail

APT_PACKAGES=(libopenmpi-dev openmpi-bin libmpich-dev mpich cmake gfortran libclang-dev clang
    pkg-config python3-venv valgrind)

missing=()
for pkg in "${APT_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
if [ ${#missing[@]} -gt 0 ]; then
    echo "== installing Debian packages: ${missing[*]}"
    SUDO=""
    [ "$(id -u)" -ne 0 ] && SUDO=sudo
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

CBINDGEN_VERSION=0.29.4
if ! cbindgen --version 2>/dev/null | grep -q "$CBINDGEN_VERSION"; then
    echo "== installing cbindgen $CBINDGEN_VERSION"
    cargo install cbindgen --version "$CBINDGEN_VERSION" --locked --quiet
fi
