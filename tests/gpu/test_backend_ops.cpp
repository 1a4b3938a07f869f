// qvl-test-backend-ops: every CUDA op against the CPU backend (the reference), in the style of llama.cpp's
// test-backend-ops.
//   eval (default): many shapes (odd sizes, GQA ratios, lengths 1 to 4096), the normalised mean squared error
//                   NMSE = Σ(gpu − cpu)² / Σ cpu² per case against a threshold for the arithmetic involved;
//   perf:           the Qwen3-VL-2B shapes of one decode step and one 512-token prefill, timed with CUDA events
//                   (median of repeats after a warm-up), printed with µs, GB/s and TFLOP/s per op.
// --profile native|sm61|both (default both). Exit codes: 0 all passed, 1 a case failed, 77 no usable GPU (CTest
// reports the test as skipped, with the reason printed).
#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "backend/backend.h"
#include "backend/cuda_plugin.h"
#include "backend/quantize.h"
#include "model/rope.h"
#include "model/text_decoder.h"
#include "runtime/profiler.h"

namespace qvl {
namespace {

std::mt19937 rng{1234};

Tensor random(Shape shape, DType dtype = DType::F32, float scale = 1.0f) {
  Tensor t = Tensor::empty(DType::F32, std::move(shape));
  std::normal_distribution<float> normal(0.0f, scale);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = normal(rng);
  return dtype == DType::F32 ? t : t.to(dtype);
}

double nmse(const Tensor& gpu_host, const Tensor& cpu_result) {
  const auto a = gpu_host.to_f32_vector(), b = cpu_result.to_f32_vector();
  if (a.size() != b.size()) return INFINITY;
  double err = 0, ref = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    const double d = double(a[i]) - double(b[i]);
    err += d * d;
    ref += double(b[i]) * double(b[i]);
  }
  return ref > 0 ? err / ref : err;
}

// Thresholds by the arithmetic: f32 all the way (only summation order differs), activations rounded to f16 or bf16
// for tensor cores (bf16 keeps 8 bits: a relative error of ~2^-9 per product).
// The tensor-core attention rounds q, k, v and the probabilities to f16 (~2^-12 relative each): ~4e-7 expected.
constexpr double kF32 = 1e-10, kF16Inputs = 1e-6, kBf16Inputs = 3e-5, kF16Attention = 4e-6;

struct Runner {
  Backend& gpu;
  Backend& cpu;
  bool narrow_for_gemm;  // the native profile's cuBLAS path rounds activations to the weights' type
  int cases = 0, failures = 0;

  void check(const std::string& what, const Tensor& gpu_result, const Tensor& cpu_result, double limit) {
    const double e = nmse(gpu.to_host(gpu_result), cpu_result);
    ++cases;
    const bool ok = e <= limit;
    if (!ok) ++failures;
    std::printf("  %-64s NMSE %9.2e  %s\n", what.c_str(), e, ok ? "OK" : "FAIL");
  }
  // An activation slot's type (Backend::alloc_operand): the weights' 16-bit type where the rows go to cuBLAS (the
  // native profile, more than the GEMV's 4 rows), else f32 (the slot is then the projection's own output).
  void check_type(const std::string& what, const Tensor& slot, DType expected) {
    ++cases;
    const bool ok = slot.dtype() == expected;
    if (!ok) ++failures;
    std::printf("  %-64s %s (expected %s)  %s\n", what.c_str(), std::string(dtype_name(slot.dtype())).c_str(),
                std::string(dtype_name(expected)).c_str(), ok ? "OK" : "FAIL");
  }
  // A result narrowed to bf16 against the CPU's f32 result rounded the same way: where the two f32 results differ in
  // their last bits, a value next to a rounding boundary lands one bf16 step apart. Each element must be equal or one
  // step from the reference, and at most 1% of them one step (a wrong result moves most elements by many steps); near
  // zero, where the norm's terms cancel and their last bits are the whole value, within a bf16 step of the row's
  // scale (the reference's RMS) instead. Results in f32 (the SM61 profile) are held to `f32_limit` by NMSE.
  void check_narrowed(const std::string& what, const Tensor& gpu_result, const Tensor& cpu_rounded, double f32_limit) {
    if (gpu_result.dtype() != DType::BF16) return check(what, gpu_result, cpu_rounded, f32_limit);
    const Tensor g = gpu.to_host(gpu_result).to(DType::F32), a = cpu_rounded.to(DType::F32);
    const auto bits = [](float v) {
      uint32_t u;
      std::memcpy(&u, &v, sizeof u);
      return int64_t(u >> 16);
    };
    double squares = 0;
    for (int64_t i = 0; i < a.numel(); ++i) squares += double(a.data<float>()[i]) * a.data<float>()[i];
    const double near_zero = std::sqrt(squares / double(std::max<int64_t>(1, a.numel()))) / 256;  // a bf16 step of the RMS
    int64_t apart = 0, far = 0;
    float worst_g = 0, worst_a = 0;  // the largest difference past one step
    for (int64_t i = 0; i < g.numel(); ++i) {
      const float gi = g.data<float>()[i], ai = a.data<float>()[i];
      const int64_t d = std::abs(bits(gi) - bits(ai));
      apart += d >= 1, far += d > 1 && std::abs(double(gi) - ai) > near_zero;
      if (d > 1 && std::abs(gi - ai) >= std::abs(worst_g - worst_a)) worst_g = gi, worst_a = ai;
    }
    ++cases;
    const bool ok = far == 0 && apart * 100 <= g.numel();
    if (!ok) ++failures;
    std::printf("  %-64s %lld/%lld apart, %lld by more than a step  %s\n", what.c_str(), (long long)apart,
                (long long)g.numel(), (long long)far, ok ? "OK" : "FAIL");
    if (worst_g != worst_a) std::printf("    past a step: %.9g against %.9g (the RMS's step %.3g)\n", worst_g, worst_a, near_zero);
  }
  // A bf16 table on the SM61 profile is stored as f16: exact but for values under f16's normal range (2^-14), which
  // lose bits as f16 subnormals.
  double stored_table_limit(DType table) const { return !narrow_for_gemm && table == DType::BF16 ? 1e-12 : 0.0; }
  // Which path a projection took, from the ops it reported: whether `call` ran one whose name holds `op`.
  bool reports_op(const std::function<void()>& call, const std::string& op) {
    Profiler seen;
    gpu.set_timing_sink(&seen);
    call();
    gpu.collect_timings(true);
    gpu.set_timing_sink(nullptr);
    for (const KernelSummary& k : seen.summary())
      if (k.name.find(op) != std::string::npos) return true;
    return false;
  }
  void check_path(const std::string& what, bool took, bool expected) {
    ++cases;
    const bool ok = took == expected;
    if (!ok) ++failures;
    std::printf("  %-64s %s (expected %s)  %s\n", what.c_str(), took ? "taken" : "not taken",
                expected ? "taken" : "not taken", ok ? "OK" : "FAIL");
  }

  double linear_limit(DType w, int64_t m) const {
    if (w == DType::F32 || m <= 4 || !narrow_for_gemm) return w == DType::F32 ? kF32 : 1e-9;
    return w == DType::F16 ? kF16Inputs : kBf16Inputs;
  }

  LinearWeights on_gpu(const Tensor& w, const Tensor* bias = nullptr) { return gpu.upload_linear(w, bias); }
  // Keys or values as a KV cache of `type` holds them: on the GPU through the cache's own append (copy_rows narrows
  // f32 rows to bf16, to nearest even), and the same values for the CPU (f32 holding the bf16 ones), so both read
  // the very same keys and values.
  struct CacheTensors {
    Tensor gpu, cpu;
  };
  CacheTensors as_cache(const Tensor& host, DType type) {
    gpu.set_cache_type(type);
    Tensor g = gpu.alloc_cache(host.shape());
    gpu.copy_rows(gpu.from_host(host), g, 0);
    return {g, type == DType::F32 ? host.to(DType::F32) : host.to(type).to(DType::F32)};
  }
  static std::string cache_name(DType type) { return type == DType::F32 ? "" : " (" + std::string(dtype_name(type)) + " cache)"; }
  NormWeights on_gpu(const NormWeights& n) {
    return {gpu.upload(n.weight, WeightRole::Vector), n.bias.raw() ? gpu.upload(n.bias, WeightRole::Vector) : Tensor()};
  }
  // Runs `run` with the GPU's fusions set to `fusions` (the default: all on), then restores them.
  template <typename Run> void with_fusions(const Fusions& fusions, Run run) {
    const Fusions before = gpu.fusions();
    gpu.set_fusions(fusions);
    run();
    gpu.set_fusions(before);
  }

  void linear() {
    // Decode rows take the GEMV with a warp a row, or (few rows longer than a batch a lane) two or four warps a row:
    // {4, 64, 1032} f32 and {1, 64, 4096} take two, {1, 2048, 6144} (the 2B's down projection), {3, 96, 5000},
    // {2, 101, 5000} and {1, 37, 6144} (an odd row count: the last block's second row empty) four.
    for (DType wt : {DType::F32, DType::F16, DType::BF16})
      for (auto [m, n, k] : std::vector<std::array<int64_t, 3>>{{1, 1, 1},      {1, 37, 129},   {3, 64, 64},
                                                              {4, 64, 1032},  {2, 48, 512},   {1, 300, 2048},
                                                              {5, 100, 33},   {9, 100, 33},   {17, 256, 1024},
                                                              {64, 128, 256}, {130, 300, 520}, {300, 1024, 2048},
                                                              {1, 2048, 6144}, {3, 96, 5000},  {2, 101, 5000},
                                                              {1, 37, 6144},  {1, 64, 4096}}) {
        const Tensor x = random({m, k}), w = random({n, k}, wt, 0.1f), b = random({n}, wt);
        const LinearWeights host = LinearWeights::of(w, b), wg = on_gpu(w, &b);
        Tensor y_cpu = cpu.alloc({m, n}), y_gpu = gpu.alloc({m, n});
        cpu.linear(x, host, y_cpu);
        gpu.linear(gpu.from_host(x), wg, y_gpu);
        const std::string shape = std::string(dtype_name(wt)) + " m=" + std::to_string(m) + " n=" + std::to_string(n) +
                                  " k=" + std::to_string(k);
        check("linear " + shape, y_gpu, y_cpu, linear_limit(wt, m));
        // The residual add folded in (the GEMV's epilogue at decode rows): stream += x · wᵀ + b, against the CPU's
        // linear and add.
        const Tensor stream = random({m, n});
        Tensor s_cpu = stream.to(DType::F32), s_gpu = gpu.from_host(stream), scratch_cpu = cpu.alloc({m, n}),
               scratch_gpu = gpu.alloc({m, n});
        const Tensor xg = gpu.from_host(x);
        project_unfused(cpu, Projection::add_to(s_cpu, x, host, scratch_cpu));
        gpu.project(Projection::add_to(s_gpu, xg, wg, scratch_gpu));
        check("linear+add " + shape, s_gpu, s_cpu, linear_limit(wt, m));
      }
    // Matrices and results that start off the 256-byte line, down to a 16-bit element's 2 bytes: the matrix stored
    // after `before` rows of another (upload_linears packs them so; bf16 at 2, 8, 16 and 256 bytes, f32 at 4, 16, 32
    // and 256), the result after `before` rows of n outputs (at 4, 32, 128 and 256). cuBLAS chooses its kernels by
    // the operands' alignment; one chosen for 256-byte operands would fault or be wrong.
    for (DType wt : {DType::F32, DType::BF16})
      for (auto [m, n, k, before] : std::vector<std::array<int64_t, 4>>{
               {9, 37, 33, 1}, {64, 37, 129, 3}, {17, 96, 68, 1}, {9, 100, 36, 2}, {33, 64, 64, 4}}) {
        const Tensor x = random({m, k}), w = random({n, k}, wt, 0.1f), lead = random({before, k}, wt, 0.1f);
        const LinearWeights host = LinearWeights::of(w);
        const LinearWeights packed = gpu.upload_linears({LinearWeights::of(lead), host})[1];
        Tensor y_cpu = cpu.alloc({m, n});
        const Tensor y_all = gpu.alloc({before + m, n});
        Tensor y_gpu = y_all.slice_rows(before, before + m);
        cpu.linear(x, host, y_cpu);
        gpu.linear(gpu.from_host(x), packed, y_gpu);
        check("linear at offsets " + std::string(dtype_name(wt)) + " m=" + std::to_string(m) + " n=" +
                  std::to_string(n) + " k=" + std::to_string(k) + " after " + std::to_string(before) + " rows",
              y_gpu, y_cpu, linear_limit(wt, m));
      }
  }

  // q8/q4 weights: at decode rows both backends quantise the activations per block the same way and sum the same
  // integers (only the order of the f32 sums differs); at more rows the GPU multiplies the dequantised weights with
  // bf16 (native) or f32 (SM61) activations while the CPU keeps its 8-bit ones: the activations' rounding (~2^-9
  // relative an element) shows, so the limit is the bf16 one's order.
  void quantised_linear() {
    for (const WeightFormat f : {WeightFormat::Q8, WeightFormat::Q4})
      for (const int64_t group : {32, 128})
        // m > 4 runs the dequantisation: eight values a thread ({5, 64, 1032}: a last block of 8 of 32 values) or,
        // where a row's values are not whole eights ({5, 64, 100}), the warp-a-block kernel. m <= 4: x quantised in
        // chunks of 1,024 values a block (2: {1, 300, 2048}, 6: {1, 2048, 6144}, 12: {1, 64, 12288}), the GEMV with 4
        // rows a warp at q4 and 2 at q8 ({1, 300, 2048}: a last block of 3 busy warps; {1, 32768, 2048}), 2 where the
        // rows are not a multiple of 4 ({1, 302, 2048}), or 1.
        for (auto [m, n, k] : std::vector<std::array<int64_t, 3>>{{1, 7, 48},       {1, 300, 2048},  {3, 64, 1032},
                                                                {4, 2048, 6144},   {2, 151, 96},    {5, 100, 96},
                                                                {64, 256, 1024},   {300, 1024, 2048}, {5, 64, 1032},
                                                                {5, 64, 100},      {1, 64, 12288},  {1, 2048, 6144},
                                                                {1, 32768, 2048},  {1, 302, 2048}}) {
          const Tensor x = random({m, k});
          LinearWeights host = quantize_matrix(random({n, k}, DType::BF16, 0.1f), f, group, "w");
          host.bias = random({n}, DType::BF16);
          const LinearWeights wg = gpu.upload_linear(host);
          Tensor y_cpu = cpu.alloc({m, n}), y_gpu = gpu.alloc({m, n});
          cpu.linear(x, host, y_cpu);
          const Tensor xg = gpu.from_host(x);
          gpu.linear(xg, wg, y_gpu);
          const std::string shape = std::string(format_traits(f).name) + " group " + std::to_string(group) +
                                    " m=" + std::to_string(m) + " n=" + std::to_string(n) + " k=" + std::to_string(k);
          const double limit = m <= 4 ? kF32 : 1e-4;
          check("linear " + shape, y_gpu, y_cpu, limit);
          const Tensor stream = random({m, n});
          Tensor s_cpu = stream.to(DType::F32), s_gpu = gpu.from_host(stream), scratch_cpu = cpu.alloc({m, n}),
                 scratch_gpu = gpu.alloc({m, n});
          project_unfused(cpu, Projection::add_to(s_cpu, x, host, scratch_cpu));
          gpu.project(Projection::add_to(s_gpu, xg, wg, scratch_gpu));
          check("linear+add " + shape, s_gpu, s_cpu, limit);
        }
    quantised_projections();
    const LinearWeights table = quantize_matrix(random({500, 72}, DType::BF16), WeightFormat::Q8, 32, "embed");
    const std::vector<int32_t> ids{3, 0, 499, 3, 250};
    Tensor a = cpu.alloc({5, 72}), g = gpu.alloc({5, 72});
    cpu.embed(table, ids, a);
    gpu.embed(gpu.upload_linear(table, WeightRole::EmbeddingTable), ids, g);
    check("embed q8", g, a, 0.0);
  }

