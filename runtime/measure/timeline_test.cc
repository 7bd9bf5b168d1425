// timeline_test.cc: the Chrome trace parsed back, and the SVG's rects, escaping and tiny spans.
#include "runtime/measure/timeline.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace paraplan {
namespace {

size_t count(const std::string& text, const std::string& part) {
  size_t n = 0;
  for (size_t at = text.find(part); at != std::string::npos; at = text.find(part, at + 1)) ++n;
  return n;
}

std::vector<TimelineSpan> two_rank_spans() {
  return {
      {.rank = 0,
       .step = 1,
       .name = "F3",
       .category = "forward",
       .micro_batch = 3,
       .start_seconds = 0.0015,
       .end_seconds = 0.004},
      {.rank = 1,
       .step = 1,
       .name = "B3",
       .category = "backward",
       .micro_batch = 3,
       .start_seconds = 0.004,
       .end_seconds = 0.006},
      {.rank = 1,
       .step = 1,
       .name = "optimizer",
       .category = "optimizer",
       .start_seconds = 0.006,
       .end_seconds = 0.01},
  };
}

TEST(ChromeTrace, CompleteEventsInMicrosecondsWithThreadNames) {
  const std::vector<TimelineTrack> tracks = {{0, "rank 0 (stage 0, dp 0, tp 0)"},
                                             {1, "rank 1 (stage 1, dp 0, tp 0)"}};
  const nlohmann::json trace = nlohmann::json::parse(chrome_trace_json(two_rank_spans(), tracks));
  EXPECT_EQ(trace.at("displayTimeUnit"), "ms");
  const nlohmann::json& events = trace.at("traceEvents");
  ASSERT_EQ(events.size(), 5u);  // 2 thread_name + 3 spans

  std::vector<nlohmann::json> complete, metadata;
  for (const nlohmann::json& event : events) {
    (event.at("ph") == "X" ? complete : metadata).push_back(event);
  }
  ASSERT_EQ(complete.size(), 3u);
  ASSERT_EQ(metadata.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(metadata[i].at("ph"), "M");
    EXPECT_EQ(metadata[i].at("name"), "thread_name");
    EXPECT_EQ(metadata[i].at("pid"), 0);
    EXPECT_EQ(metadata[i].at("tid"), tracks[i].rank);
    EXPECT_EQ(metadata[i].at("args").at("name"), tracks[i].label);
  }

  const nlohmann::json& f3 = complete[0];
  EXPECT_EQ(f3.at("name"), "F3");
  EXPECT_EQ(f3.at("cat"), "forward");
  EXPECT_EQ(f3.at("pid"), 0);
  EXPECT_EQ(f3.at("tid"), 0);
  EXPECT_DOUBLE_EQ(f3.at("ts").get<double>(), 1500.0);
  EXPECT_DOUBLE_EQ(f3.at("dur").get<double>(), 2500.0);
  EXPECT_EQ(f3.at("args").at("step"), 1);
  EXPECT_EQ(f3.at("args").at("micro_batch"), 3);

  const nlohmann::json& optimizer = complete[2];
  EXPECT_EQ(optimizer.at("tid"), 1);
  EXPECT_DOUBLE_EQ(optimizer.at("ts").get<double>(), 6000.0);
  EXPECT_DOUBLE_EQ(optimizer.at("dur").get<double>(), 4000.0);
  EXPECT_EQ(optimizer.at("args").at("micro_batch"), -1);
}

TEST(ChromeTrace, RanksWithoutATrackGetOneAndEmptyIsValid) {
  const nlohmann::json trace = nlohmann::json::parse(chrome_trace_json(two_rank_spans(), {}));
  size_t named = 0;
  for (const nlohmann::json& event : trace.at("traceEvents")) {
    if (event.at("ph") != "M") continue;
    EXPECT_EQ(event.at("args").at("name"), "rank " + std::to_string(event.at("tid").get<int>()));
    ++named;
  }
  EXPECT_EQ(named, 2u);

  const nlohmann::json empty = nlohmann::json::parse(chrome_trace_json({}, {}));
  EXPECT_TRUE(empty.at("traceEvents").is_array());
  EXPECT_TRUE(empty.at("traceEvents").empty());
  EXPECT_EQ(empty.at("displayTimeUnit"), "ms");
}

TEST(TimelineSvg, OneRectPerSpanEscapedLabelsAndTooltips) {
  const std::vector<TimelineTrack> tracks = {{0, "rank 0 <a&b>"}, {1, "rank 1"}};
  const std::string svg = timeline_svg(two_rank_spans(), tracks, "pp 2 & friends");
  EXPECT_EQ(svg.rfind("<svg", 0), 0u);
  EXPECT_EQ(svg.substr(svg.find_last_not_of('\n') - 5, 6), "</svg>");
  EXPECT_EQ(count(svg, "<svg"), 1u);
  EXPECT_EQ(count(svg, "<text"), count(svg, "</text>"));
  EXPECT_EQ(count(svg, "<title>"), count(svg, "</title>"));

  // background + 2 lanes + 3 spans + legend swatches for forward, backward, optimizer
  EXPECT_EQ(count(svg, "<rect"), 1u + 2u + 3u + 3u);
  EXPECT_EQ(count(svg, "<rect class=\"span\""), 3u);
  EXPECT_EQ(count(svg, "<title>"), 3u);

  EXPECT_NE(svg.find("rank 0 &lt;a&amp;b&gt;"), std::string::npos);
  EXPECT_EQ(svg.find("<a&b>"), std::string::npos);
  EXPECT_NE(svg.find("pp 2 &amp; friends"), std::string::npos);
  EXPECT_NE(svg.find("<title>F3 (step 1, micro-batch 3): 2.500 ms</title>"), std::string::npos);
  EXPECT_NE(svg.find("<title>optimizer (step 1): 4.000 ms</title>"), std::string::npos);
  EXPECT_NE(svg.find(">3</text>"), std::string::npos);  // micro-batch number in a wide rect
  EXPECT_NE(svg.find("time (ms)"), std::string::npos);
}

TEST(TimelineSvg, ZeroWidthSpanIsDrawnOnePixelWideWithoutItsNumber) {
  std::vector<TimelineSpan> spans = two_rank_spans();
  spans.push_back({.rank = 0,
                   .step = 2,
                   .name = "send act 42",
                   .category = "send",
                   .micro_batch = 42,
                   .start_seconds = 0.005,
                   .end_seconds = 0.005});
  const std::string svg = timeline_svg(spans, {}, "tiny");
  const size_t rect = svg.find("<title>send act 42");
  ASSERT_NE(rect, std::string::npos);
  const size_t width_at = svg.rfind("width=\"", rect) + 7;
  EXPECT_GE(std::stod(svg.substr(width_at)), 1.0);
  EXPECT_EQ(svg.find(">42</text>"), std::string::npos);
  EXPECT_EQ(count(svg, "<rect class=\"span\""), 4u);
}

TEST(TimelineSvg, NoSpans) {
  const std::string svg = timeline_svg({}, {}, "empty");
  EXPECT_EQ(svg.rfind("<svg", 0), 0u);
  EXPECT_NE(svg.find("no spans"), std::string::npos);
  EXPECT_NE(svg.find("</svg>"), std::string::npos);
}

}  // namespace
}  // namespace paraplan
