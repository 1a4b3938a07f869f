#!/usr/bin/env python3
"""Summarises a kernel timeline written by cupti_timeline.cpp (a development tool, not part of the product).

Runs are separated by gaps of more than --gap-ms with no kernel. Within a run, the phases of a qvl request:
vision (up to the decoder's first embedding kernel), prefill (up to and including the first greedy pick; without
one, the rest of the run) and the decode steps after. For each phase: its span, the time some kernel ran, the
time the GPU sat idle between kernels, and the kernels that took the most time.
"""
import argparse
import collections
import re
import subprocess


def demangle(names):
    """Itanium-mangled names (CUPTI gives them so) through c++filt, where it is installed."""
    mangled = sorted({n for n in names if n.startswith("_Z")})
    try:
        out = subprocess.run(["c++filt"], input="\n".join(mangled), capture_output=True, text=True, check=True).stdout
        return dict(zip(mangled, out.split("\n")))
    except (OSError, subprocess.CalledProcessError):
        return {}


def short(name):
    name = name.replace("(anonymous namespace)::", "")
    name = re.sub(r"\(.*$", "", name)            # parameters
    name = re.sub(r"^void ", "", name)
    name = re.sub(r"qvl::cuda::(\(anonymous namespace\)::)?", "", name)
    return name[:90]


def summarise(label, kernels, top):
    if not kernels:
        return
    span = (kernels[-1][1] - kernels[0][0]) / 1e6
    busy, reach = 0, kernels[0][0]
    for s, e, _ in kernels:                      # union of the kernels' intervals
        if e > reach:
            busy += e - max(s, reach)
            reach = e
    by_name = collections.defaultdict(lambda: [0, 0])
    for s, e, n in kernels:
        by_name[short(n)][0] += e - s
        by_name[short(n)][1] += 1
    print(f"  {label:8s} span {span:7.3f} ms, kernels running {busy / 1e6:7.3f} ms, idle {span - busy / 1e6:6.3f} ms, "
          f"{len(kernels)} kernels")
    for name, (ns, count) in sorted(by_name.items(), key=lambda x: -x[1][0])[:top]:
        print(f"    {ns / 1e3:9.1f} us {count:5d} x {ns / 1e3 / count:7.2f} us  {name}")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("timeline")
    p.add_argument("--gap-ms", type=float, default=3.0)
    p.add_argument("--top", type=int, default=12)
    a = p.parse_args()
    kernels = []
    for line in open(a.timeline):
        s, e, _stream, name = line.rstrip("\n").split(" ", 3)
        kernels.append((int(s), int(e), name))
    names = demangle(k[2] for k in kernels)
    kernels = [(s, e, names.get(n, n)) for s, e, n in kernels]
    runs, run = [], []
    for k in kernels:
        if run and k[0] - max(x[1] for x in run[-8:]) > a.gap_ms * 1e6:
            runs.append(run)
            run = []
        run.append(k)
    if run:
        runs.append(run)
    for i, run in enumerate(runs):
        print(f"run {i}: {len(run)} kernels, {(run[-1][1] - run[0][0]) / 1e6:.3f} ms")
        embed = next((j for j, k in enumerate(run) if "embed" in k[2] or "gather_kernel" in k[2]), 0)
        pick = next((j for j, k in enumerate(run) if j >= embed and "greedy_pick" in k[2]), len(run) - 1)
        summarise("vision", run[:embed], a.top)
        summarise("prefill", run[embed:pick + 1], a.top)
        summarise("decode", run[pick + 1:], a.top)


if __name__ == "__main__":
    main()
