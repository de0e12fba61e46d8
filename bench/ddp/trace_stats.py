"""Reads ddp-worker --trace files and prints per-step communication figures (medians over the
steps, the first step left out as warm-up):
  comm_ms     first all-reduce issue -> last all-reduce done
  exposed_ms  end of the backward (layer 0's bwd_end) -> last all-reduce done: the part of
              the communication the step waits for
Usage: trace_stats.py FILE  ->  prints "comm_ms exposed_ms"
"""
import statistics
import sys


def main():
    steps = {}
    with open(sys.argv[1]) as f:
        for line in f:
            if line.startswith("#"):
                continue
            t, step, kind, idx = line.split()
            steps.setdefault(int(step), []).append((int(t), kind, int(idx)))
    comm, exposed = [], []
    for s in sorted(steps)[1:]:
        ev = steps[s]
        issue = [t for t, k, _ in ev if k == "ar_issue"]
        done = [t for t, k, _ in ev if k == "ar_done"]
        end = [t for t, k, i in ev if k == "bwd_end" and i == 0]
        if not issue or not done or not end:
            continue
        comm.append((max(done) - min(issue)) / 1e6)
        exposed.append(max(0, max(done) - end[0]) / 1e6)
    if not comm:
        print("nan nan")
        return
    print("%.3f %.3f" % (statistics.median(comm), statistics.median(exposed)))


if __name__ == "__main__":
    main()
