#pragma once
// The CPU backend's weights on transparent huge pages (2 MiB): what decode reads every token.
//
// Why: a decode step streams every weight once, and how fast a core streams depends on where the pages lie. A
// checkpoint read through its mapping lies wherever the page cache put it. On this project's 2-core Xeon (a virtual
// machine; 2 threads, a plain read with 4 KB prefetched ahead) the 311 MB output head of a `qvl quantize` folder read
// at 17.5-18.5 GB/s through the mapping, another 311 MB of the same file at 32.5, a copy on 4 KB pages at 23-27 and a
// copy on huge pages at 37.7; the 2B's decode there: q8 11.3-11.9 -> 14.2-14.8 tokens/s, bf16 3.9-4.2 -> 7.8-7.9, q4
// 21.2-22.4 -> 22.8-23.0 (a copy on 4 KB pages: q8 13.4-14.0, bf16 7.3-7.5). On the GPU machine's host q4 gained 4-23%
// and q8 went -9 to +2%, within the host's spread (docs/quantization.md). So the weights are copied, once at load, onto
// memory advised for huge pages (madvise(MADV_HUGEPAGE): contiguous 2 MiB runs, one TLB entry each). The cost is at
// load: the kernel gives the pages as they are first written (0.55 s more for the q8 2B on the host, the copy then on
// one thread; on the virtual machine up to ~3 s more, when its kernel has no huge pages at hand).
#include "core/tensor.h"

namespace qvl::cpu {

// Tensors under this stay where they are (norms, biases, scales of small matrices: not worth a huge page).
constexpr std::size_t kHugePageBytes = std::size_t(2) << 20;

// Whether the kernel gives huge pages to memory that asks for them (Linux's transparent_hugepage/enabled is
// "always" or "madvise"), read once.
bool huge_pages_offered();

// Whether a copy of `bytes` leaves the machine at least a quarter of its memory available (/proc/meminfo, or the
// process's memory cgroup where that sets a lower limit, as in a container): a mapped checkpoint's pages can be
// dropped under memory pressure and read again, a copy cannot.
bool room_for_copy(std::size_t bytes);

// An uninitialised CPU tensor on memory advised for huge pages (2 MiB aligned, whole huge pages), where they are
// offered, it holds at least kHugePageBytes and there is room_for_copy; otherwise an empty Tensor() (raw() null).
// The kernel gives each huge page when it is first written: fill it over the threads.
Tensor empty_on_huge_pages(DType dtype, const Shape& shape);

// `t` copied onto huge pages where they are offered, `t` holds at least kHugePageBytes and there is room_for_copy;
// otherwise `t` itself. The copy has t's type, shape and bytes.
Tensor on_huge_pages(const Tensor& t);

}  // namespace qvl::cpu
