// checkpoint_retention_test.cc: which step directories --checkpoint-keep-latest
// removes, and what it never touches.
#include "runtime/checkpoint/checkpoint_retention.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "runtime/testing/test_temp_dir.h"

namespace paraplan {
namespace {

namespace fs = std::filesystem;

// A step directory with a file in it, as a save leaves one.
void make_step(const fs::path& dir, const std::string& name) {
  fs::create_directories(dir / name);
  std::ofstream(dir / name / "model.safetensors") << "weights";
}

std::vector<std::string> entries(const fs::path& dir) {
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(dir)) names.push_back(entry.path().filename());
  std::sort(names.begin(), names.end());
  return names;
}

TEST(CheckpointRetention, KeepsTheNewestAtOrBeforeTheStepJustSaved) {
  testing::TempDir directory;
  const fs::path dir = directory.path();
  for (const char* name : {"step_00000002", "step_00000004", "step_00000006", "step_00000008",
                           "step_00000010", "step_00000020"})
    make_step(dir, name);
  std::ofstream(dir / "latest") << "step_00000010\n";
  std::ofstream(dir / "notes.txt") << "the user's";
  fs::create_directories(dir / "step_old_copy");               // not a name saves write
  fs::create_directories(dir / "step_00000001.tmp-999999-0");  // a save in flight elsewhere

  // step_00000020 is a later run's, resumed from step 10 since: left alone.
  EXPECT_EQ(remove_old_checkpoints(dir.string(), 10, 2),
            (std::vector<std::string>{"step_00000002", "step_00000004", "step_00000006"}));
  EXPECT_EQ(entries(dir), (std::vector<std::string>{
                              "latest", "notes.txt", "step_00000001.tmp-999999-0", "step_00000008",
                              "step_00000010", "step_00000020", "step_old_copy"}));
  // Nothing more to remove; keeping more than there are removes nothing.
  EXPECT_TRUE(remove_old_checkpoints(dir.string(), 10, 2).empty());
  EXPECT_TRUE(remove_old_checkpoints(dir.string(), 10, 50).empty());
  // Keeping one: the newest goes on, the rest go.
  EXPECT_EQ(remove_old_checkpoints(dir.string(), 10, 1),
            (std::vector<std::string>{"step_00000008"}));
  EXPECT_TRUE(fs::exists(dir / "step_00000010" / "model.safetensors"));
  EXPECT_THROW(remove_old_checkpoints(dir.string(), 10, 0), std::invalid_argument);
}

// 'latest' may name an older step than the one just saved while the save's
// own 'latest' is not yet written (or a user pointed it back by hand): the
// directory it names stays.
TEST(CheckpointRetention, NeverRemovesTheCheckpointLatestNames) {
  testing::TempDir directory;
  const fs::path dir = directory.path();
  for (const char* name : {"step_00000001", "step_00000002", "step_00000003"}) make_step(dir, name);
  std::ofstream(dir / "latest") << "step_00000001\n";
  EXPECT_EQ(remove_old_checkpoints(dir.string(), 3, 1),
            (std::vector<std::string>{"step_00000002"}));
  EXPECT_EQ(entries(dir), (std::vector<std::string>{"latest", "step_00000001", "step_00000003"}));
}

}  // namespace
}  // namespace paraplan
