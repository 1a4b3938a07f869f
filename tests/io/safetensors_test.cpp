// The safetensors reader against the reference library's output, our writer through the reader, and hostile files.
#include <gtest/gtest.h>

#include <cstring>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/half.h"
#include "io/checkpoint.h"
#include "io/safetensors.h"
#include "test_support.h"

namespace qvl {
namespace {

using test::TempDir;

std::string le64(uint64_t v) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[i] = char((v >> (8 * i)) & 0xff);
  return s;
}
// A file with the given header text and `data_bytes` zero bytes of data.
std::string raw_file(const std::string& header, std::size_t data_bytes) { return le64(header.size()) + header + std::string(data_bytes, '\0'); }

// Expects opening `bytes` to fail with a message that contains every fragment.
void expect_rejected(const std::string& bytes, std::initializer_list<const char*> fragments) {
  TempDir dir;
  const auto path = dir / "bad.safetensors";
  test::write_bytes(path, bytes);
  try {
    SafetensorsFile::open(path);
    FAIL() << "accepted a bad file; expected an error containing " << *fragments.begin();
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("bad.safetensors"), std::string::npos) << what;  // the file is always named
    for (const char* f : fragments) EXPECT_NE(what.find(f), std::string::npos) << "missing '" << f << "' in: " << what;
  }
}

TEST(Safetensors, ReadsWhatTheReferenceLibraryWrote) {
  const std::string dir = std::string(QVL_TEST_GOLDEN_DIR) + "/safetensors/";
  const auto expected = nlohmann::json::parse(test::read_bytes(dir + "reference.json"));
  const auto file = SafetensorsFile::open(dir + "reference.safetensors");
  EXPECT_EQ(file->metadata().at("made_by"), "safetensors");
  ASSERT_EQ(file->tensors().size(), expected.size());
  for (const auto& [name, want] : expected.items()) {
    SCOPED_TRACE(name);
    const Tensor t = file->tensor(name);
    EXPECT_EQ(t.shape(), want["shape"].get<Shape>());
    const auto values = want["values"].get<std::vector<double>>();
    ASSERT_EQ(std::size_t(t.numel()), values.size());
    for (std::size_t i = 0; i < values.size(); ++i) {
      double got = 0;
      switch (t.dtype()) {
        case DType::I64: { int64_t v; std::memcpy(&v, t.data<char>() + 8 * i, 8); got = double(v); break; }
        case DType::U8: got = t.data<uint8_t>()[i]; break;
        default: { float f; convert_elements(t.dtype(), t.data<char>() + i * dtype_size(t.dtype()), DType::F32, &f, 1); got = f; }
      }
      EXPECT_EQ(got, values[i]) << "element " << i;
    }
  }
}

TEST(Safetensors, WriterRoundTripsEveryFloatDtype) {
  TempDir dir;
  std::vector<std::pair<std::string, Tensor>> tensors;
  for (DType dtype : {DType::F32, DType::F16, DType::BF16, DType::F64}) {
    Tensor src = Tensor::empty(DType::F32, {3, 7});
    for (int i = 0; i < 21; ++i) src.data<float>()[i] = float(i) * 0.37f - 3.0f;
    tensors.emplace_back(std::string("t.") + std::string(dtype_name(dtype)), src.to(dtype));
  }
  tensors.emplace_back("empty", Tensor::empty(DType::BF16, {0, 16}));
  write_safetensors(dir / "x.safetensors", tensors, {{"format", "pt"}});
  const auto file = SafetensorsFile::open(dir / "x.safetensors");
  EXPECT_EQ(file->metadata().at("format"), "pt");
  for (const auto& [name, t] : tensors) {
    const Tensor back = file->tensor(name);
    EXPECT_EQ(back.dtype(), t.dtype());
    EXPECT_EQ(back.shape(), t.shape());
    if (t.nbytes()) {
      EXPECT_EQ(std::memcmp(back.raw(), t.raw(), t.nbytes()), 0) << name;
    }
  }
  EXPECT_FALSE(std::filesystem::exists(dir / "x.safetensors.partial"));
}

TEST(Safetensors, ShardedCheckpointResolvesEveryTensorThroughTheIndex) {
  TempDir dir;
  Tensor a = Tensor::zeros(DType::F32, {2, 2}), b = Tensor::zeros(DType::BF16, {5});
  a.data<float>()[3] = 4.0f;
  write_safetensors(dir / "model-00001-of-00002.safetensors", {{"a", a}});
  write_safetensors(dir / "model-00002-of-00002.safetensors", {{"b", b}});
  test::write_bytes(dir / "model.safetensors.index.json",
                    R"({"metadata": {"total_size": 26}, "weight_map": {"a": "model-00001-of-00002.safetensors",
                        "b": "model-00002-of-00002.safetensors"}})");
  const Checkpoint ck = Checkpoint::open(dir.path());
  EXPECT_EQ(ck.files().size(), 2u);
  EXPECT_EQ(ck.entries().size(), 2u);
  EXPECT_EQ(ck.total_bytes(), 26u);
  EXPECT_EQ(ck.tensor("a").data<float>()[3], 4.0f);
  EXPECT_EQ(ck.find("b")->info->shape, Shape{5});
  EXPECT_EQ(ck.find("c"), nullptr);

  // The index must agree with the shards, both ways.
  test::write_bytes(dir / "model.safetensors.index.json",
                    R"({"weight_map": {"a": "model-00002-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}})");
  EXPECT_THROW(Checkpoint::open(dir.path()), Error);
  test::write_bytes(dir / "model.safetensors.index.json", R"({"weight_map": {"a": "model-00001-of-00002.safetensors"}})");
  test::write_bytes(dir / "model-00001-of-00002.safetensors", test::read_bytes(dir / "model-00002-of-00002.safetensors"));
  EXPECT_THROW(Checkpoint::open(dir.path()), Error);
  test::write_bytes(dir / "model.safetensors.index.json", R"({"weight_map": {"a": "../elsewhere.safetensors"}})");
  EXPECT_THROW(Checkpoint::open(dir.path()), Error);
  test::write_bytes(dir / "model.safetensors.index.json", R"({"weight_map": {"a": "model-00003-of-00002.safetensors"}})");
  EXPECT_THROW(Checkpoint::open(dir.path()), Error);
}

