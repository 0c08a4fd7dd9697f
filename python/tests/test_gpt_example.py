"""``examples/gpt.py`` (nanoGPT's model and training loop on global tensors) trains: its loss
falls, 1, 2 and 3 ranks give the same losses and the same sampled text for one seed (the global
batch and the initial weights do not depend on the number of ranks), and it samples text."""

import re

from conftest import EXAMPLES, launch

SMALL = ["--steps", "8", "--log-every", "1", "--batch-size", "6", "--block-size", "32",
         "--n-embd", "32", "--n-head", "2", "--sample", "24"]


def losses(job):
    return [float(m.group(1)) for line in job.out[0]
            if (m := re.match(r"step \d+: loss ([0-9.]+)", line))]


def test_gpt_example_trains_alike_on_any_number_of_ranks():
    runs = {}
    for n in (1, 2, 3):
        job = launch(EXAMPLES / "gpt.py", n, *SMALL, timeout=300)
        assert job.rc == 0, job.stdout[-2000:] + job.stderr[-2000:]
        sample = [line for line in job.out[0] if line.startswith("sample:")]
        assert len(sample) == 1, job.out[0]
        runs[n] = (losses(job), job.text(0).split("sample:")[1])
    one, _ = runs[1]
    assert len(one) == 8 and one[-1] < one[0] - 0.5, one
    for n in (2, 3):
        assert runs[n][0] == one, (n, runs[n][0], one)
        assert runs[n][1] == runs[1][1], n
