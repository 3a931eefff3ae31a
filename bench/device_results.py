"""What the device runs' reports share (device_decode.py, device_prefill.py): reading one result
file of scripts/device-check, and a synthetic model's name split into its shape and type."""
import json
import os


def load(path):
    """The JSON in `path`, or None when it is absent or not JSON (a run that did not finish)."""
    if not os.path.exists(path):
        return None
    with open(path) as f:
        try:
            return json.load(f)
        except json.JSONDecodeError:
            return None


def shape_and_type(name):
    """("1b" | "8b" | the shape's name, the weight type) of "llama-3.2-1b-q4_0" and the like."""
    like, _, dtype = name.rpartition("-")
    return {"llama-3.2-1b": "1b", "llama-3.1-8b": "8b"}.get(like, like), dtype
