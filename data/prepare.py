#!/usr/bin/env python3
"""Turn a text file into llm.c token shards for ./train --data.

Tokens are bytes (ids 0..255; the trainer's byte-level vocabulary is 257 with
<|endoftext|> = 256). Each shard is the llm.c format: a header of 256 int32
(magic 20240520, version 1, number of tokens) followed by the tokens as uint16.
The first --val-frac of the text goes to a validation shard (llm.c's convention).

  python3 data/prepare.py ../shared/data/tinyshakespeare.txt data/shakespeare
  ./train --data 'data/shakespeare_train_*.bin' --val-data data/shakespeare_val_000.bin

With no file argument it uses tinyshakespeare from ../shared/data if present.
"""
import argparse, os, struct, sys

MAGIC, VERSION = 20240520, 1


def write_shard(path, tokens):
    with open(path + ".tmp", "wb") as f:
        header = [MAGIC, VERSION, len(tokens)] + [0] * 253
        f.write(struct.pack("<256i", *header))
        f.write(struct.pack("<%dH" % len(tokens), *tokens))
    os.replace(path + ".tmp", path)
    print("wrote %s (%d tokens)" % (path, len(tokens)))


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    default = os.path.join(here, "..", "..", "shared", "data", "tinyshakespeare.txt")
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("text", nargs="?", default=default)
    ap.add_argument("prefix", nargs="?", default=os.path.join(here, "shakespeare"))
    ap.add_argument("--val-frac", type=float, default=0.1)
    ap.add_argument("--shard-tokens", type=int, default=10_000_000)
    a = ap.parse_args()
    if not os.path.exists(a.text):
        sys.exit("prepare: %s not found (pass a text file)" % a.text)
    data = open(a.text, "rb").read()
    if not data:
        sys.exit("prepare: %s is empty" % a.text)
    n_val = int(len(data) * a.val_frac)
    write_shard(a.prefix + "_val_000.bin", list(data[:n_val]))
    train = data[n_val:]
    for i in range(0, len(train), a.shard_tokens):
        write_shard(a.prefix + "_train_%03d.bin" % (i // a.shard_tokens), list(train[i:i + a.shard_tokens]))


if __name__ == "__main__":
    main()
