"""tensorboard_check.py: TensorBoard's own reader on a paraplan run.

Usage: tensorboard_check.py RUN_DIR
Prints one JSON object: {tag: [[step, value], ...]} for every scalar tag
TensorBoard's EventAccumulator finds in the directory's event files.
"""
import json
import sys

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator


def main():
    accumulator = EventAccumulator(sys.argv[1], size_guidance={"scalars": 0})
    accumulator.Reload()
    scalars = {
        tag: [[event.step, event.value] for event in accumulator.Scalars(tag)]
        for tag in accumulator.Tags()["scalars"]
    }
    print(json.dumps(scalars))


if __name__ == "__main__":
    main()
