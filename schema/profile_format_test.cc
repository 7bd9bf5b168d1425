// profile_format_test.cc: profile.json's reader (every field of version 2,
// malformed fields named by their JSON path) and writer (what it writes reads
// back equal).
#include "schema/profile_format.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace paraplan {
namespace {

constexpr const char* kModel =
    R"("seq_len": 128, "d_model": 256, "num_heads": 8, "ffn_size": 1024, "vocab_size": 512,
       "dtype": "float32")";

constexpr const char* kProvenance =
    R"("measured_on": {"backend": "cpu", "description": "Test Xeon x 2 cores", "host": "box1",
       "paraplan_version": "0.2.0", "date": "2026-11-22T10:00:00Z"})";

std::string version_2(const std::string& device, const std::string& body) {
  return R"({"format": "paraplan-profile", "version": 2, "devices": {")" + device + "\": {" + body +
         "}}}";
}

std::string load_error(const std::string& text) {
  try {
    parse_profile_document(text, "profile.json", "cpu");
  } catch (const std::runtime_error& error) {
    return error.what();
  }
  return "accepted";
}

TEST(ProfileFormat, Version2ParsesEveryField) {
  const std::string text = version_2("cpu", std::string(kProvenance) + R"(,
    "compute": [{"seq_len": 128, "d_model": 128, "num_heads": 4, "ffn_size": 512,
      "vocab_size": 96, "dtype": "bfloat16", "tensor_parallel": 2, "micro_batch_size": 4,
      "parallel": true, "processes": 4, "block_forward": 0.0012, "block_backward": 0.0025,
      "attention_core_forward": 0.0002, "embedding_forward": 0.0001,
      "embedding_backward": 0.00011, "head_forward": 0.0003, "head_backward": 0.0006,
      "tensor_group": {"forward_ratio": 1.02, "backward_ratio": 1.03, "wait_per_call": 9e-5}},
      {"seq_len": 128, "d_model": 128, "num_heads": 4, "vocab_size": 96, "micro_batch_size": 1,
       "parallel": false, "block_forward": 0.001, "block_backward": 0.002}],
    "optimizer": [{"processes": 4, "clock": "cpu", "seconds_per_parameter": 2.1e-9}],
    "collectives": [
      {"operation": "all_reduce", "group_size": 2, "processes": 4, "latency": 1.2e-5,
       "seconds_per_byte": 3.4e-10, "clock": "wall"},
      {"operation": "send_receive", "group_size": 2, "parallel": false, "latency": 1e-6,
       "seconds_per_byte": 0}],
    "gemm": [{"m": 512, "n": 512, "k": 128, "dtype": "float32", "processes": 4,
              "flops_per_second": 3.1e10}],
    "hardware": [{"processes": 4, "threads": 1, "cores": 2, "available_cores": 1.5,
                  "peak_flops_float32": 4.5e10,
                  "peak_flops_bfloat16": 3.5e10, "memory_bandwidth": 6e9}])");
  const ProfileDocument document = parse_profile_document(text, "profile.json", "cpu");
  EXPECT_EQ(document.version, 2);
  EXPECT_EQ(document.devices, std::vector<std::string>{"cpu"});
  ASSERT_TRUE(document.device.has_value());
  const DeviceProfile& device = *document.device;
  ASSERT_TRUE(device.measured_on.has_value());
  EXPECT_EQ(device.measured_on->backend, "cpu");
  EXPECT_EQ(device.measured_on->description, "Test Xeon x 2 cores");
  EXPECT_EQ(device.measured_on->host, "box1");
  EXPECT_EQ(device.measured_on->paraplan_version, "0.2.0");
  EXPECT_EQ(device.measured_on->date, "2026-11-22T10:00:00Z");
  ASSERT_EQ(device.compute.size(), 2u);
  const ProfileEntry& entry = device.compute[0];
  EXPECT_EQ(entry.seq_len, 128);
  EXPECT_EQ(entry.d_model, 128);
  EXPECT_EQ(entry.num_heads, 4);
  EXPECT_EQ(entry.ffn_size, 512);
  EXPECT_EQ(entry.vocab_size, 96);
  EXPECT_EQ(entry.dtype, schema::DType::BFloat16);
  EXPECT_EQ(entry.tensor_parallel, 2);
  EXPECT_EQ(entry.micro_batch_size, 4);
  EXPECT_TRUE(entry.parallel);
  EXPECT_EQ(entry.processes, 4);
  EXPECT_EQ(entry.times.block_forward, 0.0012);
  EXPECT_EQ(entry.times.block_backward, 0.0025);
  EXPECT_EQ(entry.times.attention_core_forward, 0.0002);
  EXPECT_EQ(entry.times.embedding_forward, 0.0001);
  EXPECT_EQ(entry.times.embedding_backward, 0.00011);
  ASSERT_TRUE(entry.tensor_group.has_value());
  EXPECT_EQ(entry.tensor_group->forward_ratio, 1.02);
  EXPECT_EQ(entry.tensor_group->backward_ratio, 1.03);
  EXPECT_EQ(entry.tensor_group->wait_per_call, 9e-5);
  EXPECT_FALSE(device.compute[1].tensor_group.has_value());
  EXPECT_EQ(entry.times.head_forward, 0.0003);
  EXPECT_EQ(entry.times.head_backward, 0.0006);
  // Defaults: ffn 4 x d_model, tp 1, float32; "parallel": false alone = 1 process.
  EXPECT_EQ(device.compute[1].ffn_size, 512);
  EXPECT_EQ(device.compute[1].tensor_parallel, 1);
  EXPECT_EQ(device.compute[1].dtype, schema::DType::Float32);
  EXPECT_EQ(device.compute[1].processes, 1);
  EXPECT_FALSE(device.compute[1].parallel);
  ASSERT_EQ(device.optimizer.size(), 1u);
  EXPECT_EQ(device.optimizer[0].processes, 4);
  EXPECT_EQ(device.optimizer[0].seconds_per_parameter, 2.1e-9);
  EXPECT_EQ(device.optimizer[0].clock, ProfileClock::kCpu);
  EXPECT_EQ(device.compute[0].clock, ProfileClock::kWall);  // absent: wall
  EXPECT_EQ(device.collectives[0].clock, ProfileClock::kWall);
  ASSERT_EQ(device.collectives.size(), 2u);
  EXPECT_EQ(device.collectives[0].operation, CollectiveOperation::AllReduce);
  EXPECT_EQ(device.collectives[0].group_size, 2);
  EXPECT_EQ(device.collectives[0].processes, 4);
  EXPECT_EQ(device.collectives[0].latency, 1.2e-5);
  EXPECT_EQ(device.collectives[0].seconds_per_byte, 3.4e-10);
  EXPECT_EQ(device.collectives[0].seconds(1e6), 1.2e-5 + 1e6 * 3.4e-10);
  EXPECT_EQ(device.collectives[1].operation, CollectiveOperation::SendReceive);
  EXPECT_EQ(device.collectives[1].processes, 1);
  ASSERT_EQ(device.gemm.size(), 1u);
  EXPECT_EQ(device.gemm[0].m, 512);
  EXPECT_EQ(device.gemm[0].n, 512);
  EXPECT_EQ(device.gemm[0].k, 128);
  EXPECT_EQ(device.gemm[0].processes, 4);
  EXPECT_EQ(device.gemm[0].flops_per_second, 3.1e10);
  EXPECT_EQ(device.hardware, (std::vector<HardwareEntry>{{.processes = 4,
                                                          .threads = 1,
                                                          .cores = 2,
                                                          .available_cores = 1.5,
                                                          .peak_flops_float32 = 4.5e10,
                                                          .peak_flops_bfloat16 = 3.5e10,
                                                          .memory_bandwidth = 6e9}}));
  // Another device's section is listed but not read.
  const ProfileDocument other = parse_profile_document(text, "profile.json", "h200");
  EXPECT_FALSE(other.device.has_value());
  EXPECT_EQ(other.devices, std::vector<std::string>{"cpu"});
}

