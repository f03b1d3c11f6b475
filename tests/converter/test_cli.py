"""``python -m coreai_torch convert`` through ``converter.cli.main``."""

from __future__ import annotations

import textwrap
from pathlib import Path

import torch
from coreai.authoring import AIModelAsset
from support.coreai_run import run_program

from coreai_torch.converter.cli import main

MODEL = textwrap.dedent(
    """
    import torch
    from torch.export import Dim


    class Model(torch.nn.Module):
        def forward(self, x):
            return torch.softmax(x * 2, -1)


    def get_model():
        return Model()


    def example_inputs():
        return (torch.randn(2, 5),)


    def dynamic_shapes():
        return ({0: Dim("batch", min=2, max=16)},)
    """
)


def test_convert_writes_an_asset(tmp_path: Path) -> None:
    model_file = tmp_path / "model.py"
    model_file.write_text(MODEL)
    output = tmp_path / "out" / "model.aimodel"
    args = [str(model_file), "-o", str(output), "--input-names", "x", "--output-names", "probs"]
    assert main(args) == 0
    assert AIModelAsset.is_valid(output)
    # Converting again replaces the asset and leaves no temporary files behind.
    assert main(args) == 0
    assert sorted(p.name for p in output.parent.iterdir()) == ["model.aimodel"]
    program = AIModelAsset.load(output).program
    x = torch.randn(4, 5)
    probs = run_program(program, {"x": x})["probs"]
    # softmax in float32: exp approximations differ by a few ulp.
    torch.testing.assert_close(probs, torch.softmax(x * 2, -1), rtol=1e-5, atol=1e-6)


def test_missing_function_is_reported(tmp_path: Path, capsys) -> None:
    model_file = tmp_path / "broken.py"
    model_file.write_text("def get_model():\n    return None\n")
    assert main([str(model_file)]) == 1
    assert "example_inputs()" in capsys.readouterr().err


def test_conversion_error_is_reported(tmp_path: Path, capsys) -> None:
    model_file = tmp_path / "bad.py"
    model_file.write_text(
        MODEL.replace("get_model():\n    return Model()", "get_model():\n    return 3")
    )
    assert main([str(model_file), "-o", str(tmp_path / "bad.aimodel")]) == 1
    assert "error:" in capsys.readouterr().err
    assert not (tmp_path / "bad.aimodel").exists()
