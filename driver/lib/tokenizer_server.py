# The Hugging Face `tokenizers` library behind Kiln's tokenizer client
# (driver/lib/Tokenizer.cpp, which runs this as `python3 -c`). It loads one
# tokenizer.json and answers requests on stdin with replies on stdout, all
# little-endian:
#
#   startup reply   'K' u32 vocab_size     or  'X' u32 n, n bytes of message
#   'E' u8 special u32 docs, per doc u32 n + n UTF-8 bytes
#                   -> 'K', per doc u32 count + count u32 ids (encode_batch)
#   'D' u32 count, count u32 ids -> 'K' u32 n + n UTF-8 bytes (decode)
#   'T' u32 n + n bytes (a token)   -> 'K' i32 id, -1 when absent
#
# Any failure after startup is an 'X' reply; the client turns it into an
# error line. End of input ends the server.
import struct
import sys

inp = sys.stdin.buffer
out = sys.stdout.buffer


def read(n):
    data = inp.read(n)
    if len(data) != n:
        sys.exit(0)
    return data


def u32():
    return struct.unpack("<I", read(4))[0]


def reply(payload):
    out.write(b"K" + payload)
    out.flush()


def fail(message):
    data = message.encode("utf-8", "replace")
    out.write(b"X" + struct.pack("<I", len(data)) + data)
    out.flush()


try:
    from tokenizers import Tokenizer
except ImportError as error:
    fail("the Hugging Face tokenizers package is not importable (%s); "
         "scripts/bootstrap installs it into .deps/hf-python" % error)
    sys.exit(0)

try:
    tokenizer = Tokenizer.from_file(sys.argv[1])
except Exception as error:  # the library raises plain Exceptions
    fail("%s: not a tokenizer the tokenizers library reads: %s"
         % (sys.argv[1], str(error).splitlines()[0] if str(error) else
            type(error).__name__))
    sys.exit(0)
reply(struct.pack("<I", tokenizer.get_vocab_size(with_added_tokens=True)))

while True:
    op = inp.read(1)
    if not op:
        break
    try:
        if op == b"E":
            special = read(1) == b"\x01"
            docs = [read(u32()).decode("utf-8") for _ in range(u32())]
            encodings = tokenizer.encode_batch(docs,
                                               add_special_tokens=special)
            parts = []
            for encoding in encodings:
                ids = encoding.ids
                parts.append(struct.pack("<I%dI" % len(ids), len(ids), *ids))
            reply(b"".join(parts))
        elif op == b"D":
            count = u32()
            ids = list(struct.unpack("<%dI" % count, read(4 * count)))
            text = tokenizer.decode(ids, skip_special_tokens=False)
            data = text.encode("utf-8")
            reply(struct.pack("<I", len(data)) + data)
        elif op == b"T":
            token = read(u32()).decode("utf-8")
            found = tokenizer.token_to_id(token)
            reply(struct.pack("<i", -1 if found is None else found))
        else:
            fail("unknown request %r" % op)
            break
    except Exception as error:
        fail(str(error).splitlines()[0] if str(error) else
             type(error).__name__)