  // A decoder layer's matrices in q8/q4 (random, quantised on the host): q of 128 rows, k of 64, v of 66 (the q+k+v
  // GEMV's rows a warp drop to 2: each part's rows a multiple of them), gate and up of `inter`, down back to `hidden`.
  struct QuantisedLayer {
    LinearWeights q, k, v, gate, up, down;
  };
  QuantisedLayer quantised_layer(WeightFormat f, int64_t group, int64_t hidden, int64_t inter) {
    const auto make = [&](int64_t rows, int64_t cols) {
      return quantize_matrix(random({rows, cols}, DType::BF16, 0.1f), f, group, "w");
    };
    return {make(128, hidden), make(64, hidden), make(66, hidden), make(inter, hidden), make(inter, hidden), make(hidden, inter)};
  }
  // The formats the layer runs in: q8 in groups of 32 (--weights q8-g32) and of 128 (q8: its 10,016-wide rows end in
  // a padded group), q4 in groups of 32.
  static constexpr std::array<std::pair<WeightFormat, int64_t>, 3> kLayerFormats{
      {{WeightFormat::Q8, 32}, {WeightFormat::Q4, 32}, {WeightFormat::Q8, 128}}};
  // Each matrix of `l` through `f` (uploaded, or widened for a float reference).
  template <typename F>
  static QuantisedLayer each(const QuantisedLayer& l, F&& f) {
    return {f(l.q), f(l.k), f(l.v), f(l.gate), f(l.up), f(l.down)};
  }
  QuantisedLayer on_gpu(const QuantisedLayer& l) {
    return each(l, [&](const LinearWeights& w) { return gpu.upload_linear(w); });
  }
  // A q8/q4 matrix as the GPU widens it for products of many rows (bf16 native, f32 SM61): a float reference that
  // multiplies what the GPU multiplies.
  DType widened() const { return narrow_for_gemm ? DType::BF16 : DType::F32; }
  LinearWeights widened_of(const LinearWeights& w) const {
    return LinearWeights::of(dequantize_matrix(w, widened()), w.bias);
  }
  QuantisedLayer widened_of(const QuantisedLayer& l) const {
    return each(l, [&](const LinearWeights& w) { return widened_of(w); });
  }

  // The residual add of w.down's product over random rows with the closing norm, then w.q's projection reading that
  // norm (folded there where the fusions fold it), the GPU (wg) against the CPU (w).
  void residual_then_norm(const QuantisedLayer& w, const QuantisedLayer& wg, const RowNorm& rms, const RowNorm& rms_g,
                          int64_t m, const std::string& what, double add_limit, double limit) {
    const int64_t hidden = w.down.rows(), inter = w.down.cols(), out = w.q.rows();
    const Tensor h = random({m, inter}), hg = gpu.from_host(h), stream = random({m, hidden});
    Tensor sc = stream.to(DType::F32), sg = gpu.from_host(stream), scratch_c = cpu.alloc({m, hidden}),
           scratch_g = gpu.alloc({m, hidden}), next_c, next_g;
    project_unfused(cpu, Projection::add_to(sc, h, w.down, scratch_c).then(rms, next_c));
    gpu.project(Projection::add_to(sg, hg, wg.down, scratch_g).then(rms_g, next_g));
    check("linear+add (then rms_norm) " + what, sg, sc, add_limit);
    Tensor after_c = cpu.alloc({m, out}), after_g = gpu.alloc({m, out});
    project_unfused(cpu, Projection::of(sc, w.q, after_c).reading_norm(rms, next_c, true));
    gpu.project(Projection::of(sg, wg.q, after_g).reading_norm(rms_g, next_g, true));
    check("rms_norm (closing, ready)+linear " + what, after_g, after_c, limit);
  }

  // A decoder layer's projections with q8/q4 weights, fusions on and off, against the CPU's reference.
  // - Decode rows (1-4): the norm folded into the q+k+v and gate/up launches, the residual added in the GEMV, the
  //   closing norm left to the next projection. Folding the norm normalises on the GPU (the plain RMSNorm's bits, not
  //   the CPU's): a value on a rounding boundary of its 8-bit activation can land one step apart, hence a limit above
  //   the f32 one. Widths: the norm's row within the registers of the kernel that folds it (256), past them (2,304,
  //   10,016: the rest of its sum of squares read from memory).
  // - Prefill rows (64, 237): on the native profile a projection's matrices are dequantised together into one bf16
  //   workspace and the float projection runs over them (project_dequantised): q+k+v and gate/up as one cuBLAS
  //   product each, the norm and the SwiGLU writing the bf16 operands of the products after them. On SM61, and with
  //   the fusions off, a matrix at a time and the reference's sequence. The CPU's reference there runs its float path
  //   over the same dequantised matrices (bf16 native, f32 SM61: what the GPU multiplies with), so only the
  //   activations' rounding differs (linear_limit), not the CPU's 8-bit activations of its q8/q4 products.
  void quantised_projections() {
    const int64_t inter = 512;
    for (const auto [hidden, m] : std::vector<std::array<int64_t, 2>>{
             {256, 1}, {256, 3}, {2304, 1}, {2304, 3}, {10016, 4}, {256, 64}, {2304, 237}}) {
      const bool prefill = m > 4;
      const double limit = prefill ? linear_limit(widened(), m) : 1e-6;
      const NormWeights norm{random({hidden}, DType::BF16), {}}, norm_g = on_gpu(norm);
      const RowNorm rms = RowNorm::rms(norm, 1e-6f), rms_g = RowNorm::rms(norm_g, 1e-6f);
      for (const auto& [f, group] : kLayerFormats)
        for (const bool fused : {true, false}) {
          const QuantisedLayer quantised = quantised_layer(f, group, hidden, inter),
                               w = prefill ? widened_of(quantised) : quantised, wg = on_gpu(quantised);
          const bool together = prefill && fused && narrow_for_gemm;  // widened together, the packed products
          const std::string what = std::string(format_traits(f).name) + " group " + std::to_string(group) +
                                   (fused ? " fused" : " unfused") +
                                   " m=" + std::to_string(m) + " k=" + std::to_string(hidden);
          with_fusions(fused ? Fusions{} : Fusions::none(), [&] {
            const Tensor x = random({m, hidden}), xg = gpu.from_host(x);
            Tensor slot_c, slot_g;
            Tensor qc = cpu.alloc({m, 128}), kc = cpu.alloc({m, 64}), vc = cpu.alloc({m, 66});
            Tensor qo = gpu.alloc({m, 128}), ko = gpu.alloc({m, 64}), vo = gpu.alloc({m, 66});
            project_unfused(cpu, Projection::of(x, w.q, w.k, w.v, qc, kc, vc).reading_norm(rms, slot_c));
            check_path("rms_norm+q+k+v " + what + " packed", reports_op([&] {
              gpu.project(Projection::of(xg, wg.q, wg.k, wg.v, qo, ko, vo).reading_norm(rms_g, slot_g));
            }, "linear packed"), together);
            check("rms_norm+q+k+v " + what + " (q)", qo, qc, limit);
            check("rms_norm+q+k+v " + what + " (k)", ko, kc, limit);
            check("rms_norm+q+k+v " + what + " (v)", vo, vc, limit);
            if (prefill) check_type("rms_norm+q+k+v's norm slot " + what, slot_g, together ? DType::BF16 : DType::F32);
            // gate and up into one allocation (as the decoder keeps them), the activation into the down product's
            // operand (at decode rows, and without the fusion, that is the output itself).
            Tensor yc = cpu.alloc({m, inter}), upc = cpu.alloc({m, inter}), slot2_c, slot2_g, activation;
            const Tensor both = gpu.alloc({2 * m, inter});
            Tensor yg = both.slice_rows(0, m), upo = both.slice_rows(m, 2 * m);
            project_unfused(cpu, Projection::swiglu(x, w.gate, w.up, yc, upc).reading_norm(rms, slot2_c));
            check_path("rms_norm+gate/up+swiglu " + what + " packed", reports_op([&] {
              gpu.project(Projection::swiglu(xg, wg.gate, wg.up, yg, upo).reading_norm(rms_g, slot2_g).into_operand(activation));
            }, "gate+up packed"), together);
            check("rms_norm+gate/up+swiglu " + what + ", its slot", activation, yc.to(activation.dtype()), limit);
            check_type("rms_norm+gate/up+swiglu's slot " + what, activation, together ? DType::BF16 : DType::F32);
            // The residual add with the closing norm, then the projection that reads it (folded there, when fused).
            residual_then_norm(w, wg, rms, rms_g, m, what, prefill ? limit : kF32, limit);
          });
        }
    }
    quantised_vision_qkv();
  }

  // The vision tower's q, k and v with q8/q4 weights at prefill rows: one shape, biases on all three, q and k rotated
  // after them (native: widened together, then one batched cuBLAS product), against the CPU's float path over the
  // dequantised matrices.
  void quantised_vision_qkv() {
    const int64_t m = 37, heads = 4, d = 64, n = heads * d, k = 96;
    const Tensor x = random({m, k}), cos = random({m, d}), sin = random({m, d}), xg = gpu.from_host(x),
                 cos_g = gpu.from_host(cos), sin_g = gpu.from_host(sin);
    for (const WeightFormat f : {WeightFormat::Q8, WeightFormat::Q4}) {
      std::array<LinearWeights, 3> host, on_device, reference;
      for (std::size_t i = 0; i < 3; ++i) {
        host[i] = quantize_matrix(random({n, k}, DType::BF16, 0.1f), f, 32, "w");
        host[i].bias = random({n}, DType::BF16);
        on_device[i] = gpu.upload_linear(host[i]);
        reference[i] = widened_of(host[i]);
      }
      Tensor q_cpu = cpu.alloc({m, heads, d}), k_cpu = cpu.alloc({m, heads, d}), v_cpu = cpu.alloc({m, heads, d});
      Tensor q_gpu = gpu.alloc({m, heads, d}), k_gpu = gpu.alloc({m, heads, d}), v_gpu = gpu.alloc({m, heads, d});
      project_unfused(cpu, Projection::of(x, reference[0], reference[1], reference[2], q_cpu, k_cpu, v_cpu).rotating(cos, sin));
      gpu.project(Projection::of(xg, on_device[0], on_device[1], on_device[2], q_gpu, k_gpu, v_gpu).rotating(cos_g, sin_g));
      const std::string what = "linear q+k+v bias+rope " + std::string(format_traits(f).name) + " m=" + std::to_string(m);
      check(what + " (q)", q_gpu, q_cpu, linear_limit(widened(), m));
      check(what + " (k)", k_gpu, k_cpu, linear_limit(widened(), m));
      check(what + " (v)", v_gpu, v_cpu, linear_limit(widened(), m));
    }
  }

  // Greedy decoding's pick made on the GPU against the CPU's (core/first_max.h): the first index of the largest value
  // within the vocabulary, and the NaN flag. Equal maxima in one thread's share and in other threads', a larger value
  // past the vocabulary, every value -inf, -FLT_MAX, NaN; the 2B model's 151,936 logits and rows shorter than the block.
  void greedy_pick() {
    const auto pick_of = [&](Backend& be, const Tensor& host, int64_t vocabulary) {
      Tensor pick = be.alloc_indices(2);
      be.greedy_pick(&be == &cpu ? host : gpu.from_host(host), vocabulary, pick);
      const Tensor h = be.to_host(pick);
      return std::array<int64_t, 2>{h.data<int64_t>()[0], h.data<int64_t>()[1]};
    };
    // Sizes below and above one CUDA block's 2,048 values, the 2B's vocabulary (75 blocks), and past what the grid
    // covers in one pass (256 blocks of 2,048).
    for (const int64_t n : {1, 5, 1000, 2049, 151936, 600001}) {
      const auto set = [&](const std::vector<std::pair<int64_t, float>>& values) {
        Tensor t = random({1, n});
        for (auto [i, v] : values)
          if (i < n) t.data<float>()[i] = v;
        return t;
      };
      const auto filled = [&](float v) {
        Tensor t = Tensor::empty(DType::F32, {1, n});
        std::fill_n(t.data<float>(), n, v);
        return t;
      };
      const float inf = std::numeric_limits<float>::infinity(), big = std::numeric_limits<float>::max();
      const std::vector<std::pair<std::string, Tensor>> rows{
          {"random", random({1, n})},
          {"equal maxima 768 apart", set({{n / 2 + 768, 50.0f}, {n / 2, 50.0f}})},
          {"equal maxima 4,096 apart", set({{n / 2 + 4096, 50.0f}, {n / 2, 50.0f}})},
          {"equal maxima far apart", set({{n - 1, 50.0f}, {n / 3 + 7, 50.0f}})},
          {"equal maxima one grid pass apart", set({{5 + 524288, 50.0f}, {5, 50.0f}})},
          {"larger past the vocabulary", set({{n - 1, 99.0f}, {n / 2, 50.0f}})},
          {"all -inf", filled(-inf)},
          {"all -FLT_MAX", filled(-big)},
          {"NaN", set({{n / 2, std::nanf("")}})},
          {"NaN before the maximum", set({{0, std::nanf("")}, {n - 1, 50.0f}})},
          {"equal maxima, the lower index in a higher thread", set({{256, 50.0f}, {1, 50.0f}})},
          {"all NaN", filled(std::nanf(""))}};
      for (const auto& [name, row] : rows) {
        const int64_t vocabulary = name == "larger past the vocabulary" ? std::max<int64_t>(1, n - 1) : n;
        const auto g = pick_of(gpu, row, vocabulary), c = pick_of(cpu, row, vocabulary);
        ++cases;
        const bool ok = g == c;
        if (!ok) ++failures;
        std::printf("  %-64s %lld/%lld %lld/%lld  %s\n", ("greedy_pick " + name + " n=" + std::to_string(n)).c_str(),
                    (long long)g[0], (long long)g[1], (long long)c[0], (long long)c[1], ok ? "OK" : "FAIL");
      }
    }
  }

