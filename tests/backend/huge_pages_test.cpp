// The CPU backend's weights on huge pages (backend/cpu/huge_pages.h): the same bytes, and only where it pays.
#include "backend/cpu/huge_pages.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>

#include "backend/backend.h"
#include "backend/registry.h"

namespace qvl {
namespace {

Tensor patterned(std::size_t bytes) {
  Tensor t = Tensor::empty(DType::BF16, {int64_t(bytes / 2)});
  auto* p = t.data<uint8_t>();
  for (std::size_t i = 0; i < bytes; ++i) p[i] = uint8_t(i * 131 + (i >> 12));
  return t;
}

TEST(HugePages, ALargeTensorIsCopiedWithItsBytesOntoAlignedPagesWhereTheKernelOffersThem) {
  const Tensor t = patterned(cpu::kHugePageBytes * 3 + 4096);  // not a whole number of huge pages
  const Tensor copy = cpu::on_huge_pages(t);
  ASSERT_EQ(copy.dtype(), t.dtype());
  ASSERT_EQ(copy.shape(), t.shape());
  EXPECT_EQ(std::memcmp(copy.raw(), t.raw(), t.nbytes()), 0);
  if (!cpu::huge_pages_offered() || !cpu::room_for_copy(t.nbytes())) {
    EXPECT_EQ(copy.raw(), t.raw()) << "no huge pages or no room: the tensor stays where it is";
    GTEST_SKIP() << "no transparent huge pages, or under a quarter of the memory free, here: only the fallback "
                    "was checked";
  }
  EXPECT_NE(copy.raw(), t.raw());
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(copy.raw()) % cpu::kHugePageBytes, 0u);
}

TEST(HugePages, SmallTensorsAndCopiesOutliveTheirSource) {
  const Tensor small = patterned(cpu::kHugePageBytes - 64);
  EXPECT_EQ(cpu::on_huge_pages(small).raw(), small.raw()) << "under 2 MiB a tensor stays where it is";
  Tensor copy;
  {
    const Tensor source = patterned(cpu::kHugePageBytes * 2);
    copy = cpu::on_huge_pages(source);
  }
  const Tensor expected = patterned(cpu::kHugePageBytes * 2);
  EXPECT_EQ(std::memcmp(copy.raw(), expected.raw(), expected.nbytes()), 0);
}

TEST(HugePages, TheCpuBackendUploadsWeightsThroughThem) {
  auto backend = create_backend(BackendKind::Cpu);
  const Tensor w = patterned(cpu::kHugePageBytes * 2);
  const Tensor uploaded = backend->upload(w, WeightRole::Matrix);
  EXPECT_EQ(std::memcmp(uploaded.raw(), w.raw(), w.nbytes()), 0);
  EXPECT_EQ(uploaded.raw() != w.raw(), cpu::huge_pages_offered() && cpu::room_for_copy(w.nbytes()));
}

}  // namespace
}  // namespace qvl
