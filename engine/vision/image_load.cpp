#include <fstream>

#include "core/error.h"
#include "io/mapped_file.h"
#include "vision/image.h"
#include "vision/image_header.h"

#if QVL_WITH_LIBPNG
#include <png.h>

#include <csetjmp>
#include <cstdio>
#include <cstdlib>
#endif
#if QVL_WITH_OPENCV
#include <opencv2/core.hpp>
#include <opencv2/imgcodecs.hpp>
#include <opencv2/imgproc.hpp>
#endif

namespace qvl {

#if QVL_WITH_LIBPNG && !QVL_WITH_OPENCV
namespace {

// libpng reports errors with longjmp, so this part holds no C++ objects: plain buffers, freed on every path.
struct PngPixels {
  unsigned char* data = nullptr;  // malloc'd, rows of `rowbytes`
  int64_t width = 0, height = 0, rowbytes = 0;
  int channels = 0, depth = 0;
};
bool read_png(std::FILE* file, int64_t max_pixels, PngPixels* out) {
  png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, nullptr, nullptr, nullptr);
  png_infop info = png ? png_create_info_struct(png) : nullptr;
  unsigned char* volatile data = nullptr;
  png_bytep* volatile rows = nullptr;
  if (!png || !info || setjmp(png_jmpbuf(png))) {
    std::free(data);
    std::free(rows);
    png_destroy_read_struct(&png, &info, nullptr);
    return false;
  }
  png_init_io(png, file);
  png_read_info(png, info);
  out->width = png_get_image_width(png, info);
  out->height = png_get_image_height(png, info);
  if (out->width * out->height > max_pixels) png_error(png, "too large");
  png_set_expand(png);  // palette -> RGB, grey below 8 bits -> 8 bits, tRNS -> alpha
  png_set_swap(png);    // 16-bit samples little-endian
  png_set_interlace_handling(png);
  png_read_update_info(png, info);
  out->channels = png_get_channels(png, info);
  out->depth = png_get_bit_depth(png, info);
  out->rowbytes = int64_t(png_get_rowbytes(png, info));
  data = static_cast<unsigned char*>(std::malloc(std::size_t(out->rowbytes * out->height)));
  rows = static_cast<png_bytep*>(std::malloc(sizeof(png_bytep) * std::size_t(out->height)));
  if (!data || !rows) png_error(png, "out of memory");
  for (int64_t y = 0; y < out->height; ++y) rows[y] = data + y * out->rowbytes;
  png_read_image(png, rows);
  png_destroy_read_struct(&png, &info, nullptr);
  std::free(rows);
  out->data = data;
  return true;
}

// PNG only, for builds without OpenCV (a GPU server): the same conversions as PIL's convert("RGB") — palette and
// grey expanded, alpha dropped, 16-bit samples clipped to 255.
RgbImage load_png(const std::filesystem::path& path, const ImageLimits& limits) {
  const std::string where = path.string();
  std::FILE* file = std::fopen(where.c_str(), "rb");
  if (!file) fail(where, ": cannot open the image");
  PngPixels px;
  const bool ok = read_png(file, limits.max_pixels, &px);
  std::fclose(file);
  if (!ok) fail(where, ": not a readable PNG image, or over the pixel limit (this build decodes PNG only)");
  RgbImage image{px.height, px.width, std::vector<uint8_t>(std::size_t(px.width * px.height * 3))};
  for (int64_t y = 0; y < px.height; ++y) {
    const unsigned char* row = px.data + y * px.rowbytes;
    for (int64_t x = 0; x < px.width; ++x)
      for (int c = 0; c < 3; ++c) {
        const auto i = std::size_t(x * px.channels + (px.channels <= 2 ? 0 : c));  // grey (+alpha) replicated
        const int v = px.depth == 16 ? std::min(255, row[2 * i] | row[2 * i + 1] << 8) : row[i];
        image.pixels[std::size_t((y * px.width + x) * 3 + c)] = uint8_t(v);
      }
  }
  std::free(px.data);
  return image;
}

}  // namespace
#endif

RgbImage load_image(const std::filesystem::path& path, const ImageLimits& limits) {
  const std::string where = path.string();
  check_regular_file(path);
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(where, ": cannot open the image");
  std::string head(1 << 16, '\0');  // JPEG headers can sit behind large EXIF blocks
  in.read(head.data(), std::streamsize(head.size()));
  head.resize(std::size_t(in.gcount()));
  if (head.empty()) fail(where, ": the image file is empty");
  if (const auto size = image_header_size(head)) {
    const auto [w, h] = *size;
    if (w <= 0 || h <= 0) fail(where, ": the image header says ", w, "x", h, " pixels");
    if (w * h > limits.max_pixels)
      fail(where, ": ", w, "x", h, " pixels is more than the limit of ", limits.max_pixels, " (refused before decoding)");
  }
#if QVL_WITH_OPENCV
  cv::Mat decoded;
  try {
    // Keep the stored depth and channels (PIL's conversions differ from OpenCV's); the EXIF orientation is applied.
    decoded = cv::imread(where, cv::IMREAD_ANYDEPTH | cv::IMREAD_ANYCOLOR);
  } catch (const cv::Exception& e) {
    fail(where, ": cannot decode the image (", e.what(), ")");
  }
  if (decoded.empty()) fail(where, ": not a readable image (unknown format or corrupt data)");
  if (int64_t(decoded.rows) * decoded.cols > limits.max_pixels)
    fail(where, ": ", decoded.cols, "x", decoded.rows, " pixels is more than the limit of ", limits.max_pixels);
  // 16-bit samples: PIL's convert("RGB") clips them to 255 rather than scaling, and transformers uses PIL.
  if (decoded.depth() == CV_16U) {
    cv::Mat clipped;
    cv::min(decoded, 255.0, clipped);
    clipped.convertTo(decoded, CV_8U);
  } else if (decoded.depth() != CV_8U) {
    fail(where, ": unsupported sample type (only 8- and 16-bit images)");
  }
  cv::Mat rgb;
  switch (decoded.channels()) {
    case 1: cv::cvtColor(decoded, rgb, cv::COLOR_GRAY2RGB); break;
    case 3: cv::cvtColor(decoded, rgb, cv::COLOR_BGR2RGB); break;
    case 4: cv::cvtColor(decoded, rgb, cv::COLOR_BGRA2RGB); break;  // alpha dropped, not composited (as PIL)
    default: fail(where, ": unsupported channel count ", decoded.channels());
  }
  RgbImage image{rgb.rows, rgb.cols, std::vector<uint8_t>(std::size_t(rgb.rows) * std::size_t(rgb.cols) * 3)};
  for (int y = 0; y < rgb.rows; ++y)
    std::copy_n(rgb.ptr<uint8_t>(y), std::size_t(rgb.cols) * 3, image.pixels.data() + std::size_t(y) * std::size_t(rgb.cols) * 3);
  return image;
#elif QVL_WITH_LIBPNG
  return load_png(path, limits);
#else
  fail(where, ": this build of qvl cannot decode images (built without OpenCV or libpng)");
#endif
}

}  // namespace qvl
