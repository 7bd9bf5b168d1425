// layout_test_support.h: checks every architecture's ParameterLayout must
// pass, shared by the layout tests (gpt/gpt_layout_test.cc,
// llama/llama_layout_test.cc): tensors contiguous, each pipeline stage and
// each tensor-parallel shard initialising exactly its slice of the whole
// single-rank model, and the shards tiling it (every split element on exactly
// one rank, replicated ones identical everywhere). Test code only.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "runtime/model/architecture.h"

namespace paraplan::layout_test {

inline void expect_contiguous(const ParameterLayout& layout) {
  size_t expected_offset = 0;
  for (const ParameterTensor& tensor : layout.tensors()) {
    EXPECT_EQ(tensor.offset, expected_offset) << tensor.name;
    expected_offset += tensor.size;
  }
  EXPECT_EQ(expected_offset, layout.num_elements());
}

// Stage `stage` of tensor rank `rank` of `size` initialises, element by
// element, what the whole model holds at the same (global) place.
inline void expect_initialises_its_slice(const TransformerConfig& config, const StageSpec& stage,
                                         int rank, int size) {
  const std::unique_ptr<ParameterLayout> whole = make_whole_model_layout(config);
  std::vector<float> whole_params(whole->num_elements());
  whole->initialize(whole_params.data(), 11);
  const std::unique_ptr<ParameterLayout> part = make_parameter_layout(config, stage, rank, size);
  std::vector<float> params(part->num_elements());
  part->initialize(params.data(), 11);
  for (const ParameterTensor& tensor : part->tensors()) {
    const ParameterTensor* global = whole->find(tensor.name);
    ASSERT_NE(global, nullptr) << tensor.name;
    for (size_t k = 0; k < tensor.size; ++k)
      ASSERT_EQ(params[tensor.offset + k], whole_params[global->offset + tensor.global_index(k)])
          << tensor.name << " " << k;
  }
}

// The shards of tensor_size ranks cover every element of the whole model
// exactly once (replicated tensors counted on rank 0), with the whole model's
// values; split tensors are most of the model.
inline void expect_shards_tile_the_model(const TransformerConfig& config, int tensor_size) {
  const std::unique_ptr<ParameterLayout> whole = make_whole_model_layout(config);
  std::vector<int> covered(whole->num_elements(), 0);
  size_t sharded_elements = 0;
  const StageSpec all{0, config.num_layers, true, true};
  for (int rank = 0; rank < tensor_size; ++rank) {
    expect_initialises_its_slice(config, all, rank, tensor_size);
    const std::unique_ptr<ParameterLayout> shard =
        make_parameter_layout(config, all, rank, tensor_size);
    for (const ParameterTensor& tensor : shard->tensors()) {
      const ParameterTensor* global = whole->find(tensor.name);
      ASSERT_NE(global, nullptr);
      for (size_t k = 0; k < tensor.size; ++k)
        if (tensor.shard != ShardKind::kReplicated || rank == 0)
          ++covered[global->offset + tensor.global_index(k)];
      if (tensor.shard != ShardKind::kReplicated) sharded_elements += tensor.size;
    }
  }
  for (size_t g = 0; g < covered.size(); ++g) ASSERT_EQ(covered[g], 1) << g;
  EXPECT_GT(sharded_elements, whole->num_elements() / 2);
}

}  // namespace paraplan::layout_test
