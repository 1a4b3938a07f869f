#include "model/rope.h"

#include <algorithm>
#include <cmath>
#include <tuple>

#include "core/error.h"
#include "core/thread_pool.h"

namespace qvl {

PromptPositions multimodal_positions(const std::vector<int32_t>& ids, const ModelConfig& config,
                                     const std::vector<ImageGrid>& grids) {
  PromptPositions p;
  for (auto& axis : p.axes) axis.reserve(ids.size());
  const int64_t merge = config.vision.spatial_merge_size;
  int64_t next = 0;  // the next free position
  std::size_t image = 0;
  for (std::size_t i = 0; i < ids.size();) {
    const bool image_here = ids[i] == config.image_token_id && i > 0 && ids[i - 1] == config.vision_start_token_id;
    if (!image_here) {
      for (auto& axis : p.axes) axis.push_back(next);
      ++next;
      ++i;
      continue;
    }
    if (image >= grids.size()) fail("the prompt has more images than image grids (", grids.size(), ")");
    const ImageGrid& g = grids[image++];
    const int64_t mh = g.h / merge, mw = g.w / merge, count = g.t * mh * mw;
    if (i + std::size_t(count) > ids.size()) fail("image ", image, " needs ", count, " <|image_pad|> tokens");
    for (int64_t f = 0; f < g.t; ++f)
      for (int64_t a = 0; a < mh; ++a)
        for (int64_t b = 0; b < mw; ++b) {
          p.axes[0].push_back(next + f);
          p.axes[1].push_back(next + a);
          p.axes[2].push_back(next + b);
        }
    next += std::max({g.t, mh, mw});
    i += std::size_t(count);
  }
  if (image != grids.size()) fail("the prompt has ", image, " images but ", grids.size(), " image grids were given");
  p.delta = next - int64_t(ids.size());
  return p;
}

namespace {
std::vector<float> inverse_frequencies(double theta, int64_t dim) {
  std::vector<float> inv(std::size_t(dim / 2));
  // As transformers: float exponent 2j/dim, then 1 / theta^exponent.
  for (std::size_t j = 0; j < inv.size(); ++j)
    inv[j] = 1.0f / std::pow(float(theta), float(2 * int64_t(j)) / float(dim));
  return inv;
}

// A prompt's tables are on the way to its first token (a 512-token prefill: 65,536 cosines and sines, ~0.4 ms on
// one core), so rows are spread over the thread pool.
std::pair<Tensor, Tensor> tables_from_angles(const std::vector<float>& angles, int64_t rows, int64_t half) {
  Tensor cos = Tensor::empty(DType::F32, {rows, 2 * half}), sin = Tensor::empty(DType::F32, {rows, 2 * half});
  float *c = cos.data<float>(), *s = sin.data<float>();
  ThreadPool::global().parallel_for(std::size_t(rows), 64, [&](std::size_t begin, std::size_t end) {
    for (auto r = int64_t(begin); r < int64_t(end); ++r)
      for (int64_t j = 0; j < half; ++j) {
        const float a = angles[std::size_t(r * half + j)];
        c[r * 2 * half + j] = c[r * 2 * half + half + j] = std::cos(a);
        s[r * 2 * half + j] = s[r * 2 * half + half + j] = std::sin(a);
      }
  });
  return {cos, sin};
}
}  // namespace

std::pair<Tensor, Tensor> text_rope_tables(const TextConfig& c, const std::array<std::vector<int64_t>, 3>& positions,
                                           std::size_t begin, std::size_t count) {
  const int64_t half = c.head_dim / 2;
  const auto inv = inverse_frequencies(c.rope_theta, c.head_dim);
  std::vector<int> axis_of(std::size_t(half), 0);
  for (int64_t j = 0; j < half; ++j) {
    if (j % 3 == 1 && j < 3 * c.mrope_section[1]) axis_of[std::size_t(j)] = 1;
    else if (j % 3 == 2 && j < 3 * c.mrope_section[2]) axis_of[std::size_t(j)] = 2;
  }
  std::vector<float> angles(count * std::size_t(half));
  for (std::size_t r = 0; r < count; ++r)
    for (int64_t j = 0; j < half; ++j)
      angles[r * std::size_t(half) + std::size_t(j)] = float(positions[std::size_t(axis_of[std::size_t(j)])][begin + r]) * inv[std::size_t(j)];
  return tables_from_angles(angles, int64_t(count), half);
}

std::pair<Tensor, Tensor> decode_rope_tables(const TextConfig& config, int64_t first, int64_t count) {
  std::array<std::vector<int64_t>, 3> positions;
  for (auto& axis : positions)
    for (int64_t i = 0; i < count; ++i) axis.push_back(first + i);
  return text_rope_tables(config, positions, 0, std::size_t(count));
}

namespace {
// Calls fn(row, col) for every patch of every image, in merge-window order (frames, window row, window col, i, j).
template <typename Fn> void for_each_patch(const std::vector<ImageGrid>& grids, int64_t merge, Fn fn) {
  for (const auto& g : grids)
    for (int64_t f = 0; f < g.t; ++f)
      for (int64_t bh = 0; bh < g.h / merge; ++bh)
        for (int64_t bw = 0; bw < g.w / merge; ++bw)
          for (int64_t i = 0; i < merge; ++i)
            for (int64_t j = 0; j < merge; ++j) fn(g, bh * merge + i, bw * merge + j);
}
}  // namespace

int64_t patch_count(const std::vector<ImageGrid>& grids) {
  int64_t n = 0;
  for (const auto& g : grids) n += g.t * g.h * g.w;
  return n;
}

std::pair<Tensor, Tensor> vision_rope_tables(const VisionConfig& c, const std::vector<ImageGrid>& grids) {
  const int64_t quarter = c.head_dim() / 4, width = 4 * quarter;  // frequencies per coordinate; a table row
  const auto inv = inverse_frequencies(c.rope_theta, c.head_dim() / 2);
  // A patch's angles are its row's and its column's: each coordinate's cosines and sines are computed once and
  // copied (a 448x448 image: 28 x 16 of each instead of 784 x 32; the same values).
  int64_t longest = 0;
  for (const auto& g : grids) longest = std::max({longest, g.h, g.w});
  std::vector<float> cos_at(std::size_t(longest * quarter)), sin_at(cos_at.size());
  for (int64_t at = 0; at < longest; ++at)
    for (int64_t j = 0; j < quarter; ++j) {
      const float angle = float(at) * inv[std::size_t(j)];
      cos_at[std::size_t(at * quarter + j)] = std::cos(angle);
      sin_at[std::size_t(at * quarter + j)] = std::sin(angle);
    }
  const int64_t n = patch_count(grids);
  Tensor cos = Tensor::empty(DType::F32, {n, width}), sin = Tensor::empty(DType::F32, {n, width});
  float *cos_row = cos.data<float>(), *sin_row = sin.data<float>();
  for_each_patch(grids, c.spatial_merge_size, [&](const ImageGrid&, int64_t row, int64_t col) {
    // [row's quarter, column's quarter] twice (rotate_half pairs d and d + head_dim / 2).
    for (int64_t part = 0; part < 4; ++part) {
      const std::size_t from = std::size_t((part % 2 ? col : row) * quarter);
      std::copy_n(cos_at.begin() + std::ptrdiff_t(from), quarter, cos_row + part * quarter);
      std::copy_n(sin_at.begin() + std::ptrdiff_t(from), quarter, sin_row + part * quarter);
    }
    cos_row += width, sin_row += width;
  });
  return {cos, sin};
}

namespace {
// torch.linspace(start, end, n) in float32, as PyTorch's CPU kernel computes it (two halves, from each end).
std::vector<float> torch_linspace(float start, float end, int64_t n) {
  std::vector<float> out(static_cast<std::size_t>(n));
  if (n == 1) {
    out[0] = start;
    return out;
  }
  const float step = (end - start) / float(n - 1);
  for (int64_t i = 0; i < n; ++i) out[std::size_t(i)] = i < n / 2 ? start + step * float(i) : end - step * float(n - i - 1);
  return out;
}
}  // namespace

RowBlend position_blend(const VisionConfig& c, const std::vector<ImageGrid>& grids) {
  const int64_t side = int64_t(std::llround(std::sqrt(double(c.num_position_embeddings))));
  struct Axis {
    std::vector<int64_t> lo, hi;
    std::vector<float> frac;
  };
  auto axis = [&](int64_t n) {
    Axis a;
    for (float v : torch_linspace(0.0f, float(side - 1), n)) {
      const auto lo = int64_t(v);  // trunc, as .int() does
      a.lo.push_back(lo);
      a.hi.push_back(std::min(lo + 1, side - 1));
      a.frac.push_back(v - float(lo));
    }
    return a;
  };
  RowBlend blend;
  blend.rows.reserve(std::size_t(patch_count(grids) * RowBlend::kTaps));
  blend.weights.reserve(blend.rows.capacity());
  const ImageGrid* current = nullptr;
  Axis rows, cols;
  for_each_patch(grids, c.spatial_merge_size, [&](const ImageGrid& g, int64_t r, int64_t col) {
    if (current != &g) {
      current = &g;
      rows = axis(g.h);
      cols = axis(g.w);
    }
    const auto [r0, r1, dh] = std::tuple(rows.lo[std::size_t(r)], rows.hi[std::size_t(r)], rows.frac[std::size_t(r)]);
    const auto [c0, c1, dw] = std::tuple(cols.lo[std::size_t(col)], cols.hi[std::size_t(col)], cols.frac[std::size_t(col)]);
    for (const int64_t row : {r0 * side + c0, r0 * side + c1, r1 * side + c0, r1 * side + c1})
      blend.rows.push_back(int32_t(row));
    for (const float w : {(1 - dh) * (1 - dw), (1 - dh) * dw, dh * (1 - dw), dh * dw}) blend.weights.push_back(w);
  });
  return blend;
}

}  // namespace qvl
