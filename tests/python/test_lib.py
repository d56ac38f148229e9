"""Finding the library: MDLOADER_LIBRARY, MDLOADER_PREFIX, next to the package, and a
clear error listing what was tried. Runs in subprocesses (no MPI needed)."""

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def run(env_updates, code="import mdloader; print(mdloader.library_path())"):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MDLOADER_", "OMPI_", "PMIX_", "PMI_"))}
    env["PYTHONPATH"] = str(ROOT / "python")
    env.update(env_updates)
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)


def test_library_env_var(comm):
    lib = os.environ["MDLOADER_LIBRARY"]
    r = run({"MDLOADER_LIBRARY": lib})
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == lib


def test_prefix_env_var(comm, tmp_path):
    prefix = tmp_path / f"prefix{comm.rank}"
    (prefix / "lib").mkdir(parents=True)
    (prefix / "lib" / "libmdloader.so").symlink_to(os.environ["MDLOADER_LIBRARY"])
    r = run({"MDLOADER_PREFIX": str(prefix)})
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == str(prefix / "lib" / "libmdloader.so")


def test_not_found_lists_what_was_tried(comm, tmp_path):
    r = run({"MDLOADER_PREFIX": str(tmp_path / "noprefix")})
    assert r.returncode != 0
    assert "LibraryNotFound" in r.stderr
    assert str(tmp_path / "noprefix" / "lib" / "libmdloader.so") in r.stderr
    assert "next to the package" in r.stderr
    assert "MDLOADER_LIBRARY" in r.stderr


def test_explicit_library_is_the_only_candidate(comm, tmp_path):
    missing = tmp_path / "nowhere" / "libmdloader.so"
    prefix = tmp_path / f"prefix{comm.rank}"
    (prefix / "lib").mkdir(parents=True)
    (prefix / "lib" / "libmdloader.so").symlink_to(os.environ["MDLOADER_LIBRARY"])
    r = run({"MDLOADER_LIBRARY": str(missing), "MDLOADER_PREFIX": str(prefix)})
    assert r.returncode != 0  # not silently the prefix's library
    assert str(missing) in r.stderr and "nothing else was tried" in r.stderr
