# Checks a headless-Chromium screenshot of a kiln report page: the page
# rendered at the window's size, and each plot's line colour is drawn
# (pixels of that exact colour, as the SVG strokes them).
#
#   check_screenshot.py PNG WIDTH HEIGHT
import sys

from PIL import Image

image = Image.open(sys.argv[1]).convert("RGB")
width, height = int(sys.argv[2]), int(sys.argv[3])
assert image.size == (width, height), image.size
counts = {}
for pixel in image.getdata():
    counts[pixel] = counts.get(pixel, 0) + 1
COLOURS = {
    "loss": (0x1f, 0x77, 0xb4),
    "validation": (0xd6, 0x27, 0x28),
    "lr": (0x2c, 0xa0, 0x2c),
    "grad norm": (0x94, 0x67, 0xbd),
    "throughput": (0xff, 0x7f, 0x0e),
    "MFU": (0x8c, 0x56, 0x4b),
}
for name, colour in COLOURS.items():
    n = counts.get(colour, 0)
    print("%s: %s" % (name, "drawn" if n >= 20 else "missing (%d pixels)" % n))
print("colours: %d" % len(counts))
