// cuda_gemm.cuh: cuBLASLt matmuls with their configuration cached.
//
// A training step runs the same few GEMM shapes over and over (per layer,
// per micro-batch); building the cuBLASLt descriptors and asking the
// heuristic for an algorithm each time costs host microseconds per GEMM. The
// descriptors and the chosen algorithm are kept per configuration: the
// operation (transposes, m, n, k, leading dimensions), the epilogue and its
// vector's type, and the operands' alignments (what the heuristic may assume
// of the pointers). A configuration cuBLASLt has no algorithm for is
// remembered too, so the fallback is chosen without asking again. The
// algorithm depends only on the key, so a cached call is bitwise the uncached
// one.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <unordered_map>

namespace paraplan::kernels::cuda {

class LtMatmul {
 public:
  // data_type: of A, B, C and D (the storage dtype); compute_type: cuBLAS's;
  // fp32_partials_only: split-K only with fp32 partial sums (bf16 storage:
  // one rounding per output). The workspace (workspace_bytes of device memory)
  // and the stream are the caller's.
  LtMatmul(cudaDataType_t data_type, cublasComputeType_t compute_type, bool fp32_partials_only,
           void* workspace, size_t workspace_bytes, cudaStream_t stream);
  ~LtMatmul();
  LtMatmul(const LtMatmul&) = delete;
  LtMatmul& operator=(const LtMatmul&) = delete;

  // D[m, n] = op(A)[m, k] * op(B)[k, n] + beta * D (column-major), with an
  // optional epilogue (bias: the vector added to D's rows; BGRADB: where the
  // column sums of op(B) over k go) whose vector has element type bias_type.
  // The GELU epilogues take aux, a matrix of D's type and layout (ld ldd,
  // 16-byte aligned): GELU_AUX(_BIAS) writes the pre-activation there and
  // GELU of it into D; DGELU reads it and writes gelu'(aux) * product into
  // D (beta 0). Returns false, having run nothing, when cuBLASLt has no
  // algorithm for the configuration.
  // c: the C operand where it is not D (same layout; beta applies to it).
  bool run(cublasOperation_t transa, cublasOperation_t transb, int m, int n, int k, const void* a,
           int lda, const void* b, int ldb, void* d, int ldd, float beta,
           cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_DEFAULT, const void* bias = nullptr,
           cudaDataType_t bias_type = CUDA_R_32F, const void* aux = nullptr,
           const void* c = nullptr);

  // Ops' fused linear layers on row-major storage tensors (kernels/ops.h:
  // linear_residual_forward, linear_gelu_forward, linear_backward_gelu),
  // bias of the storage type. Each returns false, having run nothing, where
  // its epilogue does not apply: a bias or pre-activation not 16-byte
  // aligned, GELU features not a multiple of 8, no cuBLASLt algorithm.
  bool linear_residual(void* out, const void* inp, const void* weight, const void* bias,
                       const void* residual, int rows, int in_features, int out_features);
  bool linear_gelu(void* pre_gelu, void* out, const void* inp, const void* weight, const void* bias,
                   int rows, int in_features, int out_features);
  bool linear_dgelu(void* dpre_gelu, const void* dout, const void* weight, const void* pre_gelu,
                    int rows, int in_features, int out_features);

  // Configurations seen so far (each built once).
  size_t cached_configurations() const { return cache_.size(); }

 private:
  struct Key {
    int32_t transa, transb, m, n, k, lda, ldb, ldd;
    uint32_t epilogue;
    int32_t bias_type;
    uint32_t align_a, align_b, align_c, align_d;
    // The bias (or bias gradient) and the pre-activation: the heuristic
    // reads their pointers' alignment from the descriptor.
    uint32_t align_bias, align_aux;
    bool operator==(const Key& other) const;
  };
  struct KeyHash {
    size_t operator()(const Key& key) const;
  };
  struct Configuration;  // descriptors and the chosen algorithm

  // bias, aux: the first call's, set before the heuristic is asked (the key
  // holds their alignment; run sets each call's own).
  std::unique_ptr<Configuration> configure(const Key& key, const void* bias, const void* aux) const;

  cudaDataType_t data_type_;
  cublasComputeType_t compute_type_;
  bool fp32_partials_only_;
  void* workspace_;
  size_t workspace_bytes_;
  cudaStream_t stream_;
  cublasLtHandle_t lt_ = nullptr;
  std::unordered_map<Key, std::unique_ptr<Configuration>, KeyHash> cache_;
};

}  // namespace paraplan::kernels::cuda
