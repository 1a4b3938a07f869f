// The CPU backend's weights on huge pages (backend/cpu/huge_pages.h): the same bytes, and only where it pays.
#include "backend/cpu/huge_pages.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>

#include "backend/backend.h"
#include "backend/registry.h"

namespace qvl {
namespace {

constexpr std::size_t kGiB = std::size_t(1) << 30;

Tensor patterned(std::size_t bytes, uint8_t seed) {
  Tensor t = Tensor::empty(DType::BF16, {int64_t(bytes / 2)});
  auto* p = t.data<uint8_t>();
  for (std::size_t i = 0; i < bytes; ++i) p[i] = uint8_t(i * 131 + (i >> 12) + seed);
  return t;
}

// Whether a copy must be made: huge pages offered, and room for it with a margin (memory in use moves between the
// asking and the copy; inside the margin either answer is right).
bool copy_expected(std::size_t bytes) { return cpu::huge_pages_offered() && cpu::room_for_copy(bytes + kGiB); }

// Checks `copy` against its source: the same type, shape and bytes; if it is a copy, on its own 2 MiB-aligned pages.
void expect_same_bytes(const Tensor& copy, const Tensor& source) {
  ASSERT_EQ(copy.dtype(), source.dtype());
  ASSERT_EQ(copy.shape(), source.shape());
  EXPECT_EQ(std::memcmp(copy.raw(), source.raw(), source.nbytes()), 0);
  if (copy.raw() != source.raw()) {
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(copy.raw()) % cpu::kHugePageBytes, 0u);
  }
}

TEST(HugePages, ALargeTensorIsCopiedWithItsBytesOntoAlignedPagesWhereTheKernelOffersThem) {
  const Tensor t = patterned(cpu::kHugePageBytes * 3 + 4096, 0);  // not a whole number of huge pages
  const bool expected = copy_expected(t.nbytes());
  const Tensor copy = cpu::on_huge_pages(t);
  expect_same_bytes(copy, t);
  if (expected) {
    EXPECT_NE(copy.raw(), t.raw()) << "huge pages offered and memory free: the tensor is copied";
  }
  if (!cpu::huge_pages_offered()) {
    EXPECT_EQ(copy.raw(), t.raw()) << "no huge pages here: the tensor stays where it is";
    GTEST_SKIP() << "the kernel offers no transparent huge pages here: only the fallback was checked";
  }
}

TEST(HugePages, SmallTensorsStayAndCopiesOutliveTheirSource) {
  const Tensor small = patterned(cpu::kHugePageBytes - 64, 0);
  EXPECT_EQ(cpu::on_huge_pages(small).raw(), small.raw()) << "under 2 MiB a tensor stays where it is";
  const std::size_t bytes = cpu::kHugePageBytes * 2;
  const Tensor expected = patterned(bytes, 0);
  Tensor copy;
  {
    const Tensor source = patterned(bytes, 0);
    copy = cpu::on_huge_pages(source);
  }
  const Tensor other = patterned(bytes, 77);  // may take the source's freed memory: different bytes there now
  EXPECT_EQ(std::memcmp(copy.raw(), expected.raw(), bytes), 0);
  EXPECT_NE(std::memcmp(other.raw(), expected.raw(), bytes), 0);
}

TEST(HugePages, TheCpuBackendUploadsWeightsThroughThem) {
  auto backend = create_backend(BackendKind::Cpu);
  const Tensor w = patterned(cpu::kHugePageBytes * 2, 5);
  const bool expected = copy_expected(w.nbytes());
  const Tensor uploaded = backend->upload(w, WeightRole::Matrix);
  expect_same_bytes(uploaded, w);
  if (expected) {
    EXPECT_NE(uploaded.raw(), w.raw());
  }
  if (!cpu::huge_pages_offered()) {
    EXPECT_EQ(uploaded.raw(), w.raw());
  }
}

}  // namespace
}  // namespace qvl
