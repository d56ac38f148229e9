#!/usr/bin/env bash
# Installs fairchem-core for the mdloader.fairchem tests and benchmark, in virtual
# environments of its own:
#
#   scripts/install-fairchem.sh openmpi|mpich
#
#   openmpi: .venv-fairchem, with fairchem-core (and the torch it pins), mpi4py's wheel
#            (Open MPI) and pytest;
#   mpich:   .venv-fairchem-mpich, which sees .venv-fairchem's packages through a .pth
#            file and has its own mpi4py built against mpicc.mpich (about 3-4 minutes).
#
# Why not the project's .venv: fairchem-core pins torch (fairchem-core 2.24: torch~=2.13.0,
# with triton, cuda-python, the CUDA 13 nvidia-* libraries and nvidia-cutlass-dsl), and
# .venv runs the torch of scripts/install-torch.sh (2.15); installing it there would put
# torch 2.13 in front of it. Measured on a 2-core machine: about 270 s, 6.1 GB.
#
# Exit status: 0 when fairchem.core imports (and, for mpich, mpi4py runs on MPICH); 3 when
# the disk cannot hold it (MDL_FAIRCHEM_MIN_FREE_GB, default 12: pip keeps the wheels
# until the install ends); anything else is a failure.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
MPI=${1:?usage: $0 openmpi|mpich}
PYTHON=${PYTHON:-python3}
VERSION=${MDL_FAIRCHEM_VERSION:-2.24.0}
MIN_FREE_GB=${MDL_FAIRCHEM_MIN_FREE_GB:-12}
BASE=$ROOT/.venv-fairchem

free_gb() { df -P -BG "$1" | awk 'NR == 2 { sub("G", "", $4); print $4 }'; }

if ! "$BASE/bin/python" -c "import fairchem.core, mpi4py, pytest" >/dev/null 2>&1; then
    have=$(free_gb "$ROOT")
    if [ "$have" -lt "$MIN_FREE_GB" ]; then
        echo "install-fairchem: ${have} GB free on the disk of $ROOT, fairchem-core needs ${MIN_FREE_GB} GB" >&2
        exit 3
    fi
    start=$SECONDS
    [ -x "$BASE/bin/python" ] || "$PYTHON" -m venv "$BASE"
    mkdir -p "$ROOT/.fairchem-tmp"
    echo "install-fairchem: pip install fairchem-core==$VERSION into $BASE (${have} GB free; takes minutes)" >&2
    TMPDIR=$ROOT/.fairchem-tmp "$BASE/bin/pip" install --disable-pip-version-check --no-cache-dir -q \
        "fairchem-core==$VERSION" mpi4py pytest
    rm -rf "$ROOT/.fairchem-tmp"
    echo "install-fairchem: done in $((SECONDS - start)) s, $(du -sh "$BASE" | cut -f1)" >&2
fi

if [ "$MPI" = mpich ]; then
    venv=$ROOT/.venv-fairchem-mpich
    [ -x "$venv/bin/python" ] || "$PYTHON" -m venv "$venv"
    purelib=$("$venv/bin/python" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
    base_purelib=$("$BASE/bin/python" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
    # After the venv's own packages: its mpi4py (built for MPICH) wins over the wheel's.
    echo "$base_purelib" >"$purelib/mdloader-fairchem.pth"
    ext=$(ls "$purelib"/mpi4py/MPI.*.so 2>/dev/null || true)
    if [ -z "$ext" ] || ! grep -q "libmpich.so" $ext; then
        echo "install-fairchem: building mpi4py from source against mpicc.mpich (3-4 minutes)" >&2
        MPICC=mpicc.mpich "$venv/bin/pip" install --disable-pip-version-check -q --no-cache-dir \
            --ignore-installed --no-deps --no-binary mpi4py mpi4py
    fi
    "$venv/bin/python" -c "import fairchem.core, pytest" >/dev/null 2>&1 ||
        { echo "install-fairchem: fairchem.core does not import from $venv" >&2; exit 1; }
fi
"$BASE/bin/python" -c "import fairchem.core" >/dev/null 2>&1 ||
    { echo "install-fairchem: fairchem.core does not import from $BASE" >&2; exit 1; }
