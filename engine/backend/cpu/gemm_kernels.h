#pragma once
// Prefill's products on the CPU (many activation rows): a register-blocked GEMM on packed panels, BLIS's method.
//
// The dot tiles (dot_kernels.h) hold a few weight rows x a few activation rows of partial sums along k, each vector
// a slice of k, so every weight vector is widened once per 3-4 activation rows and every sum ends in a horizontal
// reduction. Here each vector holds kNr output columns instead (an outer product): per k, one activation value
// broadcast and multiplied into the columns' vector, kMr rows x kNr columns of sums in registers (AVX-512: 8 x 32,
// 16 accumulators, 10 loads for 16 FMAs; AVX2: 6 x 16, 12 accumulators, 8 loads for 12 FMAs). What that needs:
// - the weights as panels [kc][nr] of f32 (pack_weights): a block of weight rows transposed and widened once per
//   product, then read from L1 by every panel of activation rows. bf16 rows are transposed as pairs of values (a
//   32-bit unit), which halves the shuffles, and widened after;
// - the activations as panels [k][mr] (PackedActivations), once per product for every thread: the broadcasts then
//   read consecutive floats (mr rows 8 KB apart would share one L1 set).
// Every output is one chain of fused multiply-adds over k in order, from zero: the same bits from the AVX2 and
// AVX-512 kernels and from gemm_reference, whatever the blocking, the thread split or the number of rows.
#include <atomic>
#include <cstddef>
#include <memory>
#include <vector>

#include "core/dtype.h"
#include "core/tensor.h"

namespace qvl::cpu {

// A weight panel's depth (values of k): 256 x 32 floats (32 KB) stay in L1 while every activation panel reads them.
constexpr std::size_t kGemmDepth = 256;

struct GemmKernels {
  std::size_t mr, nr;  // the register tile: activation rows x weight rows (output columns)
  // The fewest activation rows for which it beats the dot tiles on bf16 weights, packing included (one thread of
  // the GPU machine's Xeon, tools/microbench/cpu_gemm.cpp, GFLOP/s dot / packed): AVX-512 at 16 rows 109 / 99
  // (k = 2,048) and 81 / 89 (6,144), at 32 88 / 110 and 84 / 103; AVX2 at 32 65 / 63 and 64 / 59, at 64 64 / 67
  // and 60 / 65 (this project's EPYC, AVX2: 75 / 68 at 32, 74 / 77 at 64).
  std::size_t min_rows;
  // panel [kc][nr] = rows [0, cols) of w (w_stride bytes apart), elements [k0, k0 + kc), widened to f32; the columns
  // past `cols` zero.
  void (*pack_weights)(const void* w, std::size_t w_stride, DType type, std::size_t cols, std::size_t k0,
                       std::size_t kc, float* panel);
  // y[r][c] (y_stride floats apart) = (first ? 0 : y[r][c]) + Σ_k a[k][r] · panel[k][c] for r < rows, c < cols,
  // one fused multiply-add a k.
  void (*tile)(const float* a, const float* panel, std::size_t kc, float* y, std::size_t y_stride, std::size_t rows,
               std::size_t cols, bool first);
  const char* name;
};

// The variant of the instruction set dot_kernels() chose; nullptr without AVX2, or with the generic kernels forced
// ($QVL_CPU_KERNELS=generic): the dot tiles then serve every product.
const GemmKernels* gemm_kernels();
const GemmKernels* gemm_kernels_avx2();    // nullptr when the processor lacks AVX2/FMA/F16C
const GemmKernels* gemm_kernels_avx512();  // nullptr when the processor lacks AVX-512F

// x [rows, k] as panels of mr rows, each [k][mr], the rows past the last zero.
class PackedActivations {
public:
  PackedActivations() = default;
  // Across the thread pool: a prefill's 64 rows of 6,144 are 1.5 MB to transpose.
  PackedActivations(const float* x, std::size_t rows, std::size_t k, std::size_t mr);
  std::size_t rows() const { return rows_; }
  std::size_t panels() const { return (rows_ + mr_ - 1) / mr_; }
  const float* panel(std::size_t p) const { return data_.get() + p * mr_ * k_; }

private:
  std::size_t rows_ = 0, k_ = 0, mr_ = 1;
  std::unique_ptr<float[]> data_;  // not zeroed first: the constructor writes every element
};

// Weight rows packed once for products that read them with several blocks of activation rows (an attention's keys,
// read by every block of its queries): panels of nr rows, each [k][nr], as gemm_rows packs them a depth block at a
// time.
class PackedRows {
public:
  PackedRows() = default;
  PackedRows(const PackedRows&) = delete;  // a copy would share the panels it then packs into
  PackedRows& operator=(const PackedRows&) = delete;
  // Rows [0, rows) of w (w_stride bytes apart, k elements each, of `type`): packs those not packed yet (the last,
  // partly filled panel again). Another w, stride, type, k or kernel starts over; rows already packed are taken to
  // be unchanged (an attention's keys while its pass runs).
  void extend(const GemmKernels& kernels, const void* w, std::size_t w_stride, DType type, std::size_t k,
              std::size_t rows);
  std::size_t rows() const { return rows_; }
  std::size_t k() const { return k_; }
  // The panel of rows [j, j + nr) (j a multiple of nr), values k0 on: [k - k0][nr], 64-byte aligned as the kernels
  // read it.
  const float* panel(std::size_t j, std::size_t k0) const { return panels_.data<float>() + j * k_ + k0 * nr_; }

private:
  const void* w_ = nullptr;
  std::size_t w_stride_ = 0, k_ = 0, nr_ = 0, rows_ = 0;
  DType type_ = DType::F32;
  // The panels (a host tensor: 64-byte aligned). It grows by doubling and without zeroing: a causal prefill extends
  // the keys by a block of queries' 64 at a time.
  Tensor panels_;
};

// y[m][j] = Σ_k x[m][k] · w[j][k] for j < n (n ≤ w.rows()): gemm_rows' chains from rows packed beforehand.
void gemm_packed_rows(const GemmKernels& kernels, const PackedActivations& x, const PackedRows& w, std::size_t n,
                      float* y, std::size_t y_stride);

// y[m][j] = Σ_k x[m][k] · w[j][k] for the weight rows j in [begin, end) (w_stride bytes apart) and every activation
// row (k = 0: zeros); `stop` is checked between panels of weight rows (a stopped prefill: y is then garbage). Every
// weight type is taken; f32 and f16 rows are packed an element at a time, so the products send only bf16 here.
void gemm_rows(const GemmKernels& kernels, const PackedActivations& x, std::size_t k, const void* w,
               std::size_t w_stride, DType type, std::size_t begin, std::size_t end, float* y, std::size_t y_stride,
               const std::atomic<bool>* stop);

// y[m][j] = Σ_k x[m][k] · b[k][j] for j < n, with b stored by rows of k (f32 or bf16, widened as packed; b_stride
// elements apart; only the first b_rows read, the rest counted as zeros): an attention's probabilities times its
// values. The same chains as gemm_rows.
void gemm_by_rows(const GemmKernels& kernels, const PackedActivations& x, std::size_t k, const void* b, DType b_type,
                  std::size_t b_stride, std::size_t b_rows, std::size_t n, float* y, std::size_t y_stride);

// The same sums, one output at a time in plain C++ (std::fma in k's order): what the kernels must equal bit for bit.
void gemm_reference(const float* x, std::size_t rows, std::size_t k, const void* w, std::size_t w_stride, DType type,
                    std::size_t w_rows, float* y, std::size_t y_stride);

}  // namespace qvl::cpu
