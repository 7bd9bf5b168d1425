// cuda_gemm.cu: the cached cuBLASLt matmul of cuda_gemm.cuh.
#include <algorithm>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_gemm.cuh"
#include "kernels/cuda/cuda_kernels.cuh"

namespace paraplan::kernels::cuda {

namespace {

// The largest power of two (up to 256) dividing the address: what cuBLASLt's
// heuristic may assume of the pointer.
uint32_t alignment_of(const void* pointer) {
  const uintptr_t address = reinterpret_cast<uintptr_t>(pointer);
  if (address == 0) return 256;
  return static_cast<uint32_t>(std::min<uintptr_t>(256, address & (~address + 1)));
}

// The GELU epilogues, which write (GELU_AUX, GELU_AUX_BIAS) or read (DGELU)
// a matrix of D's shape beside D: the pre-activation.
bool uses_aux(uint32_t epilogue) {
  return epilogue == CUBLASLT_EPILOGUE_GELU_AUX || epilogue == CUBLASLT_EPILOGUE_GELU_AUX_BIAS ||
         epilogue == CUBLASLT_EPILOGUE_DGELU;
}

}  // namespace

// One configuration's descriptors, destroyed with it, and its algorithm.
struct LtMatmul::Configuration {
  cublasLtMatmulDesc_t operation = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulAlgo_t algorithm = {};
  bool supported = false;  // cuBLASLt offered an algorithm
  bool ran = false;        // and cublasLtMatmul took it once
  Configuration() = default;
  Configuration(const Configuration&) = delete;
  Configuration& operator=(const Configuration&) = delete;
  ~Configuration() {
    if (c != nullptr) cublas_library().cublasLtMatrixLayoutDestroy(c);
    if (b != nullptr) cublas_library().cublasLtMatrixLayoutDestroy(b);
    if (a != nullptr) cublas_library().cublasLtMatrixLayoutDestroy(a);
    if (operation != nullptr) cublas_library().cublasLtMatmulDescDestroy(operation);
  }
};

bool LtMatmul::Key::operator==(const Key& o) const {
  return transa == o.transa && transb == o.transb && m == o.m && n == o.n && k == o.k &&
         lda == o.lda && ldb == o.ldb && ldd == o.ldd && epilogue == o.epilogue &&
         bias_type == o.bias_type && align_a == o.align_a && align_b == o.align_b &&
         align_c == o.align_c && align_d == o.align_d && align_bias == o.align_bias &&
         align_aux == o.align_aux;
}

size_t LtMatmul::KeyHash::operator()(const Key& key) const {
  size_t hash = 1469598103934665603ull;
  for (int64_t field :
       {int64_t{key.transa}, int64_t{key.transb}, int64_t{key.m}, int64_t{key.n}, int64_t{key.k},
        int64_t{key.lda}, int64_t{key.ldb}, int64_t{key.ldd}, int64_t{key.epilogue},
        int64_t{key.bias_type}, int64_t{key.align_a}, int64_t{key.align_b}, int64_t{key.align_c},
        int64_t{key.align_d}, int64_t{key.align_bias}, int64_t{key.align_aux}})
    hash = (hash ^ static_cast<size_t>(field)) * 1099511628211ull;
  return hash;
}

LtMatmul::LtMatmul(cudaDataType_t data_type, cublasComputeType_t compute_type,
                   bool fp32_partials_only, void* workspace, size_t workspace_bytes,
                   cudaStream_t stream)
    : data_type_(data_type),
      compute_type_(compute_type),
      fp32_partials_only_(fp32_partials_only),
      workspace_(workspace),
      workspace_bytes_(workspace_bytes),
      stream_(stream) {
  PARAPLAN_CUBLAS_CHECK(cublas_library().cublasLtCreate(&lt_));
}

LtMatmul::~LtMatmul() {
  cache_.clear();  // descriptors before the handle
  if (lt_ != nullptr) cublas_library().cublasLtDestroy(lt_);
}

std::unique_ptr<LtMatmul::Configuration> LtMatmul::configure(const Key& key, const void* bias,
                                                             const void* aux) const {
  auto config = std::make_unique<Configuration>();
  PARAPLAN_CUBLAS_CHECK(
      cublas_library().cublasLtMatmulDescCreate(&config->operation, compute_type_, CUDA_R_32F));
  PARAPLAN_CUBLAS_CHECK(cublas_library().cublasLtMatmulDescSetAttribute(
      config->operation, CUBLASLT_MATMUL_DESC_TRANSA, &key.transa, sizeof(key.transa)));
  PARAPLAN_CUBLAS_CHECK(cublas_library().cublasLtMatmulDescSetAttribute(
      config->operation, CUBLASLT_MATMUL_DESC_TRANSB, &key.transb, sizeof(key.transb)));
  if (key.epilogue != CUBLASLT_EPILOGUE_DEFAULT) {
    PARAPLAN_CUBLAS_CHECK(cublas_library().cublasLtMatmulDescSetAttribute(
        config->operation, CUBLASLT_MATMUL_DESC_EPILOGUE, &key.epilogue, sizeof(key.epilogue)));
    PARAPLAN_CUBLAS_CHECK(cublas_library().cublasLtMatmulDescSetAttribute(
        config->operation, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &key.bias_type,
        sizeof(key.bias_type)));
    PARAPLAN_CUBLAS_CHECK(cublas_library().cublasLtMatmulDescSetAttribute(
        config->operation, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)));
  }
  if (uses_aux(key.epilogue)) {
    // The pre-activation has D's layout (its pointer is set per call).
    const int64_t aux_ld = key.ldd;
    PARAPLAN_CUBLAS_CHECK(cublas_library().cublasLtMatmulDescSetAttribute(
        config->operation, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &aux_ld, sizeof(aux_ld)));
    PARAPLAN_CUBLAS_CHECK(cublas_library().cublasLtMatmulDescSetAttribute(
        config->operation, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux, sizeof(aux)));
  }
  // Stored shapes (before op): A is m x k or k x m, B is k x n or n x k.
  const bool ta = key.transa != CUBLAS_OP_N, tb = key.transb != CUBLAS_OP_N;
  PARAPLAN_CUBLAS_CHECK(cublas_library().cublasLtMatrixLayoutCreate(
      &config->a, data_type_, ta ? key.k : key.m, ta ? key.m : key.k, key.lda));
  PARAPLAN_CUBLAS_CHECK(cublas_library().cublasLtMatrixLayoutCreate(
      &config->b, data_type_, tb ? key.n : key.k, tb ? key.k : key.n, key.ldb));
  PARAPLAN_CUBLAS_CHECK(
      cublas_library().cublasLtMatrixLayoutCreate(&config->c, data_type_, key.m, key.n, key.ldd));

