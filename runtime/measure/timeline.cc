// timeline.cc: the instruction timeline as Chrome trace-event JSON and as an SVG picture.
#include "runtime/measure/timeline.h"

#include <algorithm>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

namespace paraplan {
namespace {

// The given tracks (first one per rank wins), then "rank N" for ranks with spans but no track.
std::vector<TimelineTrack> all_tracks(const std::vector<TimelineSpan>& spans,
                                      const std::vector<TimelineTrack>& tracks) {
  std::vector<TimelineTrack> result;
  std::set<int> seen;
  for (const TimelineTrack& track : tracks) {
    if (seen.insert(track.rank).second) result.push_back(track);
  }
  std::set<int> missing;
  for (const TimelineSpan& span : spans) {
    if (!seen.count(span.rank)) missing.insert(span.rank);
  }
  for (int rank : missing) result.push_back({rank, "rank " + std::to_string(rank)});
  return result;
}

// Seconds to microseconds, rounded to the nanosecond (0.0015 s -> exactly 1500).
double microseconds(double seconds) {
  return std::round(seconds * 1e9) / 1e3;
}

struct Category {
  const char* name;
  const char* fill;
  const char* text;  // colour of the micro-batch number drawn on the fill
};
constexpr Category kCategories[] = {
    {"load", "#59a14f", "#fff"},     {"forward", "#4e79a7", "#fff"},
    {"backward", "#f28e2b", "#000"}, {"send", "#a0a0a0", "#000"},
    {"receive", "#c8c8c8", "#000"},  {"send+receive", "#787878", "#fff"},
    {"reduce", "#b07aa1", "#fff"},   {"optimizer", "#e15759", "#fff"},
    {"other", "#edc948", "#000"},
};
constexpr int kOther = 8;

int category_index(const std::string& category) {
  for (int i = 0; i < kOther; ++i) {
    if (category == kCategories[i].name) return i;
  }
  return kOther;
}

std::string xml_escape(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&apos;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

// printf into a std::string (the SVG's numbers, with fixed precision).
__attribute__((format(printf, 1, 2))) std::string format(const char* pattern, ...) {
  va_list args, copy;
  va_start(args, pattern);
  va_copy(copy, args);
  const int size = std::vsnprintf(nullptr, 0, pattern, copy);
  va_end(copy);
  std::string out(static_cast<size_t>(std::max(size, 0)) + 1, '\0');
  std::vsnprintf(out.data(), out.size(), pattern, args);
  va_end(args);
  out.resize(static_cast<size_t>(std::max(size, 0)));
  return out;
}

// A tick spacing of 1, 2 or 5 times a power of ten giving at most about `ticks` ticks.
double nice_step(double range, int ticks) {
  const double raw = range / ticks;
  const double magnitude = std::pow(10.0, std::floor(std::log10(raw)));
  for (double factor : {1.0, 2.0, 5.0}) {
    if (factor * magnitude >= raw) return factor * magnitude;
  }
  return 10 * magnitude;
}

constexpr double kWidth = 1200, kRightMargin = 20, kTop = 40, kLane = 24, kLaneGap = 6;

}  // namespace

std::string chrome_trace_json(const std::vector<TimelineSpan>& spans,
                              const std::vector<TimelineTrack>& tracks) {
  nlohmann::json events = nlohmann::json::array();
  for (const TimelineTrack& track : all_tracks(spans, tracks)) {
    events.push_back({{"name", "thread_name"},
                      {"ph", "M"},
                      {"pid", 0},
                      {"tid", track.rank},
                      {"args", {{"name", track.label}}}});
  }
  for (const TimelineSpan& span : spans) {
    const double ts = microseconds(span.start_seconds);
    events.push_back({{"name", span.name},
                      {"cat", span.category},
                      {"ph", "X"},
                      {"ts", ts},
                      {"dur", std::max(0.0, microseconds(span.end_seconds) - ts)},
                      {"pid", 0},
                      {"tid", span.rank},
                      {"args", {{"step", span.step}, {"micro_batch", span.micro_batch}}}});
  }
  return nlohmann::json{{"traceEvents", events}, {"displayTimeUnit", "ms"}}.dump() + "\n";
}

std::string timeline_svg(const std::vector<TimelineSpan>& spans,
                         const std::vector<TimelineTrack>& tracks, const std::string& title) {
  const std::string header =
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" "
      "viewBox=\"0 0 %.0f %.0f\" font-family=\"sans-serif\" font-size=\"12\">\n"
      "<rect x=\"0\" y=\"0\" width=\"100%%\" height=\"100%%\" fill=\"#fff\"/>\n"
      "<text x=\"10\" y=\"24\" font-size=\"15\" font-weight=\"bold\">%s</text>\n";
  if (spans.empty()) {
    return format(header.c_str(), kWidth, 80.0, kWidth, 80.0, xml_escape(title).c_str()) +
           "<text x=\"10\" y=\"56\">no spans</text>\n</svg>\n";
  }
  const std::vector<TimelineTrack> lanes = all_tracks(spans, tracks);
  size_t longest_label = 0;
  for (const TimelineTrack& track : lanes)
    longest_label = std::max(longest_label, track.label.size());
  const double left = std::clamp(16.0 + 7.0 * longest_label, 80.0, 360.0);
  const double plot_width = kWidth - left - kRightMargin;

  double t0 = spans[0].start_seconds, t1 = spans[0].end_seconds;
  for (const TimelineSpan& span : spans) {
    t0 = std::min(t0, span.start_seconds);
    t1 = std::max({t1, span.start_seconds, span.end_seconds});
  }
  if (!(t1 > t0)) t1 = t0 + 1e-3;
  const double scale = plot_width / (t1 - t0);  // pixels per second
  auto x_of = [&](double seconds) { return left + (seconds - t0) * scale; };
  auto y_of = [&](size_t lane) { return kTop + lane * (kLane + kLaneGap); };
  const double axis_y = y_of(lanes.size()) + 4, legend_y = axis_y + 44;
  const double height = legend_y + 24;

  std::string svg =
      format(header.c_str(), kWidth, height, kWidth, height, xml_escape(title).c_str());
  std::map<int, size_t> lane_of_rank;  // all_tracks gives every span's rank a lane
  for (size_t i = 0; i < lanes.size(); ++i) lane_of_rank[lanes[i].rank] = i;
  for (size_t i = 0; i < lanes.size(); ++i) {
    svg += format("<rect x=\"%.2f\" y=\"%.2f\" width=\"%.2f\" height=\"%.2f\" fill=\"#f3f3f3\"/>\n",
                  left, y_of(i), plot_width, kLane);
    svg += format("<text x=\"%.2f\" y=\"%.2f\" text-anchor=\"end\">%s</text>\n", left - 8,
                  y_of(i) + kLane / 2 + 4, xml_escape(lanes[i].label).c_str());
  }

  bool present[kOther + 1] = {};
  for (const TimelineSpan& span : spans) {
    const int c = category_index(span.category);
    present[c] = true;
    const double x = x_of(span.start_seconds);
    const double width = std::max(
        1.0, (std::max(span.end_seconds, span.start_seconds) - span.start_seconds) * scale);
    const double y = y_of(lane_of_rank.at(span.rank)) + 2;
    const std::string micro_batch =
        span.micro_batch >= 0 ? ", micro-batch " + std::to_string(span.micro_batch) : "";
    svg += format(
        "<rect class=\"span\" x=\"%.2f\" y=\"%.2f\" width=\"%.2f\" height=\"%.2f\" fill=\"%s\">"
        "<title>%s (step %d%s): %.3f ms</title></rect>\n",
        x, y, width, kLane - 4, kCategories[c].fill, xml_escape(span.name).c_str(), span.step,
        micro_batch.c_str(), (span.end_seconds - span.start_seconds) * 1e3);
    if (span.micro_batch >= 0) {
      const std::string label = std::to_string(span.micro_batch);
      if (width >= 7.0 * label.size() + 4) {
        svg += format(
            "<text x=\"%.2f\" y=\"%.2f\" font-size=\"10\" text-anchor=\"middle\" "
            "fill=\"%s\">%s</text>\n",
            x + width / 2, y + (kLane - 4) / 2 + 3.5, kCategories[c].text, label.c_str());
      }
    }
  }

  // Time axis: ticks at multiples of a round number of milliseconds since the common origin.
  svg += format("<line x1=\"%.2f\" y1=\"%.2f\" x2=\"%.2f\" y2=\"%.2f\" stroke=\"#000\"/>\n", left,
                axis_y, left + plot_width, axis_y);
  const double step_ms = nice_step((t1 - t0) * 1e3, 10);
  const int decimals = std::max(0, -static_cast<int>(std::floor(std::log10(step_ms))));
  for (double tick = std::ceil(t0 * 1e3 / step_ms) * step_ms; tick <= t1 * 1e3 + step_ms * 1e-6;
       tick += step_ms) {
    const double x = x_of(tick / 1e3);
    svg += format("<line x1=\"%.2f\" y1=\"%.2f\" x2=\"%.2f\" y2=\"%.2f\" stroke=\"#000\"/>\n", x,
                  axis_y, x, axis_y + 5);
    svg +=
        format("<text x=\"%.2f\" y=\"%.2f\" font-size=\"10\" text-anchor=\"middle\">%.*f</text>\n",
               x, axis_y + 17, decimals, tick);
  }
  svg += format("<text x=\"%.2f\" y=\"%.2f\" text-anchor=\"end\">time (ms)</text>\n", left - 8,
                axis_y + 17);

  // Legend: one swatch per category present.
  double x = left;
  for (int c = 0; c <= kOther; ++c) {
    if (!present[c]) continue;
    svg += format("<rect x=\"%.2f\" y=\"%.2f\" width=\"12\" height=\"12\" fill=\"%s\"/>\n", x,
                  legend_y - 10, kCategories[c].fill);
    svg += format("<text x=\"%.2f\" y=\"%.2f\">%s</text>\n", x + 16, legend_y,
                  xml_escape(kCategories[c].name).c_str());
    x += 16 + 7.0 * std::string(kCategories[c].name).size() + 20;
  }
  return svg + "</svg>\n";
}

}  // namespace paraplan
