"""tests/bindings_match_header.py passes on the project's files and fails, saying what
and where, on copies made wrong one way each. Runs the script in subprocesses (no
MPI, no library needed)."""

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "tests" / "bindings_match_header.py"
HEADER = ROOT / "include" / "mdloader.h"
PACKAGE = ROOT / "python" / "mdloader"
FORTRAN = ROOT / "fortran" / "mdloader.f90"


def run_script(*args):
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=120)


def test_the_bindings_match_the_header():
    r = run_script()
    assert r.returncode == 0, r.stdout + r.stderr
    assert re.match(r"[1-9]\d* checked", r.stdout.splitlines()[-1]), r.stdout


# (which copy: header, fortran or python (the package file that holds the text), text
# replaced, its replacement, the problems the script must print)
MUTATIONS = {
    "status-value-changed": (
        "header", "MDL_ERR_TIMEOUT = 10,", "MDL_ERR_TIMEOUT = 12,",
        ["Python Status: ERR_TIMEOUT is 10, the header's is 12", "Fortran: MDL_ERR_TIMEOUT is 10, the header's is 12"],
    ),
    "python-status-value-changed": (
        "python", "    ERR_REMOTE = 9\n", "    ERR_REMOTE = 90\n",
        ["Python Status: ERR_REMOTE is 90, the header's is 9"],
    ),
    "function-missing-in-both": (
        "header", "#ifdef __cplusplus\n}", "enum mdl_status mdl_pause(struct mdl_loader *h);\n#ifdef __cplusplus\n}",
        ["Python: mdl_pause is not declared (bind it, or list it as left out, saying why)",
         "Fortran: mdl_pause is not declared (bind it, or list it as left out, saying why)"],
    ),
    "argument-dropped-in-python": (
        "python", "lib.mdl_sample_size.argtypes = [ctypes.c_void_p, c_u64, c_u64_p]",
        "lib.mdl_sample_size.argtypes = [ctypes.c_void_p, c_u64_p]",
        ["Python: mdl_sample_size takes 2 arguments, the header 3"],
    ),
    "argument-dropped-in-fortran": (
        "fortran", "function c_mdl_sample_size(h, id, out)", "function c_mdl_sample_size(h, out)",
        ["Fortran: mdl_sample_size takes 2 arguments, the header 3"],
    ),
    "pointer-became-a-value-in-the-header": (
        "header", "mdl_num_samples(const struct mdl_loader *h, uint64_t *out)",
        "mdl_num_samples(const struct mdl_loader *h, uint64_t out)",
        ["Python: mdl_num_samples argument 2 is POINTER(c_ulong), the header's is uint64_t",
         "Fortran: mdl_num_samples argument 2 is integer(c_int64_t) by reference, the header's is uint64_t"],
    ),
    "pointer-passed-by-value-in-fortran": (
        "fortran", "integer(c_int64_t), intent(out) :: first, count",
        "integer(c_int64_t), value :: first, count",
        ["Fortran: mdl_replica_part argument 3 is integer(c_int64_t), value, the header's is uint64_t *",
         "Fortran: mdl_replica_part argument 4 is integer(c_int64_t), value, the header's is uint64_t *"],
    ),
    "narrower-integer-in-fortran": (
        "fortran", "integer(c_int64_t), value :: step\n", "integer(c_int32_t), value :: step\n",
        ["Fortran: mdl_epoch_seek argument 2 is integer(c_int32_t), value, the header's is uint64_t"],
    ),
    "signed-integer-in-python": (
        "python", "lib.mdl_set_prefetch.argtypes = [ctypes.c_void_p, ctypes.c_uint32]",
        "lib.mdl_set_prefetch.argtypes = [ctypes.c_void_p, ctypes.c_int32]",
        ["Python: mdl_set_prefetch argument 2 is c_int, the header's is uint32_t"],
    ),
}


@pytest.mark.parametrize("case", MUTATIONS)
def test_a_mismatch_is_reported(case, tmp_path):
    where, old, new, expected = MUTATIONS[case]
    header, package, fortran = tmp_path / "mdloader.h", tmp_path / "mdloader", tmp_path / "mdloader.f90"
    shutil.copy(HEADER, header)
    shutil.copytree(PACKAGE, package, ignore=shutil.ignore_patterns("__pycache__", "*.so*"))
    shutil.copy(FORTRAN, fortran)
    files = list(package.glob("*.py")) if where == "python" else [{"header": header, "fortran": fortran}[where]]
    holders = [path for path in files if old in path.read_text()]
    assert len(holders) == 1 and holders[0].read_text().count(old) == 1, f"{old!r} is not once in {where}: update it"
    holders[0].write_text(holders[0].read_text().replace(old, new))

    r = run_script("--header", str(header), "--python", str(package), "--fortran", str(fortran))
    assert r.returncode == 1, r.stdout + r.stderr
    *problems, summary = r.stdout.splitlines()
    assert sorted(problems) == sorted(expected), r.stdout + r.stderr
    assert summary == f"{len(expected)} mismatches between the bindings and {header}"
