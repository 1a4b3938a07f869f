// An image file: its header (every format's size and truncation checks), the decode, and the preprocessing the
// model applies (resize to the pixel budget, patches), with limits small enough to keep each run short.
#include "backend/backend.h"
#include "fuzz_support.h"
#include "vision/image.h"
#include "vision/image_header.h"
#include "vision/preprocess.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  static const auto cpu = qvl::make_cpu_backend();
  (void)qvl::read_image_header(qvl::fuzz::as_text(data, size));
  const auto path = qvl::fuzz::write_scratch("image", qvl::fuzz::as_text(data, size));
  qvl::ImageLimits limits;
  limits.max_pixels = 1 << 20;  // a fuzzer's 16384 x 64 BMP is legal but slow to decode a million times
  qvl::fuzz::expect_clean([&] {
    const qvl::RgbImage image = qvl::load_image(path, limits);
    qvl::PreprocessorConfig p;
    p.min_pixels = 32 * 32;
    p.max_pixels = 128 * 128;
    (void)qvl::patches(*cpu, qvl::preprocess_image(image, p));
  });
  return 0;
}
