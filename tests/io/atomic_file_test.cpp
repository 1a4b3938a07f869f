// Files and folders written whole or not at all: a planted link where the temporary file would go, a write that
// fails part way (the disk full, simulated by a file-size limit), a rename that fails, and the staging folders of
// killed runs.
#include <fcntl.h>
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <string>

#include "core/error.h"
#include "io/atomic_file.h"
#include "io/model_folder.h"
#include "io/random_model.h"
#include "io/safetensors.h"
#include "io/staged_folder.h"
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

// A new file gets the mode open(2) would give it under the umask (it was once 0644 whatever the umask said); a
// replaced file keeps its own.
TEST(AtomicFile, NewFilesFollowTheUmaskAndReplacedOnesKeepTheirMode) {
  test::TempDir dir;
  const mode_t previous = ::umask(027);
  write_file_atomically(dir / "new.json", "{}");
  test::write_bytes(dir / "private.json", "old");
  fs::permissions(dir / "private.json", fs::perms::owner_read | fs::perms::owner_write);
  write_file_atomically(dir / "private.json", "new");
  ::umask(previous);
  EXPECT_EQ(fs::status(dir / "new.json").permissions(), fs::perms(0640));
  EXPECT_EQ(fs::status(dir / "private.json").permissions(), fs::perms(0600));
  EXPECT_EQ(test::read_bytes(dir / "private.json"), "new");
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
  write_random_model(model_preset("demo-tiny"), dir / "m", model_options(1));  // a model there: what lies beside is spare
  const fs::path abandoned = dir / "m.partial-4194000", aside = dir / "m.old-4194001";
  const fs::path running = dir / "m.partial-4194002";  // its run holds the lock (a live pid is no proof: pids are reused)
  const fs::path fresh = dir / "m.partial-4194003";    // made a moment ago: its run may not hold the lock yet
  for (const auto& p : {abandoned, aside, running, fresh}) {
    fs::create_directories(p);
    test::write_bytes(p / "model.safetensors", "half a model");
    if (p != fresh) fs::last_write_time(p, fs::file_time_type::clock::now() - std::chrono::hours(1));
  }
  const int held = ::open(running.c_str(), O_RDONLY | O_DIRECTORY);
  ASSERT_GE(held, 0);
  ASSERT_EQ(::flock(held, LOCK_EX), 0);
  write_random_model(model_preset("demo-tiny"), dir / "m", model_options(1));
  EXPECT_FALSE(fs::exists(abandoned));
  EXPECT_FALSE(fs::exists(aside));
  EXPECT_TRUE(fs::exists(running / "model.safetensors"));
  EXPECT_TRUE(fs::exists(fresh / "model.safetensors"));
  ::close(held);
}

// While a run writes, its staging folder is locked: another run's cleanup of killed runs' folders does not take it.
TEST(StagedFolder, HoldsALockOnItsStagingFolderUntilItEnds) {
  test::TempDir dir;
  fs::path staging;
  {
    StagedFolder folder(dir / "m", false);
    staging = folder.path();
    const int probe = ::open(staging.c_str(), O_RDONLY | O_DIRECTORY);
    ASSERT_GE(probe, 0);
    EXPECT_NE(::flock(probe, LOCK_EX | LOCK_NB), 0);
    ::close(probe);
  }
  EXPECT_FALSE(fs::exists(staging));
}

}  // namespace
}  // namespace qvl
