"""docs/integrations.md shows the example project as the tests run it: every recipe line is in its file."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
GUIDE = REPO / "docs" / "integrations.md"
EXAMPLE = REPO / "docs" / "examples" / "integrations"
RECIPE = re.compile(r"<!-- recipe: (?P<file>[\w.]+) -->\n```python\n(?P<code>.*?)```", re.DOTALL)


def test_every_recipe_line_is_in_the_example_file_the_tests_run():
    recipes = list(RECIPE.finditer(GUIDE.read_text(encoding="utf-8")))
    assert {match["file"] for match in recipes} == {
        "train_hf.py",
        "hf_cases.py",
        "train_lightning.py",
        "lightning_cases.py",
        "train_accelerate.py",
        "accelerate_cases.py",
    }
    for match in recipes:
        source = (EXAMPLE / match["file"]).read_text(encoding="utf-8").splitlines()
        lines = [line for line in match["code"].splitlines() if line.strip()]
        assert len(lines) <= 10, f"a recipe from {match['file']} is longer than 10 lines"
        position = 0
        for line in lines:  # in the file's order
            assert line in source[position:], f"{match['file']}: {line!r}"
            position = source.index(line, position) + 1


def test_the_guide_names_every_file_the_observers_read():
    guide = GUIDE.read_text(encoding="utf-8")
    for name in (
        "model.safetensors.index.json",
        "optimizer.pt",
        "scheduler.pt",
        "scaler.pt",
        "rng_state_<rank>.pth",
        "trainer_state.json",
        "training_args.bin",
        "optimizer_states",
        "lr_schedulers",
        "loops",
        "random_states_<rank>.pkl",
        "sampler.bin",
        "custom_checkpoint_<i>.pkl",
    ):
        assert name in guide, name