  cublasLtMatmulPreference_t preference = nullptr;
  PARAPLAN_CUBLAS_CHECK(cublas_library().cublasLtMatmulPreferenceCreate(&preference));
  // The preference is needed only for the heuristic: destroyed on every path.
  struct PreferenceGuard {
    cublasLtMatmulPreference_t preference;
    ~PreferenceGuard() { cublas_library().cublasLtMatmulPreferenceDestroy(preference); }
  } guard{preference};
  const uint64_t workspace_bytes = workspace_bytes_;
  PARAPLAN_CUBLAS_CHECK(cublas_library().cublasLtMatmulPreferenceSetAttribute(
      preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace_bytes,
      sizeof(workspace_bytes)));
  if (fp32_partials_only_) {
    // Split-K only with fp32 partials: in-place and output-type reductions
    // add partial sums in bf16, rounding more than once.
    const uint32_t reductions =
        CUBLASLT_REDUCTION_SCHEME_NONE | CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE;
    PARAPLAN_CUBLAS_CHECK(cublas_library().cublasLtMatmulPreferenceSetAttribute(
        preference, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &reductions, sizeof(reductions)));
  }
  // The default assumes 256-byte aligned operands; parameters inside the
  // stage's one buffer may be only element-aligned.
  PARAPLAN_CUBLAS_CHECK(cublas_library().cublasLtMatmulPreferenceSetAttribute(
      preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &key.align_a, sizeof(key.align_a)));
  PARAPLAN_CUBLAS_CHECK(cublas_library().cublasLtMatmulPreferenceSetAttribute(
      preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &key.align_b, sizeof(key.align_b)));
  PARAPLAN_CUBLAS_CHECK(cublas_library().cublasLtMatmulPreferenceSetAttribute(
      preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &key.align_c, sizeof(key.align_c)));
  PARAPLAN_CUBLAS_CHECK(cublas_library().cublasLtMatmulPreferenceSetAttribute(
      preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &key.align_d, sizeof(key.align_d)));
  cublasLtMatmulHeuristicResult_t heuristic = {};
  int found = 0;
  // Not checked: "not supported" is an answer here, not an error.
  const cublasStatus_t status = cublas_library().cublasLtMatmulAlgoGetHeuristic(
      lt_, config->operation, config->a, config->b, config->c, config->c, preference, 1, &heuristic,
      &found);
  config->supported = status == CUBLAS_STATUS_SUCCESS && found > 0;
  if (config->supported) config->algorithm = heuristic.algo;
  return config;
}

