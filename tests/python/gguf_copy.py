"""A GGUF file copied with some tensors replaced or left out (every key kept): what tests use to
make a file that differs from a real one in a known way."""
import gguf
import numpy as np


def copy_gguf(src, dst, replaced=None, dropped=()):
    """`src` rewritten to `dst`; tensors named in `replaced` (name -> array in the tensor's stored
    type) get that data, those in `dropped` are left out."""
    replaced = replaced or {}
    r = gguf.GGUFReader(str(src))
    w = gguf.GGUFWriter(str(dst), arch=bytes(r.fields["general.architecture"].parts[-1]).decode())
    for f in r.fields.values():
        if f.name.startswith("GGUF.") or f.name == "general.architecture":
            continue
        kind = f.types[0]
        if kind == gguf.GGUFValueType.ARRAY:
            sub = f.types[-1]
            values = [bytes(f.parts[i]).decode("utf-8", "replace")
                      if sub == gguf.GGUFValueType.STRING else f.parts[i].tolist()[0]
                      for i in f.data]
            w.add_key_value(f.name, values, kind, sub_type=sub)
        elif kind == gguf.GGUFValueType.STRING:
            w.add_key_value(f.name, bytes(f.parts[f.data[0]]).decode(), kind)
        else:
            w.add_key_value(f.name, f.parts[f.data[0]].tolist()[0], kind)
    for t in r.tensors:
        if t.name in dropped:
            continue
        data = replaced.get(t.name, t.data)
        w.add_tensor(t.name, np.ascontiguousarray(data), raw_dtype=t.tensor_type)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
