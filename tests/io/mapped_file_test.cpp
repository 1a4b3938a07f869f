// Model files changed under a loaded model: truncated (reading a mapped page past the new end raised SIGBUS and killed
// the process), rewritten in place, or replaced by a rename (harmless: the mapping keeps the old file).
#include <gtest/gtest.h>

#include <signal.h>

#include <cstdio>
#include <string>
#include <vector>

#include "backend/cuda_plugin.h"
#include "core/error.h"
#include "io/mapped_file.h"
#include "runtime/engine.h"
#include "test_support.h"

namespace qvl {
namespace {

namespace fs = std::filesystem;

std::string change_error(const MappedFile& file) {
  return test::error_within(std::chrono::seconds(10), [&] { file.check_unchanged(); });
}

TEST(MappedFile, ATruncatedFileReadsAsZerosAndIsReportedNotFatal) {
  test::TempDir dir;
  const std::size_t page = std::size_t(::sysconf(_SC_PAGESIZE));
  test::write_bytes(dir / "w.bin", std::string(3 * page, '\x11'));
  const auto file = MappedFile::open(dir / "w.bin");
  EXPECT_EQ(change_error(*file), "accepted");
  fs::resize_file(dir / "w.bin", page / 2);
  const volatile std::byte* bytes = file->bytes().data();
  EXPECT_EQ(int(bytes[2 * page + 5]), 0);  // past the new end: SIGBUS, caught; the pages read as zeros
  const std::string e = change_error(*file);
  EXPECT_NE(e.find("w.bin: was cut short by another program while the model was loaded (" + std::to_string(page / 2) +
                   " bytes, was " + std::to_string(3 * page) + ")"),
            std::string::npos)
      << e;
}

TEST(MappedFile, ARewriteInPlaceIsReportedAndARenameOverItIsNot) {
  test::TempDir dir;
  test::write_bytes(dir / "w.bin", std::string(4096, 'a'));
  const auto renamed_over = MappedFile::open(dir / "w.bin");
  test::write_bytes(dir / "new.bin", std::string(4096, 'b'));
  fs::rename(dir / "new.bin", dir / "w.bin");
  EXPECT_EQ(change_error(*renamed_over), "accepted");
  EXPECT_EQ(char(renamed_over->bytes()[0]), 'a');  // still the file it mapped
  const auto rewritten = MappedFile::open(dir / "w.bin");
  const auto when = fs::last_write_time(dir / "w.bin");
  test::write_bytes(dir / "w.bin", std::string(4096, 'c'));  // same size, truncated and written through the same inode
  fs::last_write_time(dir / "w.bin", when + std::chrono::seconds(1));  // coarse clocks: make the change visible
  const std::string e = change_error(*rewritten);
  EXPECT_NE(e.find("w.bin: was written by another program while the model was loaded (same size, a new modification time)"),
            std::string::npos)
      << e;
}

TEST(MappedFileDeathTest, ASigbusElsewhereStillEndsTheProcess) {
  test::TempDir dir;
  test::write_bytes(dir / "w.bin", std::string(4096, 'a'));
  const auto file = MappedFile::open(dir / "w.bin");  // the handler is installed
#if defined(__SANITIZE_ADDRESS__)
  EXPECT_DEATH(::raise(SIGBUS), "");  // ASan's own SIGBUS handler, chained to, reports and exits with 1
#else
  EXPECT_EXIT(::raise(SIGBUS), testing::KilledBySignal(SIGBUS), "");
#endif
}

TEST(Engine, AModelTruncatedWhileAnsweringFailsTheRequestByName) {
  test::TempDir dir;
  fs::copy(test::resource_dir() / "models" / "demo-tiny", dir / "m");
  const auto engine = Engine::load(dir / "m", {"cpu"});
  GenerateRequest request;
  request.messages = {ChatMessage::text("user", "Hello")};
  request.max_new_tokens = 3;
  EXPECT_EQ(engine->generate(request).generated_ids.size() > 0, true);
  // Cut while the answer is being generated: the next step reads weights past the new end (SIGBUS, once fatal).
  struct TruncatingSink : TokenSink {
    fs::path file;
    void on_token(int32_t, const std::string&) override {
      if (fs::file_size(file) > 1000) fs::resize_file(file, 1000);
    }
  } sink;
  sink.file = dir / "m" / "model.safetensors";
  request.max_new_tokens = 4;
  request.ignore_eos = true;
  const std::string e = test::error_within(std::chrono::seconds(60), [&] { engine->generate(request, &sink); });
  EXPECT_NE(e.find("model.safetensors: was cut short by another program while the model was loaded"), std::string::npos) << e;
}

// Only the CPU reads weights from the mapped files after loading: a touch of the file fails the CPU's next request
// (its pages may now be another file's), while a model wholly on the GPU holds its own copies and answers on.
TEST(Engine, ATouchedModelFileFailsTheCpuRequestOnly) {
  test::TempDir dir;
  fs::copy(test::resource_dir() / "models" / "demo-tiny", dir / "m");
  std::vector<std::string> devices = {"cpu"};
  if (cuda_plugin().usable) devices.push_back("cuda");
  else std::printf("[ note ] the CUDA half of this test is skipped: %s\n", cuda_plugin().reason.c_str());
  GenerateRequest request;
  request.messages = {ChatMessage::text("user", "Hello")};
  request.max_new_tokens = 2;
  for (const std::string& device : devices) {
    const auto engine = Engine::load(dir / "m", {device});
    EXPECT_FALSE(engine->generate(request).generated_ids.empty());
    const fs::path weights = dir / "m" / "model.safetensors";
    fs::last_write_time(weights, fs::last_write_time(weights) + std::chrono::seconds(5));
    const std::string e = test::error_within(std::chrono::seconds(60), [&] { engine->generate(request); });
    if (device == "cpu")
      EXPECT_NE(e.find("model.safetensors: was written by another program while the model was loaded"), std::string::npos) << e;
    else
      EXPECT_EQ(e, "accepted") << device;
  }
}

}  // namespace
}  // namespace qvl
