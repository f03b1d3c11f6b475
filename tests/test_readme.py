"""The README's example runs as written."""

import re
from pathlib import Path

import pytest
import torch

README = Path(__file__).resolve().parents[1] / "README.md"


def test_readme_example_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    text = README.read_text()
    section = text[text.index("## Example") :]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    monkeypatch.chdir(tmp_path)  # the example saves add.aimodel in the working directory
    scope: dict = {}
    exec(compile(code, str(README), "exec"), scope)
    torch.testing.assert_close(scope["out"], scope["x"] + scope["y"], rtol=0, atol=0)
    assert str(scope["program"]).count("coreai.metal4_kernel") == 1
    assert (tmp_path / "add.aimodel").exists()


def test_readme_training_example_runs() -> None:
    text = README.read_text()
    section = text[text.index("## Training through kernels") :]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    scope: dict = {}
    exec(compile(code, str(README), "exec"), scope)
    x = scope["x"].detach()
    want = 2.0 * (1 - torch.tanh(x) ** 2)
    # float32 tanh of the kernel and of torch differ by an ulp or two.
    torch.testing.assert_close(scope["grad_from_reference"], want, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(scope["grad_from_kernel"], want, rtol=1e-5, atol=1e-6)
    assert scope["scaled_tanh"].backward_slot.registered.backward is scope["backward"]
