// A safetensors file: header length, header JSON (names, dtypes, shapes, offsets, metadata), data region.
#include "fuzz_support.h"
#include "io/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  const auto path = qvl::fuzz::write_scratch("f.safetensors", qvl::fuzz::as_text(data, size));
  qvl::fuzz::expect_clean([&] {
    const auto file = qvl::SafetensorsFile::open(path);
    for (const auto& info : file->tensors()) (void)file->tensor(info.name);  // every view inside the mapping
  });
  return 0;
}