// The measured sizes give a call's time within their range; the fitted
// line's slope carries it beyond them.
TEST(CollectiveEntry, InterpolatesBetweenMeasuredSizes) {
  CollectiveEntry entry{.latency = 1e-5,
                        .seconds_per_byte = 1e-10,
                        .points = {{1000, 2e-5}, {3000, 6e-5}, {7000, 8e-5}}};
  EXPECT_DOUBLE_EQ(entry.seconds(3000), 6e-5);
  EXPECT_DOUBLE_EQ(entry.seconds(2000), 4e-5);
  EXPECT_DOUBLE_EQ(entry.seconds(6000), 7.5e-5);
  EXPECT_DOUBLE_EQ(entry.seconds(17000), 8e-5 + 10000 * 1e-10);
  EXPECT_DOUBLE_EQ(entry.seconds(500), 2e-5 - 500 * 1e-10);
  entry.seconds_per_byte = 1e-7;  // steeper than the first point allows: not below zero
  EXPECT_EQ(entry.seconds(0), 0);
  const CollectiveEntry slower = entry.scaled(2);
  EXPECT_DOUBLE_EQ(slower.seconds(2000), 8e-5);
  EXPECT_DOUBLE_EQ(slower.latency, 2e-5);
  EXPECT_DOUBLE_EQ(slower.seconds_per_byte, 2e-7);
  entry.points.clear();  // an older profile: the line
  EXPECT_DOUBLE_EQ(entry.seconds(2000), 1e-5 + 2000 * 1e-7);
}

