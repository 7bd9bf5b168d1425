// context_parallel_options_test.cc: the job keys of context parallelism and
// document masking: [planner] context_parallel_degree (unset: searched; a
// fixed value validated against seq_len with one message naming the valid
// values), its part in the world a job's fixed degrees make, and [data]
// document_mask with document_separator (the tokenizer's end-of-text token
// by default, named where there is none, checked against the vocabulary).
#include <gtest/gtest.h>

#include "planner/job/device_layout.h"
#include "planner/job/job_config.h"
#include "planner/job/job_config_test_support.h"

namespace paraplan {
namespace {

using job_config_test::kMinimal;
using job_config_test::parse_error;

TEST(ContextParallelOptions, UnsetIsSearchedAndAFixedDegreeMustSplitTheSequenceInPairs) {
  const JobConfig config = parse_job_config(kMinimal);
  EXPECT_EQ(config.planner.context_parallel_degree, 0);  // the planner chooses
  // seq_len 64: 2 cp must divide it.
  EXPECT_EQ(parse_job_config(kMinimal, "job.toml", {{"planner.context_parallel_degree", "4"}})
                .planner.context_parallel_degree,
            4);
  EXPECT_EQ(parse_error(kMinimal, {{"planner.context_parallel_degree", "3"}}),
            "job.toml: [planner] context_parallel_degree = 3 is invalid: 2 x 3 = 6 does not "
            "divide [model] seq_len = 64 (each context-parallel rank holds 2 of the 2 x "
            "context_parallel_degree equal chunks of every sequence); valid: 0 (the planner "
            "chooses) or 1, 2, 4, 8, 16, 32");
  EXPECT_NE(parse_error(kMinimal, {{"planner.context_parallel_degree", "64"}})
                .find("2 x 64 = 128 does not divide [model] seq_len = 64"),
            std::string::npos);
  EXPECT_EQ(parse_error(kMinimal, {{"planner.context_parallel_degree", "-1"}}),
            "job.toml: [planner] context_parallel_degree = -1 is invalid; it must be >= 0 (0 "
            "lets the planner choose)");
  // Long sequences name at most 12 degrees.
  EXPECT_NE(
      parse_error(kMinimal, {{"model.seq_len", "131072"}, {"planner.context_parallel_degree", "3"}})
          .find("1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, ..."),
      std::string::npos);
}

TEST(ContextParallelOptions, FixedDegreesMakeTheWorldWithIt) {
  const JobConfig config = parse_job_config(kMinimal, "job.toml",
                                            {{"planner.pipeline_nstages", "2"},
                                             {"planner.tensor_parallel_degree", "2"},
                                             {"planner.context_parallel_degree", "4"}});
  EXPECT_EQ(resolve_device_layout(config).world_size(), 16);
}

TEST(ContextParallelOptions, DocumentMaskingDefaultsToTheTokenizersEndOfText) {
  const JobConfig plain = parse_job_config(kMinimal);
  EXPECT_FALSE(plain.data.document_mask);
  EXPECT_EQ(plain.data.document_separator, -1);
  const auto separator = [](const std::string& vocab) {
    return parse_job_config(kMinimal, "job.toml",
                            {{"model.vocab_size", vocab}, {"data.document_mask", "true"}})
        .data.document_separator;
  };
  EXPECT_EQ(separator("50257"), 50256);    // GPT-2's <|endoftext|>
  EXPECT_EQ(separator("50304"), 50256);    // GPT-2's, padded
  EXPECT_EQ(separator("128256"), 128000);  // Llama 3's <|begin_of_text|>
  EXPECT_EQ(default_document_separator(32000), -1);
  // Given, it wins.
  EXPECT_EQ(parse_job_config(kMinimal, "job.toml",
                             {{"model.vocab_size", "50257"},
                              {"data.document_mask", "true"},
                              {"data.document_separator", "0"}})
                .data.document_separator,
            0);
  // The option dump records the resolved separator, so that a re-plan keeps it.
  EXPECT_TRUE(option_default_is_derived("data.document_separator"));
}

TEST(ContextParallelOptions, DocumentSeparatorsAreNamedWhereMissingOrOutsideTheVocabulary) {
  EXPECT_EQ(parse_error(kMinimal, {{"data.document_mask", "true"}}),
            "job.toml: [data] document_separator is required with document_mask = true for "
            "vocab_size 256 (the default is known only for GPT-2's 50257..50304, 50256, and "
            "Llama 3's 128256, 128000): set it to the token between documents (`paraplan tokenize` "
            "prints it)");
  EXPECT_EQ(
      parse_error(kMinimal, {{"data.document_mask", "true"}, {"data.document_separator", "256"}}),
      "job.toml: [data] document_separator = 256 is not a token id; valid: [0, 256), the "
      "vocabulary");
  EXPECT_EQ(
      parse_error(kMinimal, {{"data.document_mask", "true"}, {"data.document_separator", "-1"}}),
      "job.toml: [data] document_separator = -1 is not a token id; valid: [0, 256), the "
      "vocabulary");
  EXPECT_EQ(parse_error(kMinimal, {{"data.document_separator", "7"}}),
            "job.toml: [data] document_separator = 7 is set, but document_mask = false; set "
            "document_mask = true to keep attention within the documents it ends, or remove "
            "document_separator");
  // In the file, typed by the field.
  EXPECT_NE(parse_error(std::string(kMinimal) + "[data]\ndocument_mask = \"yes\"\n")
                .find("[data] document_mask must be a boolean"),
            std::string::npos);
}

}  // namespace
}  // namespace paraplan
