// timeline.h: a replayed pipeline's instruction timeline as a Chrome trace and as an SVG picture.
#pragma once

#include <string>
#include <vector>

namespace paraplan {

// One executed instruction (or other timed region) on one rank.
struct TimelineSpan {
  int rank = 0;              // world rank: one track each
  int step = 0;              // optimizer step it belongs to (1-based)
  std::string name;          // shown on the span, e.g. "F3", "B3", "send act 3", "optimizer"
  std::string category;      // "load", "forward", "backward", "send", "receive", "send+receive",
                             // "reduce", "optimizer", "other" (anything else is drawn as "other")
  int micro_batch = -1;      // -1 when not per micro-batch
  double start_seconds = 0;  // since a common origin (all ranks share it)
  double end_seconds = 0;
};

// A rank's track and its label, e.g. "rank 3 (stage 1, dp 0, tp 1)". Ranks with spans but no
// track get one labelled "rank N", after the given ones, in rank order.
struct TimelineTrack {
  int rank = 0;
  std::string label;
};

// Chrome trace-event JSON: {"traceEvents": [...], "displayTimeUnit": "ms"}, one complete ("X")
// event per span (ts and dur in microseconds, rounded to the nanosecond; pid 0; tid = rank; cat
// = category; args {"step", "micro_batch"}) and one "thread_name" metadata ("M") event per track.
// Opens in Perfetto and chrome://tracing.
std::string chrome_trace_json(const std::vector<TimelineSpan>& spans,
                              const std::vector<TimelineTrack>& tracks);

// A self-contained SVG about 1200 px wide: a background rect, one lane (a rect, label at left)
// per track, one rect (class="span") per span coloured by category with a <title> tooltip (name,
// step, duration in ms) and the micro-batch number inside when wide enough, a time axis in ms at
// the bottom, and a legend (one rect per category present). Spans narrower than a pixel are
// drawn 1 px wide. No spans: a small SVG saying "no spans".
std::string timeline_svg(const std::vector<TimelineSpan>& spans,
                         const std::vector<TimelineTrack>& tracks, const std::string& title);

// To write either to a file, use write_file_atomically from runtime/atomic_file.h.

}  // namespace paraplan
