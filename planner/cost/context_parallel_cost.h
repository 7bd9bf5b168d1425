// context_parallel_cost.h: what context parallelism (plan.fbs
// Mesh.context_parallel) costs, in one place: a rank's share of every
// sequence, the attention ring's transfers against the block attention they
// hide behind, the node placement of a context-parallel group, and the
// runtime's ring workspace (and document masking's table).
//
// Model (the runtime's ring: runtime/model/context_parallel.h):
// - Each rank of a group of cp holds chunks r and 2 cp - 1 - r of the 2 cp
//   equal chunks of every sequence: seq_len / cp tokens. Everything but the
//   attention core is per token, so its work and memory are the model's at
//   seq_len / cp (context_parallel_tokens; parameters, such as GPT-2's
//   learned positions, are the whole model's). The attention core's queries
//   are the rank's, its keys the whole sequence's; with the chunks balanced
//   every rank computes 1 / cp of the causal attention, an equal block per
//   ring step (transformer_ops.h AttentionCore::query_shards).
// - Forward: cp steps; during each of the first cp - 1 the rank passes on
//   the packed K/V block it holds (B (T / cp) 2 Hkv_local D elements of the
//   storage dtype) beside that step's block attention: exposed max(0,
//   transfer - block forward), cp - 1 times.
// - Backward: cp steps; the K/V blocks travel as forward, and each block's
//   fp32 dK/dV accumulator (B (T / cp) 2 Hkv_local D floats) one step
//   behind: a rank computes its share of the block it holds while that
//   block's accumulator comes from the previous rank, then adds the share
//   and passes it on. Step 0 hides the next K/V block, steps 1 to cp - 2
//   the next block and the arriving accumulator (one link: their sum),
//   step cp - 1 the accumulator alone: exposed max(0, K - b) + (cp - 2)
//   max(0, K + dKV - b) + max(0, dKV - b), b a step's block backward. The
//   owner's complete accumulator, passed on after the last step, has no
//   compute to hide behind: exposed whole (dKV).
// - Recomputation (selective: the attention core; full: the block) runs the
//   forward ring again inside the backward.
// - A ring step is a point-to-point transfer (each rank sends to the next
//   and receives from the previous at once) over the intra-node link when
//   every group's tp x cp consecutive ranks (its cp ranks at stride tp) sit
//   in one node, else the inter-node link (the slowest hop sets the pace).
// - Workspace per stage, shared by its blocks (counted with the transient
//   memory; runtime/model/context_attention.h allocates it where cp > 1 or
//   documents are masked): the tokens' positions (T int32), the fp32
//   accumulator of the output and then of dq (B (T / cp) H_local D floats)
//   with its storage-dtype copy, per K/V block in flight (two with a ring,
//   one without) the packed block (storage) and its fp32 dK/dV, and with a
//   ring a step's fp32 dK/dV share (the size of a block's dK/dV).
//   Document masking (Data.document_separator), with or without cp: each
//   in-flight micro-batch's documents table [B, T] int32.
// The plan records the ring's exposed seconds in
// StagePrediction.tensor_parallel_seconds (the collectives inside a
// micro-batch's blocks; plan_writer.cc).
#pragma once

#include <cstdint>
#include <functional>

#include "planner/cost/compute_model.h"
#include "planner/cost/cost_model.h"
#include "planner/job/job_config.h"

namespace paraplan {

// The model as one rank of a context-parallel group sees its tokens:
// seq_len / context_parallel of every sequence.
ModelConfig context_parallel_tokens(const ModelConfig& model, int context_parallel);

// Whether the search tries context parallelism cp (1 always): 2 cp must
// divide seq_len, and each of a rank's two chunks hold an attention tile
// (kAttentionTile tokens) or more; a chunk that fills no tile computes
// little behind each ring step's transfer. (A job may fix any cp that 2 cp
// divides seq_len by.)
bool context_parallel_searchable(const ModelConfig& model, int context_parallel);

// One packed K/V block of a micro-batch on one rank: B (T / cp) 2 Hkv_local D
// elements (Hkv_local = kv heads / tp).
double context_parallel_kv_block_elements(const ModelConfig& model, int micro_batch_size,
                                          int tensor_parallel, int context_parallel);

// One context-parallel ring of a block, per micro-batch.
struct ContextParallelRing {
  int ranks = 1;                     // cp
  double kv_transfer_seconds = 0;    // one K/V block passed on
  double dkv_transfer_seconds = 0;   // one fp32 dK/dV accumulator passed on
  double forward_step_seconds = 0;   // one step's block attention forward
  double backward_step_seconds = 0;  // one step's block attention backward
  // The transfers the block attention does not hide (the model above).
  double forward_exposed_seconds() const;
  double backward_exposed_seconds() const;
};

// The ring of one block of `model` on a rank of `shape` with micro-batches of
// micro_batch_size: the block attention from the analytic model on `device`,
// each transfer's seconds from transfer_seconds(bytes) (the link the group
// uses). A ring of one rank costs nothing.
ContextParallelRing context_parallel_ring(const ModelConfig& model, const ParallelShape& shape,
                                          int micro_batch_size, const DeviceModel& device,
                                          const std::function<double(double)>& transfer_seconds);

// Whether some context-parallel group of the mesh spans nodes (its ring then
// runs over the inter-node link).
bool context_parallel_group_crosses_nodes(const ParallelShape& shape, int devices_per_node);

// The ring's workspace of a stage (above); 0 without context parallelism
// and document masking.
int64_t context_parallel_workspace_bytes(const ModelConfig& model, int micro_batch_size,
                                         int tensor_parallel, int context_parallel,
                                         bool document_mask = false);

// Document masking's table of a micro-batch, [B, T] int32: per in-flight
// micro-batch of a stage.
int64_t document_table_bytes(const ModelConfig& model, int micro_batch_size);

}  // namespace paraplan