TEST(Safetensors, RejectsTruncatedAndMalformedHeaders) {
  expect_rejected("", {"too small"});
  expect_rejected(std::string("\x05\0\0", 3), {"too small"});
  expect_rejected(le64(1000) + "{}", {"runs past the end", "truncated"});
  expect_rejected(le64(uint64_t(1) << 40) + "{}", {"exceeds"});
  expect_rejected(raw_file("{\"a\": {", 0), {"not valid JSON"});
  expect_rejected(raw_file("[1, 2]", 0), {"not a JSON object"});
  expect_rejected(raw_file(R"({"a": 3})", 0), {"'a'", "not an object"});
  expect_rejected(raw_file(R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                               "a": {"dtype": "F32", "shape": [2], "data_offsets": [8, 16]}})", 16), {"'a'", "twice"});
  expect_rejected(raw_file(R"({"__metadata__": {"k": 1}})", 0), {"__metadata__"});
}

// A header built to be slow: one name holding an array of 100,000 empty objects (300 KB). The duplicate-name check
// once rescanned the array at every object it closed (24 s for 900 KB); now both passes over it are linear. A
// watchdog fails the test rather than letting a regression hang the suite.
TEST(Safetensors, AHostileHeaderIsRefusedInLinearTime) {
  std::string header = R"({"a":[)";
  for (int i = 0; i < 100000; ++i) header += i ? ",{}" : "{}";
  header += "]}";
  const std::string message = test::error_within(std::chrono::seconds(20), [&] {
    TempDir dir;
    test::write_bytes(dir / "slow.safetensors", raw_file(header, 0));
    SafetensorsFile::open(dir / "slow.safetensors");
  });
  EXPECT_NE(message.find("'a'"), std::string::npos) << message;
  EXPECT_NE(message.find("not an object"), std::string::npos) << message;
}

TEST(Safetensors, RejectsEntriesThatDisagreeWithTheirBytes) {
  expect_rejected(raw_file(R"({"w": {"dtype": "Q4", "shape": [2], "data_offsets": [0, 8]}})", 8), {"'w'", "unsupported dtype 'Q4'"});
  expect_rejected(raw_file(R"({"w": {"dtype": "F32", "shape": [-2], "data_offsets": [0, 8]}})", 8), {"'w'", "shape"});
  expect_rejected(raw_file(R"({"w": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}})", 8), {"'w'", "needs 12 bytes", "span 8"});
  expect_rejected(raw_file(R"({"w": {"dtype": "F32", "shape": [2], "data_offsets": [8, 0]}})", 8), {"'w'", "end before"});
  expect_rejected(raw_file(R"({"w": {"dtype": "F32", "shape": [2], "data_offsets": [0]}})", 8), {"'w'", "data_offsets"});
  expect_rejected(raw_file(R"({"w": {"dtype": "F32", "shape": [4294967296, 4294967296], "data_offsets": [0, 8]}})", 8), {"'w'"});
  expect_rejected(raw_file(R"({"w": {"shape": [2], "data_offsets": [0, 8]}})", 8), {"'w'", "dtype"});
}

TEST(Safetensors, RejectsOffsetsPastTheEndOverlapsAndHoles) {
  const std::string two = R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}, )";
  expect_rejected(raw_file(R"({"w": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}})", 12), {"'w'", "truncated"});
  expect_rejected(raw_file(two + R"("b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}})", 12), {"overlaps"});
  expect_rejected(raw_file(two + R"("b": {"dtype": "F32", "shape": [1], "data_offsets": [12, 16]}})", 16), {"belong to no tensor"});
  expect_rejected(raw_file(two + R"("b": {"dtype": "F32", "shape": [1], "data_offsets": [8, 12]}})", 20), {"holds 20"});
  // A valid file for contrast: the same layout with no gap is accepted.
  TempDir dir;
  test::write_bytes(dir / "ok.safetensors", raw_file(two + R"("b": {"dtype": "F32", "shape": [1], "data_offsets": [8, 12]}})", 12));
  EXPECT_EQ(SafetensorsFile::open(dir / "ok.safetensors")->tensors().size(), 2u);
}

TEST(Safetensors, RejectsMissingFilesAndFolders) {
  TempDir dir;
  EXPECT_THROW(SafetensorsFile::open(dir / "absent.safetensors"), Error);
  EXPECT_THROW(SafetensorsFile::open(dir.path()), Error);
  EXPECT_THROW(Checkpoint::open(dir.path()), Error);
}

TEST(Safetensors, WriterRefusesInconsistentUse) {
  TempDir dir;
  SafetensorsWriter w(dir / "w.safetensors");
  w.declare("a", DType::F32, {2});
  EXPECT_THROW(w.declare("a", DType::F32, {2}), Error);
  const float v[3] = {1, 2, 3};
  EXPECT_THROW(w.append(v, sizeof v), Error);  // 12 bytes into 8 declared
  EXPECT_FALSE(std::filesystem::exists(dir / "w.safetensors"));
}

}  // namespace
}  // namespace qvl