TEST(ProfileFormat, MalformedCollectivePointsAreNamed) {
  auto error_with = [](const std::string& points) {
    return load_error(version_2(
        "cpu", R"("collectives": [{"operation": "all_reduce", "group_size": 2, "processes": 2,
                   "latency": 0, "seconds_per_byte": 0, "points": )" +
                   points + "}]"));
  };
  const std::string where = "profile.json: devices.\"cpu\".collectives[0].points";
  EXPECT_EQ(error_with(R"([{"bytes": 1024, "seconds": 1e-5}, {"bytes": 1024, "seconds": 2e-5}])"),
            where +
                "[1].bytes must be larger than points[0].bytes (the sizes increase along "
                "the list)");
  EXPECT_EQ(error_with(R"([{"bytes": 0, "seconds": 1e-5}])"),
            where + "[0].bytes must be a number of bytes > 0");
  EXPECT_EQ(error_with(R"([{"bytes": 1024}])"), where + "[0].seconds is required");
  EXPECT_EQ(error_with(R"([{"bytes": 1024, "seconds": -1}])"),
            where + "[0].seconds must be a number of seconds >= 0");
  EXPECT_EQ(error_with(R"({"bytes": 1024})"), where + " must be an array");
  EXPECT_EQ(error_with(R"([[1024, 1e-5]])"), where + "[0] must be an object");
}

