"""Writes a hardware description whose memory lies midway between the peak
memory of two `kiln explain --perf --json` runs: a GPU on which the first
configuration fits and the second does not (or the other way round),
whatever their bytes come to after a compiler change.

usage: hbm_between.py BASE.toml A.json B.json NAME > OUT.toml
"""
import json
import re
import sys


def main():
    base, a, b, name = sys.argv[1:5]
    peaks = [json.load(open(path))["peak_memory_gib"] for path in (a, b)]
    if peaks[0] == peaks[1]:
        sys.exit(f"both configurations need {peaks[0]} GiB")
    hbm = sum(peaks) / 2
    text = open(base).read()
    text = re.sub(r"(?m)^hbm_gib = .*$", f"hbm_gib = {hbm!r}", text)
    text = re.sub(r'(?m)^name = .*$', f'name = "{name}"', text)
    sys.stdout.write(text)


main()
