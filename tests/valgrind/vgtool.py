#!/usr/bin/env python3
"""Valgrind logs for tests/run_fuzz_tests.sh.

  vgtool.py supp LOG...    suppressions (stdout) from logs written with
                           --gen-suppressions=all by the MPI-only baseline
                           (tests/valgrind/mpi_only.c): MPI's own start-up leaks and
                           noise. Each stack is cut after its outermost MPI entry frame
                           (fun:PMPI_* / fun:MPI_*), so that it matches whatever program
                           calls MPI that way, and never names the baseline's main.
  vgtool.py check LOG...   every error or leak record left in the logs, sorted into
                           those whose stack contains libmdloader (or the library's own
                           Rust frames) and the rest (MPI internals). Prints the former
                           in full and a count of the latter; exit status 1 if any record
                           is attributed to libmdloader, 2 if a log is missing or shows
                           valgrind itself failing.
"""
import re
import sys

RECORD_START = re.compile(r"^==\d+== (?P<text>\S.*)$")
PREFIX = re.compile(r"^==\d+== ?")
# Record headers valgrind prints for errors (Memcheck) and leaks.
ERROR_HEADS = (
    "Invalid read", "Invalid write", "Invalid free", "Mismatched free",
    "Conditional jump", "Use of uninitialised", "Syscall param", "Source and destination overlap",
    "Argument 'size'", "Invalid alignment", "Process terminating", "Jump to the invalid",
)
LEAK_HEAD = re.compile(r"bytes in [\d,]+ blocks are definitely lost")
# What marks a frame as the library's: its file, or Rust symbols of its crates.
MINE = re.compile(r"libmdloader|mdloader::|/src/(ffi|loader|engine|estimator|mpi)/")


def records(path):
    """(header, frames) of each error or leak record in one log."""
    out = []
    cur = None
    with open(path, errors="replace") as f:
        for line in f:
            line = line.rstrip("\n")
            if not line.startswith("=="):
                continue
            body = PREFIX.sub("", line, count=1)
            if not body.strip():
                if cur:
                    out.append(cur)
                    cur = None
                continue
            if cur is None:
                if body.startswith(ERROR_HEADS) or LEAK_HEAD.search(body):
                    cur = (body, [])
                continue
            cur[1].append(body.strip())
    if cur:
        out.append(cur)
    return out


def cmd_supp(paths):
    seen = set()
    n = 0
    for path in paths:
        text = open(path, errors="replace").read()
        for block in re.findall(r"^\{\n(.*?)^\}", text, flags=re.S | re.M):
            lines = [l.strip() for l in block.splitlines() if l.strip()]
            if not lines:
                continue
            kind, rest = lines[1], lines[2:]
            head = []
            # Memcheck:Param and Memcheck:Leak carry one extra line before the frames.
            while rest and not rest[0].startswith(("fun:", "obj:", "...")):
                head.append(rest.pop(0))
            frames = rest
            cut = None
            for i, fr in enumerate(frames):
                if re.match(r"fun:P?MPI_", fr):
                    cut = i
            if cut is not None:
                frames = frames[: cut + 1]
            # A leak: any kind (definite in the baseline may be possible elsewhere).
            head = ["match-leak-kinds: definite,possible" if h.startswith("match-leak-kinds") else h for h in head]
            key = (kind, tuple(head), tuple(frames))
            if key in seen:
                continue
            seen.add(key)
            n += 1
            print("{")
            print(f"   mpi-baseline-{n}")
            print(f"   {kind}")
            for l in head + frames:
                print(f"   {l}")
            print("}")
    print(f"# {n} suppressions from {len(paths)} baseline logs", file=sys.stderr)


def cmd_check(paths):
    if not paths:
        print("vgtool: no valgrind logs", file=sys.stderr)
        return 2
    mine, other = [], 0
    status = 0
    for path in paths:
        text = open(path, errors="replace").read()
        if "ERROR SUMMARY" not in text:
            print(f"vgtool: {path} has no ERROR SUMMARY (the process died under valgrind?)")
            status = 2
        for head, frames in records(path):
            if any(MINE.search(f) for f in frames) or MINE.search(head):
                mine.append((path, head, frames))
            else:
                other += 1
    for path, head, frames in mine:
        print(f"  libmdloader: {path}: {head}")
        for f in frames[:25]:
            print(f"      {f}")
    print(f"vgtool: {len(mine)} reports attributed to libmdloader, {other} others (MPI internals, not counted)")
    if mine:
        return 1
    return status


def main():
    if len(sys.argv) < 2 or sys.argv[1] not in ("supp", "check"):
        print(__doc__, file=sys.stderr)
        return 2
    if sys.argv[1] == "supp":
        cmd_supp(sys.argv[2:])
        return 0
    return cmd_check(sys.argv[2:])


if __name__ == "__main__":
    sys.exit(main())
