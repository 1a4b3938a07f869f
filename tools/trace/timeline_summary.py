#!/usr/bin/env python3
"""Summarises a kernel timeline written by cupti_timeline.cpp (a development tool, not part of the product).

The timeline is cut into the requests of a qvl run (bench runs its request several times): a request starts at the
vision tower's patch embedding (patchify) or, without a picture, at the decoder's embedding (the token gather). Its
phases: vision (up to the embedding), prefill (up to the next embedding: a prompt run in one pass; a chunked
prompt's later passes count as decode) and the decode steps after, each starting at its token's embedding. For each phase: its span, the time some kernel ran, the time the GPU sat
idle between kernels, and the kernels that took the most time. Kernels before the first request (loading, warm-up
of the bandwidth probe) are left out.

Where the timeline holds the host's calls too (QVL_TIMELINE_HOST), each phase also shows its queueing on the host:
from the call that launched its first kernel to the one that launched its last, the time spent inside CUDA calls
(the outermost of nested runtime and driver calls, by name) and the rest, the engine's own time between calls.
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


def summarise_host(kernels, calls, top):
    """The phase's queueing on the host: its launching calls' window, the calls' time in it by name, the rest."""
    by_corr = {}                                  # a launch's outermost call (a runtime call holds its driver call)
    for c in calls:
        if c[3] not in by_corr or c[1] - c[0] > by_corr[c[3]][1] - by_corr[c[3]][0]:
            by_corr[c[3]] = c
    launches = [by_corr[k[3]] for k in kernels if k[3] in by_corr]
    if not launches:
        return
    first, last = min(c[0] for c in launches), max(c[1] for c in launches)
    thread = launches[0][2]
    inside = sorted(c for c in calls if c[2] == thread and c[0] >= first and c[1] <= last)
    outer, reach = [], 0
    for c in inside:                              # the outermost calls: a driver call inside a runtime one is its own
        if c[0] >= reach:
            outer.append(c)
            reach = c[1]
    by_name = collections.defaultdict(lambda: [0, 0])
    for c in outer:
        by_name[c[4]][0] += c[1] - c[0]
        by_name[c[4]][1] += 1
    in_calls = sum(c[1] - c[0] for c in outer)
    window = last - first
    print(f"    host: queueing {window / 1e6:7.3f} ms, in {len(outer)} CUDA calls {in_calls / 1e6:7.3f} ms, "
          f"between calls {(window - in_calls) / 1e6:7.3f} ms")
    for name, (ns, count) in sorted(by_name.items(), key=lambda x: -x[1][0])[:top]:
        print(f"      {ns / 1e3:9.1f} us {count:5d} x {ns / 1e3 / count:7.2f} us  {name}")


def summarise(label, kernels, top, calls=()):
    if not kernels:
        return
    span = (kernels[-1][1] - kernels[0][0]) / 1e6
    busy, reach = 0, kernels[0][0]
    for s, e, *_ in kernels:                     # union of the kernels' intervals
        if e > reach:
            busy += e - max(s, reach)
            reach = e
    by_name = collections.defaultdict(lambda: [0, 0])
    for s, e, n, _ in kernels:
        by_name[short(n)][0] += e - s
        by_name[short(n)][1] += 1
    print(f"  {label:8s} span {span:7.3f} ms, kernels running {busy / 1e6:7.3f} ms, idle {span - busy / 1e6:6.3f} ms, "
          f"{len(kernels)} kernels")
    for name, (ns, count) in sorted(by_name.items(), key=lambda x: -x[1][0])[:top]:
        print(f"    {ns / 1e3:9.1f} us {count:5d} x {ns / 1e3 / count:7.2f} us  {name}")
    if calls:
        summarise_host(kernels, calls, top)


def is_embedding(name):
    return "embed" in name or "gather_kernel" in name


def main():
    p = argparse.ArgumentParser()
    p.add_argument("timeline")
    p.add_argument("--top", type=int, default=12)
    a = p.parse_args()
    kernels, calls = [], []
    for line in open(a.timeline):
        if line[:2] not in ("K ", "A "):         # the first format: kernels only, "start end stream name"
            s, e, _stream, name = line.rstrip("\n").split(" ", 3)
            kernels.append((int(s), int(e), name, -1))
            continue
        kind, s, e, where, corr, name = line.rstrip("\n").split(" ", 5)
        if kind == "K":
            kernels.append((int(s), int(e), name, int(corr)))
        else:
            calls.append((int(s), int(e), int(where), int(corr), name))
    names = demangle(k[2] for k in kernels)
    kernels = [(s, e, names.get(n, n), c) for s, e, n, c in kernels]
    # A request starts at a patchify, or at an embedding after a decode step (a greedy pick) when no patchify began it.
    starts, in_vision = [], False
    for i, (_, _, name, _) in enumerate(kernels):
        if "patchify" in name:
            starts.append(i)
            in_vision = True
        elif is_embedding(name):
            if not in_vision and (not starts or any("greedy_pick" in k[2] for k in kernels[starts[-1]:i])):
                starts.append(i)
            in_vision = False
    for n, begin in enumerate(starts):
        end = starts[n + 1] if n + 1 < len(starts) else len(kernels)
        request = kernels[begin:end]
        embeddings = [j for j, k in enumerate(request) if is_embedding(k[2])] + [len(request)] * 2
        print(f"request {n}: {len(request)} kernels, {(request[-1][1] - request[0][0]) / 1e6:.3f} ms")
        summarise("vision", request[:embeddings[0]], a.top, calls)
        summarise("prefill", request[embeddings[0]:embeddings[1]], a.top, calls)
        summarise("decode", request[embeddings[1]:], a.top, calls)


if __name__ == "__main__":
    main()
