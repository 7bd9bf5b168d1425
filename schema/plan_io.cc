// plan_io.cc: reading and writing plan files (load_plan, load_plan_from_bytes,
// write_plan) and the enum names shared by JSON, tables and messages.
//
// Loading checks, in order: the file exists and is readable, it is long enough to
// be a FlatBuffer, it carries the PPLN identifier, its schema version is the one
// this build reads, the FlatBuffers verifier accepts it, and validate_plan finds
// nothing wrong. Each failure is one std::runtime_error naming the file.
#include "schema/plan_io.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <optional>
#include <stdexcept>
#include <system_error>

#include "common/bounded_file.h"
#include "schema/plan_lowering.h"
#include "schema/schedule_kinds.h"

namespace paraplan {
namespace {

namespace fs = std::filesystem;

// A FlatBuffer starts with a 4-byte root offset followed by the 4-byte identifier.
constexpr size_t kFlatBufferHeaderBytes = sizeof(flatbuffers::uoffset_t) + 4;

std::string quoted(const std::string& name) {
  return "'" + name + "'";
}

// The four identifier bytes, printable characters as they are, others as \xNN.
std::string describe_identifier(const uint8_t* bytes) {
  static const char* kHex = "0123456789abcdef";
  std::string text;
  for (int i = 0; i < 4; ++i) {
    const uint8_t c = bytes[sizeof(flatbuffers::uoffset_t) + i];
    if (c >= 0x20 && c < 0x7f && c != '\'' && c != '\\') {
      text += static_cast<char>(c);
    } else {
      text += "\\x";
      text += kHex[c >> 4];
      text += kHex[c & 0xf];
    }
  }
  return text;
}

// Reads header.schema_version while verifying only the root table and the header,
// so a plan from another version is named as such even when the rest of its layout
// has changed beyond what this build's verifier accepts.
std::optional<uint32_t> peek_schema_version(const uint8_t* data, size_t size) {
  flatbuffers::Verifier verifier(data, size);
  const flatbuffers::uoffset_t root_offset = verifier.VerifyOffset(0);
  if (root_offset == 0) return std::nullopt;
  const auto* root = reinterpret_cast<const flatbuffers::Table*>(data + root_offset);
  if (!root->VerifyTableStart(verifier) || !root->VerifyOffset(verifier, schema::Plan::VT_HEADER)) {
    return std::nullopt;
  }
  const auto* header = root->GetPointer<const schema::Header*>(schema::Plan::VT_HEADER);
  if (header == nullptr || !header->Verify(verifier)) return std::nullopt;
  return header->schema_version();
}

std::string errno_text(int error) {
  return std::error_code(error, std::generic_category()).message();
}

// Writes all of [data, data + size) to fd, retrying short writes and EINTR.
bool write_all(int fd, const uint8_t* data, size_t size) {
  while (size > 0) {
    const ssize_t written = ::write(fd, data, size);
    if (written < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    data += written;
    size -= static_cast<size_t>(written);
  }
  return true;
}

// Makes a completed rename durable; best effort, a failure here loses nothing.
void fsync_directory(const fs::path& directory) {
  const int fd = ::open(directory.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  ::fsync(fd);
  ::close(fd);
}

}  // namespace

LoadedPlan::LoadedPlan(std::string path, std::vector<uint8_t> bytes)
    : path_(std::move(path)), bytes_(std::move(bytes)) {}

LoadedPlan load_plan(const std::string& path) {
  std::error_code error;
  const fs::file_status status = fs::status(path, error);
  if (!fs::exists(status)) {
    throw std::runtime_error("plan file " + quoted(path) +
                             " does not exist; write one with 'paraplan plan --output " + path +
                             "'");
  }
  if (fs::is_directory(status)) {
    throw std::runtime_error("plan file " + quoted(path) + " is a directory, not a plan file");
  }
  std::vector<uint8_t> bytes = read_bounded_file<std::vector<uint8_t>>(path, kPlanFile);
  return load_plan_from_bytes(path, std::move(bytes));
}

LoadedPlan load_plan_from_bytes(const std::string& name, std::vector<uint8_t> bytes) {
  const std::string expected =
      std::string("expected a paraplan plan (a FlatBuffer with file identifier ") +
      schema::PlanIdentifier() + ")";
  if (bytes.empty()) throw std::runtime_error(quoted(name) + " is empty; " + expected);
  if (bytes.size() < kFlatBufferHeaderBytes) {
    throw std::runtime_error(quoted(name) + " is truncated: " + std::to_string(bytes.size()) +
                             " bytes, shorter than a FlatBuffer header (" +
                             std::to_string(kFlatBufferHeaderBytes) + " bytes); " + expected);
  }
  if (!schema::PlanBufferHasIdentifier(bytes.data())) {
    throw std::runtime_error(quoted(name) + " is not a paraplan plan (file identifier '" +
                             describe_identifier(bytes.data()) + "'; expected " +
                             schema::PlanIdentifier() + ")");
  }
  // The version is checked before full verification: a newer layout may not verify.
  const std::optional<uint32_t> version = peek_schema_version(bytes.data(), bytes.size());
  if (version && (*version < kOldestReadablePlanSchemaVersion || *version > kPlanSchemaVersion)) {
    throw std::runtime_error(quoted(name) + " was written with plan schema version " +
                             std::to_string(*version) + "; this paraplan reads versions " +
                             std::to_string(kOldestReadablePlanSchemaVersion) + " to " +
                             std::to_string(kPlanSchemaVersion) +
                             " (re-create the plan with this paraplan's 'paraplan plan')");
  }
  flatbuffers::Verifier verifier(bytes.data(), bytes.size());
  if (!schema::VerifyPlanBuffer(verifier)) {
    throw std::runtime_error(quoted(name) +
                             " is corrupt or truncated: FlatBuffers verification failed (" +
                             std::to_string(bytes.size()) + " bytes)");
  }
  LoadedPlan loaded(name, std::move(bytes));
  if (has_rendezvous_transfers_to_lower(loaded.plan()))
    loaded = LoadedPlan(name, lower_rendezvous_plan(loaded.plan()));
  const auto refuse_if_invalid = [&name](const schema::Plan& plan) {
    const std::vector<std::string> violations = validate_plan(plan);
    if (violations.empty()) return;
    std::string message = name + ": invalid plan:";
    for (const std::string& violation : violations) message += "\n  " + violation;
    throw std::runtime_error(message);
  };
  refuse_if_invalid(loaded.plan());
  // Its unit ops need the stages and schedule the validator accepted; the
  // ops written are checked as any plan's.
  if (has_zero_unit_ops_to_add(loaded.plan())) {
    loaded = LoadedPlan(name, add_plan_zero_unit_ops(loaded.plan()));
    refuse_if_invalid(loaded.plan());
  }
  return loaded;
}

void write_plan(const std::string& path, const uint8_t* data, size_t size) {
  const std::string context = "cannot write plan " + quoted(path) + ": ";
  if (data == nullptr || size == 0) throw std::runtime_error(context + "the buffer is empty");
  // Refusing a buffer that is not a plan here keeps a planner bug (say, Finish
  // without the identifier) from surfacing later as an unreadable file.
  flatbuffers::Verifier verifier(data, size);
  if (!schema::VerifyPlanBuffer(verifier)) {
    throw std::runtime_error(context +
                             "the buffer is not a verified paraplan plan (finish it with "
                             "schema::FinishPlanBuffer)");
  }

  const fs::path target(path);
  const fs::path directory = target.has_parent_path() ? target.parent_path() : fs::path(".");
  std::error_code error;
  const fs::file_status directory_status = fs::status(directory, error);
  if (!fs::exists(directory_status)) {
    throw std::runtime_error(context + "directory " + quoted(directory.string()) +
                             " does not exist; create it first");
  }
  if (!fs::is_directory(directory_status)) {
    throw std::runtime_error(context + quoted(directory.string()) + " is not a directory");
  }

  const std::string temporary = path + ".tmp." + std::to_string(::getpid());
  const int fd = ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    const int open_errno = errno;
    throw std::runtime_error(context + "cannot create " + quoted(temporary) + ": " +
                             errno_text(open_errno) + " (is directory " +
                             quoted(directory.string()) + " writable?)");
  }
  const auto fail = [&](const std::string& what, int failure_errno) {
    ::unlink(temporary.c_str());
    throw std::runtime_error(context + what + " " + quoted(temporary) + ": " +
                             errno_text(failure_errno));
  };
  if (!write_all(fd, data, size)) {
    const int write_errno = errno;
    ::close(fd);
    fail("cannot write", write_errno);
  }
  if (::fsync(fd) != 0) {
    const int fsync_errno = errno;
    ::close(fd);
    fail("cannot flush", fsync_errno);
  }
  if (::close(fd) != 0) fail("cannot close", errno);
  if (::rename(temporary.c_str(), path.c_str()) != 0) {
    const int rename_errno = errno;
    ::unlink(temporary.c_str());
    throw std::runtime_error(context + "cannot rename " + quoted(temporary) +
                             " to it: " + errno_text(rename_errno));
  }
  fsync_directory(directory);
}

const char* recompute_mode_name(schema::RecomputeMode mode) {
  switch (mode) {
    case schema::RecomputeMode::None:
      return "none";
    case schema::RecomputeMode::Selective:
      return "selective";
    case schema::RecomputeMode::Full:
      return "full";
  }
  return "unknown";
}

uint64_t allocatable_device_memory_bytes(const schema::Cluster& cluster) {
  const uint64_t device = cluster.device_memory_bytes(), reserved = cluster.reserved_memory_bytes();
  return reserved < device ? device - reserved : 0;
}

const char* opcode_name(schema::OpCode op) {
  using schema::OpCode;
  switch (op) {
    case OpCode::LoadMicroBatch:
      return "load_micro_batch";
    case OpCode::Forward:
      return "forward";
    case OpCode::Backward:
      return "backward";
    case OpCode::SendActivation:
      return "send_activation";
    case OpCode::RecvActivation:
      return "recv_activation";
    case OpCode::SendGradient:
      return "send_gradient";
    case OpCode::RecvGradient:
      return "recv_gradient";
    case OpCode::ReduceGradients:
      return "reduce_gradients";
    case OpCode::OptimizerStep:
      return "optimizer_step";
    case OpCode::BackwardInput:
      return "backward_input";
    case OpCode::BackwardWeight:
      return "backward_weight";
    case OpCode::GatherParameters:
      return "gather_parameters";
    case OpCode::ReleaseParameters:
      return "release_parameters";
    case OpCode::ReduceScatterGradients:
      return "reduce_scatter_gradients";
  }
  return "unknown";
}

const char* architecture_name(schema::Architecture architecture) {
  switch (architecture) {
    case schema::Architecture::Gpt2:
      return "gpt2";
    case schema::Architecture::Llama:
      return "llama";
  }
  return "unknown";
}

const char* dtype_name(schema::DType dtype) {
  switch (dtype) {
    case schema::DType::Float32:
      return "float32";
    case schema::DType::BFloat16:
      return "bfloat16";
  }
  return "unknown";
}

const char* lr_decay_style_name(schema::LrDecayStyle style) {
  switch (style) {
    case schema::LrDecayStyle::Cosine:
      return "cosine";
    case schema::LrDecayStyle::Linear:
      return "linear";
    case schema::LrDecayStyle::Constant:
      return "constant";
    case schema::LrDecayStyle::WarmupStableDecay:
      return "wsd";
  }
  return "unknown";
}

const char* wsd_decay_style_name(schema::WsdDecayStyle style) {
  switch (style) {
    case schema::WsdDecayStyle::Linear:
      return "linear";
    case schema::WsdDecayStyle::Cosine:
      return "cosine";
    case schema::WsdDecayStyle::MinusSqrt:
      return "minus_sqrt";
  }
  return "unknown";
}

const char* schedule_kind_name(schema::ScheduleKind kind) {
  return is_schedule_kind(kind) ? schedule_kind_traits(kind).name : "unknown";
}

}  // namespace paraplan
