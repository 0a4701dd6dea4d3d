// Inputs the libFuzzer targets found (tests/data/fuzz/), replayed as regression tests.
#include <cstdint>
#include <gtest/gtest.h>

#include <fstream>
#include <iterator>
#include <string>

#include "formats/dataset.h"
#include "formats/hdf5_heap.h"
#include "formats/parquet_thrift.h"

namespace stoker {
namespace {

std::string FuzzInput(const std::string& name) {
  std::ifstream in(std::string(STOKER_SOURCE_DIR) + "/tests/data/fuzz/" + name, std::ios::binary);
  EXPECT_TRUE(in.good()) << name;
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// parquet_thrift_fuzz: a map of bools declaring a huge size looped without reading input.
TEST(FuzzRegress, ThriftMapOfBoolsEndsAtTheInput) {
  std::string d = FuzzInput("parquet_thrift_map_of_bools.bin");
  ASSERT_FALSE(d.empty());
  const auto* p = reinterpret_cast<const uint8_t*>(d.data());
  // Read as a map (type 11), the input declares more bools than it holds: false, not a
  // loop. Every other type reader also stays inside the input.
  CompactReader m(p, d.size());
  EXPECT_FALSE(m.SkipValue(11, 0));
  EXPECT_LE(m.pos(), d.size());
  for (int t = 1; t <= 12; ++t) {
    CompactReader r(p, d.size());
    r.SkipValue(t, 0);
    EXPECT_LE(r.pos(), d.size()) << "type " << t;
  }
  PageHeaderInfo h;
  EXPECT_FALSE(ParsePageHeader(p, d.size(), &h));
}

TEST(FuzzRegress, ThriftListAndMapOfBoolsAreBytes) {
  // list<bool> of 3 (0x31 = size 3, type 1) then a map<bool,bool> of 1 (size 1, kv 0x11).
  const uint8_t list[] = {0x31, 1, 2, 1};
  CompactReader a(list, sizeof list);
  EXPECT_TRUE(a.SkipValue(9, 0));
  EXPECT_EQ(a.pos(), sizeof list);
  const uint8_t map[] = {0x01, 0x11, 1, 2};
  CompactReader b(map, sizeof map);
  EXPECT_TRUE(b.SkipValue(11, 0));
  EXPECT_EQ(b.pos(), sizeof map);
}

// brace_fuzz: two ranges whose product is 92 million names.
TEST(FuzzRegress, BraceProductIsBounded) {
  std::string p = FuzzInput("brace_product_of_ranges.txt");
  ASSERT_FALSE(p.empty());
  auto r = ExpandBraces(p);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("expands to more than"), std::string::npos)
      << r.status().ToString();
  // Real shard lists still expand.
  auto ok = ExpandBraces("train-{000000..099999}.tar");
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ(ok->size(), 100000u);
  EXPECT_EQ(ok->back(), "train-099999.tar");
}

TEST(FuzzRegress, Hdf5HeapObjectsStayInsideTheCollection) {
  // A collection of 64 bytes at address 0 whose first object claims more than it holds.
  uint8_t c[64] = {'G', 'C', 'O', 'L', 1};
  c[8] = 64;          // collection size
  c[16] = 1;          // object 1 ...
  c[24] = 200;        // ... of 200 bytes: does not fit
  auto cs = ParseHdf5HeapHeader(c, 0, sizeof c);
  ASSERT_TRUE(cs.ok()) << cs.status().ToString();
  EXPECT_TRUE(ListHdf5HeapObjects(c, *cs, 0).empty());
  c[24] = 8;          // now it fits: data right after its 16-byte header
  auto objs = ListHdf5HeapObjects(c, *cs, 0);
  ASSERT_EQ(objs.size(), 1u);
  EXPECT_EQ(objs[0].offset, 32u);
  EXPECT_EQ(objs[0].size, 8u);
  c[8] = 65;          // claims more than the file
  EXPECT_FALSE(ParseHdf5HeapHeader(c, 0, sizeof c).ok());
}

}  // namespace
}  // namespace stoker
