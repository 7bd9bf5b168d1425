// tensor_file_set_test.cc: one file or an index of shards read as one set of
// tensors, and an index that points anywhere but its own directory's
// .safetensors files refused naming the index and the entry.
#include "runtime/checkpoint/tensor_file_set.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <vector>

#include "runtime/testing/test_temp_dir.h"

namespace paraplan {
namespace {

using testing::contains;
using testing::error_of;
using testing::TempDir;
using testing::write_bytes;

// model-00001-of-00002 holds "a", model-00002-of-00002 holds "b" and "c".
void write_two_shards(const TempDir& dir) {
  const std::vector<float> a = {1, 2}, b = {3}, c = {4, 5, 6};
  SafetensorsWriter first, second;
  first.add("a", {2}, a.data());
  second.add("b", {1}, b.data());
  second.add("c", {3}, c.data());
  first.write(dir / shard_file_name("model", 1, 2));
  second.write(dir / shard_file_name("model", 2, 2));
  write_safetensors_index(dir.path(), "model", 6 * sizeof(float),
                          {{"a", shard_file_name("model", 1, 2)},
                           {"b", shard_file_name("model", 2, 2)},
                           {"c", shard_file_name("model", 2, 2)}});
}

TEST(TensorFileSet, NamesFilesAsTransformersDoes) {
  EXPECT_EQ(shard_file_name("model", 2, 4), "model-00002-of-00004.safetensors");
  EXPECT_EQ(single_file_name("optimizer"), "optimizer.safetensors");
  EXPECT_EQ(index_file_name("model"), "model.safetensors.index.json");
}

TEST(TensorFileSet, ReadsAnIndexOfShardsAsOneSet) {
  TempDir dir;
  write_two_shards(dir);
  ASSERT_TRUE(has_tensor_files(dir.path(), "model"));
  EXPECT_FALSE(has_tensor_files(dir.path(), "optimizer"));
  const TensorFileSet set = TensorFileSet::open(dir.path(), "model");
  EXPECT_EQ(set.path(), dir / "model.safetensors.index.json");
  EXPECT_EQ(set.names(), (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_EQ(set.shape("c"), (std::vector<int64_t>{3}));
  std::vector<float> c(3), a(2);
  set.read("c", c.data(), {3});
  set.read("a", a.data(), {2});
  EXPECT_EQ(c, (std::vector<float>{4, 5, 6}));
  EXPECT_EQ(a, (std::vector<float>{1, 2}));
  EXPECT_FALSE(set.has("d"));
}

TEST(TensorFileSet, ReadsASingleFileWhenThereIsNoIndex) {
  TempDir dir;
  const std::vector<float> x = {7, 8};
  SafetensorsWriter writer;
  writer.add("x", {2}, x.data());
  writer.write(dir / "model.safetensors");
  const TensorFileSet set = TensorFileSet::open(dir.path(), "model");
  EXPECT_EQ(set.names(), (std::vector<std::string>{"x"}));
  std::vector<float> out(2);
  set.read("x", out.data(), {2});
  EXPECT_EQ(out, x);
}

TEST(TensorFileSet, RefusesIndexEntriesOutsideItsDirectory) {
  TempDir dir;
  const std::string index = dir / "model.safetensors.index.json";
  for (const char* file : {"../model-00001-of-00001.safetensors", "/etc/passwd",
                           "sub/x.safetensors", "notes.txt", ".safetensors"}) {
    write_bytes(index, std::string(R"({"weight_map": {"a": ")") + file + "\"}}");
    const std::string error = error_of([&] { TensorFileSet::open(dir.path(), "model"); });
    EXPECT_TRUE(contains(error, index + ": weight_map['a'] is")) << error;
    EXPECT_TRUE(contains(error, "must name a .safetensors file in the same directory")) << error;
  }
  write_bytes(index, R"({"metadata": {}})");
  EXPECT_TRUE(contains(error_of([&] { TensorFileSet::open(dir.path(), "model"); }),
                       "field 'weight_map' must be a non-empty object"));
  write_bytes(index, "{");
  EXPECT_TRUE(contains(error_of([&] { TensorFileSet::open(dir.path(), "model"); }),
                       index + ": not valid JSON"));
}

TEST(TensorFileSet, AShardMissingOrLackingATensorIsNamed) {
  TempDir dir;
  write_two_shards(dir);
  std::vector<float> out(3);
  // The index says the second shard holds "d" too.
  write_safetensors_index(dir.path(), "model", 0,
                          {{"a", shard_file_name("model", 1, 2)},
                           {"c", shard_file_name("model", 2, 2)},
                           {"d", shard_file_name("model", 2, 2)}});
  const TensorFileSet lying = TensorFileSet::open(dir.path(), "model");
  EXPECT_TRUE(contains(error_of([&] { lying.read("c", out.data(), {3}); }),
                       "model-00002-of-00002.safetensors: missing tensor 'd', which " +
                           (dir / "model.safetensors.index.json") + " says it holds"));
  std::filesystem::remove(dir / shard_file_name("model", 1, 2));
  const TensorFileSet missing = TensorFileSet::open(dir.path(), "model");
  const std::string error = error_of([&] { missing.read("a", out.data(), {2}); });
  EXPECT_TRUE(contains(error, "model-00001-of-00002.safetensors")) << error;
  EXPECT_TRUE(contains(error, "(named by " + (dir / "model.safetensors.index.json") + ")"))
      << error;
}

}  // namespace
}  // namespace paraplan
