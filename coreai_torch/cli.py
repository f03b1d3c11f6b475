"""Command line: ``python -m coreai_torch {demo,check,convert}``."""

from __future__ import annotations

import argparse
import sys


def _check() -> int:
    """Runs one tiny kernel on each backend this machine has and says what happened."""
    import time

    import torch

    from . import _C
    from .demo import make_kernels

    print(f"torch {torch.__version__}")
    add = make_kernels()["vector_add"]
    devices = ["cpu"]
    devices += ["cuda"] if torch.cuda.is_available() else []
    devices += ["mps"] if torch.backends.mps.is_available() else []
    status = 0
    for device in devices:
        x = torch.arange(8.0, device=device)
        start = time.perf_counter()
        try:
            out = add(
                x,
                x,
                threads_per_grid=(8, 1, 1),
                threads_per_thread_group=(8, 1, 1),
                result_shapes=[[8]],
            )
            ok = torch.equal(out.cpu(), 2 * x.cpu())
            print(
                f"{device}: kernel ran in {time.perf_counter() - start:.2f} s, "
                f"{'correct' if ok else 'WRONG RESULT'}"
            )
            status |= 0 if ok else 1
        except Exception as exc:  # report every backend, then fail
            print(f"{device}: {type(exc).__name__}: {exc}")
            status = 1
    if "cuda" not in devices:
        libdevice = _C._cuda_libdevice() or "not found"
        print(f"cuda: no CUDA device seen by torch (libdevice for the CUDA backend: {libdevice})")
    if "mps" not in devices:
        print("mps: not available on this machine (the MPS backend needs macOS 26 and Metal 4)")
    return status


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m coreai_torch")
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="run the seed kernels, export and convert them")
    demo.add_argument("--out", help="directory for the .aimodel assets (default: a new temp dir)")
    sub.add_parser("check", help="show which backends and compiler this machine has")
    sub.add_parser("convert", help="convert a model file to a Core AI asset", add_help=False)
    args, rest = parser.parse_known_args(argv)
    if args.command == "demo":
        if rest:
            parser.error(f"unrecognized arguments: {' '.join(rest)}")
        from .demo import main as demo_main

        return demo_main(args.out)
    if args.command == "check":
        return _check()
    from .converter.cli import main as convert_main

    return convert_main(rest)


if __name__ == "__main__":
    sys.exit(main())
