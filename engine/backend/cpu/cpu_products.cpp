#include "backend/cpu/cpu_products.h"

#include <algorithm>
#include <chrono>
#include <initializer_list>
#include <vector>

#include "backend/cpu/activation_kernels.h"
#include "backend/cpu/dot_kernels.h"
#include "backend/cpu/gemm_kernels.h"
#include "backend/cpu/memory_bandwidth.h"
#include "backend/cpu/q8_tiles.h"
#include "backend/cpu/quant_dot_kernels.h"
#include "backend/quantize.h"
#include "core/cancel.h"
#include "core/error.h"
#include "core/thread_pool.h"

namespace qvl::cpu {
namespace {

constexpr int64_t kRowBlock = 64;  // activation rows a weight slice serves while they stay in cache

// A decode step reads each weight byte once, and on the GPU machine's Xeon reading each thread's rows as kReadStreams
// runs at once (memory_bandwidth.h says why) took the q4 decode loop (VNNI) from 31 to 38 GB/s at 4 threads and from
// 101 to 111 at 16, q8's (AVX2) from 30 to 34 and from 63 to 134 (tools/microbench/cpu_quant_dot.cpp, one call). On the
// 2-core machine's EPYC (an earlier machine; now a Xeon) the same order cost the q8 output head ~15% (12.3-14.5 ->
// 14.3-18.4 ms, both forced in one process). So each machine measures once (reads_in_runs) and keeps the faster.
// Every output element is computed as before either way: only the order of the rows changes. (Those figures are for
// each thread's fixed share of rows read as runs 64 KB apart. Decode's chunks are guided (over_rows): at few threads
// the first ones hold many windows; the last are 64 rows, at k = 2,048 half a window, read as four runs of 16 rows.)
// Only the q8/q4 decode products choose; the float formats' tiles, the q8 tiles (q8_tiles.h) and every prefill keep
// their order (prefill's chunks are kChunkRows, the least of decode's).
//
// Visits [begin, end) one row at a time as kReadStreams runs: the range cut into windows of kReadStreams runs of
// kRunBytes each (runs that far apart keep to a few open DRAM rows), a row of each run in turn; what the windows
// leave (all of a range shorter than one window: a last decode chunk of 64 rows of 2,048 q8 values is half a window)
// cut into kReadStreams runs of its own.
template <typename Visit>
void in_runs(std::size_t begin, std::size_t end, std::size_t row_bytes, Visit&& visit) {
  std::size_t part = std::max<std::size_t>(1, kRunBytes / row_bytes), window = begin;  // rows a run
  for (; window + kReadStreams * part <= end; window += kReadStreams * part)
    for (std::size_t i = 0; i < part; ++i)
      for (std::size_t r = 0; r < kReadStreams; ++r) visit(window + r * part + i);
  part = (end - window + kReadStreams - 1) / kReadStreams;
  for (std::size_t i = 0; i < part; ++i)
    for (std::size_t r = 0; r < kReadStreams; ++r)
      if (window + r * part + i < end) visit(window + r * part + i);
}

std::atomic<DecodeReadOrder> g_read_order{DecodeReadOrder::Automatic};  // Automatic: not measured yet
std::atomic<const void*> g_first_read{nullptr};  // the large matrix a one-row product has read once
// A one-row product has read q8/q4 rows (not tiles): there is a row loop whose order the measurement decides.
std::atomic<bool> g_row_loops_ran{false};

// The bytes of weights each of the measurement's four passes reads: each pass reads rows the others do not (the
// Xeon's L3, as its VM reports it, is 300 MiB), and the one-time cost stays a few milliseconds.
constexpr std::size_t kCalibrationBytes = std::size_t(32) << 20;

// x as the kernels read it: the f32 rows; for bf16 weights and many rows, the rows packed for the GEMM; for q8/q4
// weights the rows quantised per block of 32 (quantize.h); each once for every matrix that reads them.
class ProductInput {
public:
  ProductInput(const Tensor& x, bool for_bf16, bool quantise) : x_(x.data<float>()), k_(last_dim(x)), m_(rows_of(x)) {
    // bf16 weights against enough rows run as the packed GEMM (gemm_kernels.h: GemmKernels::min_rows); fewer rows
    // and the other formats as dot tiles, which read the weights as they are stored.
    const GemmKernels* gemm = for_bf16 ? gemm_kernels() : nullptr;
    if (gemm && std::size_t(m_) >= gemm->min_rows)
      gemm_ = gemm, packed_ = PackedActivations(x_, std::size_t(m_), std::size_t(k_), gemm->mr);
    if (!quantise) return;
    const int64_t blocks = activation_blocks(k_);
    q_.resize(std::size_t(m_ * blocks * kQuantBlock));
    scales_.resize(std::size_t(m_ * blocks));
    sums_.resize(std::size_t(m_ * blocks));
    const auto quantize_row = quant_dot_kernels().quantize_row;
    // Across the threads in chunks of 2^16 values (AVX2: 0.42 µs a 2,048 row; a prefill of 64 rows of 6,144 splits
    // six ways, 64 of 2,048 two; a decode row stays on the caller).
    ThreadPool::global().parallel_for(std::size_t(m_), std::max<std::size_t>(1, kMinChunkWork / std::size_t(k_)),
                                      [&](std::size_t begin, std::size_t end) {
                                        for (std::size_t r = begin; r < end; ++r)
                                          quantize_row(x_ + int64_t(r) * k_, k_, q_.data() + int64_t(r) * blocks * kQuantBlock,
                                                       scales_.data() + int64_t(r) * blocks, sums_.data() + int64_t(r) * blocks);
                                      });
  }
  int64_t k() const { return k_; }
  int64_t m() const { return m_; }

