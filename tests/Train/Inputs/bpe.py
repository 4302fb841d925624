# The independent side of tests/Train/tokenize.test: Hugging Face `tokenizers`
# (the pinned wheel in .deps/hf-python) trains a byte-level BPE, writes
# JSONL documents, and reads back the llm.c shards kiln tokenize wrote.
#
#   train OUT.json VOCAB FILE...     a byte-level BPE with <|endoftext|>
#   jsonl OUT.jsonl FILE COUNT       COUNT fortunes of FILE, one a line
#   documents TOKENIZER DIR SOURCES  every document of the shards, split at
#                                    the separator, equals one source
#                                    document's encoding and decodes to it
#   whole TOKENIZER DIR FILE         val + train shards are the separator
#                                    and FILE encoded whole
import json
import os
import struct
import sys

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

SEPARATOR = "<|endoftext|>"


def fortunes(path):
    with open(path, encoding="utf-8") as f:
        return [d.strip("\n") for d in f.read().split("\n%\n") if d.strip()]


def read_shard(path):
    with open(path, "rb") as f:
        header = struct.unpack("<256i", f.read(1024))
        assert header[0] == 20240520, path
        width = {1: "H", 2: "I"}[header[1]]
        count = header[2]
        ids = list(struct.unpack("<%d%s" % (count, width),
                                 f.read(count * struct.calcsize(width))))
        assert f.read() == b"", path + ": bytes after the tokens"
    return header[1], ids


def shards(folder, prefix):
    names = sorted(n for n in os.listdir(folder) if n.startswith(prefix))
    out = []
    for n in names:
        version, ids = read_shard(os.path.join(folder, n))
        out.extend(ids)
    return version, out


def split_documents(ids, sep):
    docs, current = [], None
    for t in ids:
        if t == sep:
            if current is not None:
                docs.append(current)
            current = []
        else:
            assert current is not None, "tokens before the first separator"
            current.append(t)
    if current is not None:
        docs.append(current)
    return docs


def main():
    command = sys.argv[1]
    if command == "train":
        out, vocab, files = sys.argv[2], int(sys.argv[3]), sys.argv[4:]
        tokenizer = Tokenizer(models.BPE())
        tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(
            add_prefix_space=False)
        tokenizer.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(
            vocab_size=vocab, special_tokens=[SEPARATOR],
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
            show_progress=False)
        tokenizer.train(files, trainer)
        tokenizer.save(out)
        print("vocab", tokenizer.get_vocab_size())
    elif command == "jsonl":
        out, path, count = sys.argv[2], sys.argv[3], int(sys.argv[4])
        with open(out, "w", encoding="utf-8") as f:
            for i, text in enumerate(fortunes(path)[:count]):
                f.write(json.dumps({"id": i, "text": text}) + "\n")
    elif command == "documents":
        tokenizer = Tokenizer.from_file(sys.argv[2])
        folder, sources = sys.argv[3], sys.argv[4:]
        sep = tokenizer.token_to_id(SEPARATOR)
        expected = []
        for source in sources:
            if source.endswith(".jsonl"):
                with open(source, encoding="utf-8") as f:
                    expected += [json.loads(l)["text"] for l in f if l.strip()]
            else:
                with open(source, encoding="utf-8") as f:
                    expected.append(f.read())
        found = []
        for prefix in ("train_", "val_"):
            version, ids = shards(folder, prefix)
            assert version == (1 if tokenizer.get_vocab_size() <= 65536
                               else 2)
            found += split_documents(ids, sep)
        assert len(found) == len(expected), (len(found), len(expected))
        want = sorted(tokenizer.encode(t, add_special_tokens=False).ids
                      for t in expected)
        assert sorted(found) == want, "the shards' documents differ"
        decoded = sorted(tokenizer.decode(d) for d in found)
        assert decoded == sorted(expected), "decoding does not round-trip"
        print("documents: %d, tokens: %d, all equal" %
              (len(found), sum(map(len, found))))
    elif command == "whole":
        tokenizer = Tokenizer.from_file(sys.argv[2])
        folder, path = sys.argv[3], sys.argv[4]
        with open(path, encoding="utf-8") as f:
            text = f.read()
        _, valid = shards(folder, "val_")
        _, train = shards(folder, "train_")
        want = ([tokenizer.token_to_id(SEPARATOR)] +
                tokenizer.encode(text, add_special_tokens=False).ids)
        assert valid + train == want, "pieces do not encode as the whole"
        assert tokenizer.decode(valid + train,
                                skip_special_tokens=False) == SEPARATOR + text
        print("whole: %d bytes, %d tokens, %d val, equal" %
              (len(text.encode()), len(want), len(valid)))
    else:
        sys.exit("unknown command " + command)


if __name__ == "__main__":
    main()
