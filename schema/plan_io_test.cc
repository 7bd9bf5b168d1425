// plan_io_test.cc: writing and loading plan files (round trip, atomic replace, every
// load failure and its message; enum names, plan_to_json and plan_to_table:
// plan_json_test.cc).
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "schema/plan_test_support.h"
#include "schema/text_test_support.h"

namespace paraplan {
namespace {

namespace fs = std::filesystem;
using schema::RecomputeMode;
using test_plans::build_plan;
using test_plans::contains;
using test_plans::make_plan_spec;
using test_plans::PlanSpec;

class PlanFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = ::testing::TempDir() + "plan_io_test.XXXXXX";
    ASSERT_NE(::mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
  }
  void TearDown() override {
    fs::permissions(dir_, fs::perms::owner_all, fs::perm_options::add);
    fs::remove_all(dir_);
  }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  void write_raw(const std::string& file, const std::vector<uint8_t>& bytes) const {
    std::ofstream out(file, std::ios::binary);
    out.write(reinterpret_cast<const char*>(bytes.data()),
              static_cast<std::streamsize>(bytes.size()));
  }
  // The message load_plan throws for file, or "" if it loads.
  static std::string load_error(const std::string& file) {
    try {
      load_plan(file);
    } catch (const std::runtime_error& error) {
      return error.what();
    }
    return "";
  }

  fs::path dir_;
};

TEST_F(PlanFileTest, WriteThenLoadRoundTripsEveryTable) {
  PlanSpec spec = make_plan_spec(2, 2, 2, 8, 4);
  spec.dtype = schema::DType::BFloat16;
  spec.stages[0].recompute = {RecomputeMode::Full, RecomputeMode::Selective, RecomputeMode::None,
                              RecomputeMode::None};
  spec.zero_stage = 1;
  spec.zero_num_groups = 2;
  const std::vector<uint8_t> bytes = build_plan(spec);
  const std::string file = path("job.pplan");
  write_plan(file, bytes.data(), bytes.size());

  const LoadedPlan loaded = load_plan(file);
  EXPECT_EQ(loaded.path(), file);
  EXPECT_EQ(loaded.bytes(), bytes);
  const schema::Plan& plan = loaded.plan();
  EXPECT_EQ(plan.header()->schema_version(), kPlanSchemaVersion);
  EXPECT_EQ(plan.header()->task_name()->str(), "unit-test");
  EXPECT_EQ(plan.model()->dtype(), schema::DType::BFloat16);
  EXPECT_EQ(plan.model()->num_layers(), 8);
  EXPECT_EQ(plan.training()->global_batch_size(), 16);
  EXPECT_FLOAT_EQ(plan.training()->optimizer()->learning_rate(), 3e-4f);
  EXPECT_EQ(plan.mesh()->tensor_parallel(), 2);
  ASSERT_EQ(plan.stages()->size(), 2u);
  EXPECT_EQ(plan.stages()->Get(0)->recompute()->Get(1), RecomputeMode::Selective);
  EXPECT_EQ(plan.stages()->Get(1)->first_layer(), 4);
  EXPECT_EQ(plan.zero()->num_groups(), 2);
  EXPECT_EQ(plan.schedule()->stages()->Get(1)->instructions()->size(),
            spec.schedule[1].instructions.size());
  EXPECT_DOUBLE_EQ(plan.predictions()->mfu(), 0.42);
}

TEST_F(PlanFileTest, WriteReplacesAnExistingPlanAndLeavesNoTemporaryFile) {
  const std::string file = path("job.pplan");
  const std::vector<uint8_t> first = build_plan(make_plan_spec(1, 1, 1, 4, 2));
  PlanSpec second_spec = make_plan_spec(2, 1, 1, 4, 2);
  second_spec.task_name = "second";
  const std::vector<uint8_t> second = build_plan(second_spec);
  write_plan(file, first.data(), first.size());
  write_plan(file, second.data(), second.size());
  EXPECT_EQ(load_plan(file).plan().header()->task_name()->str(), "second");
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(dir_)) {
    names.push_back(entry.path().filename().string());
  }
  EXPECT_EQ(names, std::vector<std::string>{"job.pplan"});
}

TEST_F(PlanFileTest, WriteIntoMissingDirectoryNamesIt) {
  const std::vector<uint8_t> bytes = build_plan(make_plan_spec(1, 1, 1, 4, 2));
  const std::string file = path("no/such/dir/job.pplan");
  try {
    write_plan(file, bytes.data(), bytes.size());
    FAIL() << "write_plan succeeded";
  } catch (const std::runtime_error& error) {
    EXPECT_TRUE(contains(error.what(), "cannot write plan '" + file + "'"));
    EXPECT_TRUE(contains(error.what(), "directory '" + path("no/such/dir") + "' does not exist"));
  }
}