  // The output head's greedy pick from its bounds copy (project_then_pick, kernels/head_bounds.cuh) against the same
  // GPU's head GEMV and greedy pick over every logit: the same pick and NaN flag, bit for bit; every entry the bounded
  // pass leaves is at or above its logit (the bound holds), and the picked row's is the logit itself (its product in
  // the GEMV's order). Against the CPU's pick (project, then core/first_max.h) where its two largest logits are
  // clearly apart. Widths of whole and partial 512-wide slabs and of partial groups, heads whose GEMV takes two warps
  // a row (few rows, long ones), a vocabulary short of the rows; exact ties (first index), rows one weight step apart,
  // an outlier in x (many candidates), NaN in x, an infinite weight, tiny weights (no scale: always a candidate).
  void head_pick() {
    struct Shape {
      int64_t rows, width, vocabulary;
    };
    const std::vector<Shape> shapes{{151936, 2048, 151936}, {3000, 512, 2900}, {4096, 4096, 4096}, {1000, 2560, 1000},
                                    {2000, 1552, 1999},     {5000, 4096, 5000}, {700, 48, 700},     {300, 1000, 300}};
    for (const DType wt : {DType::BF16, DType::F16})
      for (const Shape& sh : shapes) {
        if (sh.rows == 151936 && wt == DType::F16) continue;  // the 2B's head once, in bf16
        const int64_t n = sh.rows, k = sh.width;
        for (const std::string variant : {"random", "exact tie", "one step apart", "outlier in x", "NaN in x",
                                          "infinite weight", "tiny weights"}) {
          Tensor x = random({1, k});
          Tensor w = random({n, k}, DType::F32, 0.02f);
          NormWeights norm_host{random({k}, DType::F32, 0.1f), {}};
          for (int64_t i = 0; i < k; ++i) norm_host.weight.data<float>()[i] = 1.0f + std::abs(norm_host.weight.data<float>()[i]);
          float* wv = w.data<float>();
          const auto winner_row = [&](int64_t r) {  // along x's signs (the norm's weights are positive): a clear winner
            for (int64_t i = 0; i < k; ++i) wv[r * k + i] = x.data<float>()[i] > 0 ? 0.05f : -0.05f;
          };
          if (variant == "exact tie" || variant == "one step apart") {
            winner_row(7), winner_row(std::min(n, sh.vocabulary) - 3);
            if (variant == "one step apart") wv[(std::min(n, sh.vocabulary) - 3) * k + 1] *= 1.0078125f;  // a bf16 step
          }
          if (variant == "outlier in x") x.data<float>()[3] = 1000.0f;
          if (variant == "NaN in x") x.data<float>()[k / 2] = std::nanf("");
          if (variant == "infinite weight") {
            if (!narrow_for_gemm && wt == DType::BF16) continue;  // the SM61 profile refuses to store it as f16
            wv[5 * k] = std::numeric_limits<float>::infinity();
          }
          if (variant == "tiny weights")
            for (int64_t i = 0; i < k; ++i) wv[9 * k + i] = 1e-37f * (i % 3 == 0 ? 1.0f : -1.0f);  // a scale under FLT_MIN
          if (n > sh.vocabulary) winner_row(n - 1);  // past the vocabulary: must not count
          const Tensor w_typed = w.to(wt);
          const LinearWeights host = LinearWeights::of(w_typed), head = on_gpu(w_typed);
          const NormWeights norm = on_gpu(NormWeights{norm_host.weight.to(wt), {}});
          const bool fits = head_bounds_bytes(n, k) > 0;
          const std::string what = "head_pick " + std::string(dtype_name(wt)) + " " + std::to_string(n) + "x" +
                                   std::to_string(k) + " v=" + std::to_string(sh.vocabulary) + " " + variant;
          const bool made = gpu.prepare_head_pick(head);
          check_path(what + ": bounds copy made", made, fits);
          const Tensor xg = gpu.from_host(x);
          // Every logit and the plain pick, then the bounded pick (each with its own slots).
          Tensor normed_full, normed_bounded, full = gpu.alloc({1, n}), bounded = gpu.alloc({1, n});
          Tensor pick_full = gpu.alloc_indices(2), pick_bounded = gpu.alloc_indices(2);
          const RowNorm rms = RowNorm::rms(norm, 1e-6f);
          gpu.project(Projection::of(xg, head, full).reading_norm(rms, normed_full));
          gpu.greedy_pick(full, sh.vocabulary, pick_full);
          const bool took = reports_op(
              [&] {
                gpu.project_then_pick(Projection::of(xg, head, bounded).reading_norm(rms, normed_bounded),
                                      sh.vocabulary, pick_bounded);
              },
              "head bounds+pick");
          check_path(what + ": bounded", took, fits);
          const Tensor pf = gpu.to_host(pick_full), pb = gpu.to_host(pick_bounded);
          const Tensor lf = gpu.to_host(full), lb = gpu.to_host(bounded);
          const int64_t picked = pb.data<int64_t>()[0];
          int64_t below = 0, exact = 0;
          for (int64_t j = 0; j < sh.vocabulary; ++j) {
            const float f = lf.data<float>()[j], b = lb.data<float>()[j];
            below += !std::isnan(f) && !std::isnan(b) && b < f;
            exact += std::memcmp(&f, &b, sizeof f) == 0;
          }
          const float fp = lf.data<float>()[picked], bp = lb.data<float>()[picked];
          ++cases;
          const bool same = pf.data<int64_t>()[0] == picked && pf.data<int64_t>()[1] == pb.data<int64_t>()[1];
          const bool ok = same && below == 0 && (!took || std::memcmp(&fp, &bp, sizeof fp) == 0);
          if (!ok) ++failures;
          std::printf("  %-64s %lld/%lld %lld/%lld, %lld exact, %lld below  %s\n", what.c_str(),
                      (long long)picked, (long long)pb.data<int64_t>()[1], (long long)pf.data<int64_t>()[0],
                      (long long)pf.data<int64_t>()[1], (long long)exact, (long long)below, ok ? "OK" : "FAIL");
          // Top-k at the models' defaults with the draw: the same candidates, draw and state as over every logit.
          const auto top_k_of = [&](bool from_bounds) {
            Tensor normed, logits = gpu.alloc({1, n}), out = gpu.alloc_indices(TopKSpec::kSlots);
            Tensor state = gpu.alloc_indices(1), drawn = gpu.alloc_indices(1);
            const int64_t seed = 0x5eed;
            gpu.write_indices(state, {&seed, 1});
            TopKSpec spec{sh.vocabulary, 20, 0.7};
            spec.top_p = 0.8, spec.draw_state = &state, spec.drawn = &drawn;
            const Projection p = Projection::of(xg, head, logits).reading_norm(rms, normed);
            if (from_bounds) {
              gpu.project_then_top_k(p, spec, out);
            } else {
              gpu.project(p);
              gpu.top_k_candidates(logits, spec, out);
            }
            const Tensor o = gpu.to_host(out);
            std::vector<int64_t> slots(o.data<int64_t>(), o.data<int64_t>() + 2);
            if (!slots[1] && slots[0] > 0) slots.insert(slots.end(), o.data<int64_t>() + 2, o.data<int64_t>() + 2 + 2 * slots[0]);
            slots.push_back(gpu.to_host(drawn).data<int64_t>()[0]);
            slots.push_back(gpu.to_host(state).data<int64_t>()[0]);
            return slots;
          };
          const std::vector<int64_t> tk_full = top_k_of(false), tk_bounded = top_k_of(true);
          ++cases;
          const bool tk_ok = tk_full == tk_bounded;
          if (!tk_ok) ++failures;
          std::printf("  %-64s %lld candidates, drew %lld / %lld  %s\n", (what + ": top-k 20 at 0.7, top-p 0.8").c_str(),
                      (long long)tk_bounded[0], (long long)tk_bounded[tk_bounded.size() - 2],
                      (long long)tk_full[tk_full.size() - 2], tk_ok ? "OK" : "FAIL");
          // The CPU's pick, where its two largest logits are apart by more than the GPU's sums can move them.
          Tensor normed_cpu, logits_cpu = cpu.alloc({1, n}), pick_cpu = cpu.alloc_indices(2);
          cpu.project_then_pick(Projection::of(x, host, logits_cpu).reading_norm(RowNorm::rms(norm_host, 1e-6f), normed_cpu),
                                sh.vocabulary, pick_cpu);
          std::vector<float> top(logits_cpu.data<float>(), logits_cpu.data<float>() + sh.vocabulary);
          if (variant != "NaN in x") std::partial_sort(top.begin(), top.begin() + std::min<int64_t>(2, sh.vocabulary), top.end(), std::greater<>());
          if (variant != "NaN in x" && sh.vocabulary >= 2 && std::isfinite(top[0]) && top[0] - top[1] > 1e-3f * std::max(1.0f, std::abs(top[0]))) {
            ++cases;
            const bool agree = pick_cpu.data<int64_t>()[0] == picked;
            if (!agree) ++failures;
            std::printf("  %-64s %lld against %lld  %s\n", (what + ": the CPU's pick").c_str(), (long long)picked,
                        (long long)pick_cpu.data<int64_t>()[0], agree ? "OK" : "FAIL");
          }
        }
      }
    // With the switch off the same call takes the GEMV and the greedy pick.
    const LinearWeights head = on_gpu(random({64, 512}, DType::BF16, 0.02f));
    gpu.prepare_head_pick(head);
    const Tensor xg = gpu.from_host(random({1, 512}));
    Tensor logits = gpu.alloc({1, 64}), pick = gpu.alloc_indices(2);
    Fusions off;
    off.bounded_head_pick = false;
    with_fusions(off, [&] {
      check_path("head_pick with the switch off: bounded",
                 reports_op([&] { gpu.project_then_pick(Projection::of(xg, head, logits), 64, pick); }, "head bounds+pick"),
                 false);
    });
  }

  // What top_k_candidates gives on `be` for a host row: the result's slots, then, where a draw is asked for (top_p >
  // 0), the id drawn and the state after it.
  struct TopKFound {
    std::vector<int64_t> slots;
    int64_t drawn = -1, state = -1;
  };
  TopKFound top_k_found(Backend& be, const Tensor& host, TopKSpec spec, uint64_t seed) {
    Tensor out = be.alloc_indices(TopKSpec::kSlots), state = be.alloc_indices(1), drawn = be.alloc_indices(1);
    const std::vector<int64_t> unwritten(TopKSpec::kSlots, -7);  // so that a write the op skips shows
    be.write_indices(out, unwritten);
    be.write_indices(drawn, {unwritten.data(), 1});
    if (spec.top_p > 0) {
      const auto bits = int64_t(seed);
      be.write_indices(state, {&bits, 1});
      spec.draw_state = &state, spec.drawn = &drawn;
    }
    be.top_k_candidates(&be == &cpu ? host : gpu.from_host(host), spec, out);
    const Tensor h = be.to_host(out);
    TopKFound found{std::vector<int64_t>(h.data<int64_t>(), h.data<int64_t>() + TopKSpec::kSlots)};
    if (spec.top_p > 0) found.drawn = be.to_host(drawn).data<int64_t>()[0], found.state = be.to_host(state).data<int64_t>()[0];
    return found;
  }

  // Top-k's candidates found on the GPU against the CPU's (core/top_k.h): the same ids and value bits, and -1 exactly
  // where the kernel must give up (more than 128, or one of its blocks of 2,048 holding more than k values at or above
  // the k-th largest: it lists k + 1, so a tie it did not list). Rows below, at and above one block, the 2B's 151,936,
  // and the kernel's most (262,144); k 1, 20, 64; ties inside one block and across blocks, values one ulp apart that
  // the temperature rounds together, -inf, every value -inf or equal, +inf, NaN, the largest past the vocabulary,
  // both zeros (and a fitted +0 / -0 pair, the -0 in a block whose head is below the merge's threshold), the
  // largest values held by k + 1 threads of one block (8·(k + 1) pass its threshold). Each case twice: the candidates
  // alone, and with the draw from them (top-p 0.8 at temperature 0.7, 1 at 1.3), whose id and
  // state must be the CPU's too.
  void top_k_candidates() {
    const auto kernel_gives_up = [](const Tensor& row, const TopKSpec& spec, const std::vector<int64_t>& c) {
      if (c[0] < 0) return true;
      if (c[0] < spec.top_k) return false;  // fewer than k values above -inf: the k-th largest is -inf
      float kth = std::numeric_limits<float>::infinity();
      for (int64_t i = 0; i < c[0]; ++i) kth = std::min(kth, std::bit_cast<float>(uint32_t(c[std::size_t(3 + 2 * i)])));
      for (int64_t block = 0; block < spec.vocabulary; block += 2048) {
        int64_t at_or_above = 0;
        for (int64_t i = block; i < std::min(block + 2048, spec.vocabulary); ++i)
          at_or_above += float(double(row.data<float>()[i]) / spec.temperature) >= kth;
        if (at_or_above > spec.top_k) return true;
      }
      return false;
    };
    const float inf = std::numeric_limits<float>::infinity();
    for (const int64_t n : {100, 2048, 2049, 151936, 262144})
      for (const int64_t k : {1, 20, 64}) {
        const auto set = [&](const std::vector<std::pair<int64_t, float>>& values) {
          Tensor t = random({1, n});
          for (auto [i, v] : values)
            if (i < n) t.data<float>()[i] = v;
          return t;
        };
        std::vector<std::pair<int64_t, float>> in_one_block, across_blocks, many_minus_inf, ulps_apart, zeros;
        for (int64_t i = 0; i < k + 3; ++i) in_one_block.push_back({n / 2 / 2048 * 2048 + 7 * i, 9.0f});
        for (int64_t i = 0; i < k + 3; ++i) across_blocks.push_back({(i * 2053 + 5) % n, i < k / 2 ? 12.0f : 9.0f});
        for (int64_t i = 0; i < n; i += 2) many_minus_inf.push_back({i, -inf});
        float close = 30.0f;
        for (int64_t i = 0; i < k + 3; ++i, close = std::nextafter(close, inf)) ulps_apart.push_back({(i * 4099 + 3) % n, close});
        for (int64_t i = 0; i < n; ++i) zeros.push_back({i, i % 3 == 0 ? 0.0f : i % 3 == 1 ? -0.0f : -1.0f});
        const auto filled = [&](float v) {
          Tensor t = Tensor::empty(DType::F32, {1, n});
          std::fill_n(t.data<float>(), n, v);
          return t;
        };
        Tensor signed_zeros = filled(-1.0f);
        signed_zeros.data<float>()[5] = -0.0f;
        signed_zeros.data<float>()[std::min<int64_t>(3000, n - 1)] = 0.0f;
        std::vector<std::pair<int64_t, float>> in_k_plus_1_threads;
        for (int64_t t = 0; t <= k; ++t)
          for (int64_t u = 0; u < 8; ++u) in_k_plus_1_threads.push_back({t + u * 256, 50.0f + float(t * 8 + u)});
        const std::vector<std::pair<std::string, Tensor>> rows{
            {"random", random({1, n})},
            {"k + 3 equal largest in one block", set(in_one_block)},
            {"ties at the k-th across blocks", set(across_blocks)},
            {"every other value -inf", set(many_minus_inf)},
            {"values one ulp apart", set(ulps_apart)},
            {"every value -inf", filled(-inf)},
            {"every value equal", filled(0.25f)},
            {"+inf twice", set({{n / 4, inf}, {n / 2, inf}})},
            {"NaN", set({{n / 3, std::nanf("")}})},
            {"the largest past the vocabulary", set({{n - 1, 99.0f}})},
            {"0, -0 and -1", set(zeros)},
            {"+0 and -0 in two blocks", signed_zeros},
            {"the largest in k + 1 threads of a block", set(in_k_plus_1_threads)}};
        for (const auto& [name, row] : rows) {
          const int64_t vocabulary = name == "the largest past the vocabulary" ? n - 1 : n;
          if (k >= vocabulary) continue;
          for (const double temperature : {0.7, 1.3})
            for (const double top_p : {0.0, temperature < 1 ? 0.8 : 1.0}) {  // 0: no draw
              TopKSpec spec{vocabulary, k, temperature};
              spec.top_p = top_p;
              const uint64_t seed = 77 + uint64_t(n + k);
              const TopKFound g = top_k_found(gpu, row, spec, seed), c = top_k_found(cpu, row, spec, seed);
              const bool nan = c.slots[1] != 0;  // then only the flag matters: the sampler fails
              const bool gives_up = g.slots[0] == -1;
              bool ok = nan ? g.slots[1] == c.slots[1]
                            : g.slots[1] == 0 && gives_up == kernel_gives_up(row, spec, c.slots) &&
                                  (gives_up || std::equal(g.slots.begin(), g.slots.begin() + 2 + 2 * std::max<int64_t>(g.slots[0], 0),
                                                          c.slots.begin()));
              // The draw: the CPU's where the kernel kept the CPU's candidates; none (0, the state kept) where it gave
              // up or saw NaN.
              if (top_p > 0)
                ok = ok && (nan || gives_up ? g.drawn == 0 && g.state == int64_t(seed)
                                            : g.drawn == c.drawn && g.state == c.state);
              ++cases;
              if (!ok) ++failures;
              std::printf("  %-72s %lld/%lld %lld/%lld %s %s\n",
                          ("top_k_candidates " + name + " n=" + std::to_string(n) + " k=" + std::to_string(k) +
                           " t=" + (temperature < 1 ? "0.7" : "1.3") + (top_p > 0 ? " +draw" : "")).c_str(),
                          (long long)g.slots[0], (long long)g.slots[1], (long long)c.slots[0], (long long)c.slots[1],
                          top_p > 0 ? (std::to_string(g.drawn) + "/" + std::to_string(c.drawn)).c_str() : "",
                          ok ? "OK" : "FAIL");
            }
        }
      }
  }

