#!/usr/bin/python3
"""compare_allreduce.py - one table of time and busbw side by side, with ratios, from the
outputs of ddp-bench-allreduce and its peers (bench/peers/gloo_allreduce.py, mpi_allreduce),
which all print nccl-tests' columns: size(B) count type time(us) algbw(GB/s) busbw(GB/s).

    compare_allreduce.py --world W [--op allreduce|reduce-scatter|all-gather]
        OURS_LABEL=FILE[,FILE...]... -- PEER_LABEL=FILE[,FILE...]...
        [--memcpy FILE[,FILE...]]  (files holding ddp-bench-allreduce's "# memcpy ...: X GB/s")

busbw = algbw * 2(W-1)/W for the all-reduce, algbw * (W-1)/W for the reduce-scatter and the
all-gather (nccl-tests), recomputed from the median time.

Several files for one label are repetitions: each size's time is the median over them (busbw
is computed from that median time), memcpy the median too. Prints, for every size present in
all files: each system's time (us) and busbw (GB/s), then busbw(ours) / busbw(peer) for
every ours x peer pair; then the goal lines of issue 7 at the largest size (busbw ratios,
memcpy / busbw) and at the smallest (time ratio: latency).
"""
import argparse
import re
import statistics
import sys


BUS = {"allreduce": 2.0, "reduce-scatter": 1.0, "all-gather": 1.0}


def read_table(paths, world, bus=2.0):
    """{size: (time_us, busbw)}: the median time over the files' nccl-tests-like rows (a size
    missing from one file is dropped), busbw from it; comment lines are skipped."""
    per = []
    for path in paths.split(","):
        rows = {}
        with open(path, errors="replace") as f:
            for line in f:
                p = line.split()
                if len(p) == 6 and p[0].isdigit() and p[2] == "float":
                    rows[int(p[0])] = float(p[3])
        per.append(rows)
    sizes = set.intersection(*(set(r) for r in per))
    out = {}
    for s in sizes:
        us = statistics.median(r[s] for r in per)
        out[s] = (us, s / (us * 1e-6) / 1e9 * bus * (world - 1) / world)
    return out


def read_memcpy(paths):
    vals = []
    for path in paths.split(","):
        with open(path, errors="replace") as f:
            m = re.search(r"# memcpy .*?: ([0-9.]+) GB/s", f.read())
        if m:
            vals.append(float(m.group(1)))
    return statistics.median(vals) if vals else None


def human(n):
    for unit, k in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= k and n % k == 0:
            return "%d %s" % (n // k, unit)
    return "%d B" % n


def main():
    argv = sys.argv[1:]
    if "--" not in argv:
        sys.exit("usage: compare_allreduce.py --world W OURS=FILE... -- PEER=FILE... "
                 "[--memcpy FILE]")
    cut = argv.index("--")
    ap = argparse.ArgumentParser()
    ap.add_argument("--world", type=int, required=True)
    ap.add_argument("--memcpy")
    ap.add_argument("--op", default="allreduce", choices=sorted(BUS))
    ap.add_argument("systems", nargs="*")
    a1 = ap.parse_args(argv[:cut])
    a2 = ap.parse_args(["--world", str(a1.world)] + argv[cut + 1:])
    ours = [s.split("=", 1) for s in a1.systems]
    peers = [s.split("=", 1) for s in a2.systems]
    memcpy_file = a1.memcpy or a2.memcpy
    tables = {label: read_table(path, a1.world, BUS[a1.op]) for label, path in ours + peers}
    empty = [label for label, t in tables.items() if not t]
    if empty:
        sys.exit("compare_allreduce: no rows from %s" % ", ".join(empty))
    sizes = sorted(set.intersection(*(set(t) for t in tables.values())))
    labels = [label for label, _ in ours + peers]
    pairs = [(o, p) for o, _ in ours for p, _ in peers]
    nrep = max(len(path.split(",")) for _, path in ours + peers)
    print("# %s, W = %d: time (us) and busbw (GB/s) of each, median over %d run(s); ratio = "
          "busbw(ours) / busbw(peer), > 1 is ours faster" % (a1.op, a1.world, nrep))
    head = "%9s " % "size" + " ".join("%11s %8s" % (label[:8] + " us", "GB/s") for label in labels)
    head += " " + " ".join("%15s" % ("%s/%s" % (o[:8], p[:6])) for o, p in pairs)
    print(head)
    for s in sizes:
        line = "%9s " % human(s) + " ".join("%11.1f %8.3f" % tables[label][s]
                                             for label in labels)
        line += " " + " ".join("%14.2fx" % (tables[o][s][1] / tables[p][s][1]) for o, p in pairs)
        print(line)
    if not sizes:
        return
    big, small = sizes[-1], sizes[0]
    for o, _ in ours:
        for p, _ in peers:
            print("# %s vs %s: %s busbw %.2fx; %s time %.3fx (%.1f us vs %.1f us; < 1 is ours "
                  "faster)" % (o, p, human(big), tables[o][big][1] / tables[p][big][1],
                               human(small), tables[o][small][0] / tables[p][small][0],
                               tables[o][small][0], tables[p][small][0]))
    if memcpy_file:
        mc = read_memcpy(memcpy_file)
        if mc:
            for o, _ in ours:
                print("# %s %s busbw %.3f GB/s: memcpy (%.2f GB/s) is %.2fx that" % (
                    o, human(big), tables[o][big][1], mc, mc / tables[o][big][1]))


if __name__ == "__main__":
    main()
