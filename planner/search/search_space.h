// search_space.h: what the search may choose, resolved from a JobConfig: the
// job's devices, the candidate meshes, micro-batch sizes, ZeRO settings, and the
// per-layer recompute intervals and stage boundaries the options allow.
//
// World size and devices: job/device_layout.h.
// Meshes: every (pp, dp, cp, tp) with pp x dp x cp x tp = world where tp divides the
// devices per node, num_heads, d_model, ffn_size and vocab_size (the runtime
// splits the vocabulary), pp <= num_layers + 2 (only the first and last stage may
// hold no block), dp divides global_batch_size, 2 cp divides seq_len (context
// parallelism: cost/context_parallel_cost.h); fixed degrees are respected.
// Sequence parallelism (tp > 1 only, seq_len / cp divisible by tp): sequence_parallel
// true or false fixes it, 'auto' tries both; each is a mesh of its own.
// ZeRO: zero_stage fixed when set, else every stage the runtime runs
// (schema/zero_stages.h: 0 to 3; the sharding ones only where dp x cp > 1);
// zero_ngroups as set (it must divide dp x cp), else 1.
// Micro-batches: a fixed micro_batch_size or update_freq fixes it; otherwise
// every b with b x dp dividing global_batch_size.
// Every inconsistency is a std::runtime_error naming the file and the field.
#pragma once

#include <string>
#include <vector>

#include "planner/cost/communication_model.h"
#include "planner/job/device_layout.h"
#include "planner/job/job_config.h"
#include "planner/job/partition_constraints.h"
#include "planner/search/recompute_choice.h"

namespace paraplan {

struct SearchSpace {
  DeviceLayout layout;
  std::vector<ParallelShape> meshes;  // ordered by (tp, pp, cp)
  // Per layer: the recompute modes the search may choose.
  std::vector<RecomputeRange> layer_recompute;
  // Positions 0..num_layers: may a stage end (the next begin) before layer j?
  std::vector<char> boundary_allowed;
  bool boundaries_restricted = false;  // pipeline_pivots narrowed them
  // Blocks pinned to a stage by the partition-constraints file: {block, stage},
  // stage -1 = the last.
  std::vector<std::pair<int, int>> pinned_layers;
  std::vector<int> zero_stages;  // candidates
  int zero_ngroups = 1;
  bool zero_ngroups_fixed = false;
  int fixed_micro_batch_size = 0;   // 0 = search
  std::string micro_batch_field;    // the option that fixed it
  int fixed_num_micro_batches = 0;  // update_freq, 0 = search
  bool pipeline_fixed = false;
  // Why degrees the user did not fix were left out ("tp 3: does not divide num_heads 4").
  std::vector<std::string> excluded;
};

SearchSpace resolve_search_space(const JobConfig& config);

// Narrows space (per-layer recompute intervals, pinned layers) by a
// partition-constraints file (job/partition_constraints.h) and fills
// allowed_tensor_parallel (empty = any). Throws on contradictions with the
// fixed options.
void apply_partition_constraints(const JobConfig& config, const PartitionConstraints& constraints,
                                 SearchSpace& space, std::vector<int>& allowed_tensor_parallel);

// Micro-batch sizes for data-parallel degree dp, largest first.
std::vector<int> micro_batch_sizes(const SearchSpace& space, const JobConfig& config,
                                   int data_parallel);

// Whether micro-batch size b on `shape`, a mesh with context parallelism, is
// left out of the search: where g = gcd(b, cp) > 1 and the space has the mesh
// with dp x g and cp / g (same pp, tp, sequence parallelism) and micro-batch
// b / g there, that setting runs the same tokens per rank per micro-batch
// (the same GEMMs, the same attention FLOPs, activations, collectives and
// micro-batch count) with a shorter ring of the same blocks: the cost
// model's step and memory are never worse there, so the search skips b. Not
// where a measured profile costs the other mesh (cp / g = 1) and not this
// one, nor where that mesh (cp / g = 1) would run attention on cuDNN, whose
// workspace the ring's block kernels do not take: there the ring may fit
// where the shorter mesh does not. (max_pipeline_unbalance_ratio may refuse
// the shorter mesh where the ring's time per block passes it: the search
// then tries b after all, plan_search.cc.)
bool context_parallel_dominated(const SearchSpace& space, const JobConfig& config,
                                const ParallelShape& shape, int micro_batch_size,
                                bool measured_profile);

// The sequence-parallel settings a mesh of tensor-parallel degree tp and
// context-parallel degree cp may use (the rule above); a tp whose seq_len / cp
// forbids the one asked for is noted in excluded (and gets none).
std::vector<bool> sequence_parallel_choices(const JobConfig& config, int tp, int cp,
                                            std::vector<std::string>& excluded);

}  // namespace paraplan