  // Top-p and the draw (top_k_candidates' draw) on the GPU against the CPU's (core/top_k.h's draw_from_candidates
  // after its selection): the same id and the same state after, bit for bit, for 0 to 128 candidates (random values,
  // equal ones, +inf, values far apart; past 64, top-k's most, by ties below the first 63; the rest of the row -inf,
  // top-k the candidates' count or 64), top_p 1, 0.8, 0.3 and 1e-9, several states; candidates that did not fit (200)
  // or a NaN draw 0 and keep the state.
  void draw_from_candidates() {
    std::mt19937_64 gen(2026);
    std::normal_distribution<float> normal(0.0f, 3.0f);
    const float inf = std::numeric_limits<float>::infinity();
    const int64_t vocabulary = 151936;
    for (const int64_t n : {0, 1, 2, 20, 64, 128, 200})
      for (const std::string kind : {"random", "equal", "two +inf", "far apart", "NaN seen"}) {
        if (n == 0 && kind != "random") continue;
        std::vector<float> values;
        for (int64_t i = 0; i < n; ++i)
          values.push_back(kind == "equal" ? 1.5f : kind == "far apart" ? normal(gen) * 40.0f : normal(gen));
        const auto distinct = std::min<std::ptrdiff_t>(n, TopKSpec::kMaxTopK - 1);
        if (n > TopKSpec::kMaxTopK)  // more candidates than top-k's most: ties at the 64th largest
          std::fill(values.begin() + distinct, values.end(), *std::min_element(values.begin(), values.begin() + distinct) - 1);
        if (kind == "two +inf" && n > 0) values[std::size_t(n / 3)] = values[std::size_t(n - 1)] = inf;
        Tensor row = Tensor::empty(DType::F32, {1, vocabulary});
        std::fill_n(row.data<float>(), vocabulary, -inf);
        for (int64_t i = 0; i < n; ++i)  // at most a few a block of 2,048
          row.data<float>()[(i * 757 + int64_t(gen() % 700)) % vocabulary] = values[std::size_t(i)];
        if (kind == "NaN seen") row.data<float>()[vocabulary / 2] = std::nanf("");
        for (const double top_p : {1.0, 0.8, 0.3, 1e-9})
          for (const uint64_t seed : {1ull, 77ull, 0x9e3779b97f4a7c15ull}) {
            TopKSpec spec{vocabulary, std::clamp<int64_t>(n, 1, TopKSpec::kMaxTopK), 1.0};
            spec.top_p = top_p;
            const TopKFound g = top_k_found(gpu, row, spec, seed), c = top_k_found(cpu, row, spec, seed);
            const bool ok = g.drawn == c.drawn && g.state == c.state &&
                            (kind == "NaN seen" ? g.slots[1] == 1 && c.slots[1] == 1 : g.slots[0] == c.slots[0]);
            ++cases;
            if (!ok) ++failures;
            std::printf("  %-72s %lld/%lld  %s\n",
                        ("draw " + kind + " n=" + std::to_string(n) + " top_p=" + std::to_string(top_p) +
                         " seed=" + std::to_string(seed % 1000)).c_str(),
                        (long long)g.drawn, (long long)c.drawn, ok ? "OK" : "FAIL");
          }
      }
  }

  void norms_and_elementwise() {
    for (int64_t rows : {1, 5, 300})
      for (int64_t width : {1, 16, 100, 1024, 2048, 5000}) {
        const std::string shape = " " + std::to_string(rows) + "x" + std::to_string(width);
        const Tensor x = random({rows, width}), w = random({width}, DType::BF16), b = random({width}, DType::F16);
        Tensor a = cpu.alloc({rows, width}), g = gpu.alloc({rows, width});
        const Tensor xg = gpu.from_host(x), wg = gpu.upload(w, WeightRole::Vector), bg = gpu.upload(b, WeightRole::Vector);
        cpu.rms_norm(x, w, 1e-6f, a);
        gpu.rms_norm(xg, wg, 1e-6f, g);
        check("rms_norm" + shape, g, a, kF32);
        cpu.layer_norm(x, w, b, 1e-6f, a);
        gpu.layer_norm(xg, wg, bg, 1e-6f, g);
        check("layer_norm (bf16 w, f16 b)" + shape, g, a, kF32);
        // w and b of one type: the warp-a-row kernel up to 1,024 wide (mixed, as above, a block a row; on the SM61
        // profile both are stored as f16, so both cases run the warp kernel there).
        const Tensor b16 = random({width}, DType::BF16), b16g = gpu.upload(b16, WeightRole::Vector);
        cpu.layer_norm(x, w, b16, 1e-6f, a);
        gpu.layer_norm(xg, wg, b16g, 1e-6f, g);
        check("layer_norm" + shape, g, a, kF32);
        const Tensor y = random({rows, width}), yg = gpu.from_host(y);
        cpu.add(x, y, a);
        gpu.add(xg, yg, g);
        check("add" + shape, g, a, kF32);
        cpu.silu_mul(x, y, a);
        gpu.silu_mul(xg, yg, g);
        check("silu_mul" + shape, g, a, kF32);
        add_norms(x, y, NormWeights{w, b}, shape);
        add_norms(x, y, NormWeights{w, b16}, shape + " (one weight type)");
        if (width <= 2048) {
          norms_into_matmul_operands(x, y, NormWeights{w, b16}, shape);
          norms_into_matmul_operands(x, y, NormWeights{w, b}, shape + " (bf16 w, f16 b)");
        }
        for (GeluKind kind : {GeluKind::Tanh, GeluKind::Erf}) {
          cpu.gelu(x, kind, a);
          gpu.gelu(xg, kind, g);
          check(std::string(kind == GeluKind::Tanh ? "gelu_tanh" : "gelu_erf") + shape, g, a, kF32);
        }
      }
  }

  // An identity matrix of `width` in `type`: a projection whose product is its input exactly (any summation order
  // adds zeros), so a residual projection's closing add + norm is checked on its own.
  static Tensor identity(int64_t width, DType type) {
    Tensor t = Tensor::zeros(DType::F32, {width, width});
    for (int64_t i = 0; i < width; ++i) t.data<float>()[i * width + i] = 1.0f;
    return type == DType::F32 ? t : t.to(type);
  }

  // The fused residual add + RMSNorm / LayerNorm (a residual projection's closing norm, rows the GEMV does not fold)
  // against the CPU's unfused sequence: both outputs.
  void add_norms(const Tensor& x, const Tensor& y, const NormWeights& norm, const std::string& shape) {
    const int64_t rows = x.dim(0), width = x.dim(1);
    const LinearWeights eye = LinearWeights::of(identity(width, DType::F32)), eye_g = on_gpu(eye.weight);
    const NormWeights norm_g = on_gpu(norm);
    const Tensor yg = gpu.from_host(y);
    Fusions fused;
    fused.norm_into_projection = false;  // decode rows would leave the norm to the next projection's GEMV
    for (const bool layer : {false, true}) {
      const RowNorm n = layer ? RowNorm::layer(norm, 1e-6f) : RowNorm::rms(norm, 1e-6f);
      const RowNorm ng = layer ? RowNorm::layer(norm_g, 1e-6f) : RowNorm::rms(norm_g, 1e-6f);
      Tensor sum_cpu = x.to(DType::F32), sum_gpu = gpu.from_host(x), scratch_cpu = cpu.alloc({rows, width}),
             scratch_gpu = gpu.alloc({rows, width}), a, g;
      project_unfused(cpu, Projection::add_to(sum_cpu, y, eye, scratch_cpu).then(n, a));
      with_fusions(fused, [&] { gpu.project(Projection::add_to(sum_gpu, yg, eye_g, scratch_gpu).then(ng, g)); });
      const std::string what = layer ? "add+layer_norm" : "add+rms_norm";
      check(what + " (normed)" + shape, g, a, kF32);
      check(what + " (sum)" + shape, sum_gpu, sum_cpu, kF32);
    }
  }

  // The fused add + norm kernels against the GPU's own unfused sequence (the GEMM with its bias kernel, the add, the
  // norm), bit for bit: the warp and the block layouts, norm weights in bf16 and f32, the residual's bias in the
  // norm's type and in another.
  void fused_norms_match_unfused() {
    const int64_t m = 37, k = 64;
    for (int64_t width : {100, 1024, 2048})
      for (DType norm_type : {DType::BF16, DType::F32})
        for (DType bias_type : {DType::BF16, DType::F16}) {
          const Tensor x = random({m, k}), w = random({width, k}, DType::BF16, 0.1f), bias = random({width}, bias_type);
          const LinearWeights wg = on_gpu(w, &bias);
          const NormWeights ln = on_gpu(NormWeights{random({width}, norm_type), random({width}, norm_type)}),
                            rn = on_gpu(NormWeights{random({width}, norm_type), {}});
          const Tensor xg = gpu.from_host(x), stream = random({m, width});
          for (const bool layer : {true, false}) {
            const RowNorm norm = layer ? RowNorm::layer(ln, 1e-6f) : RowNorm::rms(rn, 1e-6f);
            Tensor sum_f = gpu.from_host(stream), sum_u = gpu.from_host(stream), scratch_f = gpu.alloc({m, width}),
                   scratch_u = gpu.alloc({m, width}), y_f, y_u;
            gpu.project(Projection::add_to(sum_f, xg, wg, scratch_f).then(norm, y_f));
            with_fusions(Fusions::none(), [&] { gpu.project(Projection::add_to(sum_u, xg, wg, scratch_u).then(norm, y_u)); });
            const std::string what = std::string(layer ? "add+layer_norm" : "add+rms_norm") + " w=" +
                                     std::to_string(width) + " " + std::string(dtype_name(norm_type)) + " norm, " +
                                     std::string(dtype_name(bias_type)) + " bias = unfused on the GPU";
            // The fused norm may write the GEMMs' 16-bit operand: the unfused f32 rows rounded the same way.
            check(what + " (normed)", y_f, gpu.to_host(y_u).to(y_f.dtype()), 0.0);
            check(what + " (sum)", sum_f, gpu.to_host(sum_u), 0.0);
          }
        }
  }

  // The norms writing a cuBLAS operand (the norm slot: bf16 for bf16 weights and rows past the GEMV), against the
  // CPU's f32 result rounded to bf16 (a one-ulp f32 difference may flip a rounding: check_narrowed).
  void norms_into_matmul_operands(const Tensor& x, const Tensor& y, const NormWeights& norm, const std::string& shape) {
    const int64_t rows = x.dim(0), width = x.dim(1);
    const NormWeights norm_g = on_gpu(norm);
    const Tensor xg = gpu.from_host(x), y16 = y.to(DType::BF16).to(DType::F32), y16g = gpu.from_host(y16);
    const Tensor m = random({37, width}, DType::BF16, 0.1f), mb = random({37}, DType::BF16);
    const LinearWeights mg = on_gpu(m, &mb), eye = LinearWeights::of(identity(width, DType::BF16)),
                        eye_g = on_gpu(eye.weight);
    Tensor out_g = gpu.alloc({rows, 37}), out_c = cpu.alloc({rows, 37});
    for (const bool layer : {false, true}) {
      const RowNorm n = layer ? RowNorm::layer(norm, 1e-6f) : RowNorm::rms(norm, 1e-6f);
      const RowNorm ng = layer ? RowNorm::layer(norm_g, 1e-6f) : RowNorm::rms(norm_g, 1e-6f);
      const std::string name = layer ? "layer_norm" : "rms_norm";
      Tensor g, a;
      gpu.project(Projection::of(xg, mg, out_g).reading_norm(ng, g));
      project_unfused(cpu, Projection::of(x, LinearWeights::of(m, mb), out_c).reading_norm(n, a));
      const std::string type = " into " + std::string(dtype_name(g.dtype()));
      const auto as_operand = [&](const Tensor& t) { return g.dtype() == DType::F32 ? t : t.to(g.dtype()); };
      check_narrowed(name + type + shape, g, as_operand(a), kF32);
      // The closing norm of a residual projection (the product: the bf16-exact y through an identity matrix).
      Tensor sum_cpu = x.to(DType::F32), sum_gpu = gpu.from_host(x), s_cpu = cpu.alloc({rows, width}),
             s_gpu = gpu.alloc({rows, width}), gc, ac;
      project_unfused(cpu, Projection::add_to(sum_cpu, y16, eye, s_cpu).then(n, ac));
      Fusions closing;  // at the GEMV's rows (profile.h: up to 4) the RMSNorm would fold into the next projection
      closing.norm_into_projection = rows > 4;
      with_fusions(closing, [&] { gpu.project(Projection::add_to(sum_gpu, y16g, eye_g, s_gpu).then(ng, gc)); });
      check_narrowed("add+" + name + type + shape, gc, as_operand(ac), kF32);
      // The product reading the operand gives the bits of the product converting the f32 rows itself.
      Tensor from_operand = gpu.alloc({rows, 37}), from_f32 = gpu.alloc({rows, 37}), f32_slot;
      gpu.project(Projection::of(xg, mg, from_operand).reading_norm(ng, g, true));
      Fusions unnarrowed;
      unnarrowed.norm_into_projection = unnarrowed.layer_norm_linear = false;
      with_fusions(unnarrowed, [&] { gpu.project(Projection::of(xg, mg, from_f32).reading_norm(ng, f32_slot)); });
      check("linear of " + name + type + shape + " = of f32 rows", from_operand, gpu.to_host(from_f32), 0.0);
    }
  }