  // Output rows [begin, end) of w for every activation row, into y [m, w.rows()], plus the bias (w's, in f32)
  // when there is one.
  // `runs` (one activation row only): q8/q4 rows read as kReadStreams runs (in_runs) instead of in order.
  void rows(const LinearWeights& w, const std::vector<float>& bias, float* y, std::size_t begin, std::size_t end,
            const std::atomic<bool>* stop, bool runs) const {
    const int64_t n = w.rows();
    if (w.quantised()) quantised_rows(w, y, begin, end, stop, runs);
    else float_rows(w, y, begin, end, stop);
    if (!bias.empty() && !stop_requested(stop))
      for (int64_t r = 0; r < m_; ++r)
        for (std::size_t j = begin; j < end; ++j) y[r * n + int64_t(j)] += bias[j];
  }

private:
  void float_rows(const LinearWeights& w, float* y, std::size_t begin, std::size_t end, const std::atomic<bool>* stop) const {
    const auto& kernels = dot_kernels();
    const int64_t n = w.rows();
    const std::size_t row_bytes = std::size_t(format_traits(w.format).row_bytes(k_, 1));
    const auto* wp = static_cast<const char*>(w.weight.raw());
    if (gemm_ && w.weight.dtype() == DType::BF16)
      return gemm_rows(*gemm_, packed_, std::size_t(k_), wp, row_bytes, w.weight.dtype(), begin, end, y, std::size_t(n), stop);
    for (int64_t m0 = 0; m0 < m_; m0 += kRowBlock) {
      if (stop_requested(stop)) return;  // a stopped prefill ends after this block, not the whole product
      const int64_t rows = std::min(kRowBlock, m_ - m0);
      for (std::size_t j = begin; j < end; j += kDotTileRows)
        kernels.dot_tile(x_ + m0 * k_, std::size_t(rows), std::size_t(k_), wp + j * row_bytes, row_bytes,
                         std::min(kDotTileRows, end - j), w.weight.dtype(), y + m0 * n + int64_t(j), std::size_t(n));
    }
  }

  void quantised_rows(const LinearWeights& w, float* y, std::size_t begin, std::size_t end, const std::atomic<bool>* stop,
                      bool runs) const {
    const auto& kernels = quant_dot_kernels();
    const auto dot = w.format == WeightFormat::Q8 ? kernels.q8 : kernels.q4;
    const int64_t n = w.rows(), blocks = activation_blocks(k_);
    const auto* values = w.weight.data<uint8_t>();
    const auto* scales = w.scales.data<uint16_t>();
    const std::size_t row_bytes = std::size_t(w.weight.dim(1)), groups = std::size_t(w.scales.dim(1));
    for (int64_t m0 = 0; m0 < m_; m0 += kRowBlock) {
      if (stop_requested(stop)) return;
      if (w.tiled) {  // q8 in tiles of 16 rows (q8_tiles.h): read in order, a tile's rows at once
        q8_tile_rows({.x = q_.data() + m0 * blocks * kQuantBlock,
                      .x_scales = scales_.data() + m0 * blocks,
                      .x_sums = sums_.data() + m0 * blocks,
                      .rows = std::size_t(std::min(kRowBlock, m_ - m0)),
                      .blocks = std::size_t(blocks),
                      .w = &w,
                      .y = y + m0 * n,
                      .y_stride = std::size_t(n)},
                     begin, end);
        continue;
      }
      const auto row = [&](std::size_t j) {
        dot({.x = q_.data() + m0 * blocks * kQuantBlock,
             .x_scales = scales_.data() + m0 * blocks,
             .x_sums = sums_.data() + m0 * blocks,
             .rows = std::size_t(std::min(kRowBlock, m_ - m0)),
             .blocks = std::size_t(blocks),
             .w = values + j * row_bytes,
             .w_scales = scales + j * groups,
             .group_shift = w.group_shift(),
             .y = y + m0 * n + int64_t(j),
             .y_stride = std::size_t(n)});
      };
      if (runs) in_runs(begin, end, row_bytes, row);
      else for (std::size_t j = begin; j < end; ++j) row(j);
    }
  }

