// cudnn_attention.cc: causal self-attention on cuDNN's SDPA through the
// cuDNN frontend's graph API (cudnn_attention.h), cuDNN itself opened at run
// time (cudnn_library.h; the frontend is built with
// NV_CUDNN_FRONTEND_USE_DYNAMIC_LOADING, so nothing links libcudnn).
//
// Per shape (B, T, H, Hkv, D, bf16), two graphs, built on first use and kept:
//   forward   Q [B, H, T, D], K and V [B, Hkv, T, D], each a strided view of
//             qkv (row stride (H + 2 Hkv) D, head stride D; K starts H D
//             elements in, V (H + Hkv) D) -> O [B, H, T, D] viewed as out [B, T,
//             H D], and Stats [B, H, T, 1] fp32: logsumexp, natural log (the
//             frontend's default; stats_use_log2 would scale it by log2 e),
//             of the scores scaled by 1/sqrt(D): what ops.h's logsumexp is.
//   backward  Q, K, V, O, dO (as out), Stats -> dQ, dK, dV written in qkv's
//             layout into dqkv, with set_deterministic_algorithm(true): on
//             Hopper the frontend then decomposes dP into a 16-bit workspace
//             [B, H, ceil64(T)^2] and computes dQ by a GEMM over it, no
//             atomics (the workspace formula: common/attention_workspace.h).
// Causal: top-left diagonal alignment, right bound 0 (key <= query), as
// paraplan's kernels mask. io bf16, intermediate and compute fp32.
// Every frontend and cuDNN call is checked (PARAPLAN_CUDNN_CHECK,
// PARAPLAN_CUDNN_FE_CHECK) and throws std::runtime_error naming the call, the
// shape and cuDNN's message; a graph cuDNN cannot build is not an error
// here (prepare says why; the dispatch decides: cuda_attention_dispatch.cu).
#include "kernels/cuda/cudnn_attention.h"

#include <cudnn_frontend.h>

#include <cmath>
#include <cstdint>
#include <exception>
#include <memory>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cudnn_library.h"

namespace paraplan::kernels::cuda {

namespace {

namespace fe = cudnn_frontend;
using Graph = fe::graph::Graph;
using TensorAttributes = fe::graph::Tensor_attributes;

[[noreturn]] void throw_cudnn_error(const std::string& error, const char* call, const char* file,
                                    int line) {
  throw_cuda_error("cuDNN", error.c_str(), call, file, line);
}

void check_cudnn(cudnnStatus_t status, const char* call, const char* file, int line) {
  if (status != CUDNN_STATUS_SUCCESS)
    throw_cudnn_error(cudnn_status_string(static_cast<int>(status)), call, file, line);
}

void check_frontend(fe::error_t error, const char* call, const char* file, int line) {
  if (error.is_bad()) throw_cudnn_error("cuDNN frontend: " + error.get_message(), call, file, line);
}

}  // namespace

}  // namespace paraplan::kernels::cuda

