"""Prints the tensors of a safetensors file, read independently of Kiln:
name, dtype, shape, then the metadata, checking the format's rules."""
import json
import struct
import sys

data = open(sys.argv[1], "rb").read()
(length,) = struct.unpack("<Q", data[:8])
assert 8 + length <= len(data), "header past the end"
header = json.loads(data[8:8 + length])
body = len(data) - 8 - length
sizes = {"F32": 4, "BF16": 2}
end = 0
for name in sorted(k for k in header if k != "__metadata__"):
    t = header[name]
    count = 1
    for d in t["shape"]:
        count *= d
    begin, stop = t["data_offsets"]
    assert stop - begin == count * sizes[t["dtype"]], name
    assert stop <= body, name
    end = max(end, stop)
    print(name, t["dtype"], json.dumps(t["shape"]))
assert end == body, "trailing bytes"
for key, value in sorted(header.get("__metadata__", {}).items()):
    print(key, "=", value)