TEST_F(PlanFileTest, WriteUnderAFileSaysItIsNotADirectory) {
  write_raw(path("plain"), {1, 2, 3});
  const std::vector<uint8_t> bytes = build_plan(make_plan_spec(1, 1, 1, 4, 2));
  try {
    write_plan(path("plain/job.pplan"), bytes.data(), bytes.size());
    FAIL() << "write_plan succeeded";
  } catch (const std::runtime_error& error) {
    EXPECT_TRUE(contains(error.what(), "'" + path("plain") + "' is not a directory"));
  }
}

TEST_F(PlanFileTest, WriteIntoReadOnlyDirectoryNamesIt) {
  if (::geteuid() == 0) GTEST_SKIP() << "running as root: permissions do not stop writes";
  fs::create_directory(path("ro"));
  fs::permissions(path("ro"), fs::perms::owner_read | fs::perms::owner_exec);
  const std::vector<uint8_t> bytes = build_plan(make_plan_spec(1, 1, 1, 4, 2));
  try {
    write_plan(path("ro/job.pplan"), bytes.data(), bytes.size());
    FAIL() << "write_plan succeeded";
  } catch (const std::runtime_error& error) {
    EXPECT_TRUE(contains(error.what(), "Permission denied"));
    EXPECT_TRUE(contains(error.what(), "is directory '" + path("ro") + "' writable?"));
  }
  fs::permissions(path("ro"), fs::perms::owner_all);
}

TEST_F(PlanFileTest, WriteReportsATemporaryFileItCannotCreate) {
  // A directory squatting on the temporary name makes open() fail even for root.
  const std::string temporary = path("job.pplan") + ".tmp." + std::to_string(::getpid());
  fs::create_directory(temporary);
  const std::vector<uint8_t> bytes = build_plan(make_plan_spec(1, 1, 1, 4, 2));
  try {
    write_plan(path("job.pplan"), bytes.data(), bytes.size());
    FAIL() << "write_plan succeeded";
  } catch (const std::runtime_error& error) {
    EXPECT_TRUE(contains(error.what(), "cannot create '" + temporary + "'"));
  }
  EXPECT_FALSE(fs::exists(path("job.pplan")));
}

TEST_F(PlanFileTest, WriteOntoADirectoryFailsAndRemovesItsTemporaryFile) {
  fs::create_directories(path("job.pplan/inside"));
  const std::vector<uint8_t> bytes = build_plan(make_plan_spec(1, 1, 1, 4, 2));
  try {
    write_plan(path("job.pplan"), bytes.data(), bytes.size());
    FAIL() << "write_plan succeeded";
  } catch (const std::runtime_error& error) {
    EXPECT_TRUE(contains(error.what(), "cannot rename"));
  }
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(dir_)) {
    names.push_back(entry.path().filename().string());
  }
  EXPECT_EQ(names, std::vector<std::string>{"job.pplan"});
}

TEST_F(PlanFileTest, WriteRefusesABufferThatIsNotAPlan) {
  const std::string text = "definitely not a flatbuffer";
  try {
    write_plan(path("job.pplan"), reinterpret_cast<const uint8_t*>(text.data()), text.size());
    FAIL() << "write_plan succeeded";
  } catch (const std::runtime_error& error) {
    EXPECT_TRUE(contains(error.what(), "not a verified paraplan plan"));
  }
  EXPECT_FALSE(fs::exists(path("job.pplan")));
}

TEST_F(PlanFileTest, LoadMissingFileSaysItDoesNotExist) {
  EXPECT_TRUE(contains(load_error(path("absent.pplan")),
                       "plan file '" + path("absent.pplan") + "' does not exist"));
}

TEST_F(PlanFileTest, LoadDirectorySaysItIsNotAPlanFile) {
  EXPECT_TRUE(contains(load_error(dir_.string()), "is a directory, not a plan file"));
}

TEST_F(PlanFileTest, LoadEmptyFileSaysItIsEmpty) {
  write_raw(path("empty.pplan"), {});
  const std::string message = load_error(path("empty.pplan"));
  EXPECT_TRUE(contains(message, "'" + path("empty.pplan") + "' is empty"));
  EXPECT_TRUE(contains(message, "PPLN"));
}

TEST_F(PlanFileTest, LoadFileShorterThanAHeaderSaysTruncated) {
  write_raw(path("short.pplan"), {1, 2, 3, 4, 5});
  EXPECT_TRUE(contains(load_error(path("short.pplan")),
                       "is truncated: 5 bytes, shorter than a FlatBuffer header (8 bytes)"));
}

