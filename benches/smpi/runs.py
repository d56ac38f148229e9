"""Reading run.sh's result files (benches/smpi/results/*.csv), for the plotting scripts.

A file starts with `#` lines (the library's commit, the platform, the whole smpirun
line, every MDL_* variable), then smpi_client's CSV rows.
"""
import csv
import glob
import os

HERE = os.path.dirname(os.path.abspath(__file__))


def result_paths(names):
    """The result files whose names start with any of the comma-separated ``names``."""
    return sorted({p for n in names.split(",") for p in glob.glob(os.path.join(HERE, "results", n + "*.csv"))})


def read_run(path):
    """(settings, commit, platform line, rows) of one result file: the set of smpirun
    options and MDL_* variables it ran with, the library's commit, its `# platform`
    line (without "# "), and its CSV rows."""
    settings, commit, platform, rows = set(), None, None, []
    with open(path) as f:
        for row in csv.reader(f):
            if not row:
                continue
            if not row[0].startswith("#"):
                rows.append(row)
                continue
            line = ",".join(row)[2:]
            key = line.split(" ")[0].rstrip(":")
            if key == "library":
                commit = line.split(" ")[4].rstrip(",")
            elif key == "platform" and platform is None:
                platform = line
            elif key == "smpirun":
                settings |= {t for t in line.split(" smpi_client")[0].split(" ")[3:] if t}
            elif key == "env":
                settings |= {t for t in line.split(" ")[1:] if t}
    return settings, commit, platform, rows
