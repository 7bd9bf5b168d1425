// training_data.h: the data `paraplan train` reads, from the command line and
// the plan's Training.data (job.toml's [data]):
//   training data    --data when given, else [data] train (a blend when it
//                    names several datasets); one of them is required;
//   validation data  --val-data when given, else [data] validation; optional;
//   order            [data] shuffle and seed; a plan without [data] (written
//                    before schema version 4) reads its data in file order.
//                    Recorded in every checkpoint (data_order_record.h).
// Everything is opened and checked here, before the run allocates.
#pragma once

#include <memory>
#include <string>

#include "runtime/checkpoint/data_order_record.h"
#include "runtime/data/data_loader.h"
#include "runtime/data/multiple_choice.h"
#include "schema/plan_io.h"

namespace paraplan {

struct TrainingData {
  std::unique_ptr<DataLoader> train;
  std::string train_name;       // how errors name it: "--data fineweb_*.bin", "[data] train"
  DataOrderRecord train_order;  // what checkpoints record, and a resume compares
  std::unique_ptr<DataLoader> validation;  // null when there is none
  std::string validation_name;
};

// Throws std::runtime_error naming the flag or key and the file.
TrainingData open_training_data(const std::string& data_flag, const std::string& val_data_flag,
                                const schema::Training& training, int seq_len, int vocab_size);

// Validation data: --val-data when given (val_data_flag), else the plan's
// [data] validation; null when neither. Sets *name to how errors name it.
std::unique_ptr<DataLoader> open_validation_data(const std::string& val_data_flag,
                                                 const schema::Training& training, int seq_len,
                                                 int vocab_size, std::string* name);

// The multiple-choice set --hellaswag names (llm.c's eval file or
// HellaSwag's .jsonl; runtime/tokenizer/hellaswag.h) as rows of seq_len. A
// .jsonl is encoded with the tokenizer at tokenizer_path, else the one beside
// the weights in model_dir (tokenizer_file_in; model_dir may be empty), else
// byte by byte for a byte-level model (vocab 256). Every token must be below
// vocab_size. Throws std::runtime_error naming the flag and the file.
std::unique_ptr<MultipleChoiceRows> open_multiple_choice_rows(const std::string& path,
                                                              const std::string& tokenizer_path,
                                                              const std::string& model_dir,
                                                              int seq_len, int vocab_size);

// "hellaswag: 10,042 examples (40,168 rows) from FILE", and how many contexts
// were cut to fit.
std::string describe(const MultipleChoiceRows& rows, const std::string& path);

// One line for the log: datasets, shards, tokens, samples, shares and order.
std::string describe(const DataLoader& data);

}  // namespace paraplan
