"""Driving tests/quant_tools/dequant_tool, pagoda's reference codec behind a command line, from the
tests that hold it against the `gguf` package (the `dequant_tool` fixture is in conftest.py)."""
import pathlib
import subprocess

import numpy as np


def run_tool(tool: pathlib.Path, tmp_path: pathlib.Path, mode: str, type_name: str,
             data: bytes) -> bytes:
    """`mode` (quantize / dequantize) of `data` as `type_name`: the bytes the tool wrote."""
    src, dst = tmp_path / f"{mode}-{type_name}.in", tmp_path / f"{mode}-{type_name}.out"
    src.write_bytes(data)
    result = subprocess.run([str(tool), mode, type_name, str(src), str(dst)],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, f"dequant_tool {mode} {type_name} failed: {result.stderr}"
    return dst.read_bytes()


def tool_values(tool: pathlib.Path, tmp_path: pathlib.Path, mode: str, type_name: str,
                data: bytes) -> np.ndarray:
    return np.frombuffer(run_tool(tool, tmp_path, mode, type_name, data), np.float32)
