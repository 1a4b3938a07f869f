#!/usr/bin/env python3
"""Names and sums the host samples written by host_sampler.cpp (a development tool, not part of the product).

Each frame is named from its library's symbol table (nm; the return address less one, so a call's own line).
--under NAME keeps the samples whose stack passes through a function whose name contains NAME, and shows where
their time goes: by the function NAME calls (inclusive), and by the function the sample landed in (self), each as
a share of the kept samples. Without it, the whole run's inclusive and self counts.
"""
import argparse
import bisect
import collections
import subprocess


def load_segments(path):
    """(file offset, virtual address, size) of each LOAD segment: maps a file offset to an address nm knows."""
    out = subprocess.run(["readelf", "-lW", path], capture_output=True, text=True).stdout
    segments = []
    for line in out.splitlines():
        parts = line.split()
        if parts and parts[0] == "LOAD":
            segments.append((int(parts[1], 16), int(parts[2], 16), int(parts[4], 16)))
    return segments


def load_symbols(path):
    names = {}
    for flags in (["-C", "--defined-only"], ["-C", "-D", "--defined-only"]):
        out = subprocess.run(["nm", *flags, path], capture_output=True, text=True).stdout
        for line in out.splitlines():
            parts = line.split(" ", 2)
            if len(parts) == 3 and parts[1].lower() in "tw":
                names.setdefault(int(parts[0], 16), parts[2])
    addresses = sorted(names)
    return addresses, [names[a] for a in addresses]


class Resolver:
    def __init__(self, maps):
        self.maps = sorted(maps)  # (start, end, offset, path)
        self.starts = [m[0] for m in self.maps]
        self.libraries = {}
        self.cache = {}

    def name(self, address):
        if address in self.cache:
            return self.cache[address]
        i = bisect.bisect_right(self.starts, address) - 1
        result = f"?{address:x}"
        if i >= 0 and address < self.maps[i][1]:
            start, _, offset, path = self.maps[i]
            if path not in self.libraries:
                self.libraries[path] = (load_segments(path), *load_symbols(path))
            segments, addresses, names = self.libraries[path]
            file_offset = address - start + offset
            vaddr = next((v + file_offset - o for o, v, size in segments if o <= file_offset < o + size), None)
            library = path.rsplit("/", 1)[-1]
            result = library
            if vaddr is not None:
                j = bisect.bisect_right(addresses, vaddr) - 1
                if j >= 0:
                    result = f"{names[j][:110]} [{library}]"
        self.cache[address] = result
        return result


def main():
    p = argparse.ArgumentParser()
    p.add_argument("samples")
    p.add_argument("--under", default=None)
    p.add_argument("--top", type=int, default=30)
    a = p.parse_args()
    maps, stacks = [], []
    for line in open(a.samples):
        if line.startswith("M "):
            fields = line.split()
            lo, hi = (int(x, 16) for x in fields[1].split("-"))
            maps.append((lo, hi, int(fields[3], 16), fields[6]))
        elif line.startswith("S"):
            stacks.append([int(x, 16) for x in line.split()[1:]])
    resolver = Resolver(maps)
    named = []
    for stack in stacks:
        frames = [resolver.name(x - 1) for x in stack]
        # Drop the sampler's own frames and the signal trampoline: the sample starts where the program was.
        while frames and ("on_sample" in frames[0] or "libc.so" in frames[0] and
                          ("restore" in frames[0].lower() or "sigaction" in frames[0])):
            frames.pop(0)
        named.append(frames)
    total = len(named)
    kept, children, selves = 0, collections.Counter(), collections.Counter()
    inclusive = collections.Counter()
    for frames in named:
        if a.under:
            depth = next((i for i in range(len(frames) - 1, -1, -1) if a.under in frames[i]), None)
            if depth is None:
                continue
            children[frames[depth - 1] if depth > 0 else "(itself)"] += 1
        kept += 1
        selves[frames[0] if frames else "?"] += 1
        for f in set(frames):
            inclusive[f] += 1
    print(f"{total} samples, {kept} kept" + (f" (through {a.under})" if a.under else ""))
    if a.under:
        print(f"\nwhat {a.under} calls, inclusive:")
        for name, n in children.most_common(a.top):
            print(f"  {100 * n / kept:5.1f}%  {name}")
    else:
        print("\ninclusive:")
        for name, n in inclusive.most_common(a.top):
            print(f"  {100 * n / kept:5.1f}%  {name}")
    print("\nself:")
    for name, n in selves.most_common(a.top):
        print(f"  {100 * n / kept:5.1f}%  {name}")
    if a.under:
        print("\ninclusive, in the kept samples:")
        for name, n in inclusive.most_common(a.top):
            print(f"  {100 * n / kept:5.1f}%  {name}")


if __name__ == "__main__":
    main()
