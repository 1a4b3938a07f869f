// Paths that name something other than a file: a FIFO (opening one for reading blocks until a writer comes: the app
// hung on one given as a shard, as config.json or as an image), a folder (a stream error that named no path), a
// device. Each is refused by its kind, naming the path, without being opened.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <functional>

#include "core/error.h"
#include "io/json_fields.h"
#include "io/mapped_file.h"
#include "io/model_config.h"
#include "test_support.h"
#include "vision/image.h"

namespace qvl {
namespace {

std::string refusal(const std::function<void()>& load) { return test::error_within(std::chrono::seconds(10), load); }

TEST(FileKinds, AFifoIsRefusedWithoutBlocking) {
  test::TempDir dir;
  const auto fifo = dir / "config.json";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  for (const auto& load : std::vector<std::function<void()>>{
           [&] { ModelConfig::load(fifo); }, [&] { MappedFile::open(fifo); }, [&] { read_json_file(fifo); },
           [&] { load_image(fifo, {}); }}) {
    const std::string e = refusal(load);
    EXPECT_NE(e.find("FIFO"), std::string::npos) << e;
    EXPECT_NE(e.find(fifo.string()), std::string::npos) << e;
  }
}

TEST(FileKinds, AFolderOrADeviceIsNamedAsSuch) {
  test::TempDir dir;
  std::filesystem::create_directories(dir / "config.json");
  const std::string folder = refusal([&] { ModelConfig::load(dir / "config.json"); });
  EXPECT_NE(folder.find("is a folder, where a file is expected"), std::string::npos) << folder;
  const std::string device = refusal([&] { read_json_file("/dev/zero"); });
  EXPECT_NE(device.find("/dev/zero: is a device"), std::string::npos) << device;
  // A config is read only when its size is a config's (a 200 MB file of [] once took 4.7 GB to parse).
  test::write_bytes(dir / "big.json", "[" + std::string(std::size_t(limits::kConfigFileBytes), ' ') + "]");
  const std::string big = refusal([&] { ModelConfig::load(dir / "big.json"); });
  EXPECT_NE(big.find("over the limit of 1048576"), std::string::npos) << big;
  const std::string missing = refusal([&] { MappedFile::open(dir / "nothing.safetensors"); });
  EXPECT_NE(missing.find("cannot open"), std::string::npos) << missing;
}

}  // namespace
}  // namespace qvl