bool LtMatmul::run(cublasOperation_t transa, cublasOperation_t transb, int m, int n, int k,
                   const void* a, int lda, const void* b, int ldb, void* d, int ldd, float beta,
                   cublasLtEpilogue_t epilogue, const void* bias, cudaDataType_t bias_type,
                   const void* aux, const void* c) {
  if (c == nullptr) c = d;
  const Key key{transa,
                transb,
                m,
                n,
                k,
                lda,
                ldb,
                ldd,
                static_cast<uint32_t>(epilogue),
                epilogue == CUBLASLT_EPILOGUE_DEFAULT ? 0 : static_cast<int32_t>(bias_type),
                alignment_of(a),
                alignment_of(b),
                alignment_of(c),
                alignment_of(d),
                alignment_of(bias),
                alignment_of(aux)};
  auto found = cache_.find(key);
  if (found == cache_.end()) found = cache_.emplace(key, configure(key, bias, aux)).first;
  Configuration& config = *found->second;
  if (!config.supported) return false;
  if (epilogue != CUBLASLT_EPILOGUE_DEFAULT)
    PARAPLAN_CUBLAS_CHECK(cublas_library().cublasLtMatmulDescSetAttribute(
        config.operation, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)));
  if (uses_aux(key.epilogue))
    PARAPLAN_CUBLAS_CHECK(cublas_library().cublasLtMatmulDescSetAttribute(
        config.operation, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux, sizeof(aux)));
  const float alpha = 1.0f;
  const cublasStatus_t status = cublas_library().cublasLtMatmul(
      lt_, config.operation, &alpha, a, config.a, b, config.b, &beta, c, config.c, d, config.c,
      &config.algorithm, workspace_, workspace_bytes_, stream_);
  // The heuristic may offer what the matmul then refuses (an epilogue's
  // vector type it does not document for this output type, say): refused
  // before anything ran, so the caller's plain path takes this shape from now on.
  if (!config.ran &&
      (status == CUBLAS_STATUS_NOT_SUPPORTED || status == CUBLAS_STATUS_INVALID_VALUE)) {
    config.supported = false;
    return false;
  }
  PARAPLAN_CUBLAS_CHECK(status);
  config.ran = true;
  return true;
}

// Row-major [rows, features] tensors are column-major [features, rows]: the
// forward is D[out, rows] = W^T[out, in] X[in, rows], the input gradient
// D[in, rows] = W[in, out] dY[out, rows] (linear_forward's and
// linear_backward's GEMMs in cuda_ops.cu).
bool LtMatmul::linear_residual(void* out, const void* inp, const void* weight, const void* bias,
                               const void* residual, int rows, int in_features, int out_features) {
  if (rows <= 0 || in_features <= 0 || out_features <= 0) return false;
  if (bias != nullptr && !is_aligned16(bias)) return false;
  return run(CUBLAS_OP_T, CUBLAS_OP_N, out_features, rows, in_features, weight, in_features, inp,
             in_features, out, out_features, 1.0f,
             bias != nullptr ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT, bias, data_type_,
             nullptr, residual);
}

bool LtMatmul::linear_gelu(void* pre_gelu, void* out, const void* inp, const void* weight,
                           const void* bias, int rows, int in_features, int out_features) {
  if (rows <= 0 || in_features <= 0 || out_features <= 0 || out_features % 8 != 0) return false;
  if (!is_aligned16(pre_gelu) || (bias != nullptr && !is_aligned16(bias))) return false;
  return run(CUBLAS_OP_T, CUBLAS_OP_N, out_features, rows, in_features, weight, in_features, inp,
             in_features, out, out_features, 0.0f,
             bias != nullptr ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX, bias,
             data_type_, pre_gelu);
}

bool LtMatmul::linear_dgelu(void* dpre_gelu, const void* dout, const void* weight,
                            const void* pre_gelu, int rows, int in_features, int out_features) {
  if (rows <= 0 || in_features <= 0 || out_features <= 0 || in_features % 8 != 0) return false;
  if (!is_aligned16(pre_gelu)) return false;
  return run(CUBLAS_OP_N, CUBLAS_OP_N, in_features, rows, out_features, weight, in_features, dout,
             out_features, dpre_gelu, in_features, 0.0f, CUBLASLT_EPILOGUE_DGELU, nullptr,
             data_type_, pre_gelu);
}

}  // namespace paraplan::kernels::cuda
