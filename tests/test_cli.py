"""The `trainparity` command: exit codes, usage errors, help examples, snapshot, diff and env."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import uuid
from importlib import metadata

import pytest
import torch
from trainparity._internal.cli.main import main
from trainparity._internal.state.snapshot_file import read_snapshot, write_snapshot

COMMANDS = ("resume", "runs", "accumulation", "coverage", "snapshot", "diff", "env")


def _run(capsys, *arguments: str) -> tuple[int, str, str]:
    code = main([str(argument) for argument in arguments])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _snapshot(path, state, **options):
    write_snapshot(path, state, **options)
    return path


def test_the_console_script_and_python_m_run_the_same_main():
    (script,) = metadata.entry_points(group="console_scripts", name="trainparity")
    assert script.value == "trainparity._internal.cli.main:main"
    completed = subprocess.run(
        [sys.executable, "-m", "trainparity", "env", "--json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert completed.returncode == 0, completed.stderr
    report = json.loads(completed.stdout)
    assert report["schema_version"] == 2
    assert report["environment"]["torch"]["version"] == torch.__version__


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_has_help_with_an_example(capsys, command):
    code, out, _ = _run(capsys, command, "--help")
    assert code == 0
    assert "example:\n  $ " in out
    assert "--json" in out and "--report PATH" in out


@pytest.mark.parametrize(
    "arguments",
    [
        (),
        ("frobnicate",),
        ("diff", "only-one.safetensors"),
        ("diff", "a", "b", "--rtol", "1e-5"),
        ("diff", "a", "b", "--rtol", "-1", "--atol", "0"),
        ("diff", "a", "b", "--equal-nan"),
        ("resume", "cases:Case", "--timeout", "0"),
        ("resume", "cases:Case", "--env", "NO_EQUALS_SIGN"),
        ("runs", "c:C", "--variant", "no-equals-sign"),
        ("runs", "c:C", "--variant", "a=--x", "--variant-env", "b:KEY=1"),
        ("snapshot", "--output", "x.safetensors"),
        ("coverage", "--ids", "0=ids.npy", "--policy", "sometimes"),
        ("accumulation", "c:C", "--microbatches", "2", "--seed", "-1"),
        ("accumulation", "c:C", "--microbatches", "2", "--seed", str(2**32)),
    ],
)
def test_usage_errors_exit_with_4_and_say_what_is_wrong(capsys, arguments):
    code, out, err = _run(capsys, *arguments)
    assert code == 4
    assert out == ""
    assert "error" in err or "usage" in err


def test_help_examples_run_as_written(capsys, tmp_path, monkeypatch):
    """The snapshot, diff and env examples, executed line by line in an empty directory."""
    monkeypatch.chdir(tmp_path)
    for command in ("snapshot", "diff", "env"):
        _, help_text, _ = _run(capsys, command, "--help")
        example = help_text.split("example:\n", 1)[1]
        for line in example.splitlines():
            words = shlex.split(line.strip().removeprefix("$ "))
            if words[0] == "python":
                assert words[1] == "-c"
                exec(words[2], {})
            else:
                assert words[0] == "trainparity"
                code, out, err = _run(capsys, *words[1:])
                assert code == 0, (line, out, err)


def test_the_coverage_help_example_runs_as_written(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _, help_text, _ = _run(capsys, "coverage", "--help")
    lines = [
        line.strip().removeprefix("$ ") for line in help_text.split("example:\n", 1)[1].splitlines()
    ]
    exec(shlex.split(lines[0])[2], {})
    code, out, err = _run(capsys, *shlex.split(lines[1])[1:])
    assert code == 0, (out, err)


def test_diff_exit_codes_follow_the_outcome(capsys, tmp_path):
    same = _snapshot(tmp_path / "a.safetensors", {"w": torch.ones(3)})
    other = _snapshot(tmp_path / "b.safetensors", {"w": torch.ones(3) * 1.001})
    digests = _snapshot(
        tmp_path / "d.safetensors", {"w": torch.ones(3) * 1.001}, include_values=False
    )
    assert _run(capsys, "diff", same, same)[0] == 0
    assert _run(capsys, "diff", same, other)[0] == 1
    assert _run(capsys, "diff", same, other, "--rtol", "1e-2", "--atol", "0")[0] == 0
    assert _run(capsys, "diff", same, digests, "--rtol", "1e-2", "--atol", "0")[0] == 2
    code, out, _ = _run(capsys, "diff", same, tmp_path / "missing.safetensors")
    assert code == 3
    assert out.startswith("ERROR: snapshot file ")


def test_diff_prints_text_by_default_and_exactly_the_report_with_json(capsys, tmp_path):
    baseline = _snapshot(tmp_path / "a.safetensors", {"model": {"w": torch.arange(4.0)}})
    candidate = _snapshot(tmp_path / "b.safetensors", {"model": {"w": torch.arange(4.0) + 0.5}})
    code, text, _ = _run(capsys, "diff", baseline, candidate)
    assert code == 1
    assert text.startswith("FAIL: first observed divergence at model.w: tensor_value\n")
    assert "Worst tensors" in text and "Environment leads (not causes)" in text

    report_file = tmp_path / "diff.json"
    code, printed, _ = _run(capsys, "diff", baseline, candidate, "--json", "--report", report_file)
    assert code == 1
    assert printed == report_file.read_text(encoding="utf-8")
    report = json.loads(printed)
    assert report["differing_tensors"][0]["path"] == "model.w"
    assert report["environment_leads"] == []

    page = tmp_path / "diff.html"
    code, _, err = _run(capsys, "diff", baseline, candidate, "--report", page)
    assert code == 1 and f"report written to {page}" in err
    assert page.read_text(encoding="utf-8").startswith("<!DOCTYPE html>")


def test_failures_outside_a_check_are_errors_with_a_message_not_a_traceback(capsys, tmp_path):
    same = _snapshot(tmp_path / "a.safetensors", {"w": torch.ones(3)})
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    code, _, err = _run(capsys, "diff", same, same, "--report", blocker / "report.json")
    assert code == 3
    assert err.startswith("trainparity diff: error: ") and "Traceback" not in err


def test_a_report_or_snapshot_path_that_is_a_directory_leaves_no_temporary_file(capsys, tmp_path):
    same = _snapshot(tmp_path / "a.safetensors", {"w": torch.ones(3)})
    (tmp_path / "taken").mkdir()
    code, _, err = _run(capsys, "diff", same, same, "--report", tmp_path / "taken")
    assert code == 3 and "IsADirectoryError" in err
    checkpoint = tmp_path / "checkpoint.pt"
    torch.save({"w": torch.ones(2)}, checkpoint)
    code, out, _ = _run(capsys, "snapshot", "--checkpoint", checkpoint, "-o", tmp_path / "taken")
    assert code == 3 and "snapshot could not be written: IsADirectoryError" in out
    assert sorted(path.name for path in tmp_path.iterdir()) == [
        "a.safetensors",
        "checkpoint.pt",
        "taken",
    ]


def test_snapshot_records_a_checkpoint_with_the_environment(capsys, tmp_path):
    checkpoint = tmp_path / "checkpoint.pt"
    torch.save(
        {"model": {"weight": torch.ones(2, 2)}, "optimizer": {"state": {0: {"step": 3}}}},
        checkpoint,
    )
    output = tmp_path / "snap.safetensors"
    code, out, _ = _run(
        capsys, "snapshot", "--checkpoint", checkpoint, "-o", output, "--step", "5", "--json"
    )
    assert code == 0
    report = json.loads(out)
    assert report["outcome"] == "PASS" and report["tensor_count"] == 1
    snapshot, extras = read_snapshot(output)
    assert snapshot.step == 5
    assert snapshot.state.as_dict()["optimizer"].as_dict()["state"].keys() == ["0"]
    assert extras["environment"] == report["environment"]

    code, out, _ = _run(
        capsys,
        "snapshot",
        "--checkpoint",
        checkpoint,
        "-o",
        tmp_path / "d.safetensors",
        "--digest-only",
    )
    assert code == 0 and "digests only" in out
    assert read_snapshot(tmp_path / "d.safetensors")[1]["includes_values"] is False


def test_snapshot_of_a_callable_and_its_failures(capsys, tmp_path):
    module = f"observations_{uuid.uuid4().hex}"
    (tmp_path / f"{module}.py").write_text(
        "import torch\n"
        "def good():\n    return {'w': torch.zeros(3), 'lr': 0.1}\n"
        "def broken():\n    raise RuntimeError('no GPU here')\n"
        "def unsupported():\n    return {'w': object()}\n"
        "def not_a_mapping():\n    return [1, 2]\n"
    )
    common = ("--cwd", tmp_path, "-o", tmp_path / "out.safetensors")
    assert _run(capsys, "snapshot", "--call", f"{module}:good", *common)[0] == 0
    code, out, _ = _run(capsys, "snapshot", "--call", f"{module}:broken", *common)
    assert code == 3 and "RuntimeError: no GPU here" in out
    code, out, _ = _run(capsys, "snapshot", "--call", f"{module}:unsupported", *common)
    assert code == 2 and "unsupported state at w" in out
    assert _run(capsys, "snapshot", "--call", f"{module}:not_a_mapping", *common)[0] == 2
    assert _run(capsys, "snapshot", "--call", f"{module}:missing", *common)[0] == 3
    assert _run(capsys, "snapshot", "--call", "no_colon_here", *common)[0] == 4
    code, out, _ = _run(
        capsys, "snapshot", "--checkpoint", tmp_path / "nothing.pt", "-o", tmp_path / "x"
    )
    assert code == 3 and "could not be observed" in out and "FileNotFoundError" in out
    text_file = tmp_path / "notes.txt"
    text_file.write_text("epoch 3, loss 0.1\n")
    code, out, _ = _run(capsys, "snapshot", "--checkpoint", text_file, "-o", tmp_path / "x")
    assert code == 3
    assert "could not read it" in out and "give a file written by torch.save" in out


def test_env_prints_the_fingerprint_and_never_another_variable(capsys, monkeypatch):
    secret = f"s3cr3t-{uuid.uuid4()}"
    monkeypatch.setenv("TRAINPARITY_TEST_TOKEN", secret)
    monkeypatch.setenv("PYTHONHASHSEED", "0")
    code, text, _ = _run(capsys, "env")
    assert code == 0
    assert text.startswith("trainparity environment\n")
    assert "torch.version" in text and "variables.PYTHONHASHSEED" in text
    code, printed, _ = _run(capsys, "env", "--json")
    assert json.loads(printed)["environment"]["variables"]["PYTHONHASHSEED"] == "0"
    assert secret not in text and secret not in printed


def test_snapshot_of_a_cyclic_state_abstains_naming_the_path(capsys, tmp_path):
    module = f"cyclic_{uuid.uuid4().hex}"
    (tmp_path / f"{module}.py").write_text(
        "def state():\n    loop = {'inner': []}\n    loop['inner'].append(loop)\n"
        "    return {'model': loop}\n"
    )
    code, out, err = _run(
        capsys, "snapshot", "--call", f"{module}:state", "--cwd", tmp_path, "-o", tmp_path / "s"
    )
    assert (code, err) == (2, "")
    assert out.startswith(
        "ABSTAIN: snapshot state is unsupported: unsupported state at model.inner[0]: cyclic"
    )


def test_fifos_are_rejected_instead_of_blocking_forever(capsys, tmp_path):
    pipe = tmp_path / "pipe"
    os.mkfifo(pipe)
    code, out, _ = _run(capsys, "diff", pipe, pipe)
    assert code == 3 and out.startswith(f"ERROR: snapshot file {pipe} is a FIFO")
    code, _, err = _run(capsys, "snapshot", "--checkpoint", pipe, "-o", tmp_path / "s")
    assert (code, err) == (
        4,
        f"trainparity snapshot: error: --checkpoint {pipe} is a FIFO, not a regular file\n",
    )
    code, _, err = _run(
        capsys,
        "coverage",
        "--ids",
        f"0={pipe}",
        "--policy",
        "exactly_once",
        "--universe-file",
        pipe,
    )
    assert code == 4 and "--universe-file" in err and "is a FIFO" in err
    code, out, _ = _run(
        capsys, "coverage", "--ids", f"0={pipe}", "--policy", "exactly_once", "--universe", "3"
    )
    assert code == 3 and "is a FIFO, not a regular file" in out
