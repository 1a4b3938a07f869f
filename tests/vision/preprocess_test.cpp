// Image preprocessing: smart_resize against the spec's worked examples (computed by transformers' own function),
// the resize filter against invariants, bad images, and the pixel cap.
#include <gtest/gtest.h>

#include <cstdio>

#include "core/error.h"
#include "io/safetensors.h"
#include "test_support.h"
#include "vision/image_header.h"
#include "vision/preprocess.h"

namespace qvl {
namespace {

TEST(SmartResize, MatchesTransformersOnTheReferenceExamples) {
  // (H, W) -> (h, w) as listed in the reference spec section 3 (factor 32, 256² to 4096² pixels).
  const std::tuple<int64_t, int64_t, int64_t, int64_t> cases[] = {
      {768, 1024, 768, 1024}, {480, 640, 480, 640}, {224, 224, 256, 256}, {1080, 1920, 1088, 1920},
      {3000, 4000, 3008, 4000}, {336, 1000, 320, 992}};
  for (const auto& [h, w, eh, ew] : cases) {
    const auto [rh, rw] = smart_resize(h, w, 32, 65536, 16777216);
    EXPECT_EQ(rh, eh) << h << "x" << w;
    EXPECT_EQ(rw, ew) << h << "x" << w;
  }
  EXPECT_EQ(image_token_count(768, 1024, PreprocessorConfig{}), 768);
  EXPECT_EQ(image_token_count(1080, 1920, PreprocessorConfig{}), 2040);
  EXPECT_THROW(smart_resize(10, 2500, 32, 65536, 16777216), Error);  // aspect ratio 250
  EXPECT_THROW(smart_resize(0, 10, 32, 65536, 16777216), Error);
}

// With do_resize off the model sees the image at its own size: the prompt's token count must come from that size
// (it once came from smart_resize's, which grew a small image to the pixel floor, while the patches did not).
TEST(SmartResize, TokenCountFollowsTheImageSizeWhenResizeIsOff) {
  PreprocessorConfig p;
  p.do_resize = false;
  const RgbImage image{64, 96, std::vector<uint8_t>(64 * 96 * 3, 7)};
  const PreprocessedImage pre = preprocess_image(image, p);
  EXPECT_EQ(image_token_count(64, 96, p), pre.grid.h * pre.grid.w / (p.merge_size * p.merge_size));
  EXPECT_EQ(image_token_count(64, 96, p), 6);
  EXPECT_THROW(image_token_count(64, 100, p), Error);  // 100 is no multiple of patch 16 × merge 2
  p.do_resize = true;
  EXPECT_GT(image_token_count(64, 96, p), 6);  // resized up to the pixel floor
}

// --image-min-tokens / --image-max-tokens: one bound given, the other the preprocessor's, and the message names which
// is which (it said "max tokens must not be below min tokens" where the user had given only one).
TEST(TokenBudget, NamesTheGivenBoundAndThePreprocessorsOne) {
  const PreprocessorConfig p;  // 64 to 16,384 tokens (1,024 pixels a token)
  const PreprocessorConfig both = with_token_budget(p, 100, 200);
  EXPECT_EQ(both.min_pixels, 100 * 1024);
  EXPECT_EQ(both.max_pixels, 200 * 1024);
  const auto message = [&](int64_t min_tokens, int64_t max_tokens) {
    try {
      with_token_budget(p, min_tokens, max_tokens);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_EQ(message(0, 10), "image max tokens 10 (given) is below image min tokens 64 (the preprocessor's min_pixels 65536)");
  EXPECT_EQ(message(20000, 0),
            "image max tokens 16384 (the preprocessor's max_pixels 16777216) is below image min tokens 20000 (given)");
  EXPECT_EQ(message(300000, 0).rfind("image min tokens 300000 is over the limit of 262144 tokens", 0), 0u);
}

TEST(Resize, KeepsFlatImagesFlatAndIsIdentityAtTheSameSize) {
  RgbImage flat{37, 53, std::vector<uint8_t>(37 * 53 * 3, 200)};
  for (auto [h, w] : {std::pair<int64_t, int64_t>{64, 96}, {16, 16}, {200, 31}}) {
    const RgbImage r = resize_bicubic_antialiased(flat, h, w);
    ASSERT_EQ(r.pixels.size(), std::size_t(h * w * 3));
    for (uint8_t v : r.pixels) ASSERT_EQ(v, 200);  // weights are normalised per output pixel
  }
  RgbImage gradient{4, 4, {}};
  for (int i = 0; i < 48; ++i) gradient.pixels.push_back(uint8_t(i * 5));
  EXPECT_EQ(resize_bicubic_antialiased(gradient, 4, 4).pixels, gradient.pixels);
}

TEST(Preprocess, PatchifiesInMergeWindowOrder) {
  // A 64x64 image whose pixel value encodes its 16x16 patch: row-major patch index p = py * 4 + px.
  RgbImage img{64, 64, std::vector<uint8_t>(64 * 64 * 3)};
  for (int y = 0; y < 64; ++y)
    for (int x = 0; x < 64; ++x)
      for (int c = 0; c < 3; ++c) img.pixels[std::size_t((y * 64 + x) * 3 + c)] = uint8_t((y / 16) * 4 + (x / 16));
  PreprocessorConfig p;
  p.min_pixels = 64 * 64;
  p.max_pixels = 64 * 64;
  const PreprocessedImage out = preprocess_image(img, p);
  EXPECT_EQ(out.grid.h, 4);
  EXPECT_EQ(out.grid.w, 4);
  const Tensor pixels = patches(*make_cpu_backend(), out);
  ASSERT_EQ(pixels.shape(), (Shape{16, 1536}));
  // Rows run over (window row, window col, i, j): row r is patch (2*bh + i, 2*bw + j).
  const int expected_patch[16] = {0, 1, 4, 5, 2, 3, 6, 7, 8, 9, 12, 13, 10, 11, 14, 15};
  for (int r = 0; r < 16; ++r)
    for (int k = 0; k < 1536; k += 97)
      EXPECT_FLOAT_EQ(pixels.data<float>()[r * 1536 + k], (float(expected_patch[r]) - 127.5f) / 127.5f) << r;
}

TEST(LoadImage, ConvertsEveryPixelFormatLikeTransformersLoadImage) {
  const std::filesystem::path dir = std::filesystem::path(QVL_TEST_GOLDEN_DIR) / "images" / "decode";
  const auto expected = SafetensorsFile::open(dir / "expected.safetensors");
  ASSERT_GE(expected->tensors().size(), 7u);
  int skipped = 0;
  for (const auto& info : expected->tensors()) {
    SCOPED_TRACE(info.name);
#if !QVL_TEST_DECODES_ALL_FORMATS
    if (!info.name.ends_with(".png")) {  // a build without OpenCV decodes PNG only
      std::printf("skipped: %s (this build decodes PNG only)\n", info.name.c_str());
      ++skipped;
      continue;
    }
#endif
    const RgbImage got = load_image(dir / info.name);
    const Tensor want = expected->tensor(info.name);
    ASSERT_EQ((Shape{got.height, got.width, 3}), want.shape());  // the EXIF-rotated JPEG comes out transposed
    // PNG and BMP are lossless: exact. JPEG decoders (PIL's libjpeg-turbo and the system's) may differ by a step.
    const int tolerance = info.name.ends_with(".jpg") ? 2 : 0;
    int worst = 0;
    for (std::size_t i = 0; i < got.pixels.size(); ++i)
      worst = std::max(worst, std::abs(int(got.pixels[i]) - int(want.data<uint8_t>()[i])));
    EXPECT_LE(worst, tolerance);
  }
  EXPECT_LT(skipped, int(expected->tensors().size()));
}

TEST(LoadImage, RefusesMissingCorruptEmptyAndOversizedFiles) {
  test::TempDir dir;
  EXPECT_THROW(load_image(dir / "absent.png"), Error);
  test::write_bytes(dir / "empty.png", "");
  EXPECT_THROW(load_image(dir / "empty.png"), Error);
  test::write_bytes(dir / "junk.png", "this is not an image at all");
  EXPECT_THROW(load_image(dir / "junk.png"), Error);
  // A PNG header claiming 50000 x 50000 pixels: refused from the header, before any decoding.
  std::string png("\x89PNG\r\n\x1a\n\0\0\0\x0dIHDR", 16);
  png += std::string("\x00\x00\xc3\x50\x00\x00\xc3\x50\x08\x02\x00\x00\x00", 13);
  test::write_bytes(dir / "huge.png", png);
  try {
    load_image(dir / "huge.png");
    FAIL() << "a 50000x50000 image was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("refused before decoding"), std::string::npos) << e.what();
  }
  const auto header = read_image_header(png);
  ASSERT_TRUE(header);
  EXPECT_EQ((std::pair<int64_t, int64_t>{header->width, header->height}), (std::pair<int64_t, int64_t>{50000, 50000}));
}

}  // namespace
}  // namespace qvl
