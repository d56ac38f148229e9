"""One rank of HydraGNN's examples/LennardJones, run as it is, timed from outside:

    launch.py <out prefix> LennardJones.py <its arguments>

HydraGNN's train loop reports the time it waits for data to its tracers
(``tr.start("dataload")`` before each ``next`` of the loader, ``tr.stop`` after), but no
tracer of its own is installed here (GPTL etc.): this adds one to its tracer registry,
which its ``tr.initialize()`` keeps. At exit the rank writes ``<out prefix>.r<rank>.json``:
per epoch the train loop's time and its data wait, the epochs' start times, peak RSS.
"""

import atexit
import json
import os
import resource
import runpy
import sys
import time

# As LennardJones.py sets them before its own first import of mpi4py.MPI: the tracer
# module imports it first here.
import mpi4py

mpi4py.rc.thread_level = "serialized"
mpi4py.rc.threads = False


class DataWait:
    """A HydraGNN tracer (start/stop/enable/disable/reset) that keeps, per ``train``
    span, its length and the sum of its ``dataload`` spans."""

    def __init__(self):
        self.enabled, self.opened, self.epochs = False, None, []

    def start(self, name):
        if not self.enabled:
            return
        if name == "train":
            self.epochs.append({"start": time.time(), "train_s": None, "dataload_s": 0.0})
        elif name == "dataload":
            self.opened = time.perf_counter()

    def stop(self, name):
        if not self.enabled:
            return
        if name == "dataload" and self.opened is not None:
            self.epochs[-1]["dataload_s"] += time.perf_counter() - self.opened
            self.opened = None
        elif name == "train":
            self.epochs[-1]["train_s"] = time.time() - self.epochs[-1]["start"]

    def enable(self):
        self.enabled = True

    def disable(self):
        self.enabled = False

    def reset(self):
        """HydraGNN resets its tracers after epoch 0; epochs are kept apart here."""


def main():
    prefix, script = sys.argv[1], os.path.abspath(sys.argv[2])
    sys.argv = sys.argv[2:]
    sys.path.insert(0, os.path.dirname(script))  # the example imports LJ_data beside it
    from mpi4py import MPI

    import hydragnn.utils.profiling_and_tracing.tracer as tr

    rank, began = MPI.COMM_WORLD.Get_rank(), time.time()
    wait = DataWait()
    tr.__tracer_list__["DataWait"] = wait

    def report():
        peak_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        with open(f"{prefix}.r{rank}.json", "w") as f:
            json.dump({"rank": rank, "peak_rss_mib": peak_kib / 1024, "began": began, "ended": time.time(),
                       "epochs": wait.epochs}, f)

    atexit.register(report)
    runpy.run_path(script, run_name="__main__")


if __name__ == "__main__":
    main()