  // The fused attention prologue against the CPU's unfused sequence: q, k and both caches, host and device rows.
  // With a bf16 cache the appended rows are the CPU's rounded to bf16: equal, or one bf16 step apart where the f32
  // results differ in their last bit across a rounding boundary (NMSE of that order at most).
  void qk_norm_rope_append() {
    for (DType kv : {DType::F32, DType::BF16})
    for (auto [s, hq, hkv, d] : std::vector<std::array<int64_t, 4>>{{1, 16, 8, 128}, {37, 6, 1, 128}, {5, 4, 2, 8}, {17, 6, 2, 64}, {3, 2, 1, 256}, {6, 2, 1, 256}})
      for (bool on_device : {false, true}) {
        const int64_t cap = s + 9, row = 7;
        const Tensor q = random({s, hq, d}), k = random({s, hkv, d}), v = random({s, hkv, d});
        const Tensor qn = random({d}, DType::BF16), kn = random({d}, DType::BF16);
        const Tensor cos = random({s, d}), sin = random({s, d});
        const CacheTensors cache_k = as_cache(random({cap, hkv, d}), kv), cache_v = as_cache(random({cap, hkv, d}), kv);
        Tensor cq = q.to(DType::F32), ck = k.to(DType::F32), cck = cache_k.cpu.to(DType::F32), ccv = cache_v.cpu.to(DType::F32);
        Tensor gq = gpu.from_host(q), gk = gpu.from_host(k), gck = cache_k.gpu, gcv = cache_v.gpu;
        Tensor cpu_row = cpu.alloc_indices(1), gpu_row = gpu.alloc_indices(1);
        cpu.write_indices(cpu_row, std::vector<int64_t>{row});
        gpu.write_indices(gpu_row, std::vector<int64_t>{row});
        qk_norm_rope_append_unfused(cpu, {&cq, &ck, &v, &qn, &kn, 1e-6f, &cos, &sin, &cck, &ccv, row,
                                          on_device ? &cpu_row : nullptr});
        const Tensor vg = gpu.from_host(v), qng = gpu.upload(qn, WeightRole::Vector),
                     kng = gpu.upload(kn, WeightRole::Vector), cosg = gpu.from_host(cos), sing = gpu.from_host(sin);
        gpu.qk_norm_rope_append({&gq, &gk, &vg, &qng, &kng, 1e-6f, &cosg, &sing, &gck, &gcv, on_device ? 0 : row,
                                 on_device ? &gpu_row : nullptr});
        const std::string what = "qk_norm+rope+append s=" + std::to_string(s) + " hq=" + std::to_string(hq) + " hkv=" +
                                 std::to_string(hkv) + " d=" + std::to_string(d) + (on_device ? " (row on device)" : "") +
                                 cache_name(kv);
        check(what + " q", gq, cq, kF32);
        check(what + " k", gk, ck, kF32);
        const bool narrow = kv != DType::F32;
        check(what + " cache k", gck, narrow ? cck.to(kv).to(DType::F32) : cck, narrow ? 1e-5 : kF32);
        check(what + " cache v", gcv, narrow ? ccv.to(kv).to(DType::F32) : ccv, 0.0);
        // Against the GPU's own unfused sequence: the same bits where the kernel sums as the RMSNorm kernel does.
        if (d <= 256) {
          Tensor uq = gpu.from_host(q), uk = gpu.from_host(k), uck = as_cache(cache_k.cpu, kv).gpu,
                 ucv = as_cache(cache_v.cpu, kv).gpu;
          qk_norm_rope_append_unfused(gpu, {&uq, &uk, &vg, &qng, &kng, 1e-6f, &cosg, &sing, &uck, &ucv,
                                            on_device ? 0 : row, on_device ? &gpu_row : nullptr});
          check(what + " q = unfused on the GPU", gq, gpu.to_host(uq), 0.0);
          check(what + " cache k = unfused on the GPU", gck, gpu.to_host(uck), 0.0);
        }
      }
  }

  // A q+k+v projection and the attention prologue as one call (Backend::project_then_heads): on cuBLAS rows of heads
  // of 64-256 with the matrices packed, the prologue reads the product's packed rows (no split pass); the q and the
  // cache rows it leaves are the two calls' (the projection, then qk_norm_rope_append), bit for bit. Decode rows,
  // other head sizes and matrices apart take the two calls.
  void project_then_heads() {
    for (DType kv : {DType::F32, DType::BF16})
      for (auto [m, hq, hkv, d, k] : std::vector<std::array<int64_t, 5>>{{1, 4, 2, 64, 128}, {9, 4, 2, 64, 128},
                                                                          {40, 2, 1, 128, 256}, {237, 16, 8, 128, 64},
                                                                          {12, 2, 2, 96, 64}})
        for (bool packed : {false, true}) {
          const Tensor x = random({m, k}), wq = random({hq * d, k}, DType::BF16, 0.1f),
                       wk = random({hkv * d, k}, DType::BF16, 0.1f), wv = random({hkv * d, k}, DType::BF16, 0.1f);
          const LinearWeights q_c = LinearWeights::of(wq, Tensor()), k_c = LinearWeights::of(wk, Tensor()),
                              v_c = LinearWeights::of(wv, Tensor());
          const std::vector<LinearWeights> w =
              packed ? gpu.upload_linears({q_c, k_c, v_c}) : std::vector<LinearWeights>{on_gpu(wq), on_gpu(wk), on_gpu(wv)};
          const Tensor qn = gpu.upload(random({d}, DType::BF16), WeightRole::Vector),
                       kn = gpu.upload(random({d}, DType::BF16), WeightRole::Vector), cos = gpu.from_host(random({m, d})),
                       sin = gpu.from_host(random({m, d})), xg = gpu.from_host(x);
          const int64_t cap = m + 5, row = 3;
          const Tensor cache_init = random({cap, hkv, d});
          const auto run = [&](bool together, Tensor& q, Tensor& cache_k, Tensor& cache_v) {
            Tensor kk = gpu.alloc({m, hkv, d}), vv = gpu.alloc({m, hkv, d});
            q = gpu.alloc({m, hq, d});
            cache_k = as_cache(cache_init, kv).gpu, cache_v = as_cache(cache_init, kv).gpu;
            const Projection p = Projection::of(xg, w[0], w[1], w[2], q, kk, vv);
            const HeadNormRopeAppend op{&q, &kk, &vv, &qn, &kn, 1e-6f, &cos, &sin, &cache_k, &cache_v, row, nullptr};
            if (together) {
              gpu.project_then_heads(p, op);
            } else {
              gpu.project(p);
              gpu.qk_norm_rope_append(op);
            }
          };
          Tensor q1, ck1, cv1, q2, ck2, cv2;
          run(false, q1, ck1, cv1);
          const bool took_split = reports_op([&] { run(true, q2, ck2, cv2); }, "split columns");
          const std::string what = "linear q+k+v then heads m=" + std::to_string(m) + " hq=" + std::to_string(hq) +
                                   " hkv=" + std::to_string(hkv) + " d=" + std::to_string(d) +
                                   (packed ? " packed" : "") + cache_name(kv);
          // (Matrices uploaded one by one may still lie one after another, and gemm_packed then takes them too: the
          // path is asserted for the packed upload only.)
          const bool from_packed = narrow_for_gemm && m > 4 && (d == 64 || d == 128 || d == 256);
          if (packed) check_path(what + ": no split pass", !took_split, !narrow_for_gemm || m <= 4 || from_packed);
          check(what + " q", q2, gpu.to_host(q1), 0.0);
          check(what + " cache k", ck2, gpu.to_host(ck1), 0.0);
          check(what + " cache v", cv2, gpu.to_host(cv1), 0.0);
        }
    gpu.set_cache_type(DType::BF16);
  }

  // The attention tap (a view's picture of one decode step) against the CPU's double sums: whole levels 0..255, which
  // may differ by one where f32's exp puts a value across a rounding boundary; rows past the keys are 0 both ways.
  void attention_tap() {
    const int64_t hq = 16, hkv = 8, d = 128;
    for (DType kv : {DType::F32, DType::BF16})
    for (int64_t kv_len : {int64_t(1), int64_t(300), int64_t(4096)})
      for (int64_t head : {int64_t(-1), int64_t(5)})
        for (bool on_device : {false, true}) {
          const int64_t cap = kv_len + 3, first = std::min<int64_t>(kv_len - 1, 7), count = std::min<int64_t>(256, cap - first);
          const CacheTensors keys = as_cache(random({cap, hkv, d}), kv);
          const Tensor q = random({1, hq, d}), &k = keys.cpu, qg = gpu.from_host(q), &kg = keys.gpu;
          Tensor heat_cpu = cpu.alloc({count}), heat_gpu = gpu.alloc({count});
          Tensor cpu_row = cpu.alloc_indices(1), gpu_row = gpu.alloc_indices(1);
          cpu.write_indices(cpu_row, std::vector<int64_t>{kv_len - 1});
          gpu.write_indices(gpu_row, std::vector<int64_t>{kv_len - 1});
          cpu.attention_tap({&q, &k, on_device ? 0 : kv_len, on_device ? &cpu_row : nullptr, first, count, head, 0.088f, &heat_cpu});
          gpu.attention_tap({&qg, &kg, on_device ? 0 : kv_len, on_device ? &gpu_row : nullptr, first, count, head, 0.088f, &heat_gpu});
          const std::string what = "attention_tap keys=" + std::to_string(kv_len) + " rows " + std::to_string(first) + "+" +
                                   std::to_string(count) + (head < 0 ? " mean of heads" : " head 5") +
                                   (on_device ? " (position on device)" : "") + cache_name(kv);
          check(what, heat_gpu, heat_cpu, 1e-4);
          const Tensor got = gpu.to_host(heat_gpu);
          float worst = 0;
          for (int64_t i = 0; i < count; ++i)
            worst = std::max(worst, std::abs(got.data<float>()[i] - heat_cpu.data<float>()[i]));
          ++cases;
          if (worst > 1.0f) ++failures;
          std::printf("  %-64s max level difference %.0f  %s\n", (what + " (levels)").c_str(), worst, worst <= 1.0f ? "OK" : "FAIL");
        }
  }

  // The fused SwiGLU projection against the CPU's two linears and silu_mul, decode rows (fused kernel) and prefill
  // rows (separately uploaded matrices: the unfused ops; uploaded together: one packed product, below).
  void swiglu_projection() {
    for (DType wt : {DType::F32, DType::F16, DType::BF16})
      for (auto [m, n, k] : std::vector<std::array<int64_t, 3>>{{1, 6144, 2048}, {3, 100, 64}, {4, 37, 136}, {9, 64, 128},
                                                                {9, 37, 136}, {6, 100, 64}}) {
        const Tensor x = random({m, k}), gate = random({n, k}, wt, 0.1f), up = random({n, k}, wt, 0.1f);
        const LinearWeights gate_c = LinearWeights::of(gate), up_c = LinearWeights::of(up), gate_g = on_gpu(gate),
                            up_g = on_gpu(up);
        Tensor y_cpu = cpu.alloc({m, n}), s_cpu = cpu.alloc({m, n}), y_gpu = gpu.alloc({m, n}), s_gpu = gpu.alloc({m, n});
        const Tensor x_g = gpu.from_host(x);
        project_unfused(cpu, Projection::swiglu(x, gate_c, up_c, y_cpu, s_cpu));
        gpu.project(Projection::swiglu(x_g, gate_g, up_g, y_gpu, s_gpu));
        const std::string shape = std::string(dtype_name(wt)) + " m=" + std::to_string(m) + " n=" + std::to_string(n) +
                                  " k=" + std::to_string(k);
        check("linear+swiglu " + shape, y_gpu, y_cpu, linear_limit(wt, m));
        // Into an activation slot (the down projection's input): the same values, in the 16-bit operand where the rows
        // go to cuBLAS, rounded as the conversion pass would round them (bit for bit); else the output itself.
        const Tensor plain = gpu.to_host(y_gpu);
        Tensor slot;
        gpu.project(Projection::swiglu(x_g, gate_g, up_g, y_gpu, s_gpu).into_operand(slot));
        check("linear+swiglu into its slot (" + std::string(dtype_name(slot.dtype())) + ") " + shape, slot,
              plain.to(slot.dtype()), 0.0);
        check_type("linear+swiglu's slot " + shape, slot, narrow_for_gemm && m > 4 && wt != DType::F32 ? wt : DType::F32);
        // gate and up uploaded together and their outputs one allocation (as the decoder keeps them): on cuBLAS rows,
        // one product of twice the width and the SiLU·mul reading it in place (gemm_swiglu_packed).
        {
          const std::vector<LinearWeights> together = gpu.upload_linears({gate_c, up_c});
          const Tensor both = gpu.alloc({2 * m, n});
          Tensor y_p = both.slice_rows(0, m), s_p = both.slice_rows(m, 2 * m), slot_p;
          const bool took = reports_op(
              [&] { gpu.project(Projection::swiglu(x_g, together[0], together[1], y_p, s_p).into_operand(slot_p)); },
              "gate+up packed");
          check_path("linear gate+up packed " + shape, took, narrow_for_gemm && m > 4 && wt != DType::F32);
          check("linear+swiglu packed, its slot " + shape, slot_p, y_cpu.to(slot_p.dtype()), linear_limit(wt, m));
        }
        // The input RMSNorm folded in (decode rows), against the CPU's rms_norm, two linears and silu_mul.
        const NormWeights norm{random({k}, DType::BF16), {}}, norm_g = on_gpu(norm);
        Tensor n_cpu, n_gpu;
        project_unfused(cpu, Projection::swiglu(x, gate_c, up_c, y_cpu, s_cpu).reading_norm(RowNorm::rms(norm, 1e-6f), n_cpu));
        gpu.project(Projection::swiglu(x_g, gate_g, up_g, y_gpu, s_gpu).reading_norm(RowNorm::rms(norm_g, 1e-6f), n_gpu));
        check("rms_norm+linear+swiglu " + shape, y_gpu, y_cpu, linear_limit(wt, m));
      }
  }

