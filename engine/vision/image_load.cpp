#include "core/content_hash.h"
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
RgbImage load_png(const std::string& where, std::string_view bytes, const ImageLimits& limits) {
  std::FILE* file = ::fmemopen(const_cast<char*>(bytes.data()), bytes.size(), "rb");
  if (!file) fail(where, ": cannot read the image from memory");
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

namespace {

std::string_view bytes_of(const MappedFile& file) { return {reinterpret_cast<const char*>(file.bytes().data()), file.size()}; }

// "67108864 pixels (67.1 M)": a large count in words beside its exact number (the limit once read "67108864").
std::string pixel_count(int64_t pixels) {
  if (pixels < 100000) return std::to_string(pixels) + " pixels";
  char text[64];
  std::snprintf(text, sizeof text, "%lld pixels (%.1f M)", static_cast<long long>(pixels), double(pixels) / 1e6);
  return text;
}

// The header of an image's bytes read and checked against the limits: nothing is decoded that was not sized first.
ImageHeader checked_image_header(const std::string& where, std::string_view bytes, const ImageLimits& limits) {
  if (bytes.empty()) fail(where, ": the image file is empty");
  const auto h = read_image_header(bytes);
  if (!h) {
    const std::string_view announced = image_signature(bytes);
    if (announced == "TIFF")
      fail(where, ": a TIFF image; qvl reads PNG, JPEG, BMP and WebP (convert it to one of those)");
    if (!announced.empty())
      fail(where, ": starts as a ", announced, " image but its header is missing or damaged (a corrupt file)");
    fail(where, ": not a PNG, JPEG, BMP or WebP image (its first bytes are no header of those)");
  }
  if (h->width <= 0 || h->height <= 0) fail(where, ": the ", h->format, " header says ", h->width, "x", h->height, " pixels");
  // A side over the limit is refused before the product, which two 32-bit sides can take past int64.
  const bool side_over = h->width > limits.max_pixels || h->height > limits.max_pixels;
  if (side_over || h->width * h->height > limits.max_pixels)
    fail(where, ": ", h->width, "x", h->height, side_over ? std::string() : " is " + pixel_count(h->width * h->height),
         ", more than the limit of ", pixel_count(limits.max_pixels), " (refused before decoding)");
  if (h->truncated) fail(where, ": the ", h->format, " data ends before the image does (a truncated or corrupt file)");
  return *h;
}

// The file mapped (not read: sizing an image and decoding it once read it whole twice) and its header checked.
std::shared_ptr<const MappedFile> checked_image_file(const std::filesystem::path& path, const ImageLimits& limits,
                                                     ImageHeader* header) {
  auto file = MappedFile::open(path, std::uintmax_t(limits.max_file_bytes), "an image file");
  *header = checked_image_header(path.string(), bytes_of(*file), limits);
  return file;
}

// Pixels from the bytes of an image sized and checked by checked_image_header.
RgbImage decode_image(const std::string& where, std::string_view bytes, const ImageHeader& header,
                      [[maybe_unused]] const ImageLimits& limits) {
#if QVL_WITH_OPENCV
  cv::Mat decoded;
  try {
    // Keep the stored depth and channels (PIL's conversions differ from OpenCV's); the EXIF orientation is applied.
    const cv::Mat encoded(1, int(bytes.size()), CV_8U, const_cast<char*>(bytes.data()));
    decoded = cv::imdecode(encoded, cv::IMREAD_ANYDEPTH | cv::IMREAD_ANYCOLOR);
  } catch (const cv::Exception& e) {
    fail(where, ": cannot decode the image (", e.what(), ")");
  }
  if (decoded.empty() && header.format == "GIF")  // OpenCV decodes GIF from 4.11 on, and only when built to
    fail(where, ": cannot decode GIF pictures in this build (OpenCV ", CV_VERSION, " has no GIF decoder); qvl reads PNG, "
         "JPEG, BMP and WebP (convert it to one of those)");
  if (decoded.empty()) fail(where, ": not a readable ", header.format, " image (corrupt data, or a kind of ", header.format,
                            " this build's decoder does not read)");
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
  return load_png(where, bytes, limits);
#else
  fail(where, ": this build of qvl cannot decode images (built without OpenCV or libpng)");
#endif
}


}  // namespace

std::pair<int64_t, int64_t> image_file_size(const std::filesystem::path& path, const ImageLimits& limits) {
  ImageHeader header;
  checked_image_file(path, limits, &header);
  return {header.width, header.height};
}

RgbImage load_image(const std::filesystem::path& path, const ImageLimits& limits) {
  const std::string where = path.string();
  ImageHeader header;
  const auto file = checked_image_file(path, limits, &header);
  RgbImage image = decode_image(where, bytes_of(*file), header, limits);
  if (file->changed()) fail(where, ": the image changed while it was decoded (cut short or rewritten); send it again");
  return image;
}

ImageInput::ImageInput(RgbImage decoded)
    : decoded_(std::make_shared<const RgbImage>(std::move(decoded))),
      size_(std::pair<int64_t, int64_t>{decoded_->width, decoded_->height}) {}

ImageInput ImageInput::file(std::filesystem::path path, ImageLimits limits) {
  ImageInput input;
  input.path_ = std::move(path);
  input.limits_ = limits;
  return input;
}

ImageInput ImageInput::encoded(std::shared_ptr<const std::string> bytes, std::string name, ImageLimits limits) {
  if (bytes->size() > uint64_t(limits.max_file_bytes))
    fail(name, ": ", bytes->size(), " bytes is more than the limit of ", limits.max_file_bytes, " for an image");
  ImageInput input;
  input.encoded_ = std::move(bytes);
  input.name_ = std::move(name);
  input.limits_ = limits;
  return input;
}

std::pair<int64_t, int64_t> ImageInput::size() const {
  if (!size_) {
    if (encoded_) {
      const ImageHeader header = checked_image_header(name_, *encoded_, limits_);
      size_ = std::pair<int64_t, int64_t>{header.width, header.height};
    } else {
      size_ = image_file_size(path_, limits_);
    }
  }
  return *size_;
}

uint64_t ImageInput::content_key() const {
  if (decoded_) {  // pixels in memory do not change: hashed once
    if (!content_key_) {
      const auto* pixels = reinterpret_cast<const std::byte*>(decoded_->pixels.data());
      content_key_ = content_hash({pixels, decoded_->pixels.size()}, uint64_t(decoded_->width) << 32 ^ uint64_t(decoded_->height));
    }
    return *content_key_;
  }
  if (encoded_) {  // the same bytes as a file holding them: the same key
    if (!content_key_) content_key_ = content_hash({reinterpret_cast<const std::byte*>(encoded_->data()), encoded_->size()}, 1);
    return *content_key_;
  }
  // A file is hashed at every ask (a request asks once): an input reused after the file was rewritten must not
  // keep the old picture's key.
  const auto file = MappedFile::open(path_, std::uintmax_t(limits_.max_file_bytes), "an image file");
  const uint64_t key = content_hash(file->bytes(), 1);  // seeds differ: a file's key is never a decoded image's
  if (file->changed()) fail(path_.string(), ": the image changed while it was read; send it again");
  return key;
}

std::shared_ptr<const RgbImage> ImageInput::pixels() const {
  if (decoded_) return decoded_;
  if (encoded_) {
    const ImageHeader header = checked_image_header(name_, *encoded_, limits_);
    return std::make_shared<const RgbImage>(decode_image(name_, *encoded_, header, limits_));
  }
  auto image = std::make_shared<const RgbImage>(load_image(path_, limits_));
  const auto [width, height] = size();
  const bool same = (image->width == width && image->height == height) || (image->width == height && image->height == width);
  if (!same)  // an EXIF rotation may swap the sides; anything else means another file is there now
    fail(path_.string(), ": the image changed while the request was prepared (", width, "x", height, " pixels, now ",
         image->width, "x", image->height, ")");
  return image;
}

}  // namespace qvl
