// plan_io.h: reading, writing, validating and printing plan files (schema/plan.fbs).
//
// load_plan() is the one door through which a plan enters the runtime or the
// planner: it runs the FlatBuffers verifier, then semantic validation, and
// throws std::runtime_error whose message names the file, the field and what
// would be valid. Errors are collected, not stopped at the first: the message
// lists every violation, one per line.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "plan_generated.h"

namespace paraplan {

// Bumped whenever plan.fbs changes; readers refuse versions outside
// [kOldestReadablePlanSchemaVersion, kPlanSchemaVersion]. Every change so far
// adds fields whose defaults mean what an older plan meant, so older plans
// read as they were written.
// 2: the Llama fields of Model (num_kv_heads, rope_theta, rope scaling).
// 3: virtual stages (Schedule.virtual_stages, Instruction.chunk), split
//    backward (BackwardInput, BackwardWeight), Interleaved1F1B and
//    ZeroBubbleH1 schedules, Mesh.sequence_parallel.
// 4: Training.data (datasets, blend weights, shuffle and its seed).
// 5: Schedule.transfers (Posted: sends and receives that never wait).
// 6: the ZeroBubbleV schedule kind (two chunks per rank in a V).
// 7: the DualPipeV schedule kind (ZB-V's V in DualPipe-V's order).
// 8: one transfer model: every schedule's transfers are Posted; the
//    combined send-and-receive ops (7, 8) are retired. Older plans with
//    Rendezvous transfers are lowered at load (plan_lowering.h).
// 9: ZeRO stages 2 and 3 (StageSchedule.keep_parameters_gathered), context
//    parallelism (Mesh.context_parallel), document masking
//    (Data.document_separator).
// 10: ZeRO's unit ops in the streams (GatherParameters, ReleaseParameters,
//    ReduceScatterGradients; Instruction.unit) and ZeRO-3's gathered
//    working set as its own memory part (StageMemory.gathered). ZeRO-2 and
//    3 streams of older plans get the unit ops at load (zero_units.h).
// 11: ZeRO units of several layers (Zero.layers_per_unit).
// 12: the warmup-stable-decay LR schedule (LrDecayStyle.WarmupStableDecay,
//    Optimizer.wsd_decay_steps and wsd_decay_style).
// 13: Llama's q, k and v biases (Model.qkv_bias: Qwen 2).
inline constexpr uint32_t kPlanSchemaVersion = 13;
// The first version whose ZeRO-2 and 3 streams list their unit ops.
inline constexpr uint32_t kZeroUnitOpsPlanSchemaVersion = 10;
// The first version whose plans must have Posted transfers.
inline constexpr uint32_t kPostedOnlyPlanSchemaVersion = 8;
inline constexpr uint32_t kOldestReadablePlanSchemaVersion = 1;

// The device memory a plan's ranks may allocate: device_memory_bytes less
// reserved_memory_bytes (0 when the reserve is not below the device's).
uint64_t allocatable_device_memory_bytes(const schema::Cluster& cluster);

// A plan file held in memory; plan() points into bytes.
class LoadedPlan {
 public:
  LoadedPlan() = default;
  LoadedPlan(std::string path, std::vector<uint8_t> bytes);
  const schema::Plan& plan() const { return *schema::GetPlan(bytes_.data()); }
  const std::string& path() const { return path_; }
  const std::vector<uint8_t>& bytes() const { return bytes_; }

 private:
  std::string path_;
  std::vector<uint8_t> bytes_;
};

// Reads, verifies and validates a plan file. Throws on any problem.
LoadedPlan load_plan(const std::string& path);

// Verifies and validates bytes already in memory (name is used in messages).
LoadedPlan load_plan_from_bytes(const std::string& name, std::vector<uint8_t> bytes);

// Writes a finished FlatBuffer to path atomically (temporary name, then rename).
void write_plan(const std::string& path, const uint8_t* data, size_t size);

// Semantic checks of a verified plan: each returned string is one violation,
// "field: problem; what would be valid". Empty means valid.
std::vector<std::string> validate_plan(const schema::Plan& plan);

// Every field and prediction of the plan, as JSON (enums by name).
nlohmann::json plan_to_json(const schema::Plan& plan);

// A readable summary: model, training, mesh, a table of stages with their
// layers, recompute, predicted time and memory breakdown.
std::string plan_to_table(const schema::Plan& plan);

// Enum names as they appear in JSON and tables ("none", "selective", "full", ...).
// Values outside the enum give "unknown".
const char* recompute_mode_name(schema::RecomputeMode mode);
const char* opcode_name(schema::OpCode op);
const char* architecture_name(schema::Architecture architecture);  // "gpt2", "llama"
const char* dtype_name(schema::DType dtype);                       // "float32", "bfloat16"
const char* lr_decay_style_name(schema::LrDecayStyle style);       // "cosine", ..., "wsd"
const char* wsd_decay_style_name(schema::WsdDecayStyle style);  // "linear", "cosine", "minus_sqrt"
const char* schedule_kind_name(schema::ScheduleKind kind);      // "1f1b", "gpipe"

}  // namespace paraplan
