#!/usr/bin/env python3
"""Writes the chat template (tokenizer.chat_template) of every GGUF file under the given folders
into OUT_DIR, one file each: seeds for the template fuzzer (scripts/fuzz).

    scripts/extract_chat_templates.py OUT_DIR FOLDER...
"""
import pathlib
import sys

import gguf


def main():
    out = pathlib.Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    count = 0
    for folder in sys.argv[2:]:
        for path in sorted(pathlib.Path(folder).rglob("*.gguf")) if pathlib.Path(folder).is_dir() else []:
            try:
                field = gguf.GGUFReader(str(path)).fields.get("tokenizer.chat_template")
            except Exception:  # a file the gguf package cannot read is not a seed
                continue
            if field is None:
                continue
            (out / (path.stem + ".jinja")).write_bytes(bytes(field.parts[field.data[0]]))
            count += 1
    print(f"extract_chat_templates: {count} templates")


if __name__ == "__main__":
    main()