TEST(ProfileFormat, MalformedVersion2FieldsAreNamed) {
  auto error_with = [](const std::string& body) { return load_error(version_2("cpu", body)); };
  EXPECT_EQ(
      error_with(R"("collectives": [{"operation": "all_reduce", "group_size": 2, "processes": 4,
                                     "seconds_per_byte": 1e-10}])"),
      "profile.json: devices.\"cpu\".collectives[0].latency is required");
  EXPECT_EQ(error_with(R"("collectives": [{"operation": "broadcast", "group_size": 2}])"),
            "profile.json: devices.\"cpu\".collectives[0].operation = 'broadcast'; valid: "
            "all_reduce, reduce_scatter, all_gather, send_receive");
  EXPECT_EQ(error_with(R"("collectives": [{"operation": "all_gather", "group_size": 1,
                                           "processes": 1, "latency": 0, "seconds_per_byte": 0}])"),
            "profile.json: devices.\"cpu\".collectives[0].group_size must be an integer >= 2");
  EXPECT_EQ(
      error_with(R"("collectives": [{"operation": "all_reduce", "group_size": 2, "processes": 2,
                                     "latency": -1, "seconds_per_byte": 0}])"),
      "profile.json: devices.\"cpu\".collectives[0].latency must be a number of seconds >= 0");
  EXPECT_EQ(error_with(std::string("\"compute\": [{") + kModel +
                       R"(, "micro_batch_size": 1, "processes": 2,
                          "block_forward": 1, "block_backward": 2}, {"seq_len": 128}])"),
            "profile.json: devices.\"cpu\".compute[1].d_model is required");
  EXPECT_EQ(error_with(std::string("\"compute\": [{") + kModel +
                       ", \"micro_batch_size\": 1, \"block_forward\": 1, \"block_backward\": 2}]"),
            "profile.json: devices.\"cpu\".compute[0].processes is required (or \"parallel\": "
            "false for one process)");
  EXPECT_EQ(error_with(std::string("\"compute\": [{") + kModel +
                       ", \"micro_batch_size\": 1, \"parallel\": true, \"processes\": 1, "
                       "\"block_forward\": 1, \"block_backward\": 2}]"),
            "profile.json: devices.\"cpu\".compute[0].parallel is true but processes is 1; "
            "parallel must be true exactly when processes > 1");
  EXPECT_EQ(error_with(std::string("\"compute\": [{") + kModel +
                       ", \"micro_batch_size\": 1, \"processes\": 2, \"block_backward\": 2}]"),
            "profile.json: devices.\"cpu\".compute[0].block_forward is required");
  EXPECT_EQ(error_with(std::string("\"compute\": [{") + kModel +
                       R"(, "micro_batch_size": 1, "processes": 2, "block_forward": 1,
                          "block_backward": 2, "tensor_group": {"forward_ratio": 1.1,
                          "backward_ratio": 0, "wait_per_call": 1e-4}}])"),
            "profile.json: devices.\"cpu\".compute[0].tensor_group.backward_ratio must be a "
            "ratio of compute times > 0");
  EXPECT_EQ(error_with(std::string("\"compute\": [{") + kModel +
                       R"(, "micro_batch_size": 1, "processes": 2, "block_forward": 1,
                          "block_backward": 2, "tensor_group": [1.1, 1.2]}])"),
            "profile.json: devices.\"cpu\".compute[0].tensor_group must be an object");
  EXPECT_EQ(error_with(R"("optimizer": [{"processes": 4, "seconds_per_parameter": 0}])"),
            "profile.json: devices.\"cpu\".optimizer[0].seconds_per_parameter must be a number "
            "of seconds > 0");
  EXPECT_EQ(error_with(R"("optimizer": [{"processes": 4, "clock": "thread",
                                        "seconds_per_parameter": 1e-9}])"),
            "profile.json: devices.\"cpu\".optimizer[0].clock = 'thread'; valid: wall, cpu");
  EXPECT_EQ(error_with(R"("gemm": [{"m": 1, "n": 2, "k": 3, "dtype": "float16", "processes": 1}])"),
            "profile.json: devices.\"cpu\".gemm[0].dtype = 'float16'; valid: float32, bfloat16");
  EXPECT_EQ(error_with(R"("hardware": [{"processes": 2, "peak_flops_float32": 1e10,
                                       "peak_flops_bfloat16": 1e10}])"),
            "profile.json: devices.\"cpu\".hardware[0].memory_bandwidth is required");
  EXPECT_EQ(error_with(R"("hardware": [{"processes": 2, "peak_flops_float32": -1,
                                       "peak_flops_bfloat16": 1e10, "memory_bandwidth": 1}])"),
            "profile.json: devices.\"cpu\".hardware[0].peak_flops_float32 must be a number of "
            "FLOP/s > 0");
  EXPECT_EQ(error_with(R"("measured_on": {"date": 20261122})"),
            "profile.json: devices.\"cpu\".measured_on.date must be a string");
  EXPECT_EQ(error_with(R"("collectives": {"operation": "all_reduce"})"),
            "profile.json: devices.\"cpu\".collectives must be an array");
  EXPECT_EQ(load_error(R"({"format": "paraplan-profile", "version": 2, "devices": {"cpu": []}})"),
            "profile.json: devices.\"cpu\" must be an object (version 2) of measured_on, "
            "compute, optimizer, collectives, gemm");
  EXPECT_EQ(load_error(R"({"format": "paraplan-profile", "version": 3, "devices": {}})"),
            "profile.json: \"version\" must be 1 or 2 (this paraplan reads versions 1 and 2)");
}

