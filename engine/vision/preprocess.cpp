#include "vision/preprocess.h"

#include <algorithm>
#include <cmath>

#include "core/limits.h"
#include "core/error.h"

namespace qvl {

std::pair<int64_t, int64_t> smart_resize(int64_t height, int64_t width, int64_t factor, int64_t min_pixels, int64_t max_pixels) {
  if (height <= 0 || width <= 0) fail("image has no pixels (", width, "x", height, ")");
  const double h = double(height), w = double(width), f = double(factor);
  if (std::max(h, w) / std::min(h, w) > 200)
    fail("image aspect ratio ", std::max(h, w) / std::min(h, w), " exceeds 200 (", width, "x", height, ")");
  // std::nearbyint rounds half to even in the default rounding mode, like Python's round().
  double hb = f * std::nearbyint(h / f), wb = f * std::nearbyint(w / f);
  if (hb * wb > double(max_pixels)) {
    const double beta = std::sqrt(h * w / double(max_pixels));
    hb = std::max(f, std::floor(h / beta / f) * f);
    wb = std::max(f, std::floor(w / beta / f) * f);
  } else if (hb * wb < double(min_pixels)) {
    const double beta = std::sqrt(double(min_pixels) / (h * w));
    hb = std::ceil(h * beta / f) * f;
    wb = std::ceil(w * beta / f) * f;
  }
  return {int64_t(hb), int64_t(wb)};
}

namespace {

double cubic(double x) {
  constexpr double a = -0.5;
  x = std::fabs(x);
  if (x < 1) return ((a + 2) * x - (a + 3)) * x * x + 1;
  if (x < 2) return (((x - 5) * x + 8) * x - 4) * a;
  return 0;
}

// PIL's precomputed taps for one axis: for each output pixel, the first input index and normalised weights,
// stored as fixed point with 22 fractional bits (PIL's PRECISION_BITS for 8-bit images).
struct Taps {
  std::vector<int64_t> first, count;
  std::vector<int32_t> weights;  // count_max per output
  int64_t count_max = 0;
};
constexpr int kPrecisionBits = 22;

Taps compute_taps(int64_t in_size, int64_t out_size) {
  const double scale = double(in_size) / double(out_size);
  const double filter_scale = std::max(1.0, scale);
  const double support = 2.0 * filter_scale;
  Taps t;
  t.count_max = int64_t(std::ceil(support)) * 2 + 1;
  t.weights.assign(std::size_t(out_size * t.count_max), 0);
  std::vector<double> w(std::size_t(t.count_max));
  for (int64_t o = 0; o < out_size; ++o) {
    const double centre = (double(o) + 0.5) * scale;
    int64_t lo = int64_t(centre - support + 0.5);
    int64_t hi = int64_t(centre + support + 0.5);
    lo = std::max<int64_t>(lo, 0);
    hi = std::min(hi, in_size);
    const int64_t n = hi - lo;
    double total = 0;
    for (int64_t i = 0; i < n; ++i) total += w[std::size_t(i)] = cubic((double(i + lo) - centre + 0.5) / filter_scale);
    for (int64_t i = 0; i < n; ++i) {
      const double normalised = total != 0 ? w[std::size_t(i)] / total : 0;
      // PIL rounds half away from zero when converting to fixed point.
      const double scaled = normalised * double(1 << kPrecisionBits);
      t.weights[std::size_t(o * t.count_max + i)] = int32_t(scaled < 0 ? scaled - 0.5 : scaled + 0.5);
    }
    t.first.push_back(lo);
    t.count.push_back(n);
  }
  return t;
}

uint8_t clip8(int64_t v) {
  v >>= kPrecisionBits;
  return uint8_t(std::clamp<int64_t>(v, 0, 255));
}

}  // namespace

RgbImage resize_bicubic_antialiased(const RgbImage& in, int64_t height, int64_t width) {
  if (height <= 0 || width <= 0) fail("resize to an empty image");
  if (in.height == height && in.width == width) return in;
  // Horizontal pass, then vertical, each rounding to uint8 as PIL does.
  const Taps tx = compute_taps(in.width, width), ty = compute_taps(in.height, height);
  RgbImage mid{in.height, width, std::vector<uint8_t>(std::size_t(in.height * width * 3))};
  for (int64_t y = 0; y < in.height; ++y)
    for (int64_t x = 0; x < width; ++x)
      for (int c = 0; c < 3; ++c) {
        int64_t acc = int64_t(1) << (kPrecisionBits - 1);
        for (int64_t i = 0; i < tx.count[std::size_t(x)]; ++i)
          acc += int64_t(in.at(y, tx.first[std::size_t(x)] + i, c)) * tx.weights[std::size_t(x * tx.count_max + i)];
        mid.pixels[std::size_t((y * width + x) * 3 + c)] = clip8(acc);
      }
  RgbImage out{height, width, std::vector<uint8_t>(std::size_t(height * width * 3))};
  for (int64_t y = 0; y < height; ++y)
    for (int64_t x = 0; x < width; ++x)
      for (int c = 0; c < 3; ++c) {
        int64_t acc = int64_t(1) << (kPrecisionBits - 1);
        for (int64_t i = 0; i < ty.count[std::size_t(y)]; ++i)
          acc += int64_t(mid.at(ty.first[std::size_t(y)] + i, x, c)) * ty.weights[std::size_t(y * ty.count_max + i)];
        out.pixels[std::size_t((y * width + x) * 3 + c)] = clip8(acc);
      }
  return out;
}

PreprocessorConfig with_token_budget(PreprocessorConfig p, int64_t min_tokens, int64_t max_tokens) {
  if (min_tokens < 0 || max_tokens < 0) fail("image min/max tokens must not be negative");
  const int64_t per_token = p.patch_size * p.patch_size * p.merge_size * p.merge_size;
  const int64_t most = limits::kImagePixelBudget / per_token;  // checked before the product can overflow
  for (const auto& [name, tokens] : {std::pair{"min", min_tokens}, std::pair{"max", max_tokens}})
    if (tokens > most)
      fail("image ", name, " tokens ", tokens, " is over the limit of ", most, " tokens (", limits::kImagePixelBudget,
           " pixels) an image");
  if (min_tokens > 0) p.min_pixels = min_tokens * per_token;
  if (max_tokens > 0) p.max_pixels = max_tokens * per_token;
  // One bound given, the other the preprocessor's: the message says which is which.
  const auto bound = [&](const char* name, int64_t given, int64_t pixels) {
    return given > 0 ? cat(given, " (given)")
                     : cat((pixels + per_token - 1) / per_token, " (the preprocessor's ", name, "_pixels ", pixels, ")");
  };
  if (p.max_pixels < p.min_pixels)
    fail("image max tokens ", bound("max", max_tokens, p.max_pixels), " is below image min tokens ",
         bound("min", min_tokens, p.min_pixels));
  return p;
}

std::pair<int64_t, int64_t> model_input_size(int64_t height, int64_t width, const PreprocessorConfig& p) {
  const int64_t factor = p.patch_size * p.merge_size;
  if (p.do_resize) return smart_resize(height, width, factor, p.min_pixels, p.max_pixels);
  if (height <= 0 || width <= 0) fail("image has no pixels (", width, "x", height, ")");
  if (height % factor || width % factor)
    fail("image of ", width, "x", height, " does not tile into ", factor, "-pixel windows, and the preprocessor's "
         "do_resize is off (the image is used at its own size)");
  return {height, width};
}

int64_t image_token_count(int64_t height, int64_t width, const PreprocessorConfig& p) {
  const auto [h, w] = model_input_size(height, width, p);
  return (h / p.patch_size) * (w / p.patch_size) / (p.merge_size * p.merge_size);
}

PreprocessedImage preprocess_image(const RgbImage& image, const PreprocessorConfig& p) {
  const auto [h, w] = model_input_size(image.height, image.width, p);
  const RgbImage resized = p.do_resize ? resize_bicubic_antialiased(image, h, w) : image;
  const int64_t ps = p.patch_size, m = p.merge_size, tp = p.temporal_patch_size;
  const int64_t gh = resized.height / ps, gw = resized.width / ps;
  if (gh * ps != resized.height || gw * ps != resized.width || gh % m || gw % m)
    fail("image of ", resized.width, "x", resized.height, " does not tile into ", ps, "-pixel patches and ", m, "x", m, " windows");
  // transformers fuses rescale into normalise: v = (u - mean / rescale) / (std / rescale), in f32.
  PreprocessedImage out{resized, {1, gh, gw}, {}};
  out.layout.patch = ps;
  out.layout.temporal = tp;
  out.layout.merge = m;
  for (int c = 0; c < 3; ++c) {
    const double unscale = p.do_rescale ? 1.0 / p.rescale_factor : 1.0;
    out.layout.mean[c] = float(p.do_normalize ? p.image_mean[std::size_t(c)] * unscale : 0.0);
    out.layout.std[c] = float(p.do_normalize ? p.image_std[std::size_t(c)] * unscale : unscale);
  }
  return out;
}

Tensor patches(Backend& backend, const PreprocessedImage& im) {
  Tensor image = Tensor::empty(DType::U8, {im.resized.height, im.resized.width, 3});
  std::copy(im.resized.pixels.begin(), im.resized.pixels.end(), image.data<uint8_t>());
  Tensor out = backend.alloc({im.grid.h * im.grid.w, 3 * im.layout.temporal * im.layout.patch * im.layout.patch});
  backend.patchify(image, im.layout, out);
  return out;
}

Tensor stack_rows(Backend& backend, const std::vector<Tensor>& parts) {
  if (parts.size() == 1) return parts[0];
  int64_t rows = 0;
  for (const auto& p : parts) rows += p.dim(0);
  Tensor out = backend.alloc({rows, parts.empty() ? 0 : parts[0].dim(1)});
  int64_t at = 0;
  for (const auto& p : parts) {
    backend.copy_rows(p, out, at);
    at += p.dim(0);
  }
  return out;
}

}  // namespace qvl