  const float* x_;
  int64_t k_, m_;
  const GemmKernels* gemm_ = nullptr;  // set where packed_ holds x
  PackedActivations packed_;
  std::vector<int8_t> q_;
  std::vector<float> scales_;
  std::vector<int32_t> sums_;
};

std::vector<float> bias_of(const LinearWeights& w) {
  const Tensor* bias = w.bias_or_null();
  return bias ? bias->to_f32_vector() : std::vector<float>{};
}

bool any_quantised(std::span<const ProductOutput> outputs) {
  return std::any_of(outputs.begin(), outputs.end(), [](const ProductOutput& o) { return o.weights->quantised(); });
}
bool any_bf16(std::span<const ProductOutput> outputs) {
  return std::any_of(outputs.begin(), outputs.end(),
                     [](const ProductOutput& o) { return o.weights->format == WeightFormat::BF16; });
}

// A chunk worth a thread, in weight rows: at least four (a dot tile), and 2^16 multiply-adds.
std::size_t row_grain(const ProductInput& in) {
  return std::max<std::size_t>(4, kMinChunkWork / std::size_t(std::max<int64_t>(1, in.k() * in.m())));
}

// Rows a product's chunk holds, taken from a counter by whichever thread is free (ThreadPool::parallel_chunks; a
// decode's ThreadPool::parallel_guided, below) rather than a fixed share a thread: a product ends when its last chunk
// does, not when its slowest thread's share does (the GPU machine's host is a virtual machine whose threads are not
// equally fast from one product to the next).
// - Decode (one activation row): each of a step's ~110 products (the 2B's four a layer and the head) ends at a
//   barrier. On the H100 machine's Xeon (2B, fixed shares beside in one binary): q8 18.7 against 16.9 tokens/s at 4
//   threads, 42.0 against 39.8 at 16 (medians of three rounds, one call); bf16 (another call, two rounds) 10.6
//   against 10.0 and 26.0 against 23.0. 32 and 128 rows (that call) were no clear improvement on 64.
//   Since 2026-11-28 decode's chunks are guided (ThreadPool::parallel_guided): a 2·threads-th of the rows left, down
//   to 64. Chunks of 64 rows are 128 KB of q8 (64 KB of q4): each thread's reads restarted every chunk, in four runs
//   of 32 KB (16 KB) where the read order is runs, and a core's prefetchers never got up to speed. On this project's
//   2-core Xeon (tools/microbench/cpu_quant_dot.cpp, 2 threads, 256 MiB, read in runs, the loops decode runs: q8's
//   AVX2, q4's VNNI) chunks of 64 read 21.3 GB/s of q8 and 19.5 of q4, guided chunks 29.0 and 28.1 (a plain read,
//   without software prefetch, 21-22 in that run). The 2B's decode there (2 threads, three rounds, one binary): q8
//   10.26 / 10.02 / 10.01 → 11.02 / 11.36 / 11.10 tokens/s, q4 15.95 / 17.55 / 16.50 → 18.44 / 18.45 / 19.49, bf16
//   4.27 / 4.37 / 4.15 → 4.78 / 4.53 / 4.68. At 16 threads a product of 2,048 rows starts at 64 rows a chunk, as
//   before; the larger ones (q+k+v, gate/up, down, the head) start longer. On the GPU machine's host (one call, five
//   rounds, chunks of 64 built beside): q4 at 4 threads +6 to +11% in four rounds (−3% in the fifth); q8, and q4 at
//   16 threads, within the host's spread (−11 to +8%).
// - Prefill (several rows; vision's products take the same path, not measured apart): on the H200 machine's Xeon (2B,
//   bf16, 64 prompt tokens, three rounds of one call): 290.6 against 261.0 tokens/s at 16 threads (median; rounds
//   268.9 / 290.6 / 314.3 against 203.0 / 269.4 / 261.0, llama.cpp 212.1 / 215.4 / 234.1), 93.1 against 101.5 at 4
//   (93.1 / 92.4 / 125.1 against 93.3 / 101.5 / 110.2: slower in two rounds, faster in one; no gain there). 128
//   rows: 291.2 at 16 threads, 100.3 at 4. Only 4 and 16 threads were measured: a 2,048-row product is 32 chunks,
//   so at 12 or 24 threads its last round is partly idle where fixed shares would be even.
// docs/quantization.md and docs/performance.md have the rounds.
constexpr std::size_t kChunkRows = 64;

// Runs fn over [0, n) weight rows in chunks of kChunkRows (or row_grain's, where a row is too little work); a decode's
// guided, down to that size. `tiles`: every matrix is in q8 tiles (q8_tiles.h), so chunks hold whole tiles. (Where
// tiles and rows mix, which only a machine short of room for the tiles' copies makes, the chunks are rows, and a
// tile that a chunk's edge cuts is computed by both chunks' threads, each writing its own rows.)
template <typename Fn>
void over_rows(const ProductInput& in, std::size_t n, bool tiles, Fn&& fn) {
  const std::size_t unit = tiles ? std::size_t(kTileRows) : 1, chunk = std::max(kChunkRows, row_grain(in));
  const auto units = [&](std::size_t begin, std::size_t end) { fn(begin * unit, std::min(n, end * unit)); };
  const std::size_t count = (n + unit - 1) / unit, least = (chunk + unit - 1) / unit;
  if (in.m() == 1) ThreadPool::global().parallel_guided(count, least, units);
  else ThreadPool::global().parallel_chunks(count, least, units);
}

bool all_tiled(std::span<const ProductOutput> outputs) {
  return std::all_of(outputs.begin(), outputs.end(), [](const ProductOutput& o) { return o.weights->tiled; });
}

// Whether this decode product reads its q8/q4 rows in runs. Undecided, the second time a one-row product's first matrix
// is q8/q4 and holds 4 x kCalibrationBytes (the output head: by then its pages are in memory, not page faults of a
// mapped folder, and the first token is out) settles it: four such slices of rows, in order, in runs, in runs, in
// order, each timed over the threads (woken first) in the decode's own chunks (over_rows), and the faster order kept
// for the process. (Those rows' outputs are written again by the product itself.) Timed through the chunks rather than
// fixed shares (H200 machine's Xeon, 2B q8, three rounds of one call, a scratch switch) it chose in order in all six
// runs, where fixed shares chose it in ten of twelve, and decode was level: 20.06 / 18.45 / 19.45 tokens/s against
// 19.85 / 16.62 / 23.17 at 4 threads, 55.46 / 42.13 / 49.95 against 49.93 / 45.60 / 53.39 at 16. A model whose head is
// not q8/q4 never measures: its products keep their order. (Those H200 rounds timed chunks of 64 rows; since
// 2026-11-28 the decode's chunks, and so the calibration's, are guided: on this project's 2-core Xeon it chose runs
// in all four processes printed, q8 at 1 and 2 threads.) A caller whose loop runs alone (another one holds the pool)
// measures one thread; whichever measurement finishes first decides.
bool reads_in_runs(const ProductInput& in, const ProductOutput& first, const std::atomic<bool>* stop) {
  if (in.m() != 1) return false;
  const DecodeReadOrder known = g_read_order.load(std::memory_order_relaxed);
  if (known != DecodeReadOrder::Automatic) return known == DecodeReadOrder::Runs;
  // Tiles are always read in order; the order measured here is the row loops' (q4 matrices, q8 ones not tiled), so a
  // model whose one-row products all read tiles never measures. A tiled head is measured as rows of the same bytes:
  // what is timed is the memory and the loop, not the values, and the product itself then writes every output.
  if (first.weights->tiled && !g_row_loops_ran.load(std::memory_order_relaxed)) return false;
  LinearWeights w = *first.weights;
  w.tiled = false;
  const std::size_t slice = w.quantised() ? kCalibrationBytes / std::size_t(w.weight.dim(1)) : 0;
  if (slice == 0 || std::size_t(w.rows()) < 4 * slice) return false;  // too small to tell: in order, still undecided
  if (g_first_read.exchange(w.weight.raw()) != w.weight.raw()) return false;  // its first read: in order
  auto& pool = ThreadPool::global();
  pool.parallel_for(std::size_t(pool.size()), 1, [](std::size_t, std::size_t) {});  // the workers awake
  double seconds[2] = {0, 0};  // in order, in runs
  for (std::size_t pass = 0; pass < 4; ++pass) {
    const bool runs = pass == 1 || pass == 2;
    const auto start = std::chrono::steady_clock::now();
    over_rows(in, slice, false, [&](std::size_t begin, std::size_t end) {
      in.rows(w, {}, first.y, pass * slice + begin, pass * slice + end, stop, runs);
    });
    seconds[runs] += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }
  if (stop_requested(stop)) return false;  // cut short: not a measurement
  const DecodeReadOrder faster = seconds[1] < seconds[0] ? DecodeReadOrder::Runs : DecodeReadOrder::InOrder;
  DecodeReadOrder expected = DecodeReadOrder::Automatic;
  g_read_order.compare_exchange_strong(expected, faster);
  return g_read_order.load() == DecodeReadOrder::Runs;
}

// Notes that a one-row product reads q8/q4 rows (reads_in_runs measures only where one does).
void note_row_loops(const ProductInput& in, std::initializer_list<const LinearWeights*> weights) {
  if (in.m() != 1 || g_row_loops_ran.load(std::memory_order_relaxed)) return;
  for (const LinearWeights* w : weights)
    if (w->quantised() && !w->tiled) g_row_loops_ran.store(true, std::memory_order_relaxed);
}

bool decided_runs(const ProductInput& in) {
  return in.m() == 1 && g_read_order.load(std::memory_order_relaxed) == DecodeReadOrder::Runs;
}

}  // namespace

void set_decode_read_order(DecodeReadOrder order) { g_read_order.store(order); }
DecodeReadOrder decode_read_order() { return g_read_order.load(); }

void products(const Tensor& x, std::span<const ProductOutput> outputs, const std::atomic<bool>* stop) {
  // Nothing to quantise (the integer loops below would read no rows), or stopped: nothing to pack or add either (a
  // vision product of 3,260 rows stopped before it began took 4-19 ms on this project's 2-core machine, its packing
  // and biases, before these checks).
  if (rows_of(x) == 0 || stop_requested(stop)) return;
  const ProductInput in(x, any_bf16(outputs), any_quantised(outputs));
  std::size_t total = 0;
  std::vector<std::vector<float>> biases;
  for (const ProductOutput& o : outputs) {
    total += std::size_t(o.weights->rows());
    biases.push_back(bias_of(*o.weights));
  }
  for (const ProductOutput& o : outputs) note_row_loops(in, {o.weights});
  const bool runs = reads_in_runs(in, outputs[0], stop);
  // One loop over the matrices' rows one after another: a slice or chunk may start in one and end in the next.
  over_rows(in, total, all_tiled(outputs), [&](std::size_t begin, std::size_t end) {
    std::size_t first = 0;
    for (std::size_t i = 0; i < outputs.size(); ++i) {
      const std::size_t n = std::size_t(outputs[i].weights->rows());
      const std::size_t from = std::max(begin, first), to = std::min(end, first + n);
      if (from < to) in.rows(*outputs[i].weights, biases[i], outputs[i].y, from - first, to - first, stop, runs);
      first += n;
    }
  });
}

void swiglu_product(const Tensor& x, const LinearWeights& gate, const LinearWeights& up, float* y, float* up_product,
                    const std::atomic<bool>* stop) {
  if (rows_of(x) == 0 || stop_requested(stop)) return;
  const ProductInput in(x, gate.format == WeightFormat::BF16 || up.format == WeightFormat::BF16,
                        gate.quantised() || up.quantised());
  const int64_t n = gate.rows();
  const std::vector<float> gate_bias = bias_of(gate), up_bias = bias_of(up);
  const auto silu_mul = activation_kernels().silu_mul;
  note_row_loops(in, {&gate, &up});
  const bool runs = decided_runs(in);
  over_rows(in, std::size_t(n), gate.tiled && up.tiled, [&](std::size_t begin, std::size_t end) {
    in.rows(gate, gate_bias, y, begin, end, stop, runs);
    in.rows(up, up_bias, up_product, begin, end, stop, runs);
    if (stop_requested(stop)) return;
    for (int64_t r = 0; r < in.m(); ++r) {
      float* row = y + r * n + int64_t(begin);
      silu_mul(row, up_product + r * n + int64_t(begin), row, end - begin);
    }
  });
}

}  // namespace qvl::cpu
