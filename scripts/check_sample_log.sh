#!/usr/bin/env bash
# check_sample_log.sh LOG STEPS: fails (naming what is missing) unless a
# sample run's log (samples/*/run*.sh, everything it printed) holds what a
# newcomer is promised: a step line for every step up to STEPS with a finite
# loss, a validation loss, and sample text after the last step line: the
# prompt "The " and at least 200 more characters (the scripts ask for 300
# byte tokens). CI runs the samples through it (.ci/run).
set -euo pipefail
log=$1 steps=$2
problems=()
step_lines=$(grep -cE '^step: +[0-9]+ +loss: +[0-9]+\.[0-9]+ ' "$log" || true)
last_step=$(grep -oE '^step: +[0-9]+' "$log" | tail -1 | grep -oE '[0-9]+$' || true)
[ "$step_lines" -ge "$steps" ] ||
  problems+=("$step_lines step lines with a finite loss, expected $steps")
[ "${last_step:-0}" = "$steps" ] || problems+=("the last step line is step ${last_step:-none}, expected $steps")
val_loss=$(grep -oE 'val_loss: +[0-9]+\.[0-9]+' "$log" | tail -1 | grep -oE '[0-9.]+$' || true)
[ -n "$val_loss" ] || problems+=("no 'val_loss: <number>'")
# The sampler prints the prompt and its continuation last: the first line
# that starts with the prompt after the last step line, to the end.
sample_text=$(awk '/^step: /{found=0; text=""} !found && /^The /{found=1} found{text=text $0 "\n"}
                   END{printf "%s", text}' "$log")
sample_chars=$(printf '%s' "$sample_text" | wc -m)
[ "$sample_chars" -ge 204 ] ||
  problems+=("sample text after the last step: $sample_chars characters, expected 'The ' and 200 more")
if [ ${#problems[@]} -gt 0 ]; then
  for problem in "${problems[@]}"; do echo "$log: $problem" >&2; done
  exit 1
fi
echo "$log: $step_lines step lines to step $last_step, val_loss $val_loss," \
  "sample text $sample_chars characters: $(printf '%s' "$sample_text" | head -c 60 | tr '\n\t' '  ')..."
