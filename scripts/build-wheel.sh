#!/usr/bin/env bash
# Builds a wheel of the Python package with the library inside it, for one MPI:
#
#   scripts/build-wheel.sh openmpi|mpich [OUTDIR]      (default OUTDIR: target/wheels)
#
# The wheel's mdloader/ holds libmdloader.so built for that MPI (scripts/build.sh), so
# that `pip install target/wheels/mdloader-*.whl` finds the library with no environment
# variable (mdloader._lib looks next to the package first after MDLOADER_LIBRARY and
# MDLOADER_PREFIX), and a Loader refuses clearly when mpi4py runs the other MPI. The
# wheel is tagged with the MPI in its local version (0.1.0+openmpi) and, as it holds a
# native library, for this platform.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
MPI=${1:?usage: scripts/build-wheel.sh openmpi|mpich [OUTDIR]}
OUT=$(realpath -m "${2:-$ROOT/target/wheels}")
PYTHON=${PYTHON:-python3}
"$ROOT/scripts/build.sh" "$MPI" >/dev/null
STAGE=$(mktemp -d)
trap 'rm -rf "$STAGE"' EXIT
cp -r "$ROOT/python/." "$STAGE/"
rm -rf "$STAGE"/build "$STAGE"/*.egg-info
cp "$ROOT/target/$MPI/release/libmdloader.so" "$STAGE/mdloader/"
# The MPI in the version (PEP 440 local label) and the library as package data.
sed -i "s/^version = \"\\(.*\\)\"/version = \"\\1+$MPI\"/" "$STAGE/pyproject.toml"
cat >>"$STAGE/pyproject.toml" <<'TOML'

[tool.setuptools.package-data]
mdloader = ["libmdloader.so"]
TOML
# A platform wheel, not "any": it carries a native library.
cat >"$STAGE/setup.py" <<'PY'
from setuptools import setup
from setuptools.dist import Distribution


class BinaryDistribution(Distribution):
    def has_ext_modules(self):
        return True


setup(distclass=BinaryDistribution)
PY
mkdir -p "$OUT"
"$PYTHON" -m pip wheel --no-deps -q -w "$OUT" "$STAGE"
ls "$OUT"/mdloader-*"+$MPI"-*.whl
