// tensorboard_writer.h: training scalars as TensorBoard event files
// (`train --tensorboard-dir DIR`, as torchtitan's metrics.enable_tensorboard),
// written without TensorFlow or protobuf: each record is TFRecord-framed
// (length, masked CRC-32C, data, masked CRC-32C) and holds an Event protocol
// buffer encoded here by hand: wall_time, step, and a Summary of simple_value
// scalars. TensorBoard reads the directory as a run.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

namespace paraplan {

// CRC-32C (Castagnoli) of `size` bytes, and TFRecord's masked form of it.
uint32_t crc32c(const void* data, size_t size);
uint32_t masked_crc32c(const void* data, size_t size);

class TensorBoardWriter {
 public:
  // Creates `directory` if needed and a new event file in it
  // (events.out.tfevents.<seconds>.<host>.<pid>), which starts with the
  // file-version event. Throws naming the path if it cannot.
  explicit TensorBoardWriter(const std::string& directory);
  ~TensorBoardWriter();
  TensorBoardWriter(const TensorBoardWriter&) = delete;
  TensorBoardWriter& operator=(const TensorBoardWriter&) = delete;

  const std::string& path() const { return path_; }
  // One event at `step` holding every (tag, value); flushed, so that
  // TensorBoard shows it while the run goes on.
  void add_scalars(int64_t step, const std::vector<std::pair<std::string, double>>& scalars);

 private:
  void write_record(const std::string& event);

  std::string path_;
  std::FILE* file_ = nullptr;
};

}  // namespace paraplan
