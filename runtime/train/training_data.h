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

// One line for the log: datasets, shards, tokens, samples, shares and order.
std::string describe(const DataLoader& data);

}  // namespace paraplan
