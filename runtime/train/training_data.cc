// training_data.cc: the run's data from --data, --val-data and the plan's
// [data] (training_data.h).
#include "runtime/train/training_data.h"

#include <cstdio>
#include <filesystem>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string_view>
#include <vector>

#include "common/printable_text.h"
#include "runtime/tokenizer/hellaswag.h"

namespace paraplan {

namespace {

std::string with_thousands(int64_t value) {
  std::string digits = std::to_string(value), text;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) text += ',';
    text += digits[i];
  }
  return text;
}

// The order as checkpoints record it: each dataset's files made absolute
// (lexically: hosts may reach the same files through other links), so the
// same files named from another directory are the same order. A file name
// that is not UTF-8 is refused here: train_state.json could not hold it.
DataOrderRecord order_record(const DataLoader& loader, const std::vector<DataSource>& sources,
                             const std::string& what) {
  DataOrderRecord record{
      .datasets = {}, .shuffle = loader.order().shuffle, .seed = loader.order().seed};
  for (size_t d = 0; d < loader.num_datasets(); ++d) {
    const TokenDataset& dataset = loader.dataset(d);
    std::vector<std::string> files;
    std::vector<int64_t> tokens;
    for (size_t s = 0; s < dataset.num_shards(); ++s) {
      const std::string& file = dataset.shard(s).path();
      if (const std::string problem = utf8_problem(file); !problem.empty())
        throw std::runtime_error(what + ": " + printable_text(file) + ": the file name's " +
                                 problem + "; rename it to UTF-8 (checkpoints record it)");
      files.push_back(std::filesystem::absolute(file).lexically_normal().string());
      tokens.push_back(dataset.shard(s).num_tokens());
    }
    record.datasets.push_back(dataset_record(files, tokens, sources[d].weight));
  }
  return record;
}

}  // namespace

TrainingData open_training_data(const std::string& data_flag, const std::string& val_data_flag,
                                const schema::Training& training, int seq_len, int vocab_size) {
  const schema::Data* plan_data = training.data();
  DataOrder order;
  if (plan_data != nullptr)
    order = DataOrder{.shuffle = plan_data->shuffle(), .seed = plan_data->seed()};
  TrainingData data;
  std::vector<DataSource> sources;
  if (!data_flag.empty()) {
    sources.push_back({data_flag, 1.0});
    data.train_name = "--data " + data_flag;
  } else if (plan_data != nullptr && plan_data->train() != nullptr &&
             plan_data->train()->size() > 0) {
    for (const schema::DataSource* source : *plan_data->train())
      sources.push_back({source->paths() ? source->paths()->str() : "", source->weight()});
    data.train_name = "[data] train";
  } else {
    throw std::runtime_error(
        "no training data: give --data (a token file, a glob such as 'shards/train_*.bin', or a "
        "comma-separated list), or [data] train in the job file the plan was made from");
  }
  data.train = std::make_unique<DataLoader>(sources, seq_len, vocab_size, order,
                                            data_flag.empty() ? "[data] train" : "--data");
  data.train_order =
      order_record(*data.train, sources, data_flag.empty() ? "[data] train" : "--data");

  data.validation =
      open_validation_data(val_data_flag, training, seq_len, vocab_size, &data.validation_name);
  return data;
}

std::unique_ptr<DataLoader> open_validation_data(const std::string& val_data_flag,
                                                 const schema::Training& training, int seq_len,
                                                 int vocab_size, std::string* name) {
  const schema::Data* plan_data = training.data();
  std::string validation = val_data_flag;
  *name = "--val-data " + val_data_flag;
  if (validation.empty() && plan_data != nullptr && plan_data->validation() != nullptr) {
    validation = plan_data->validation()->str();
    *name = "[data] validation";
  }
  // Validation reads its samples in file order: the same ones every time.
  if (validation.empty()) return nullptr;
  return std::make_unique<DataLoader>(validation, seq_len, vocab_size,
                                      val_data_flag.empty() ? "[data] validation" : "--val-data");
}

std::string describe(const DataLoader& data) {
  std::ostringstream text;
  for (size_t d = 0; d < data.num_datasets(); ++d) {
    const TokenDataset& dataset = data.dataset(d);
    if (d > 0) text << "; ";
    text << dataset.spec() << ": " << dataset.num_shards()
         << (dataset.num_shards() == 1 ? " shard, " : " shards, ")
         << with_thousands(dataset.num_tokens()) << " tokens, "
         << with_thousands(dataset.num_samples()) << " samples";
    if (data.num_datasets() > 1) {
      char share[32];
      std::snprintf(share, sizeof(share), "%.1f%%",
                    100.0 * data.blend().places(static_cast<int>(d)) / data.blend().period());
      text << ", " << share << " of the draws";
    }
  }
  if (data.order().shuffle)
    text << "; shuffled each epoch (seed " << data.order().seed << ")";
  else
    text << "; in file order";
  return text.str();
}

std::unique_ptr<MultipleChoiceRows> open_multiple_choice_rows(const std::string& path,
                                                              const std::string& tokenizer_path,
                                                              const std::string& model_dir,
                                                              int seq_len, int vocab_size) {
  const std::string name = "--hellaswag " + path;
  std::optional<BpeTokenizer> tokenizer;
  if (is_hellaswag_text(path)) {
    const std::string file = !tokenizer_path.empty() ? tokenizer_path
                             : model_dir.empty()     ? ""
                                                     : tokenizer_file_in(model_dir);
    if (!file.empty())
      tokenizer = load_tokenizer_for_model(
          file, vocab_size, "the model (vocab_size " + std::to_string(vocab_size) + ")");
    else if (vocab_size != 256)
      throw std::runtime_error(name +
                               ": text needs the model's tokenizer: give --tokenizer "
                               "(tokenizer.json or .tiktoken), or llm.c's "
                               "hellaswag_val.bin (tokens already)");
  }
  std::vector<MultipleChoiceExample> examples;
  try {
    examples = read_multiple_choice_set(path, tokenizer ? &*tokenizer : nullptr);
  } catch (const std::runtime_error& error) {
    throw std::runtime_error("--hellaswag: " + std::string(error.what()));
  }
  if (const std::string outside = find_token_outside(examples, vocab_size); !outside.empty())
    throw std::runtime_error(name + ": " + outside + " is not below the model's vocab_size " +
                             std::to_string(vocab_size) +
                             " (tokenized for another model's vocabulary?)");
  return std::make_unique<MultipleChoiceRows>(std::move(examples), seq_len, name);
}

std::string describe(const MultipleChoiceRows& rows, const std::string& path) {
  std::string text = "hellaswag: " + with_thousands(rows.num_examples()) + " examples (" +
                     with_thousands(rows.num_rows()) + " rows of " +
                     std::to_string(rows.seq_len()) + " tokens) from " + path;
  if (rows.truncated_examples() > 0)
    text += "; " + with_thousands(rows.truncated_examples()) +
            " contexts cut from the left to fit seq_len";
  return text;
}

}  // namespace paraplan
