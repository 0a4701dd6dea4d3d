#include "io/memory_env.h"

#include <cstdint>
#include <gtest/gtest.h>


namespace stoker {
namespace {

TEST(MemoryEnv, FilesDirectoriesRenames) {
  MemoryEnv env;
  EXPECT_EQ(env.Stat("/d").status().code(), StatusCode::kNotFound);
  ASSERT_TRUE(env.CreateDirs("/d/e").ok());
  EXPECT_TRUE(env.Stat("/d").value().is_dir);
  ASSERT_TRUE(env.WriteFile("/d/b.txt", "hello", 5).ok());
  ASSERT_TRUE(env.WriteFileAtomic("/d/a.txt", "xy", 2).ok());
  std::vector<uint8_t> got;
  ASSERT_TRUE(env.ReadFile("/d/b.txt", &got).ok());
  EXPECT_EQ(std::string(got.begin(), got.end()), "hello");
  auto ls = env.ListDir("/d");
  ASSERT_TRUE(ls.ok());
  ASSERT_EQ(ls->size(), 3u);  // sorted: a.txt, b.txt, e/
  EXPECT_EQ((*ls)[0].name, "a.txt");
  EXPECT_EQ((*ls)[2].name, "e");
  EXPECT_TRUE((*ls)[2].is_dir);
  ASSERT_TRUE(env.RenameFile("/d/b.txt", "/d/e/c.txt").ok());
  EXPECT_FALSE(env.FileExists("/d/b.txt"));
  EXPECT_EQ(env.Stat("/d/e/c.txt").value().size, 5u);
  ASSERT_TRUE(env.RemoveFile("/d/e/c.txt").ok());
  EXPECT_EQ(env.RemoveFile("/d/e/c.txt").code(), StatusCode::kNotFound);
  EXPECT_EQ(env.NewRandomAccessFile("/nope").status().code(), StatusCode::kNotFound);
  auto f = env.NewRandomAccessFile("/d/a.txt");
  ASSERT_TRUE(f.ok());
  uint8_t b[4];
  EXPECT_EQ((*f)->ReadAt(1, 4, b).value(), 1u);
  EXPECT_EQ((*f)->ReadExact(0, 3, b).code(), StatusCode::kCorrupt);
}

}  // namespace
}  // namespace stoker
