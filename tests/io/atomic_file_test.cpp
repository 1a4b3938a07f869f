// Files and folders written whole or not at all: a planted link where the temporary file would go, a write that
// fails part way (the disk full, simulated by a file-size limit), a rename that fails, and the staging folders of
// killed runs.
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>

#include "core/error.h"
#include "io/atomic_file.h"
#include "io/model_folder.h"
#include "io/random_model.h"
#include "io/safetensors.h"
#include "test_support.h"

namespace qvl {
namespace {

namespace fs = std::filesystem;

// Names in `dir` holding ".partial" or ".old-": what an interrupted write would leave behind.
std::vector<std::string> leftovers(const fs::path& dir) {
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    if (name.find(".partial") != std::string::npos || name.find(".old-") != std::string::npos) names.push_back(name);
  }
  return names;
}

// While it lives, a file may grow to `bytes` at most: a write past it fails with EFBIG, as a full disk fails one.
class FileSizeLimit {
public:
  explicit FileSizeLimit(rlim_t bytes) {
    ::getrlimit(RLIMIT_FSIZE, &saved_);
    previous_ = ::signal(SIGXFSZ, SIG_IGN);  // the write returns an error instead of killing the process
    rlimit limit = saved_;
    limit.rlim_cur = bytes;
    ::setrlimit(RLIMIT_FSIZE, &limit);
  }
  ~FileSizeLimit() {
    ::setrlimit(RLIMIT_FSIZE, &saved_);
    ::signal(SIGXFSZ, previous_);
  }

private:
  rlimit saved_{};
  sighandler_t previous_{};
};

TEST(AtomicFile, NeverWritesThroughAPlantedLink) {
  test::TempDir dir;
  test::write_bytes(dir / "victim", "precious");
  fs::create_symlink(dir / "victim", dir / "t.json.partial");  // the fixed temporary name the old code used
  write_file_atomically(dir / "t.json", "{}");
  EXPECT_EQ(test::read_bytes(dir / "victim"), "precious");
  EXPECT_EQ(test::read_bytes(dir / "t.json"), "{}");
  fs::remove(dir / "t.json.partial");
  EXPECT_TRUE(leftovers(dir.path()).empty());
}

TEST(AtomicFile, AFailedWriteOrRenameLeavesTheOldFileAndNothingBesideIt) {
  test::TempDir dir;
  test::write_bytes(dir / "t.json", "old");
  {
    FileSizeLimit limit(4096);
    EXPECT_THROW(write_file_atomically(dir / "t.json", std::string(100000, 'x')), Error);
    SafetensorsWriter writer(dir / "w.safetensors");
    writer.declare("big", DType::F32, {100000});
    const std::vector<float> zeros(100000);
    EXPECT_THROW(writer.append(zeros.data(), zeros.size() * sizeof(float)), Error);
  }
  EXPECT_EQ(test::read_bytes(dir / "t.json"), "old");
  EXPECT_FALSE(fs::exists(dir / "w.safetensors"));
  fs::create_directories(dir / "folder" / "inside");  // rename cannot put a file over a non-empty folder
  const std::string e = test::error_within(std::chrono::seconds(10), [&] { write_file_atomically(dir / "folder", "x"); });
  EXPECT_NE(e.find("folder: cannot replace it"), std::string::npos) << e;
  EXPECT_TRUE(leftovers(dir.path()).empty()) << leftovers(dir.path()).front();
}

RandomModelOptions model_options(uint64_t seed) {
  RandomModelOptions o;
  o.seed = seed;
  o.tokenizer_dir = test::resource_dir() / "tokenizer";
  o.overwrite = true;
  return o;
}

TEST(StagedFolder, ADiskFullWhileWritingAModelKeepsTheOldOne) {
  test::TempDir dir;
  write_random_model(model_preset("demo-tiny"), dir / "m", model_options(1));
  const std::string before = test::read_bytes(dir / "m" / "model.safetensors");
  {
    FileSizeLimit limit(1 << 20);  // the demo-tiny weights take several MB
    EXPECT_THROW(write_random_model(model_preset("demo-tiny"), dir / "m", model_options(2)), Error);
  }
  EXPECT_EQ(test::read_bytes(dir / "m" / "model.safetensors"), before);
  EXPECT_NO_THROW(ModelFolder::open(dir / "m"));
  EXPECT_TRUE(leftovers(dir.path()).empty());
}

TEST(StagedFolder, RemovesTheStagingFoldersOfKilledRunsOnly) {
  test::TempDir dir;
  const pid_t gone = ::fork();  // a process that has exited: its pid names an abandoned staging folder
  if (gone == 0) ::_exit(0);
  ::waitpid(gone, nullptr, 0);
  write_random_model(model_preset("demo-tiny"), dir / "m", model_options(1));  // a model there: what lies beside is spare
  const fs::path abandoned = dir / ("m.partial-" + std::to_string(gone));
  const fs::path aside = dir / ("m.old-" + std::to_string(gone));
  const fs::path running = dir / ("m.partial-" + std::to_string(::getppid()));  // a live process's: kept
  for (const auto& p : {abandoned, aside, running}) {
    fs::create_directories(p);
    test::write_bytes(p / "model.safetensors", "half a model");
  }
  write_random_model(model_preset("demo-tiny"), dir / "m", model_options(1));
  EXPECT_FALSE(fs::exists(abandoned));
  EXPECT_FALSE(fs::exists(aside));
  EXPECT_TRUE(fs::exists(running / "model.safetensors"));
}

}  // namespace
}  // namespace qvl
