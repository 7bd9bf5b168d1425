// nccl_settings_test.cc: the NCCL_* variables as a parsed job holds them
// (ClusterConfig::nccl): read from the environment when the job is parsed,
// kept when a cluster preset fills in the cluster's other fields and when
// an override re-resolves the job, NCCL's defaults where unset, and a bad
// value refused by parse_job_config naming the variable.
#include "planner/job/nccl_settings.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <optional>
#include <stdexcept>
#include <string>

#include "planner/job/job_config.h"
#include "planner/job/job_config_test_support.h"

namespace paraplan {
namespace {

// Sets one variable for its lifetime, then restores it.
class ScopedVariable {
 public:
  ScopedVariable(const char* name, const char* value) : name_(name) {
    if (const char* saved = std::getenv(name)) saved_ = saved;
    setenv(name, value, 1);
  }
  ~ScopedVariable() {
    if (saved_)
      setenv(name_.c_str(), saved_->c_str(), 1);
    else
      unsetenv(name_.c_str());
  }
  ScopedVariable(const ScopedVariable&) = delete;
  ScopedVariable& operator=(const ScopedVariable&) = delete;

 private:
  std::string name_;
  std::optional<std::string> saved_;
};

TEST(NcclSettingsTest, AParsedJobKeepsTheEnvironmentsThroughPresetsAndOverrides) {
  const ScopedVariable buffer("NCCL_BUFFSIZE", "1048576");
  const ScopedVariable channels("NCCL_MAX_NCHANNELS", "8");
  JobConfig config =
      parse_job_config(job_config_test::kMinimal, "job.toml", {{"cluster.preset", "h100-sxm"}});
  EXPECT_EQ(config.cluster.nccl.simple_buffer_bytes, 1048576);
  EXPECT_EQ(config.cluster.nccl.max_channels, 8);
  EXPECT_EQ(config.cluster.nccl.ll_buffer_bytes, 524288);  // unset: NCCL's default
  // An override re-resolves the job (the preset again): the settings stay.
  apply_override(config, "cluster.num_nodes", "2");
  EXPECT_EQ(config.cluster.nccl.simple_buffer_bytes, 1048576);
  EXPECT_EQ(config.cluster.nccl.max_channels, 8);
}

TEST(NcclSettingsTest, ABadValueIsOneErrorNamingTheVariable) {
  const ScopedVariable buffer("NCCL_BUFFSIZE", "4MB");
  try {
    parse_job_config(job_config_test::kMinimal, "job.toml", {});
    FAIL() << "NCCL_BUFFSIZE=4MB was accepted";
  } catch (const std::invalid_argument& error) {
    const std::string message = error.what();
    EXPECT_NE(message.find("NCCL_BUFFSIZE='4MB'"), std::string::npos) << message;
    EXPECT_NE(message.find("a size in bytes"), std::string::npos) << message;
  }
}

}  // namespace
}  // namespace paraplan