// A cuDNN call (through the frontend's dynamically loaded entry points).
#define PARAPLAN_CUDNN_CHECK(call) \
  ::paraplan::kernels::cuda::check_cudnn((call), #call, __FILE__, __LINE__)
// A frontend call returning cudnn_frontend::error_t.
#define PARAPLAN_CUDNN_FE_CHECK(call) \
  ::paraplan::kernels::cuda::check_frontend((call), #call, __FILE__, __LINE__)

namespace paraplan::kernels::cuda {

namespace {

// The tensors' uids in both graphs' variant packs.
enum Uid : int64_t { kQ = 1, kK, kV, kO, kStats, kDO, kDQ, kDK, kDV };

// The strided views of paraplan's layouts (module comment).
struct Layout {
  int64_t B, T, H, G, D;  // G: KV heads
  explicit Layout(const AttentionShapeKey& key)
      : B(key.batch), T(key.seq_len), H(key.heads), G(key.kv_heads), D(key.head_dim) {}
  int64_t row() const { return (H + 2 * G) * D; }  // qkv's row stride, elements
  // A head-major [B, heads, T, D] view of qkv's rows.
  std::vector<int64_t> qkv_stride() const { return {T * row(), D, row(), 1}; }
  std::vector<int64_t> out_stride() const { return {T * H * D, D, H * D, 1}; }
  std::vector<int64_t> stats_stride() const { return {H * T, T, 1, 1}; }
  size_t key_offset() const { return static_cast<size_t>(H * D); }
  size_t value_offset() const { return static_cast<size_t>((H + G) * D); }
};

std::shared_ptr<TensorAttributes> input(Graph& graph, const char* name, int64_t uid,
                                        std::vector<int64_t> dim, std::vector<int64_t> stride) {
  return graph.tensor(TensorAttributes()
                          .set_name(name)
                          .set_uid(uid)
                          .set_dim(std::move(dim))
                          .set_stride(std::move(stride)));
}

void mark_output(const std::shared_ptr<TensorAttributes>& tensor, int64_t uid,
                 std::vector<int64_t> dim, std::vector<int64_t> stride) {
  tensor->set_output(true).set_uid(uid).set_dim(std::move(dim)).set_stride(std::move(stride));
}

// sm_version > 0: the target GPU without a device (validate_cudnn_attention_graphs);
// 0: the current device's. Set before any node: a node copies the context.
std::shared_ptr<Graph> new_graph(int sm_version) {
  auto graph = std::make_shared<Graph>();
  if (sm_version > 0) graph->set_sm_version(sm_version);
  graph->set_io_data_type(fe::DataType_t::BFLOAT16)
      .set_intermediate_data_type(fe::DataType_t::FLOAT)
      .set_compute_data_type(fe::DataType_t::FLOAT);
  return graph;
}

// The graph built and its plan chosen (heuristics A), or the frontend's reason not.
fe::error_t build(Graph& graph, cudnnHandle_t handle) {
  return graph.build(handle, {fe::HeurMode_t::A});
}

std::shared_ptr<Graph> forward_graph(const Layout& l, float scale, int sm_version = 0) {
  std::shared_ptr<Graph> graph = new_graph(sm_version);
  auto q = input(*graph, "Q", kQ, {l.B, l.H, l.T, l.D}, l.qkv_stride());
  auto k = input(*graph, "K", kK, {l.B, l.G, l.T, l.D}, l.qkv_stride());
  auto v = input(*graph, "V", kV, {l.B, l.G, l.T, l.D}, l.qkv_stride());
  auto options = fe::graph::SDPA_attributes()
                     .set_name("paraplan_attention")
                     .set_generate_stats(true)
                     .set_causal_mask(true)
                     .set_attn_scale(scale);
  auto [o, stats] = graph->sdpa(q, k, v, std::move(options));
  mark_output(o, kO, {l.B, l.H, l.T, l.D}, l.out_stride());
  mark_output(stats, kStats, {l.B, l.H, l.T, 1}, l.stats_stride());
  stats->set_data_type(fe::DataType_t::FLOAT);
  return graph;
}

std::shared_ptr<Graph> backward_graph(const Layout& l, float scale, int sm_version = 0) {
  std::shared_ptr<Graph> graph = new_graph(sm_version);
  auto q = input(*graph, "Q", kQ, {l.B, l.H, l.T, l.D}, l.qkv_stride());
  auto k = input(*graph, "K", kK, {l.B, l.G, l.T, l.D}, l.qkv_stride());
  auto v = input(*graph, "V", kV, {l.B, l.G, l.T, l.D}, l.qkv_stride());
  auto o = input(*graph, "O", kO, {l.B, l.H, l.T, l.D}, l.out_stride());
  auto d_o = input(*graph, "dO", kDO, {l.B, l.H, l.T, l.D}, l.out_stride());
  auto stats = input(*graph, "Stats", kStats, {l.B, l.H, l.T, 1}, l.stats_stride());
  stats->set_data_type(fe::DataType_t::FLOAT);
  auto options = fe::graph::SDPA_backward_attributes()
                     .set_name("paraplan_attention_backward")
                     .set_causal_mask(true)
                     .set_attn_scale(scale)
                     .set_deterministic_algorithm(true);
  auto [dq, dk, dv] = graph->sdpa_backward(q, k, v, o, d_o, stats, std::move(options));
  mark_output(dq, kDQ, {l.B, l.H, l.T, l.D}, l.qkv_stride());
  mark_output(dk, kDK, {l.B, l.G, l.T, l.D}, l.qkv_stride());
  mark_output(dv, kDV, {l.B, l.G, l.T, l.D}, l.qkv_stride());
  return graph;
}

// One shape's graphs and their workspaces; why_not: "" when usable.
struct ShapeGraphs {
  std::string why_not;
  std::shared_ptr<Graph> forward, backward;
  size_t forward_workspace = 0, backward_workspace = 0;
};

class FrontendAttention final : public CudnnAttention {
 public:
  explicit FrontendAttention(cudaStream_t stream) {
    PARAPLAN_CUDNN_CHECK(fe::detail::create_handle(&handle_));
    try {
      PARAPLAN_CUDNN_CHECK(fe::detail::set_stream(handle_, stream));
    } catch (...) {
      (void)fe::detail::destroy_handle(handle_);
      throw;
    }
  }
  ~FrontendAttention() override {
    graphs_.clear();  // the plans before the handle they were built with
    (void)fe::detail::destroy_handle(handle_);
  }
  FrontendAttention(const FrontendAttention&) = delete;
  FrontendAttention& operator=(const FrontendAttention&) = delete;

  const std::string& prepare(const AttentionShapeKey& key) override {
    const auto found = graphs_.find(key);
    if (found != graphs_.end()) return found->second.why_not;
    ShapeGraphs& graphs = graphs_[key];
    try {
      graphs.why_not = build_graphs(key, graphs);
    } catch (const std::exception& error) {  // the frontend throws for some unsupported graphs
      graphs.why_not = error.what();
    }
    if (!graphs.why_not.empty()) {
      graphs.forward.reset();
      graphs.backward.reset();
    }
    return graphs.why_not;
  }

  size_t forward_workspace_bytes(const AttentionShapeKey& key) const override {
    return prepared(key).forward_workspace;
  }
  size_t backward_workspace_bytes(const AttentionShapeKey& key) const override {
    return prepared(key).backward_workspace;
  }

  void forward(const AttentionShapeKey& key, void* out, float* logsumexp, const void* qkv,
               void* workspace) override {
    const ShapeGraphs& graphs = prepared(key);
    const Layout layout(key);
    char* base = static_cast<char*>(const_cast<void*>(qkv));
    const size_t element = dtype_bytes(key.storage);
    std::unordered_map<int64_t, void*> pack{{kQ, base},
                                            {kK, base + layout.key_offset() * element},
                                            {kV, base + layout.value_offset() * element},
                                            {kO, out},
                                            {kStats, logsumexp}};
    PARAPLAN_CUDNN_FE_CHECK(graphs.forward->execute(handle_, pack, workspace));
  }

  void backward(const AttentionShapeKey& key, void* dqkv, const void* dout, const void* qkv,
                const void* out, const float* logsumexp, void* workspace) override {
    const ShapeGraphs& graphs = prepared(key);
    const Layout layout(key);
    const size_t element = dtype_bytes(key.storage);
    char* base = static_cast<char*>(const_cast<void*>(qkv));
    char* gradient = static_cast<char*>(dqkv);
    std::unordered_map<int64_t, void*> pack{{kQ, base},
                                            {kK, base + layout.key_offset() * element},
                                            {kV, base + layout.value_offset() * element},
                                            {kO, const_cast<void*>(out)},
                                            {kDO, const_cast<void*>(dout)},
                                            {kStats, const_cast<float*>(logsumexp)},
                                            {kDQ, gradient},
                                            {kDK, gradient + layout.key_offset() * element},
                                            {kDV, gradient + layout.value_offset() * element}};
    PARAPLAN_CUDNN_FE_CHECK(graphs.backward->execute(handle_, pack, workspace));
  }

 private:
  // Builds both graphs into `graphs`: "" when both built, else the frontend's reason.
  std::string build_graphs(const AttentionShapeKey& key, ShapeGraphs& graphs) {
    if (!cudnn_sdpa_supports(key)) return "the shape is not one paraplan runs on cuDNN";
    const Layout layout(key);
    const float scale = 1.0f / std::sqrt(static_cast<float>(key.head_dim));
    graphs.forward = forward_graph(layout, scale);
    if (fe::error_t error = build(*graphs.forward, handle_); error.is_bad())
      return "forward: " + error.get_message();
    graphs.backward = backward_graph(layout, scale);
    if (fe::error_t error = build(*graphs.backward, handle_); error.is_bad())
      return "backward: " + error.get_message();
    int64_t forward_bytes = 0, backward_bytes = 0;
    PARAPLAN_CUDNN_FE_CHECK(graphs.forward->get_workspace_size(forward_bytes));
    PARAPLAN_CUDNN_FE_CHECK(graphs.backward->get_workspace_size(backward_bytes));
    graphs.forward_workspace = static_cast<size_t>(forward_bytes);
    graphs.backward_workspace = static_cast<size_t>(backward_bytes);
    return "";
  }

  const ShapeGraphs& prepared(const AttentionShapeKey& key) const {
    const auto found = graphs_.find(key);
    if (found == graphs_.end() || !found->second.why_not.empty())
      throw std::logic_error("cuDNN attention: " + describe(key) +
                             " used before CudnnAttention::prepare accepted it");
    return found->second;
  }

  cudnnHandle_t handle_ = nullptr;
  std::unordered_map<AttentionShapeKey, ShapeGraphs, AttentionShapeKeyHash> graphs_;
};

}  // namespace

std::string validate_cudnn_attention_graphs(const AttentionShapeKey& key, int sm_version) {
  const CudnnAvailability& availability = cudnn_availability();
  if (!availability.available) return "cuDNN is not available: " + availability.description;
  if (!cudnn_sdpa_supports(key)) return "the shape is not one paraplan runs on cuDNN";
  try {
    const Layout layout(key);
    const float scale = 1.0f / std::sqrt(static_cast<float>(key.head_dim));
    for (const auto& [name, graph] :
         {std::pair{"forward", forward_graph(layout, scale, sm_version)},
          std::pair{"backward", backward_graph(layout, scale, sm_version)}}) {
      if (fe::error_t error = graph->validate(); error.is_bad())
        return std::string(name) + ": " + error.get_message();
    }
  } catch (const std::exception& error) {
    return error.what();
  }
  return "";
}

std::unique_ptr<CudnnAttention> make_cudnn_attention(cudaStream_t stream) {
  const CudnnAvailability& availability = cudnn_availability();
  if (!availability.available)
    throw std::runtime_error("cuDNN's SDPA is not available: " + availability.description);
  return std::make_unique<FrontendAttention>(stream);
}

}  // namespace paraplan::kernels::cuda