TEST_F(PlanFileTest, LoadTruncatedPlanFailsVerification) {
  std::vector<uint8_t> bytes = build_plan(make_plan_spec(2, 2, 2, 8, 4));
  bytes.resize(bytes.size() / 2);
  write_raw(path("half.pplan"), bytes);
  EXPECT_TRUE(contains(
      load_error(path("half.pplan")),
      "'" + path("half.pplan") + "' is corrupt or truncated: FlatBuffers verification failed"));
}

TEST_F(PlanFileTest, LoadCorruptRootOffsetFailsVerification) {
  std::vector<uint8_t> bytes = build_plan(make_plan_spec(2, 2, 2, 8, 4));
  const uint32_t bad_offset = 0x7ffffff0;
  std::memcpy(bytes.data(), &bad_offset, sizeof(bad_offset));
  write_raw(path("corrupt.pplan"), bytes);
  EXPECT_TRUE(contains(load_error(path("corrupt.pplan")),
                       "is corrupt or truncated: FlatBuffers verification failed"));
}

TEST_F(PlanFileTest, LoadCorruptBodyFailsVerification) {
  std::vector<uint8_t> bytes = build_plan(make_plan_spec(2, 2, 2, 8, 4));
  for (size_t i = 8; i < bytes.size(); ++i) bytes[i] = 0xab;
  write_raw(path("corrupt.pplan"), bytes);
  EXPECT_TRUE(contains(load_error(path("corrupt.pplan")),
                       "is corrupt or truncated: FlatBuffers verification failed"));
}

// Any single corrupted byte must give a clean error or a valid plan, never a crash
// or a huge allocation (run under ASan to make this bite).
TEST(LoadPlanFromBytes, SurvivesEveryFlippedByte) {
  const std::vector<uint8_t> good = build_plan(make_plan_spec(2, 2, 2, 8, 4));
  int rejected = 0;
  for (size_t i = 0; i < good.size(); ++i) {
    for (uint8_t mask : {0x01, 0x80, 0xff}) {
      std::vector<uint8_t> bytes = good;
      bytes[i] ^= mask;
      try {
        const LoadedPlan loaded = load_plan_from_bytes("flipped", bytes);
        plan_to_json(loaded.plan());
        plan_to_table(loaded.plan());
      } catch (const std::runtime_error& error) {
        ++rejected;
        EXPECT_LE(std::string(error.what()).find("flipped"), 1u)
            << error.what();  // 'flipped' or flipped:
      }
    }
  }
  EXPECT_GT(rejected, static_cast<int>(good.size()));  // most corruptions are caught
}

TEST_F(PlanFileTest, LoadWrongIdentifierShowsWhatItFound) {
  std::vector<uint8_t> bytes = build_plan(make_plan_spec(1, 1, 1, 4, 2));
  std::memcpy(bytes.data() + 4, "ABCD", 4);
  write_raw(path("other.bin"), bytes);
  EXPECT_TRUE(contains(load_error(path("other.bin")),
                       "'" + path("other.bin") +
                           "' is not a paraplan plan (file identifier 'ABCD'; expected PPLN)"));
  std::memset(bytes.data() + 4, 0, 4);
  write_raw(path("zeros.bin"), bytes);
  EXPECT_TRUE(contains(load_error(path("zeros.bin")),
                       "(file identifier '\\x00\\x00\\x00\\x00'; expected PPLN)"));
}

TEST_F(PlanFileTest, LoadUnknownSchemaVersionNamesTheVersionsItReads) {
  PlanSpec spec = make_plan_spec(1, 1, 1, 4, 2);
  spec.schema_version = kPlanSchemaVersion + 1;
  write_raw(path("v14.pplan"), build_plan(spec));
  EXPECT_TRUE(contains(load_error(path("v14.pplan")),
                       "'" + path("v14.pplan") +
                           "' was written with plan schema version 14; this paraplan reads "
                           "versions 1 to 13"));
  spec.schema_version = 0;
  write_raw(path("v0.pplan"), build_plan(spec));
  EXPECT_TRUE(contains(load_error(path("v0.pplan")), "schema version 0; this paraplan reads"));
}

// Versions 1 and 2 only lack fields whose defaults mean what they meant then
// (GPT-2, one chunk per rank, no split backward, no sequence parallelism).
TEST_F(PlanFileTest, OlderSchemaVersionsReadAsTheyWereWritten) {
  for (const uint32_t version : {1u, 2u}) {
    PlanSpec spec = make_plan_spec(2, 1, 1, 4, 2);
    spec.schema_version = version;
    const std::string file = path("v" + std::to_string(version) + ".pplan");
    write_raw(file, build_plan(spec));
    const LoadedPlan loaded = load_plan(file);
    const schema::Plan& plan = loaded.plan();
    EXPECT_EQ(plan.header()->schema_version(), version);
    EXPECT_EQ(plan.schedule()->virtual_stages(), 1);
    EXPECT_FALSE(plan.mesh()->sequence_parallel());
    for (const schema::StageSchedule* stage : *plan.schedule()->stages())
      for (const schema::Instruction* instruction : *stage->instructions())
        EXPECT_EQ(instruction->chunk(), 0);
  }
}

