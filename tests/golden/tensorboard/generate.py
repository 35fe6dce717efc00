"""TensorBoard golden fixture: event files fsdp_train wrote, read back by tensorboard itself.

  python generate.py path/to/fsdp_train      (from the repository root or anywhere)

Runs fsdp_train twice into run/ next to this file, as a killed and requeued job would:
  1. 6 steps with logging.tensorboard, a checkpoint every 3 steps, an evaluation every 3;
  2. the step_6 checkpoint removed (the job died before it), then 8 steps: the run resumes
     from step 3 and trains 4..8 again, opening a second event file that starts with a
     SessionLog START at step 4.
Then tensorboard 2.18.0's EventAccumulator (the reader behind its scalars dashboard, with
its default purge of orphaned data) reads run/tensorboard, and this script checks that
every scalar of every metrics.jsonl line is there at its step with the same float32 value,
once per step (steps 4..6 of the first file purged). It writes what tensorboard read to
expected.json, which tests/cpu/test_observability.cpp (GoldenEventFilesReadAsTensorBoardReadThem)
compares with our own C++ reader of the same files. The checkpoints are deleted afterwards;
run/ keeps tensorboard/ and metrics.jsonl.
"""

import json
import os
import shutil
import subprocess
import sys

import numpy
import tensorboard
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", "..", ".."))
RUN = os.path.join(HERE, "run")


def train(binary, max_steps):
    cmd = [binary, "train", "--config", os.path.join(ROOT, "configs", "tiny.yaml"),
           "--set", "data.source=synthetic", "--set", "model.num_layers=2", "--set", "train.seq_len=32",
           "--set", "train.micro_batch_size=4", "--set", "train.grad_accum_steps=1",
           "--set", f"train.max_steps={max_steps}", "--set", "train.eval_every=3", "--set", "eval.batches=1",
           "--set", "checkpoint.interval=3", "--set", "logging.tensorboard=true", "--set", f"run.dir={RUN}"]
    subprocess.run(cmd, check=True, env=dict(os.environ, OMP_NUM_THREADS="1"))


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    binary = os.path.abspath(sys.argv[1])
    shutil.rmtree(RUN, ignore_errors=True)
    train(binary, 6)
    shutil.rmtree(os.path.join(RUN, "checkpoints", "step_6"))
    train(binary, 8)
    shutil.rmtree(os.path.join(RUN, "checkpoints"))

    accumulator = EventAccumulator(os.path.join(RUN, "tensorboard"), size_guidance={"scalars": 0})
    accumulator.Reload()
    with open(os.path.join(RUN, "metrics.jsonl")) as f:
        metrics = [json.loads(line) for line in f]
    assert [m["step"] for m in metrics] == list(range(1, 9)), [m["step"] for m in metrics]

    scalars = {}
    for tag in sorted(accumulator.Tags()["scalars"]):
        events = accumulator.Scalars(tag)
        steps = [e.step for e in events]
        field = tag.split("/", 1)[1]
        expected_steps = [m["step"] for m in metrics if field in m]
        assert steps == expected_steps, (tag, steps, expected_steps)
        for e in events:
            value = metrics[e.step - 1][field]
            assert numpy.float32(value) == numpy.float32(e.value), (tag, e.step, value, e.value)
        scalars[tag] = [[e.step, e.value] for e in events]
    fields = {k for m in metrics for k, v in m.items() if k != "step" and isinstance(v, (int, float))}
    assert fields == {t.split("/", 1)[1] for t in scalars}, fields ^ {t.split("/", 1)[1] for t in scalars}

    with open(os.path.join(HERE, "expected.json"), "w") as f:
        json.dump({"tensorboard": tensorboard.__version__, "reader": "EventAccumulator, purge_orphaned_data=True",
                   "scalars": scalars}, f, indent=1)
        f.write("\n")
    print(f"{len(scalars)} tags x {len(metrics)} steps: tensorboard {tensorboard.__version__} read what "
          f"metrics.jsonl says; wrote expected.json")


if __name__ == "__main__":
    main()
