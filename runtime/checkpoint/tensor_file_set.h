// tensor_file_set.h: the tensors of one kind in a step directory ("model" or
// "optimizer"), in either of the forms Hugging Face's from_pretrained takes:
//
//   BASE.safetensors                      one file, or
//   BASE.safetensors.index.json           {"metadata": {"total_size": bytes},
//                                          "weight_map": {tensor name: file name}}
//   BASE-00001-of-00004.safetensors ...   the files it names, in the same directory
//
// A distributed save writes one file per writer (distributed_checkpoint.h);
// Hugging Face's hub ships large models the same way, so `train --init-from`
// reads either. Which file holds a tensor depends on the plan that saved it;
// the tensors do not.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "runtime/checkpoint/safetensors.h"

namespace paraplan {

// "model-00002-of-00004.safetensors": file `number` (1-based) of `count`.
std::string shard_file_name(const std::string& base, int number, int count);
std::string single_file_name(const std::string& base);  // "model.safetensors"
std::string index_file_name(const std::string& base);   // "model.safetensors.index.json"

// Writes BASE.safetensors.index.json in `directory` atomically.
// `total_bytes` is the tensors' data size (transformers reads it as
// metadata.total_size).
void write_safetensors_index(const std::string& directory, const std::string& base,
                             uint64_t total_bytes,
                             const std::map<std::string, std::string>& weight_map);

// True if `directory` holds BASE.safetensors or its index.
bool has_tensor_files(const std::string& directory, const std::string& base);

class TensorFileSet {
 public:
  // The index if there is one, else BASE.safetensors (opened and validated
  // now, so a missing or corrupt file is named at once). The index is
  // validated: a JSON object whose weight_map maps names to plain file names
  // in the directory ending in .safetensors. A shard is opened on its first
  // read, and checked to hold every tensor the index gives it.
  static TensorFileSet open(const std::string& directory, const std::string& base);

  // The file the reader names in messages: BASE.safetensors or the index.
  const std::string& path() const { return path_; }
  size_t tensor_count() const;
  std::vector<std::string> names() const;  // sorted
  bool has(const std::string& name) const;
  const std::vector<int64_t>& shape(const std::string& name) const;  // throws if absent
  // Reads tensor `name` as floats after checking its shape (SafetensorsFile::read).
  void read(const std::string& name, float* out, const std::vector<int64_t>& expected_shape) const;
  // Elements [first, first + count) of it (SafetensorsFile::read_range).
  void read_range(const std::string& name, const std::vector<int64_t>& expected_shape, size_t first,
                  size_t count, float* out) const;

 private:
  const SafetensorsFile& file_holding(const std::string& name) const;

  std::string directory_, path_;
  std::unique_ptr<SafetensorsFile> single_;
  std::map<std::string, std::string> weight_map_;  // index form: tensor -> file name
  // Shards opened so far, by file name; reads are const.
  mutable std::map<std::string, SafetensorsFile> shards_;
};

}  // namespace paraplan