// Found by fuzz/profile_fuzzer: a number beyond double's range made nlohmann
// throw out_of_range past the reader (a message without the file's name).
TEST(ProfileFormat, NumberBeyondDoubleIsNamed) {
  EXPECT_EQ(load_error(R"({"format": "paraplan-profile", "version": 2, "devices": {"cpu":
                          {"optimizer": [{"processes": 1, "seconds_per_parameter": 0.01e999}]}}})"),
            "profile.json: not valid JSON: [json.exception.out_of_range.406] number overflow "
            "parsing '0.01e999'");
}

// The writer's output reads back as the same profile, field for field, and
// another device's section is kept as it was.
TEST(ProfileFormat, WhatTheWriterWritesTheReaderReadsBackEqual) {
  DeviceProfile written;
  written.measured_on = ProfileProvenance{.backend = "cuda",
                                          .description = "NVIDIA H100 (0000:1b:00.0)",
                                          .host = "node7",
                                          .paraplan_version = "0.1.0",
                                          .date = "2026-11-24T08:00:00Z"};
  ProfileEntry entry;
  entry.seq_len = 1024;
  entry.d_model = 768;
  entry.num_heads = 12;
  entry.ffn_size = 3072;
  entry.vocab_size = 50304;
  entry.dtype = schema::DType::BFloat16;
  entry.tensor_parallel = 2;
  entry.micro_batch_size = 8;
  entry.processes = 4;
  entry.parallel = true;
  entry.times = ProfiledTimes{.block_forward = 1.25e-3,
                              .block_backward = 2.5e-3,
                              .attention_core_forward = 3e-4,
                              .embedding_forward = 1e-4,
                              .embedding_backward = 2e-4,
                              .head_forward = 5e-4,
                              .head_backward = 1e-3};
  entry.tensor_group =
      TensorGroupPace{.forward_ratio = 1.0625, .backward_ratio = 1.03125, .wait_per_call = 8.5e-5};
  written.compute.push_back(entry);
  entry.tensor_group.reset();
  entry.processes = 1;
  entry.parallel = false;
  entry.micro_batch_size = 1;
  entry.clock = ProfileClock::kCpu;
  written.compute.push_back(entry);
  written.optimizer.push_back(
      OptimizerEntry{.processes = 4, .seconds_per_parameter = 1.5e-9, .clock = ProfileClock::kCpu});
  written.collectives.push_back(CollectiveEntry{.operation = CollectiveOperation::ReduceScatter,
                                                .group_size = 4,
                                                .processes = 4,
                                                .latency = 2e-5,
                                                .seconds_per_byte = 1.0 / 3e11,
                                                .clock = ProfileClock::kCpu,
                                                .points = {{16384, 3.1e-5}, {65536, 4.7e-5}}});
  written.gemm.push_back(GemmEntry{.m = 8192,
                                   .n = 1536,
                                   .k = 768,
                                   .dtype = schema::DType::BFloat16,
                                   .processes = 4,
                                   .flops_per_second = 6.5e14});
  written.hardware.push_back(HardwareEntry{.processes = 4,
                                           .threads = 2,
                                           .cores = 16,
                                           .available_cores = 15.25,
                                           .peak_flops_float32 = 5.5e13,
                                           .peak_flops_bfloat16 = 7.1e14,
                                           .memory_bandwidth = 2.9e12});
  nlohmann::json devices = {{"other", {{"compute", "kept as it was"}}}};
  devices["h100-sxm"] = device_profile_json(written);
  const std::string text = profile_document_text(devices);

  const ProfileDocument document = parse_profile_document(text, "profile.json", "h100-sxm");
  EXPECT_EQ(document.version, kProfileFormatVersion);
  EXPECT_EQ(document.devices, (std::vector<std::string>{"h100-sxm", "other"}));
  ASSERT_TRUE(document.device.has_value());
  const DeviceProfile& read = *document.device;
  ASSERT_TRUE(read.measured_on.has_value());
  EXPECT_EQ(read.measured_on->backend, "cuda");
  EXPECT_EQ(read.measured_on->description, "NVIDIA H100 (0000:1b:00.0)");
  EXPECT_EQ(read.measured_on->host, "node7");
  EXPECT_EQ(read.measured_on->paraplan_version, "0.1.0");
  EXPECT_EQ(read.measured_on->date, "2026-11-24T08:00:00Z");
  ASSERT_EQ(read.compute.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    const ProfileEntry& a = written.compute[i];
    const ProfileEntry& b = read.compute[i];
    EXPECT_EQ(b.seq_len, a.seq_len);
    EXPECT_EQ(b.d_model, a.d_model);
    EXPECT_EQ(b.num_heads, a.num_heads);
    EXPECT_EQ(b.ffn_size, a.ffn_size);
    EXPECT_EQ(b.vocab_size, a.vocab_size);
    EXPECT_EQ(b.dtype, a.dtype);
    EXPECT_EQ(b.tensor_parallel, a.tensor_parallel);
    EXPECT_EQ(b.micro_batch_size, a.micro_batch_size);
    EXPECT_EQ(b.processes, a.processes);
    EXPECT_EQ(b.parallel, a.parallel);
    EXPECT_EQ(b.clock, a.clock);
    EXPECT_EQ(b.times.block_forward, a.times.block_forward);
    EXPECT_EQ(b.times.block_backward, a.times.block_backward);
    EXPECT_EQ(b.times.attention_core_forward, a.times.attention_core_forward);
    EXPECT_EQ(b.times.embedding_forward, a.times.embedding_forward);
    EXPECT_EQ(b.times.embedding_backward, a.times.embedding_backward);
    EXPECT_EQ(b.times.head_forward, a.times.head_forward);
    EXPECT_EQ(b.times.head_backward, a.times.head_backward);
    EXPECT_EQ(b.tensor_group.has_value(), a.tensor_group.has_value());
    if (a.tensor_group && b.tensor_group) {
      EXPECT_EQ(b.tensor_group->forward_ratio, a.tensor_group->forward_ratio);
      EXPECT_EQ(b.tensor_group->backward_ratio, a.tensor_group->backward_ratio);
      EXPECT_EQ(b.tensor_group->wait_per_call, a.tensor_group->wait_per_call);
    }
  }
  ASSERT_EQ(read.optimizer.size(), 1u);
  EXPECT_EQ(read.optimizer[0].processes, 4);
  EXPECT_EQ(read.optimizer[0].seconds_per_parameter, 1.5e-9);
  EXPECT_EQ(read.optimizer[0].clock, ProfileClock::kCpu);
  ASSERT_EQ(read.collectives.size(), 1u);
  EXPECT_EQ(read.collectives[0].operation, CollectiveOperation::ReduceScatter);
  EXPECT_EQ(read.collectives[0].group_size, 4);
  EXPECT_EQ(read.collectives[0].latency, 2e-5);
  EXPECT_EQ(read.collectives[0].clock, ProfileClock::kCpu);
  EXPECT_EQ(read.collectives[0].seconds_per_byte, 1.0 / 3e11);  // doubles round-trip exactly
  ASSERT_EQ(read.collectives[0].points.size(), 2u);
  EXPECT_EQ(read.collectives[0].points[1].bytes, 65536);
  EXPECT_EQ(read.collectives[0].points[1].seconds, 4.7e-5);
  ASSERT_EQ(read.gemm.size(), 1u);
  EXPECT_EQ(read.gemm[0].m, 8192);
  EXPECT_EQ(read.gemm[0].dtype, schema::DType::BFloat16);
  EXPECT_EQ(read.gemm[0].flops_per_second, 6.5e14);
  EXPECT_EQ(read.hardware, written.hardware);  // doubles round-trip exactly
  EXPECT_EQ(nlohmann::json::parse(text)["devices"]["other"]["compute"], "kept as it was");
}

}  // namespace
}  // namespace paraplan