  // The fused q/k/v projection against the CPU's three linears: decode rows (one GEMV launch), with and without
  // biases, and prefill rows (native profile: three matrices of one shape, as the vision tower's, in one batched
  // cuBLAS launch with their biases after in one launch, four columns a thread where they divide; else three
  // GEMMs); then with q and k rotated.
  void qkv_projection() {
    for (DType wt : {DType::F32, DType::F16, DType::BF16})
      for (auto [m, nq, nkv, k] : std::vector<std::array<int64_t, 4>>{{1, 2048, 1024, 2048}, {3, 96, 32, 64},
                                                                      {4, 40, 24, 136}, {9, 64, 32, 128},
                                                                      {16, 64, 64, 96}, {12, 30, 30, 64},
                                                                      {40, 256, 128, 256}})
        for (bool with_bias : {false, true}) {
          const Tensor x = random({m, k}), wq = random({nq, k}, wt, 0.1f), wk = random({nkv, k}, wt, 0.1f),
                       wv = random({nkv, k}, wt, 0.1f), bq = random({nq}, DType::BF16), bk = random({nkv}, DType::BF16),
                       bv = random({nkv}, DType::BF16);
          const auto unit = [&](const Tensor& w, const Tensor& b) { return LinearWeights::of(w, with_bias ? b : Tensor()); };
          const LinearWeights q_c = unit(wq, bq), k_c = unit(wk, bk), v_c = unit(wv, bv);
          const LinearWeights q_g = on_gpu(wq, with_bias ? &bq : nullptr), k_g = on_gpu(wk, with_bias ? &bk : nullptr),
                              v_g = on_gpu(wv, with_bias ? &bv : nullptr);
          Tensor q_cpu = cpu.alloc({m, nq}), k_cpu = cpu.alloc({m, nkv}), v_cpu = cpu.alloc({m, nkv});
          Tensor q_gpu = gpu.alloc({m, nq}), k_gpu = gpu.alloc({m, nkv}), v_gpu = gpu.alloc({m, nkv});
          const Tensor xg = gpu.from_host(x);
          project_unfused(cpu, Projection::of(x, q_c, k_c, v_c, q_cpu, k_cpu, v_cpu));
          gpu.project(Projection::of(xg, q_g, k_g, v_g, q_gpu, k_gpu, v_gpu));
          const std::string what = "linear q+k+v " + std::string(dtype_name(wt)) + " m=" + std::to_string(m) +
                                   " n=" + std::to_string(nq) + "+2x" + std::to_string(nkv) + " k=" + std::to_string(k) +
                                   (with_bias ? " bias" : "");
          check(what + " (q)", q_gpu, q_cpu, linear_limit(wt, m));
          check(what + " (k)", k_gpu, k_cpu, linear_limit(wt, m));
          check(what + " (v)", v_gpu, v_cpu, linear_limit(wt, m));
          // Uploaded together (as the decoder's): on cuBLAS rows one product of the summed width, its columns split
          // (gemm_packed), from f32 rows and from the norm's 16-bit operand; biases keep the other paths.
          if (!with_bias) {
            const std::vector<LinearWeights> together = gpu.upload_linears({q_c, k_c, v_c});
            const bool expected = narrow_for_gemm && m > 4 && wt != DType::F32;
            Tensor qp = gpu.alloc({m, nq}), kp = gpu.alloc({m, nkv}), vp = gpu.alloc({m, nkv});
            check_path(what + " packed", reports_op([&] {
              gpu.project(Projection::of(xg, together[0], together[1], together[2], qp, kp, vp));
            }, "linear packed"), expected);
            check(what + " packed (q)", qp, q_cpu, linear_limit(wt, m));
            check(what + " packed (k)", kp, k_cpu, linear_limit(wt, m));
            check(what + " packed (v)", vp, v_cpu, linear_limit(wt, m));
            const NormWeights norm{random({k}, DType::BF16), {}}, norm_g = on_gpu(norm);
            Tensor n_cpu, n_gpu;
            project_unfused(cpu, Projection::of(x, q_c, k_c, v_c, q_cpu, k_cpu, v_cpu)
                                     .reading_norm(RowNorm::rms(norm, 1e-6f), n_cpu));
            check_path("rms_norm+" + what + " packed", reports_op([&] {
              gpu.project(Projection::of(xg, together[0], together[1], together[2], qp, kp, vp)
                              .reading_norm(RowNorm::rms(norm_g, 1e-6f), n_gpu));
            }, "linear packed"), expected);
            check("rms_norm+" + what + " packed (q)", qp, q_cpu, linear_limit(wt, m));
            check("rms_norm+" + what + " packed (k)", kp, k_cpu, linear_limit(wt, m));
            check("rms_norm+" + what + " packed (v)", vp, v_cpu, linear_limit(wt, m));
          }
          // The input RMSNorm folded in (decode rows), against the CPU's rms_norm and three linears.
          const NormWeights norm{random({k}, DType::BF16), {}}, norm_g = on_gpu(norm);
          Tensor n_cpu, n_gpu;
          project_unfused(cpu, Projection::of(x, q_c, k_c, v_c, q_cpu, k_cpu, v_cpu)
                                   .reading_norm(RowNorm::rms(norm, 1e-6f), n_cpu));
          gpu.project(Projection::of(xg, q_g, k_g, v_g, q_gpu, k_gpu, v_gpu).reading_norm(RowNorm::rms(norm_g, 1e-6f), n_gpu));
          check("rms_norm+" + what + " (q)", q_gpu, q_cpu, linear_limit(wt, m));
          check("rms_norm+" + what + " (k)", k_gpu, k_cpu, linear_limit(wt, m));
          check("rms_norm+" + what + " (v)", v_gpu, v_cpu, linear_limit(wt, m));
        }
    // The vision tower's q and k rotated by RoPE after their biases (Projection::rotating): decode rows (the GEMV,
    // then two rope launches), many rows of one shape (the batched GEMM, then biases and rotation in one kernel),
    // and with the fusion off (three linears, then rope), against the CPU's reference. Head sizes: 64 and 24 take the
    // kernel's 16-byte pieces (four pairs a thread; 24: three such a head half), 20 its value-a-thread form.
    for (int64_t d : {64, 24, 20})
    for (int64_t m : {4, 37, 300})
      for (bool fused : {true, false})
        for (int biases : {0, 2, 3}) {  // on none; on q and k; on all three (the vision tower's)
          const int64_t heads = 4, n = heads * d, k = 96;
          const Tensor x = random({m, k}), cos = random({m, d}), sin = random({m, d});
          const DType bias_type = m == 37 ? DType::F16 : DType::BF16;  // the kernel's loads of either
          std::array<Tensor, 3> w, b;
          for (std::size_t i = 0; i < 3; ++i) w[i] = random({n, k}, DType::BF16, 0.1f), b[i] = random({n}, bias_type);
          const auto biased = [&](int i) { return i < biases; };  // q and k without v: an output the kernel skips
          const auto host_unit = [&](int i) {
            return LinearWeights::of(w[std::size_t(i)], biased(i) ? b[std::size_t(i)] : Tensor());
          };
          const auto gpu_unit = [&](int i) { return on_gpu(w[std::size_t(i)], biased(i) ? &b[std::size_t(i)] : nullptr); };
          const LinearWeights q_c = host_unit(0), k_c = host_unit(1), v_c = host_unit(2);
          const LinearWeights q_g = gpu_unit(0), k_g = gpu_unit(1), v_g = gpu_unit(2);
          Tensor q_cpu = cpu.alloc({m, heads, d}), k_cpu = cpu.alloc({m, heads, d}), v_cpu = cpu.alloc({m, heads, d});
          Tensor q_gpu = gpu.alloc({m, heads, d}), k_gpu = gpu.alloc({m, heads, d}), v_gpu = gpu.alloc({m, heads, d});
          const Tensor xg = gpu.from_host(x), cos_g = gpu.from_host(cos), sin_g = gpu.from_host(sin);
          project_unfused(cpu, Projection::of(x, q_c, k_c, v_c, q_cpu, k_cpu, v_cpu).rotating(cos, sin));
          Fusions fusions;
          fusions.qkv_projection = fused;
          with_fusions(fusions, [&] {
            gpu.project(Projection::of(xg, q_g, k_g, v_g, q_gpu, k_gpu, v_gpu).rotating(cos_g, sin_g));
          });
          const std::string what = std::string("linear q+k+v ") +
                                   (biases == 3 ? "bias+rope" : biases == 2 ? "bias(q,k)+rope" : "rope") +
                                   (biases ? " (" + std::string(dtype_name(bias_type)) + ")" : "") + " m=" +
                                   std::to_string(m) + " d=" + std::to_string(d) + (fused ? "" : " unfused");
          check(what + " (q)", q_gpu, q_cpu, linear_limit(DType::BF16, m));
          check(what + " (k)", k_gpu, k_cpu, linear_limit(DType::BF16, m));
          check(what + " (v)", v_gpu, v_cpu, linear_limit(DType::BF16, m));
          // Into the tower's key and value slots (Backend::alloc_keys_values, made with every fusion on): f16 where
          // the tensor-core attention reads them (native, 16 rows or more, d a multiple of 16), the f32 results
          // rounded to nearest, bit for bit: written by the bias + RoPE kernel (fused), or the f32 path's narrowed.
          Tensor k_slot = gpu.alloc_keys_values({m, heads, d}), v_slot = gpu.alloc_keys_values({m, heads, d});
          Tensor q_beside = gpu.alloc({m, heads, d});
          check_type(what + " keys' slot", k_slot, narrow_for_gemm && m >= 16 && d % 16 == 0 ? DType::F16 : DType::F32);
          with_fusions(fusions, [&] {
            gpu.project(Projection::of(xg, q_g, k_g, v_g, q_beside, k_slot, v_slot).rotating(cos_g, sin_g));
          });
          check(what + " (q beside the slots)", q_beside, gpu.to_host(q_gpu), 0.0);
          check(what + " (k into its slot)", k_slot, gpu.to_host(k_gpu).to(k_slot.dtype()), 0.0);
          check(what + " (v into its slot)", v_slot, gpu.to_host(v_gpu).to(v_slot.dtype()), 0.0);
        }
  }

  // The vision tower's linears with their bias folded into what follows (GELU; residual add + LayerNorm) against the
  // CPU's unfused sequences: few rows (the GEMV adds the bias itself) and many (cuBLAS, then the fused kernel).
  void bias_epilogues() {
    // n = 30: the bias kernels' element-a-thread path (columns not whole fours).
    for (auto [m, n, k] : std::vector<std::array<int64_t, 3>>{{3, 64, 48}, {37, 256, 64}, {300, 1024, 256}, {37, 30, 64}}) {
      const std::string shape = " m=" + std::to_string(m) + " n=" + std::to_string(n) + " k=" + std::to_string(k);
      const Tensor x = random({m, k}), w = random({n, k}, DType::BF16, 0.1f), bias = random({n}, DType::BF16);
      const LinearWeights host = LinearWeights::of(w, bias), wg = on_gpu(w, &bias);
      const Tensor xg = gpu.from_host(x);
      for (GeluKind kind : {GeluKind::Tanh, GeluKind::Erf}) {
        Tensor y_cpu = cpu.alloc({m, n}), y_gpu = gpu.alloc({m, n});
        project_unfused(cpu, Projection::of(x, host, y_cpu).gelu(kind));
        gpu.project(Projection::of(xg, wg, y_gpu).gelu(kind));
        check(std::string(kind == GeluKind::Tanh ? "linear+bias+gelu_tanh" : "linear+bias+gelu_erf") + shape, y_gpu,
              y_cpu, linear_limit(DType::BF16, m));
        const Tensor plain = gpu.to_host(y_gpu);  // into an activation slot, as linear+swiglu's
        Tensor slot;
        gpu.project(Projection::of(xg, wg, y_gpu).gelu(kind).into_operand(slot));
        check(std::string(kind == GeluKind::Tanh ? "linear+bias+gelu_tanh" : "linear+bias+gelu_erf") + " into its slot (" +
                  std::string(dtype_name(slot.dtype())) + ")" + shape,
              slot, plain.to(slot.dtype()), 0.0);
        check_type("linear+bias+gelu's slot" + shape, slot, narrow_for_gemm && m > 4 ? DType::BF16 : DType::F32);
      }
      const Tensor stream = random({m, n});
      const NormWeights norm{random({n}, DType::BF16), random({n}, DType::BF16)}, norm_g = on_gpu(norm);
      Tensor x_cpu = stream.to(DType::F32), x_gpu = gpu.from_host(stream);
      Tensor s_cpu = cpu.alloc({m, n}), s_gpu = gpu.alloc({m, n}), y_cpu, y_gpu;
      project_unfused(cpu, Projection::add_to(x_cpu, x, host, s_cpu).then(RowNorm::layer(norm, 1e-6f), y_cpu));
      gpu.project(Projection::add_to(x_gpu, xg, wg, s_gpu).then(RowNorm::layer(norm_g, 1e-6f), y_gpu));
      // LayerNorm divides by the row's spread, so the narrowed inputs' error shows through about as it does in linear.
      check("linear+bias+add+layer_norm (normed)" + shape, y_gpu, y_cpu, linear_limit(DType::BF16, m));
      check("linear+bias+add+layer_norm (sum)" + shape, x_gpu, x_cpu, linear_limit(DType::BF16, m));
    }
  }

  void rows_ops() {
    for (DType dt : {DType::F32, DType::F16, DType::BF16}) {
      const Tensor table = random({500, 72}, dt);
      const std::vector<int32_t> ids{3, 0, 499, 3, 250, 17, 17};
      Tensor a = cpu.alloc({7, 72}), g = gpu.alloc({7, 72});
      cpu.embed(LinearWeights::of(table), ids, a);
      gpu.embed(gpu.upload_linear(LinearWeights::of(table), WeightRole::EmbeddingTable), ids, g);
      check("embed " + std::string(dtype_name(dt)), g, a, stored_table_limit(dt));
      const Tensor src = random({3, 72});
      const std::vector<int64_t> rows{1, 3, 6};
      cpu.add_rows(a, src, rows);
      gpu.add_rows(g, gpu.from_host(src), rows);
      check("add_rows", g, a, kF32);
      cpu.set_rows(a, src, rows);
      gpu.set_rows(g, gpu.from_host(src), rows);
      check("set_rows", g, a, 0.0);
      Tensor big_cpu = random({12, 72}), big_gpu = gpu.from_host(big_cpu);
      cpu.copy_rows(src, big_cpu, 9);
      gpu.copy_rows(gpu.from_host(src), big_gpu, 9);
      check("copy_rows", big_gpu, big_cpu, 0.0);
    }
    // The vision tower's position embedding: each patch blends four rows of a 48 x 48 table (a 448x448 image and
    // a 64x96 one, as the model's position_blend picks them), in the same order on both sides: the same bits.
    VisionConfig vision;
    vision.hidden_size = 64, vision.num_heads = 4, vision.num_position_embeddings = 48 * 48;
    const RowBlend blend = position_blend(vision, {{1, 28, 28}, {1, 4, 6}});
    for (DType dt : {DType::F32, DType::BF16}) {
      const Tensor table = random({48 * 48, 64}, dt), x = random({blend.count(), 64});
      Tensor a = x.to(DType::F32), g = gpu.from_host(x);
      cpu.add_blended_rows(a, table, blend);
      gpu.add_blended_rows(g, gpu.upload(table, WeightRole::Vector), blend);
      check("add_blended_rows " + std::string(dtype_name(dt)), g, a, stored_table_limit(dt));
    }
  }

  void patchify() {
    PatchLayout layout;
    for (int c = 0; c < 3; ++c) layout.mean[c] = 120.0f + 3.5f * float(c), layout.std[c] = 60.0f - 2.25f * float(c);
    for (auto [h, w] : std::vector<std::array<int64_t, 2>>{{32, 32}, {64, 96}, {448, 448}, {32, 1600}}) {
      Tensor image = Tensor::empty(DType::U8, {h, w, 3});
      for (int64_t i = 0; i < image.numel(); ++i) image.data<uint8_t>()[i] = uint8_t(rng() >> 24);
      const int64_t rows = (h / 16) * (w / 16);
      Tensor a = cpu.alloc({rows, 1536}), g = gpu.alloc({rows, 1536});
      cpu.patchify(image, layout, a);
      gpu.patchify(image, layout, g);
      check("patchify " + std::to_string(w) + "x" + std::to_string(h), g, a, 0.0);
    }
  }

  void rope() {
    for (auto [s, h, d] : std::vector<std::array<int64_t, 3>>{{1, 2, 8}, {7, 4, 16}, {33, 8, 64}, {300, 16, 128}, {5, 3, 72}}) {
      const Tensor x = random({s, h, d}), cos = random({s, d}), sin = random({s, d});
      Tensor xc = x.to(DType::F32), xg = gpu.from_host(x);
      cpu.rope(xc, cos, sin);
      gpu.rope(xg, gpu.from_host(cos), gpu.from_host(sin));
      check("rope s=" + std::to_string(s) + " h=" + std::to_string(h) + " d=" + std::to_string(d), xg, xc, kF32);
    }
  }

