// parquet_test.cc: `paraplan tokenize --input FILE.parquet` against pyarrow
// (tests/parquet_check.py, from the venv scripts/install_dependencies.sh
// makes; the test skips without it): every form Hugging Face datasets and
// datatrove write (SNAPPY, ZSTD, uncompressed, PLAIN and dictionary values,
// data pages v1 and v2, many row groups, nulls, optional and required
// columns), and Spark's DELTA_BYTE_ARRAY and DELTA_LENGTH_BYTE_ARRAY, gives the tokens of the same
// documents as a .jsonl, and a validation split starts at a document; what paraplan does not read
// (GZIP, a text column inside a struct, a file cut short, a missing column, no tokenizer) is
// refused in one line naming the file and what to do.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "command_fixture.h"

namespace {

using namespace paraplan::testing;

const std::string kGpt2 = std::string(PARAPLAN_SOURCE_DIR) + "/.cache/tokenizers/gpt2.tiktoken";

class Parquet : public CommandTest {
 protected:
  void SetUp() override {
    CommandTest::SetUp();
    if (!std::filesystem::exists(kGpt2) ||
        run_command(std::string(PARAPLAN_HF_PYTHON) + " -c 'import pyarrow'").exit_code != 0)
      GTEST_SKIP() << PARAPLAN_HF_PYTHON << " cannot import pyarrow, or " << kGpt2
                   << " is missing; run scripts/install_dependencies.sh";
  }

  CommandResult tokenize(const std::string& input, const std::string& extra = "") {
    return run("tokenize --tokenizer " + kGpt2 + " --input " + path("work/" + input) +
               " --output " + path("out") + " " + extra);
  }
};

TEST_F(Parquet, EveryFormGivesTheTokensOfTheSameDocumentsAsJsonl) {
  const CommandResult checked =
      run_command(std::string(PARAPLAN_HF_PYTHON) + " " + PARAPLAN_SOURCE_DIR +
                  "/tests/parquet_check.py " + PARAPLAN_BINARY + " " + kGpt2 + " " + path("work"));
  ASSERT_EQ(checked.exit_code, 0) << checked.output;
  const nlohmann::json results =
      nlohmann::json::parse(checked.output.substr(checked.output.rfind("\n{") + 1));
  EXPECT_GT(results["tokens"].get<int64_t>(), 1000000);
  for (const char* form : {"snappy", "zstd", "none", "plain", "v2", "groups", "v2_zstd_groups",
                           "required", "delta", "delta_length_v2_zstd"})
    EXPECT_TRUE(results["forms"][form].get<bool>()) << form;
  EXPECT_TRUE(results["split"].get<bool>());

  expect_clear_error(tokenize("gzip.parquet"),
                     {"gzip.parquet: row group 0: compressed with GZIP; paraplan reads "
                      "UNCOMPRESSED, SNAPPY (pyarrow's default) and ZSTD"});
  expect_clear_error(tokenize("nested.parquet"),
                     {"nested.parquet: no column \"text\" (--text-field); its columns are "
                      "\"meta\""});
  expect_clear_error(tokenize("cut.parquet"),
                     {"cut.parquet: not a whole Parquet file (it does not end with PAR1"});
  expect_clear_error(tokenize("snappy.parquet", "--text-field body"),
                     {"no column \"body\" (--text-field); its columns are \"id\", \"text\", "
                      "\"url\""});
  expect_clear_error(
      run("tokenize --input " + path("work/snappy.parquet") + " --output " + path("out")),
      {"snappy.parquet: a .parquet corpus needs --tokenizer"});
}

}  // namespace
