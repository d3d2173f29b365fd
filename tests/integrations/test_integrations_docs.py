"""docs/integrations.md shows the example project as the tests run it: every recipe line is in its file."""

from __future__ import annotations

from pathlib import Path

from tests.doc_blocks import code_blocks, excerpt_mismatch

REPO = Path(__file__).resolve().parents[2]
GUIDE = REPO / "docs" / "integrations.md"


def test_every_recipe_line_is_in_the_example_file_the_tests_run():
    recipes = [block for block in code_blocks(GUIDE) if block.kind == "recipe"]
    assert {block.source.relative_to(REPO / "docs").as_posix() for block in recipes} == {
        "examples/integrations/train_hf.py",
        "examples/integrations/hf_cases.py",
        "examples/integrations/train_lightning.py",
        "examples/integrations/lightning_cases.py",
        "examples/integrations/train_accelerate.py",
        "examples/integrations/accelerate_cases.py",
    }
    for block in recipes:
        shown = [line for line in block.code.splitlines() if line.strip() not in ("", "...")]
        assert len(shown) <= 10, f"{block.where}: a recipe is longer than 10 lines"
        assert excerpt_mismatch(block) is None, excerpt_mismatch(block)
        # An excerpt reads as Python: every call it opens, it closes.
        assert block.code.count("(") == block.code.count(")"), f"{block.where}: unclosed call"


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
