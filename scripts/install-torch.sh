#!/usr/bin/env bash
# Installs torch once, into .torch/ at the top of the checkout, for every virtual
# environment of the tests (Open MPI's .venv, MPICH's .venv-mpich) and for the LibTorch
# example of the CMake tests. A venv sees it through a .pth file:
#
#   scripts/install-torch.sh [VENV...]
#
# Installs torch into .torch/ when it is not there yet, then links each VENV to it.
#
# Why one shared copy: PyPI is the only package index these machines reach, and its one
# Linux wheel of torch is the CUDA build, about 5.3 GB installed with its nvidia-*
# libraries (`pip install --no-deps torch` cannot even be imported without them). One
# copy per venv doubled that; a clean CI machine ran out of disk on the first.
# The tests use the CPU.
#
# Exit status: 0 when torch imports from every VENV; 3 when the disk cannot hold it
# (the caller skips its torch tests and says so); anything else is a failure. The free
# space it needs is MDL_TORCH_MIN_FREE_GB (default 9: the downloaded wheels, about 3 GB,
# stay on disk until the install ends). pip keeps no cache (--no-cache-dir) and spools
# its downloads under .torch/, not /tmp, which may be a small tmpfs.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
SITE=$ROOT/.torch/site
PYTHON=${PYTHON:-python3}
MIN_FREE_GB=${MDL_TORCH_MIN_FREE_GB:-9}

free_gb() { df -P -BG "$1" | awk 'NR == 2 { sub("G", "", $4); print $4 }'; }

torch_imports() { PYTHONPATH=$SITE "$PYTHON" -c "import torch" 2>/dev/null; }

if ! torch_imports; then
    mkdir -p "$ROOT/.torch"
    have=$(free_gb "$ROOT/.torch")
    if [ "$have" -lt "$MIN_FREE_GB" ]; then
        echo "install-torch: ${have} GB free on the disk of $ROOT/.torch, torch needs ${MIN_FREE_GB} GB (MDL_TORCH_MIN_FREE_GB)" >&2
        df -h "$ROOT/.torch" /tmp >&2 || true
        exit 3
    fi
    rm -rf "$SITE" "$ROOT/.torch/tmp"
    mkdir -p "$ROOT/.torch/tmp"
    start=$SECONDS
    echo "install-torch: pip install torch into $SITE (${have} GB free; takes minutes)" >&2
    TMPDIR=$ROOT/.torch/tmp "$PYTHON" -m pip install --disable-pip-version-check \
        --no-cache-dir -q --target "$SITE" torch
    rm -rf "$ROOT/.torch/tmp"
    torch_imports || { echo "install-torch: torch installed but does not import" >&2; exit 1; }
    echo "install-torch: done in $((SECONDS - start)) s, $(du -sh "$SITE" | cut -f1)" >&2
fi

for venv in "$@"; do
    purelib=$("$venv/bin/python" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
    # Appended to sys.path after the venv's own packages, so the venv's numpy and
    # mpi4py (built for its MPI) win over anything torch brought along.
    echo "$SITE" >"$purelib/mdloader-torch.pth"
    "$venv/bin/python" -c "import torch" || { echo "install-torch: torch does not import from $venv" >&2; exit 1; }
done