// Plans before version 8 with Rendezvous transfers (1F1B and GPipe, and
// every plan before v5) are lowered at load: each combined op becomes its
// send then its receive, in place, and the transfers Posted. Version 8
// refuses Rendezvous, naming the version and what to do.
TEST_F(PlanFileTest, RendezvousPlansBeforeVersion8AreLoweredAtLoad) {
  const int p = 3, m = 5;
  for (const uint32_t version : {1u, 4u, 5u, 7u}) {
    PlanSpec spec = make_plan_spec(p, 1, 1, 6, m);
    spec.schema_version = version;
    spec.transfers = schema::Transfers::Rendezvous;
    for (int s = 0; s < p; ++s)
      spec.schedule[s].instructions =
          test_plans::one_f_one_b_stream(s, p, m, s == 0 || s == p - 1, true);
    const std::string file = path("rendezvous-v" + std::to_string(version) + ".pplan");
    write_raw(file, build_plan(spec));
    const LoadedPlan loaded = load_plan(file);
    const schema::Plan& plan = loaded.plan();
    EXPECT_EQ(plan.header()->schema_version(), version);
    EXPECT_EQ(plan.schedule()->transfers(), schema::Transfers::Posted);
    for (int s = 0; s < p; ++s) {
      const auto& lowered = *plan.schedule()->stages()->Get(s)->instructions();
      const std::vector<schema::Instruction> expected =
          test_plans::one_f_one_b_stream(s, p, m, s == 0 || s == p - 1);
      ASSERT_EQ(lowered.size(), expected.size()) << "version " << version << " stage " << s;
      for (size_t i = 0; i < expected.size(); ++i) {
        EXPECT_EQ(lowered.Get(i)->op(), expected[i].op()) << s << ":" << i;
        EXPECT_EQ(lowered.Get(i)->micro_batch(), expected[i].micro_batch()) << s << ":" << i;
        EXPECT_EQ(lowered.Get(i)->peer_micro_batch(), -1) << s << ":" << i;
      }
    }
    // Everything else as written.
    EXPECT_EQ(plan.stages()->size(), static_cast<uint32_t>(p));
    EXPECT_EQ(plan.training()->num_micro_batches(), m);
  }
  PlanSpec current = make_plan_spec(2, 1, 1, 4, 2);
  current.transfers = schema::Transfers::Rendezvous;
  write_raw(path("rendezvous-v8.pplan"), build_plan(current));
  const std::string error = load_error(path("rendezvous-v8.pplan"));
  EXPECT_TRUE(contains(error,
                       "schedule.transfers: rendezvous (0), retired in plan schema "
                       "version 8"))
      << error;
  EXPECT_TRUE(contains(error, "re-create the plan with 'paraplan plan'")) << error;
}

TEST_F(PlanFileTest, LoadInvalidPlanListsEveryViolationOnItsOwnLine) {
  PlanSpec spec = make_plan_spec(2, 2, 2, 8, 4);
  spec.d_model = 66;
  spec.zero_num_groups = 0;
  const std::vector<uint8_t> bytes = build_plan(spec);
  const std::string file = path("bad.pplan");
  write_plan(file, bytes.data(), bytes.size());  // writing does not validate semantics
  const std::string message = load_error(file);
  EXPECT_EQ(message.rfind(file + ": invalid plan:\n  ", 0), 0u) << message;
  EXPECT_TRUE(contains(message, "\n  model.d_model: 66 is not divisible by num_heads 4"));
  EXPECT_TRUE(contains(message, "\n  zero.num_groups: 0; must be at least 1"));
}

TEST(LoadPlanFromBytes, NamesTheSourceInItsMessages) {
  std::vector<uint8_t> bytes = build_plan(make_plan_spec(1, 1, 1, 4, 2));
  EXPECT_EQ(load_plan_from_bytes("memory", bytes).plan().model()->num_layers(), 4);
  bytes.resize(bytes.size() - 16);
  try {
    load_plan_from_bytes("<planner output>", bytes);
    FAIL() << "truncated bytes loaded";
  } catch (const std::runtime_error& error) {
    EXPECT_TRUE(contains(error.what(), "'<planner output>' is corrupt or truncated"));
  }
}

}  // namespace
}  // namespace paraplan
