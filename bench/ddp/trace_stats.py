"""Reads ddp-worker --trace files (one per rank of one run) and prints per-step communication
figures (medians over the steps, the first step left out as warm-up):
  comm_ms        rank 0: first all-reduce issue -> last all-reduce done
  exposed_ms     rank 0: end of its backward (layer 0's bwd_end) -> last all-reduce done: the
                 part of the communication its step waits for
  comm_sf_ms     skew-free: the later rank's first issue -> the last done on any rank
  exposed_sf_ms  skew-free: the later rank's end of backward -> the last done on any rank
Rank 0's figures count the time it waits for a slower rank's backward (load imbalance between
the ranks) as communication; the skew-free ones start the clock when the last rank is ready,
so they count only the communication itself. The trace clock is CLOCK_MONOTONIC, one clock
for all ranks of a host.
Usage: trace_stats.py FILE [FILE...]  (rank 0's first)  ->  "comm exposed comm_sf exposed_sf"
"""
import statistics
import sys


def load(path):
    steps = {}
    with open(path) as f:
        for line in f:
            if line.startswith("#"):
                continue
            t, step, kind, idx = line.split()
            steps.setdefault(int(step), []).append((int(t), kind, int(idx)))
    return steps


def figures(ev):
    issue = [t for t, k, _ in ev if k == "ar_issue"]
    done = [t for t, k, _ in ev if k == "ar_done"]
    end = [t for t, k, i in ev if k == "bwd_end" and i == 0]
    if not issue or not done or not end:
        return None
    return min(issue), max(done), end[0]


def main():
    ranks = [load(p) for p in sys.argv[1:]]
    comm, exposed, comm_sf, exposed_sf = [], [], [], []
    for s in sorted(ranks[0])[1:]:
        f = [figures(r[s]) for r in ranks if s in r]
        if len(f) != len(ranks) or any(x is None for x in f):
            continue
        first, last, end = f[0]
        comm.append((last - first) / 1e6)
        exposed.append(max(0, last - end) / 1e6)
        last_all = max(x[1] for x in f)
        comm_sf.append((last_all - max(x[0] for x in f)) / 1e6)
        exposed_sf.append(max(0, last_all - max(x[2] for x in f)) / 1e6)
    if not comm:
        print("nan nan nan nan")
        return
    print("%.3f %.3f %.3f %.3f" % tuple(statistics.median(v) for v in
                                        (comm, exposed, comm_sf, exposed_sf)))


if __name__ == "__main__":
    main()