  // kv: the keys' and values' type (f32 activations, or a bf16 KV cache: the same arithmetic on the same values, so
  // the same limits).
  void attention_case(int64_t s, int64_t hq, int64_t hkv, int64_t d, int64_t kv_len, const AttentionMask& mask,
                      DType kv = DType::F32) {
    const Tensor q = random({s, hq, d});
    const CacheTensors k = as_cache(random({kv_len, hkv, d}), kv), v = as_cache(random({kv_len, hkv, d}), kv);
    const float scale = 1.0f / std::sqrt(float(d));
    Tensor a = cpu.alloc({s, hq, d}), g = gpu.alloc({s, hq, d});
    cpu.attention(q, k.cpu, v.cpu, kv_len, mask, scale, a);
    gpu.attention(gpu.from_host(q), k.gpu, v.gpu, kv_len, mask, scale, g);
    std::string what = "attention " + std::string(mask.kind == AttentionMask::Kind::Causal ? "causal" : "segments") +
                       " s=" + std::to_string(s) + " kv=" + std::to_string(kv_len) + " hq=" + std::to_string(hq) +
                       " hkv=" + std::to_string(hkv) + " d=" + std::to_string(d);
    if (mask.kind == AttentionMask::Kind::Segments) what += " (" + std::to_string(mask.bounds.size() - 1) + " blocks)";
    if (!mask.block_layout.empty()) what += " past=" + std::to_string(mask.past) + " block-sparse";
    what += cache_name(kv);
    // The native profile's tiled kernel runs on tensor cores where the GPU has them (flash_attention_mma_fits).
    const bool tensor_cores = narrow_for_gemm && s >= 16 && d % 16 == 0 && d <= 128;
    check(what, g, a, tensor_cores ? kF16Attention : kF32);
    // Into the o product's operand (Backend::alloc_for_product): bf16 where the tensor-core kernel runs and writes
    // it (a bf16 product reading cuBLAS rows), the f32 result rounded as the conversion pass rounds it, bit for bit;
    // else f32. With the fused attention off, the unfused kernels' f32 result is narrowed into it, the same way.
    const LinearWeights reader = gpu.upload_linear(random({8, hq * d}, DType::BF16, 0.02f), nullptr);
    Tensor slot = gpu.alloc_for_product({s, hq, d}, reader);
    check_type(what + " operand", slot, tensor_cores ? DType::BF16 : DType::F32);
    if (slot.dtype() != DType::F32) {
      gpu.attention(gpu.from_host(q), k.gpu, v.gpu, kv_len, mask, scale, slot);
      check(what + " operand", slot, gpu.to_host(g).to(slot.dtype()), 0.0);
    }
    // The unfused reference (scores, softmax, weighted sum as three kernels), f32 throughout.
    Tensor u = gpu.alloc({s, hq, d});
    Fusions unfused;
    unfused.flash_attention = false;
    with_fusions(unfused, [&] { gpu.attention(gpu.from_host(q), k.gpu, v.gpu, kv_len, mask, scale, u); });
    check(what + " unfused", u, a, kF32);
    if (slot.dtype() != DType::F32) {
      with_fusions(unfused, [&] { gpu.attention(gpu.from_host(q), k.gpu, v.gpu, kv_len, mask, scale, slot); });
      check(what + " unfused into the operand", slot, gpu.to_host(u).to(slot.dtype()), 0.0);
    }
    if (kv == DType::F32) f16_keys_values(q, k.cpu, v.cpu, mask, what);
  }

  // Keys and values in f16 (Backend::alloc_keys_values: the vision tower's, where the tensor-core kernel reads them,
  // which copies them into its tiles as they are) against f32 ones holding the same values (which that kernel rounds
  // to the same f16 as it widens them): the same bits. Any other kernel (decode rows, the fused attention off) gets
  // them widened, exactly: its bits too. Every mask and shape of the suite with f32 keys: causal ones with GQA and
  // the two key groups of short causal grids, head sizes whose tile rows the threads do not divide.
  void f16_keys_values(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionMask& mask, const std::string& what) {
    const int64_t s = q.dim(0), hq = q.dim(1), d = q.dim(2), kv_len = k.dim(0);
    // The slot's type follows its rows (the keys'; the tower's attention has as many queries).
    const bool tensor_cores = narrow_for_gemm && kv_len >= 16 && d % 16 == 0 && d <= 128;
    const Tensor slot = gpu.alloc_keys_values(k.shape());
    check_type(what + " keys' slot", slot, tensor_cores ? DType::F16 : DType::F32);
    if (slot.dtype() != DType::F16) return;
    const Tensor k16 = k.to(DType::F16), v16 = v.to(DType::F16), qg = gpu.from_host(q);
    const Tensor k16g = gpu.upload(k16, WeightRole::Vector), v16g = gpu.upload(v16, WeightRole::Vector);
    check_type(what + " f16 keys uploaded", k16g, DType::F16);
    const Tensor k32g = gpu.from_host(k16), v32g = gpu.from_host(v16);  // widened: f32 holding the f16 values
    const float scale = 1.0f / std::sqrt(float(d));
    Tensor from32 = gpu.alloc({s, hq, d}), from16 = gpu.alloc({s, hq, d});
    gpu.attention(qg, k32g, v32g, kv_len, mask, scale, from32);
    gpu.attention(qg, k16g, v16g, kv_len, mask, scale, from16);
    check(what + " f16 keys and values", from16, gpu.to_host(from32), 0.0);
    Fusions unfused;
    unfused.flash_attention = false;
    with_fusions(unfused, [&] {
      gpu.attention(qg, k32g, v32g, kv_len, mask, scale, from32);
      gpu.attention(qg, k16g, v16g, kv_len, mask, scale, from16);
    });
    check(what + " f16 keys and values, unfused", from16, gpu.to_host(from32), 0.0);
  }

  void attention() {
    // Prefill (causal from 0), GQA ratios 1, 2, 4, 8, head sizes of both towers and odd ones.
    for (auto [s, hq, hkv, d] : std::vector<std::array<int64_t, 4>>{{1, 2, 1, 8},      {7, 4, 2, 16},   {16, 8, 8, 64},
                                                                  {33, 8, 1, 64},    {64, 16, 8, 128}, {130, 6, 2, 72},
                                                                  {100, 4, 4, 36},   {37, 2, 2, 160}, {512, 16, 8, 128},
                                                                  {4096, 4, 1, 128}, {70, 4, 2, 32},  {200, 6, 3, 96},
                                                                  {65, 2, 1, 48},    {129, 4, 4, 16},
                                                                  // 144 blocks of 128 causal queries: 8-warp blocks (fewer: 4)
                                                                  {1100, 16, 4, 128}})
      attention_case(s, hq, hkv, d, s, AttentionMask::causal(0));
    // The decoder's attention reads its KV cache, f32 or bf16 (kv_cache.cuh): prefill through it (the tiled kernels),
    // decode and a few queries (the split kernel).
    for (DType kv : {DType::F32, DType::BF16}) {
      if (kv != DType::F32)
        // 1,100 queries x 16 heads: 144 blocks of 128 causal queries, the 8-warp blocks on GPUs of up to 144 SMs
        // (fewer blocks than SMs split their keys between two groups of 4 warps); d = 80 copies a tile row in 10
        // pieces, which 256 threads do not divide; d = 16 a bf16 tile in 128 pieces, fewer than 256 threads.
        for (auto [s, hq, hkv, d] : std::vector<std::array<int64_t, 4>>{{7, 4, 2, 16}, {33, 4, 2, 16}, {64, 16, 8, 128}, {130, 6, 2, 72},
                                                                      {512, 16, 8, 128}, {37, 2, 2, 160},
                                                                      {1100, 16, 4, 128}, {1100, 16, 4, 80}})
          attention_case(s, hq, hkv, d, s, AttentionMask::causal(0), kv);
      // A second chunk of prompt after cached tokens (a multi-turn chat), and decode: one query after T - 1 keys.
      attention_case(20, 8, 2, 128, 120, AttentionMask::causal(100), kv);
      // Decode: the decode kernel (attention_decode.cu) where the shape fits — rows of 128-512 bytes, GQA groups of
      // 1, 2, 4 and 8, every register tile it has (d = 32 in f32, 64, 128, 256 in bf16: 8, 16 and 32 lanes a row,
      // 16, 8 and 4 warps a block) — and the split kernel of attention.cu for the rest (72, 36; 32 in bf16, 256 in
      // f32); key counts from one to 32,768 (one chunk at short contexts, up to the GPU's fill at thousands).
      for (auto [hq, hkv, d] : std::vector<std::array<int64_t, 3>>{{16, 8, 128}, {16, 2, 128}, {32, 8, 128}, {32, 4, 64},
                                                                  {8, 8, 64}, {8, 8, 32}, {16, 2, 256}, {12, 4, 72}, {6, 2, 36}})
        for (int64_t t : {1, 2, 31, 32, 33, 257, 1000, 4096})
          attention_case(1, hq, hkv, d, t, AttentionMask::causal(t - 1), kv);
      for (int64_t t : {8192, 32768}) attention_case(1, 16, 8, 128, t, AttentionMask::causal(t - 1), kv);
      attention_case(3, 16, 8, 128, 3000, AttentionMask::causal(2997), kv);  // a few queries: chunks per query and kv head
    }
    gpu.set_cache_type(DType::BF16);  // as the backend starts
    // Vision: block-diagonal, one block per image, bidirectional inside.
    attention_case(784, 16, 16, 64, 784, AttentionMask::segments({0, 784}));
    attention_case(300, 4, 4, 64, 300, AttentionMask::segments({0, 64, 100, 300}));
    attention_case(45, 2, 2, 72, 45, AttentionMask::segments({0, 5, 45}));
    attention_case(400, 6, 6, 32, 400, AttentionMask::segments({0, 36, 136, 400}));  // the demo model's tower
    attention_case(784, 16, 16, 64, 784, AttentionMask::segments({0, 196, 392, 588, 784}));
    // A query block (64 rows) that starts in one image and ends in the next, and one-row images.
    attention_case(150, 2, 2, 64, 150, AttentionMask::segments({0, 1, 60, 61, 130, 150}));
    // Block-sparse causal (a window of 2 blocks of 64 plus the first block) against the CPU's dense attention under
    // the same mask: from 0, after 37 cached positions (query blocks astride layout blocks), a head size only the
    // CUDA-core kernel takes, and a layout with an empty row of off-diagonal blocks.
    const auto sparse = [](int64_t past, int64_t s, int64_t window, int64_t global) {
      const int64_t side = (past + s + 63) / 64;
      return AttentionMask::causal_block_sparse(past, AttentionMask::local_global_layout(side, window, global), side);
    };
    for (DType kv : {DType::F32, DType::BF16}) {
      attention_case(512, 16, 8, 128, 512, sparse(0, 512, 2, 1), kv);
      attention_case(300, 4, 2, 64, 337, sparse(37, 300, 2, 1), kv);
      attention_case(200, 4, 4, 72, 200, sparse(0, 200, 2, 1), kv);
      attention_case(256, 2, 1, 128, 256, sparse(0, 256, 1, 0), kv);
    }
    gpu.set_cache_type(DType::BF16);
  }
  // A decode step's device-side inputs: ids, the cache position and the attention's position read on the device,
  // run directly and as recorded work replayed at several positions (a CUDA graph), against the CPU with host values.
  void recorded_step() {
    // A capacity well past the positions replayed: the recorded grid is sized for it, the kernel splits what is there.
    const int64_t capacity = 4096, hq = 16, hkv = 8, d = 128, vocab = 1000;
    const LinearWeights table = LinearWeights::of(random({vocab, hq * d}, DType::BF16)),
                        table_g = gpu.upload_linear(table, WeightRole::EmbeddingTable);
    for (DType kv : {DType::F32, DType::BF16}) {
    auto [cache_gpu, cache_cpu] = as_cache(random({capacity, hkv, d}), kv);
    Tensor ids = gpu.alloc_indices(1), past = gpu.alloc_indices(1);
    Tensor x = gpu.alloc({1, hq * d}), out = gpu.alloc({1, hq, d});
    const Tensor kv_src = random({1, hkv, d}), kv_src_g = gpu.from_host(kv_src);
    const auto step = [&] {
      gpu.embed_at(table_g, ids, x);
      gpu.copy_rows_at(kv_src_g, cache_gpu, past);
      gpu.attention(x.reshaped({1, hq, d}), cache_gpu, cache_gpu, capacity,
                    AttentionMask::causal_on_device(past, capacity - 1), 0.088f, out);
    };
    for (const bool record : {false, true}) {
      std::shared_ptr<RecordedWork> work;
      if (record) {
        if (!gpu.begin_recording()) {
          ++cases, ++failures;
          std::printf("  recording refused  FAIL\n");
          return;
        }
        step();
        work = gpu.end_recording();
      }
      for (int64_t position : {0, 7, 64, 299, 4095}) {
        const int64_t id = (position * 37 + 11) % vocab;
        gpu.write_indices(ids, {&id, 1});
        gpu.write_indices(past, {&position, 1});
        if (record) gpu.replay(*work);
        else step();
        Tensor x_cpu = cpu.alloc({1, hq * d}), out_cpu = cpu.alloc({1, hq, d});
        cpu.embed(table, std::vector<int32_t>{int32_t(id)}, x_cpu);
        cpu.copy_rows(kv != DType::F32 ? kv_src.to(kv).to(DType::F32) : kv_src, cache_cpu, position);  // as appended
        cpu.attention(x_cpu.reshaped({1, hq, d}), cache_cpu, cache_cpu, position + 1, AttentionMask::causal(position), 0.088f,
                      out_cpu);
        const std::string how = std::string(record ? "replayed" : "direct") + " at position " + std::to_string(position) +
                                cache_name(kv);
        check("embed_at, " + how, x, x_cpu, stored_table_limit(DType::BF16));
        check("copy_rows_at, " + how, cache_gpu, cache_cpu, 0.0);
        check("attention with the position on the device, " + how, out, out_cpu, kF32);
      }
    }
    }
    gpu.set_cache_type(DType::BF16);
  }

