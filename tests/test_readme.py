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
