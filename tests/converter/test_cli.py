"""``python -m coreai_torch convert`` through ``converter.cli.main``."""

from __future__ import annotations

import shutil
import textwrap
from pathlib import Path

import pytest
import torch
from coreai.authoring import AIModelAsset, AIProgram
from support.coreai_run import run_program

from coreai_torch.converter import TorchConverter
from coreai_torch.converter.asset_writer import AssetWriteError, write_asset_atomically
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


def _destination_cases(tmp_path: Path) -> dict[str, tuple[Path, str]]:
    """What may be at a destination that is not an asset: the path and what the error says."""
    folder = tmp_path / "folder.aimodel"
    folder.mkdir()
    (folder / "notes.txt").write_text("the user's notes")
    regular = tmp_path / "regular.aimodel"
    regular.write_text("the user's data")
    target = tmp_path / "target"
    target.mkdir()
    link = tmp_path / "link.aimodel"
    link.symlink_to(target)
    dangling = tmp_path / "dangling.aimodel"
    dangling.symlink_to(tmp_path / "nowhere")
    plain = tmp_path / "plain"
    plain.write_text("a file where a directory would go")
    return {
        "directory": (folder, "is a directory that is not a Core AI asset (it holds notes.txt)"),
        "file": (regular, "is a file, not a Core AI asset"),
        "symlink": (link, f"is a symbolic link to {target}, and an asset is not written"),
        "dangling symlink": (dangling, "(which does not exist), and an asset is not written"),
        "parent is a file": (plain / "model.aimodel", f"{plain} is not a directory"),
    }


@pytest.mark.parametrize(
    "case", ["directory", "file", "symlink", "dangling symlink", "parent is a file"]
)
def test_a_destination_that_is_not_an_asset_is_refused(tmp_path: Path, capsys, case: str) -> None:
    model_file = tmp_path / "model.py"
    model_file.write_text(MODEL)
    destination, says = _destination_cases(tmp_path)[case]
    before = _tree(tmp_path)
    assert main([str(model_file), "-o", str(destination)]) == 2
    err = capsys.readouterr().err
    assert says in err, err
    assert str(destination) in err
    assert _tree(tmp_path) == before  # nothing written, replaced or created


def _tree(root: Path) -> dict[str, str]:
    """Every path under root with what it is: a link's target, a file's text, or a directory."""
    out = {}
    for path in sorted(root.rglob("*")):
        key = str(path.relative_to(root))
        if path.is_symlink():
            out[key] = f"-> {path.readlink()}"
        elif path.is_file():
            out[key] = path.read_text()
        else:
            out[key] = "dir"
    return out


def test_an_empty_directory_at_the_destination_is_replaced(tmp_path: Path) -> None:
    model_file = tmp_path / "model.py"
    model_file.write_text(MODEL)
    output = tmp_path / "empty.aimodel"
    output.mkdir()
    assert main([str(model_file), "-o", str(output)]) == 0
    assert AIModelAsset.is_valid(output)


class _SlowSave:
    """An AIProgram stand-in whose save, like a long conversion, lets someone put a
    directory of their own at the destination before the asset is renamed there."""

    def __init__(self, program: AIProgram, destination: Path) -> None:
        self.program, self.destination = program, destination

    def save_asset(self, path: Path) -> None:
        self.program.save_asset(path)
        shutil.rmtree(self.destination)
        self.destination.mkdir()
        (self.destination / "notes.txt").write_text("written during the conversion")


def test_what_appears_at_the_destination_while_converting_is_not_deleted(
    tmp_path: Path,
) -> None:
    model_file = tmp_path / "model.py"
    model_file.write_text(MODEL)
    output = tmp_path / "model.aimodel"
    assert main([str(model_file), "-o", str(output)]) == 0  # an asset: may be replaced
    program = AIModelAsset.load(output).program
    with pytest.raises(AssetWriteError, match="is a directory that is not a Core AI asset"):
        write_asset_atomically(_SlowSave(program, output), output)
    assert (output / "notes.txt").read_text() == "written during the conversion"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.aimodel", "model.py"]


def test_an_empty_entrypoint_is_refused(tmp_path: Path, capsys) -> None:
    model_file = tmp_path / "model.py"
    model_file.write_text(MODEL)
    output = tmp_path / "model.aimodel"
    with pytest.raises(SystemExit) as exit_:
        main([str(model_file), "-o", str(output), "--entrypoint", ""])
    assert exit_.value.code == 2
    assert "argument --entrypoint: entrypoint_name must be a non-empty string" in (
        capsys.readouterr().err
    )
    assert not output.exists()
    exported = torch.export.export(torch.nn.ReLU(), (torch.randn(3),))
    with pytest.raises(ValueError, match="cannot load an asset whose entry point has no name"):
        TorchConverter().add_exported_program(exported, entrypoint_name="")