  // A decode step's hand-off (Backend::hand_off_step) against the host's, run three times in a row with another pick
  // each time, directly and as a recorded step replayed without the host writing the position: each pick in its slot
  // of the host memory (the slot the position names; the others keep a sentinel), the position advanced, the next
  // position's rows from the ring. Positions at the ring's (64 rows) and the slots' (4) wrap; a greedy pick's 2
  // indices and a sampled one's.
  void step_handoff() {
    const int64_t slots = 4, rows = 64, d = 128;
    const Tensor rotary = random({rows, 2, d});
    for (const int64_t n : {int64_t(2), TopKSpec::kSlots + 2})
      for (const int64_t first : {0, 2, 62, 63, 64, 1001, 32767})
        for (const bool record : {false, true}) {
          const auto run = [&](Backend& be) {
            Tensor pick = be.alloc_indices(n), past = be.alloc_indices(1), cos = be.alloc({1, d}), sin = be.alloc({1, d});
            const Tensor ring = &be == &cpu ? rotary : gpu.from_host(rotary);
            Tensor handed = be.alloc_handed(DType::I64, {slots, n});
            std::fill_n(handed.data<int64_t>(), handed.numel(), -7);
            be.write_indices(past, {&first, 1});
            const auto hand_off = [&] { be.hand_off_step({&pick, &handed, &past, &ring, &cos, &sin}); };
            std::shared_ptr<RecordedWork> work;
            if (record && be.begin_recording()) {
              hand_off();
              work = be.end_recording();
            }
            for (int64_t i = 0; i < 3; ++i) {
              std::vector<int64_t> values(static_cast<std::size_t>(n));
              for (int64_t j = 0; j < n; ++j) values[std::size_t(j)] = (first + i) * 1000 + j;
              be.write_indices(pick, values);
              if (work) be.replay(*work);
              else hand_off();
            }
            return std::array<Tensor, 4>{be.read_later(handed)->get(), be.to_host(past), be.to_host(cos), be.to_host(sin)};
          };
          const auto g = run(gpu), c = run(cpu);
          const auto same = [](const Tensor& a, const Tensor& b) {
            return a.nbytes() == b.nbytes() && std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0;
          };
          const bool ok = same(g[0], c[0]) && same(g[1], c[1]) && same(g[2], c[2]) && same(g[3], c[3]) &&
                          c[1].data<int64_t>()[0] == first + 3;
          ++cases;
          if (!ok) ++failures;
          std::printf("  %-64s %s\n",
                      ("step_handoff " + std::string(record ? "replayed" : "direct") + " n=" + std::to_string(n) +
                       " from position " + std::to_string(first)).c_str(),
                      ok ? "OK" : "FAIL");
        }
  }
};

int eval(Backend& gpu, Backend& cpu, bool narrow) {
  Runner r{gpu, cpu, narrow};
  r.linear();
  r.quantised_linear();
  r.norms_and_elementwise();
  r.fused_norms_match_unfused();
  r.greedy_pick();
  r.head_pick();
  r.top_k_candidates();
  r.draw_from_candidates();
  r.rows_ops();
  r.qk_norm_rope_append();
  r.project_then_heads();
  r.attention_tap();
  r.swiglu_projection();
  r.qkv_projection();
  r.bias_epilogues();
  r.patchify();
  r.rope();
  r.attention();
  r.recorded_step();
  r.step_handoff();
  std::printf("  %d/%d cases passed\n", r.cases - r.failures, r.cases);
  return r.failures ? 1 : 0;
}

// The ops of one Qwen3-VL-2B decode step (m = 1) and of a 512-token prefill (m = 512), repeated.
void perf(Backend& gpu) {
  const int64_t hidden = 2048, inter = 6144, hq = 16, hkv = 8, d = 128, vocab = 151936;
  auto profiler = std::make_shared<Profiler>();
  const auto matrix = [&](int64_t rows, int64_t cols) { return gpu.upload_linear(random({rows, cols}, DType::BF16, 0.02f), nullptr); };
  const LinearWeights wq = matrix(hq * d, hidden), wkv = matrix(hkv * d, hidden), wup = matrix(inter, hidden),
                      wdown = matrix(hidden, inter), head = matrix(vocab, hidden);
  gpu.prepare_head_pick(head);
  const NormWeights norm{gpu.upload(random({hidden}, DType::BF16), WeightRole::Vector), {}};
  const RowNorm rms = RowNorm::rms(norm, 1e-6f);
  const Tensor kc = gpu.from_host(random({4096, hkv, d})), vc = gpu.from_host(random({4096, hkv, d}));
  // A sampled step's hand-off (its 2 KB pick to the host, the next position and rotary rows).
  const Tensor ring = gpu.from_host(random({TextDecoder::kRotaryRingRows, 2, d}));
  Tensor handed = gpu.alloc_handed(DType::I64, {4, TopKSpec::kSlots + 2}), step_past = gpu.alloc_indices(1),
         next_cos = gpu.alloc({1, d}), next_sin = gpu.alloc({1, d});
  const int64_t zero = 0;
  gpu.write_indices(step_past, {&zero, 1});
  const auto run = [&](int64_t m) {
    const Tensor x = gpu.from_host(random({m, hidden})), xi = gpu.from_host(random({m, inter}));
    Tensor yq = gpu.alloc({m, hq * d}), ykv = gpu.alloc({m, hkv * d}), yup = gpu.alloc({m, inter}), yh = gpu.alloc({m, hidden});
    Tensor q = gpu.alloc({m, hq, d}), out = gpu.alloc({m, hq, d});
    gpu.linear(x, wq, yq);
    gpu.linear(x, wkv, ykv);
    Tensor yv = gpu.alloc({m, hkv * d});
    gpu.project(Projection::of(x, wq, wkv, wkv, yq, ykv, yv));  // decode: one launch for all three
    Tensor normed, stream = gpu.from_host(random({m, hidden})), up = gpu.alloc({m, inter});
    gpu.project(Projection::of(x, wq, wkv, wkv, yq, ykv, yv).reading_norm(rms, normed));
    gpu.project(Projection::swiglu(x, wup, wup, yup, up).reading_norm(rms, normed));
    gpu.project(Projection::add_to(stream, xi, wdown, yh));
    gpu.linear(x, wup, yup);
    gpu.linear(xi, wdown, yh);
    gpu.rms_norm(x, norm.weight, 1e-6f, yh);
    gpu.silu_mul(yup, yup, yup);
    gpu.add(yh, yh, yh);
    const int64_t past = m == 1 ? 255 : 0;
    gpu.attention(q, kc, vc, past + m, AttentionMask::causal(past), 0.088f, out);
    if (m == 1) {
      Tensor logits = gpu.alloc({1, vocab});
      gpu.linear(x, head, logits);
      Tensor pick = gpu.alloc_indices(2), candidates = gpu.alloc_indices(TopKSpec::kSlots);
      gpu.greedy_pick(logits, vocab, pick);
      gpu.project_then_pick(Projection::of(x, head, logits), vocab, pick);  // from the bounds copy: the two above
      TopKSpec sampled{vocab, 20, 0.7};  // the Qwen models' default sampling
      gpu.top_k_candidates(logits, sampled, candidates);
      Tensor state = gpu.alloc_indices(1), drawn = gpu.alloc_indices(1);
      sampled.top_p = 0.8, sampled.draw_state = &state, sampled.drawn = &drawn;
      gpu.top_k_candidates(logits, sampled, candidates);
      Tensor sampled_pick = gpu.alloc_indices(TopKSpec::kSlots + 2);
      gpu.hand_off_step({&sampled_pick, &handed, &step_past, &ring, &next_cos, &next_sin});
    }
  };
  // The same decode and prefill products with q8 and q4 weights (random, quantised on the host).
  const auto quantised = [&](int64_t rows, int64_t cols, WeightFormat f) {
    return gpu.upload_linear(quantize_matrix(random({rows, cols}, DType::BF16, 0.02f), f, 32, "w"));
  };
  std::vector<std::array<LinearWeights, 3>> quantised_sets;  // q, up, down
  for (const WeightFormat f : {WeightFormat::Q8, WeightFormat::Q4})
    quantised_sets.push_back({quantised(hq * d, hidden, f), quantised(inter, hidden, f), quantised(hidden, inter, f)});
  const LinearWeights head_q8 = quantised(vocab, hidden, WeightFormat::Q8);
  const auto run_quantised = [&](int64_t m) {
    const Tensor x = gpu.from_host(random({m, hidden})), xi = gpu.from_host(random({m, inter}));
    Tensor yq = gpu.alloc({m, hq * d}), yup = gpu.alloc({m, inter}), yh = gpu.alloc({m, hidden});
    for (const auto& set : quantised_sets) {
      gpu.linear(x, set[0], yq);
      gpu.linear(x, set[1], yup);
      gpu.linear(xi, set[2], yh);
    }
    if (m == 1) {
      Tensor logits = gpu.alloc({1, vocab});
      gpu.linear(x, head_q8, logits);
    }
  };
  for (int i = 0; i < 3; ++i) run(1), run(512), run_quantised(1), run_quantised(512);  // warm-up (cuBLAS picks its kernels, the pool fills)
  gpu.collect_timings(true);
  gpu.set_timing_sink(profiler.get());
  for (int i = 0; i < 20; ++i) run(1), run(512), run_quantised(1), run_quantised(512);
  gpu.collect_timings(true);
  gpu.set_timing_sink(nullptr);
  const auto print = [](const char* title, const Profiler& p) {
    std::printf("  %-44s %7s %9s %9s %9s %8s\n", title, "calls", "p50 us", "mean us", "GB/s", "TFLOP/s");
    for (const KernelSummary& k : p.summary())
      std::printf("  %-44s %7lld %9.1f %9.1f %9.1f %8.2f\n", k.name.c_str(), (long long)k.calls, k.p50_us, k.mean_us,
                  k.gb_per_s, k.tflop_per_s);
  };
  print("op (decode m=1, prefill m=512)", *profiler);
  // Some calls: 3 warm-up rounds, then 20 timed ones, printed as one table.
  const auto time_calls = [&](const std::string& title, const std::function<void()>& calls) {
    Profiler timed;
    for (int i = 0; i < 3; ++i) calls();
    gpu.collect_timings(true);
    gpu.set_timing_sink(&timed);
    for (int i = 0; i < 20; ++i) calls();
    gpu.collect_timings(true);
    gpu.set_timing_sink(nullptr);
    print(title.c_str(), timed);
  };
  const auto time_attention = [&](const std::string& title, const Tensor& q, const Tensor& k, const Tensor& v,
                                  int64_t kv_len, const AttentionMask& mask, float scale, Tensor& out) {
    time_calls(title, [&] { gpu.attention(q, k, v, kv_len, mask, scale, out); });
  };
  // The vision tower's row ops at a 448² picture (784 rows of 1,024): a biased projection closed by the residual add
  // and the next LayerNorm (the bias folds into the add), and a plain LayerNorm.
  {
    const int64_t rows = 784, width = 1024;
    const Tensor bias = random({width}, DType::BF16);
    const LinearWeights proj = gpu.upload_linear(random({width, width}, DType::BF16, 0.02f), &bias);
    const NormWeights ln{gpu.upload(random({width}, DType::BF16), WeightRole::Vector),
                         gpu.upload(random({width}, DType::BF16), WeightRole::Vector)};
    const Tensor xv = gpu.from_host(random({rows, width}));
    Tensor stream = gpu.from_host(random({rows, width})), scratch = gpu.alloc({rows, width}), normed,
           plain = gpu.alloc({rows, width});
    // The decoder's row ops at a 512-token prefill: o's closing add + RMSNorm, and the attention prologue (q/k
    // norms, RoPE, the cache append).
    const int64_t m = 512;
    const Tensor o_in = gpu.from_host(random({m, hq * d})), qn = gpu.upload(random({d}, DType::BF16), WeightRole::Vector),
                 kn = gpu.upload(random({d}, DType::BF16), WeightRole::Vector), vp = gpu.from_host(random({m, hkv, d})),
                 cos = gpu.from_host(random({m, d})), sin = gpu.from_host(random({m, d}));
    Tensor residual = gpu.from_host(random({m, hidden})), o_out = gpu.alloc({m, hidden}), o_normed,
           qp = gpu.from_host(random({m, hq, d})), kp = gpu.from_host(random({m, hkv, d})), ck = kc, cv = vc;
    time_calls("prefill rows, 512 tokens", [&] {
      gpu.project(Projection::add_to(residual, o_in, wq, o_out).then(rms, o_normed));
      gpu.qk_norm_rope_append({&qp, &kp, &vp, &qn, &kn, 1e-6f, &cos, &sin, &ck, &cv, 0, nullptr});
    });
    time_calls("vision rows, 784 x 1024", [&] {
      gpu.project(Projection::add_to(stream, xv, proj, scratch).then(RowNorm::layer(ln, 1e-6f), normed));
      gpu.layer_norm(xv, ln.weight, ln.bias, 1e-6f, plain);
    });
  }
  // Decode attention against the context length: the cache is its only traffic (GB/s is the figure of merit).
  const Tensor q1 = gpu.from_host(random({1, hq, d}));
  Tensor out1 = gpu.alloc({1, hq, d});
  // f32 and bf16 caches (half the bytes: kv_cache.cuh), 16 query heads over 8 kv heads of 128 (the 2B's).
  gpu.set_cache_type(DType::BF16);
  Tensor kb = gpu.alloc_cache({4096, hkv, d}), vb = gpu.alloc_cache({4096, hkv, d});
  gpu.copy_rows(kc, kb, 0);
  gpu.copy_rows(vc, vb, 0);
  for (int64_t t : {256, 1024, 4096}) {
    time_attention("decode attention, " + std::to_string(t) + " keys", q1, kc, vc, t, AttentionMask::causal(t - 1),
                   0.088f, out1);
    time_attention("decode attention, " + std::to_string(t) + " keys, bf16 cache", q1, kb, vb, t,
                   AttentionMask::causal(t - 1), 0.088f, out1);
  }
  // The attention view's tap, recorded into every decode step while the view is open: a 448 x 448 picture's 196
  // merged patches among 256 and 4,096 keys, the mean of the heads (what it adds to a step).
  for (int64_t t : {256, 4096}) {
    Tensor heat = gpu.alloc({196});
    Profiler timed;
    const AttentionTap tap{&q1, &kc, t, nullptr, 10, 196, -1, 0.088f, &heat};
    for (int i = 0; i < 3; ++i) gpu.attention_tap(tap);
    gpu.collect_timings(true);
    gpu.set_timing_sink(&timed);
    for (int i = 0; i < 20; ++i) gpu.attention_tap(tap);
    gpu.collect_timings(true);
    gpu.set_timing_sink(nullptr);
    print(("attention tap, 196 patches of " + std::to_string(t) + " keys").c_str(), timed);
  }
  // The decoder's prefill attention over its bf16 cache: a 448x448 picture's prompt (237 tokens) and 512 tokens.
  for (int64_t m : {237, 512}) {
    const Tensor qm = gpu.from_host(random({m, hq, d}));
    Tensor outm = gpu.alloc({m, hq, d});
    time_attention("prefill attention, " + std::to_string(m) + " tokens, bf16 cache", qm, kb, vb, m,
                   AttentionMask::causal(0), 0.088f, outm);
  }
  // A 4,096-token prefill, dense causal and block-sparse (a window of 4 blocks of 64 plus the first block: at most
  // 320 keys a query instead of up to 4,096).
  const Tensor q4 = gpu.from_host(random({4096, hq, d}));
  Tensor out4 = gpu.alloc({4096, hq, d});
  time_attention("prefill attention, 4096 tokens, dense", q4, kc, vc, 4096, AttentionMask::causal(0), 0.088f, out4);
  time_attention("prefill attention, 4096 tokens, window 4 + 1", q4, kc, vc, 4096,
                 AttentionMask::causal_block_sparse(0, AttentionMask::local_global_layout(64, 4, 1), 64), 0.088f, out4);
  // The vision tower's attention for 784 patches (a 448x448 image), and for four 224x224 images in one batch: the
  // block-diagonal mask skips the other images' keys (a quarter of the score work; 48 -> 28 us on an H100).
  const Tensor qv = gpu.from_host(random({784, 16, 64})), kv = gpu.from_host(random({784, 16, 64}));
  Tensor outv = gpu.alloc({784, 16, 64});
  for (const auto& bounds : {std::vector<int64_t>{0, 784}, std::vector<int64_t>{0, 196, 392, 588, 784}})
    time_attention("vision attention, 784 patches in " + std::to_string(bounds.size() - 1) + " image(s)", qv, kv, kv,
                   784, AttentionMask::segments(bounds), 0.125f, outv);
  // The same with the keys and values in f16, as the tower's bias + RoPE kernel writes them where the tensor-core
  // kernel reads them (Backend::alloc_keys_values): copied into its tiles as they are.
  if (gpu.alloc_keys_values({784, 16, 64}).dtype() == DType::F16) {
    const Tensor kv16 = gpu.upload(random({784, 16, 64}).to(DType::F16), WeightRole::Vector);
    time_attention("vision attention, 784 patches in 1 image(s), f16 keys and values", qv, kv16, kv16, 784,
                   AttentionMask::segments({0, 784}), 0.125f, outv);
  }
}

}  // namespace
}  // namespace qvl

int main(int argc, char** argv) {
  std::string mode = "eval", profiles = "both";
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "eval" || a == "perf") mode = a;
    else if (a == "--profile" && i + 1 < argc) profiles = argv[++i];
    else {
      std::fprintf(stderr, "usage: qvl-test-backend-ops [eval|perf] [--profile native|sm61|both]\n");
      return 2;
    }
  }
  const qvl::CudaPluginStatus& cuda = qvl::cuda_plugin();
  if (!cuda.usable) {
    std::printf("SKIPPED: no usable CUDA device (%s)\n", cuda.reason.c_str());
    return 77;
  }
  int status = 0;
  for (const std::string profile : {"native", "sm61"}) {
    if (profiles != "both" && profiles != profile) continue;
    auto gpu = qvl::make_cuda_backend(0, 0, profile);
    auto cpu = qvl::make_cpu_backend();
    std::printf("%s: %s\n", mode.c_str(), gpu->name().c_str());
    if (mode == "perf") {
      qvl::perf(*gpu);
      if (profile == "sm61")
        std::printf("  (the SM61 profile forced on this GPU checks the Pascal code path; it does not measure a Pascal card)\n");
    } else {
      try {
        status |= qvl::eval(*gpu, *cpu, profile == "native");
      } catch (const std::exception& e) {
        std::printf("\n  FAIL: %s\n", e.what());
        status = 1;
      }
    }
  }
  return status;
}
