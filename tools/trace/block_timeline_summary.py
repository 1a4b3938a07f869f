#!/usr/bin/env python3
"""Summarises a block timeline (kernels/block_timeline.cuh; a development tool, not part of the product).

Each line of the file is a stamp, in the order the GPU took their slots: "time_ns grid_id grid_x grid_y threads what
sm block", what 0 when a block started (reached allow_next_kernel) and 1 when its wait for the kernel before
returned; grid_id (%gridid) tells the launches apart (a graph's replays of one kernel node share it: the n-th stamp
of a block is its n-th launch's). A launch's waits return once the launch before it has
finished, so in a chain of launches that all wait, "time in the chain" of launch i is the first wait of launch i + 1
minus the first wait of launch i: what it added to the step, overlap included. Launches that stamp no start (a
kernel that only waits) or no wait are left out. Printed: one window of launches as they ran (started: first and
last block; waited: first and last return), and each shape's (grid and block size) median time in the chain.
"""
import argparse
import collections
import statistics


def read_stamps(path):
    """The file's stamps as (time_ns, grid_id, shape, what, sm, block), shape = (grid x, grid y, threads)."""
    stamps = []
    with open(path) as f:
        for line in f:
            t, grid, gx, gy, threads, what, sm, block = map(int, line.split())
            stamps.append((t, grid, (gx, gy, threads), what, sm, block))
    return stamps


def launches(stamps):
    """The stamps grouped into launches, each a dict: shape, starts and waits (block -> time), sms; in start order.

    A kernel node of a CUDA graph keeps its grid id from replay to replay, so a grid id's stamps are one launch per
    replay: the n-th start (or wait) of a block of that grid belongs to its n-th launch."""
    by_launch = {}
    seen = collections.Counter()  # (grid, block, what) -> stamps so far
    for t, grid, shape, what, sm, block in stamps:
        key = (grid, block, what)
        replay, seen[key] = seen[key], seen[key] + 1
        run = by_launch.setdefault((grid, replay), {"shape": shape, "starts": {}, "waits": {}, "sms": set()})
        if what == 0:
            run["starts"][block] = t
            run["sms"].add(sm)
        else:
            run["waits"][block] = t
    runs = [r for r in by_launch.values() if r["starts"] and r["waits"]]
    for r in runs:
        r["first_start"], r["last_start"] = min(r["starts"].values()), max(r["starts"].values())
        r["first_wait"], r["last_wait"] = min(r["waits"].values()), max(r["waits"].values())
    runs.sort(key=lambda r: r["first_start"])
    return runs


def chain_times(runs):
    """Each shape's times in the chain (ns): the next launch's first wait less this launch's."""
    chain = collections.defaultdict(list)
    for a, b in zip(runs, runs[1:]):
        chain[a["shape"]].append(b["first_wait"] - a["first_wait"])
    return chain


def main():
    p = argparse.ArgumentParser()
    p.add_argument("timeline")
    p.add_argument("--window", type=int, default=14, help="launches shown as they ran")
    p.add_argument("--skip", type=int, default=200, help="launches from the end where the window starts")
    args = p.parse_args()
    runs = launches(read_stamps(args.timeline))
    chain = chain_times(runs)
    print("%d launches" % len(runs))
    print("shape (grid x, grid y, threads)     launches   time in the chain: median   p10    p90 (us)")
    for shape, gaps in sorted(chain.items(), key=lambda kv: -statistics.median(kv[1]) * len(kv[1])):
        gaps = sorted(gaps)
        print("%-36s %7d   %8.2f %8.2f %8.2f" % (shape, len(gaps), statistics.median(gaps) / 1e3,
                                                 gaps[len(gaps) // 10] / 1e3, gaps[len(gaps) * 9 // 10] / 1e3))
    start = max(0, len(runs) - args.skip)
    window = runs[start:start + args.window]
    if window:
        t0 = window[0]["first_wait"]
        print("\nA window (us from the first wait shown): started first..last, waited first..last, SMs, blocks")
        for r in window:
            print("%-24s start %8.2f .. %8.2f   wait %8.2f .. %8.2f   %3d SMs %5d blocks" % (
                r["shape"], (r["first_start"] - t0) / 1e3, (r["last_start"] - t0) / 1e3, (r["first_wait"] - t0) / 1e3,
                (r["last_wait"] - t0) / 1e3, len(r["sms"]), len(r["starts"])))


if __name__ == "__main__":
    main()
