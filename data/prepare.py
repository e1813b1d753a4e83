#!/usr/bin/env python3
"""Turn a text file into llm.c token shards for ./train --data.

Each shard is the llm.c format: a header of 256 int32 (magic 20240520, version 1, number of
tokens) followed by the tokens as uint16. The first --val-frac of the tokens go to a
validation shard (llm.c's convention).

--tokenizer bytes (default): tokens are bytes (ids 0..255; the trainer's byte-level
vocabulary is 257 with <|endoftext|> = 256), for the default models:

  python3 data/prepare.py ../shared/data/tinyshakespeare.txt data/shakespeare
  ./train --data 'data/shakespeare_train_*.bin' --val-data data/shakespeare_val_000.bin

--tokenizer gpt2: GPT-2's byte-level BPE (tiktoken; 50257 ids, <|endoftext|> = 50256). The
text is cut into documents at blank lines and each starts with <|endoftext|> (as llm.c's
tinyshakespeare). It also writes PREFIX_tokenizer.bin, llm.c's tokenizer file, so that
samples print as text:

  python3 data/prepare.py --tokenizer gpt2 ../shared/data/tinyshakespeare.txt data/shakespeare_gpt2
  ./train --model gpt2-124m --data 'data/shakespeare_gpt2_train_*.bin' \\
          --val-data data/shakespeare_gpt2_val_000.bin --tokenizer data/shakespeare_gpt2_tokenizer.bin

tiktoken downloads GPT-2's merge ranks on first use (cached in TIKTOKEN_CACHE_DIR). Where
that host is not reachable, --bpe-file FILE reads the same ranks from a local file in
tiktoken's format (one "base64-token rank" per line: r50k_base.tiktoken, or gpt2.tiktoken
as some packages ship it); <|endoftext|> is then the id after the last rank.

With no file argument it uses tinyshakespeare from ../shared/data if present.
"""
import argparse, array, os, struct, sys

MAGIC, VERSION = 20240520, 1
TOKENIZER_MAGIC, TOKENIZER_VERSION = 20240328, 2
# GPT-2's pre-tokenizer: contractions, letters, digits, other symbols, spaces (its encoder.py)
GPT2_SPLIT = r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""


def write_shard(path, tokens):
    if tokens and max(tokens) > 65535:
        sys.exit("prepare: token id %d does not fit the shards' uint16" % max(tokens))
    with open(path + ".tmp", "wb") as f:
        f.write(struct.pack("<256i", MAGIC, VERSION, len(tokens), *([0] * 253)))
        f.write(array.array("H", tokens).tobytes())  # little-endian on the hosts this runs on
    os.replace(path + ".tmp", path)
    print("wrote %s (%d tokens)" % (path, len(tokens)))


def write_tokenizer(path, pieces, eot):
    """llm.c's tokenizer file, version 2: 256 uint32 (magic, version, vocab size, eot id),
    then per id a uint8 length and the piece's bytes."""
    with open(path + ".tmp", "wb") as f:
        f.write(struct.pack("<256I", TOKENIZER_MAGIC, TOKENIZER_VERSION, len(pieces), eot, *([0] * 252)))
        for i, p in enumerate(pieces):
            if not 0 < len(p) < 256:
                sys.exit("prepare: token %d is %d bytes; llm.c's tokenizer file holds 1 to 255" % (i, len(p)))
            f.write(bytes([len(p)]) + p)
    os.replace(path + ".tmp", path)
    print("wrote %s (%d tokens, <|endoftext|> = %d)" % (path, len(pieces), eot))


def gpt2_encoding(bpe_file):
    try:
        import tiktoken
        from tiktoken.load import load_tiktoken_bpe
    except ImportError:
        print("prepare: --tokenizer gpt2 needs tiktoken (pip install -r requirements.txt)", file=sys.stderr)
        sys.exit(2)
    if not bpe_file:
        return tiktoken.get_encoding("gpt2")
    if not os.path.isfile(bpe_file):
        sys.exit("prepare: --bpe-file %s: not a file" % bpe_file)
    try:
        ranks = load_tiktoken_bpe(bpe_file)
    except Exception as e:
        sys.exit("prepare: --bpe-file %s: not a tiktoken ranks file (%s)" % (bpe_file, e))
    return tiktoken.Encoding("gpt2-local", pat_str=GPT2_SPLIT, mergeable_ranks=ranks,
                             special_tokens={"<|endoftext|>": len(ranks)})


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    default = os.path.join(here, "..", "..", "shared", "data", "tinyshakespeare.txt")
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("text", nargs="?", default=default)
    ap.add_argument("prefix", nargs="?", default=None, help="output prefix (default data/shakespeare or data/shakespeare_gpt2)")
    ap.add_argument("--tokenizer", choices=["bytes", "gpt2"], default="bytes")
    ap.add_argument("--bpe-file", help="GPT-2's merge ranks in tiktoken's format, read instead of downloaded")
    ap.add_argument("--val-frac", type=float, default=0.1)
    ap.add_argument("--shard-tokens", type=int, default=10_000_000)
    a = ap.parse_args()
    if a.bpe_file and a.tokenizer != "gpt2":
        sys.exit("prepare: --bpe-file goes with --tokenizer gpt2")
    if not 0 <= a.val_frac < 1 or a.shard_tokens < 1:
        sys.exit("prepare: --val-frac must be in [0, 1) and --shard-tokens >= 1")
    prefix = a.prefix or os.path.join(here, "shakespeare" if a.tokenizer == "bytes" else "shakespeare_gpt2")
    if not os.path.isfile(a.text):
        sys.exit("prepare: %s not found (pass a text file)" % a.text)
    data = open(a.text, "rb").read()
    if not data:
        sys.exit("prepare: %s is empty" % a.text)
    if a.tokenizer == "bytes":
        tokens = list(data)
        vocab_flags = ""
    else:
        enc = gpt2_encoding(a.bpe_file)
        eot = enc.eot_token
        text = data.decode("utf-8", errors="replace")
        tokens = []
        for doc in text.split("\n\n"):
            tokens.append(eot)
            tokens.extend(enc.encode_ordinary(doc))
        pieces = [enc.decode_single_token_bytes(i) for i in range(enc.n_vocab)]
        write_tokenizer(prefix + "_tokenizer.bin", pieces, eot)
        vocab_flags = " --model gpt2-124m" if enc.n_vocab == 50257 else " --vocab %d" % enc.n_vocab
        vocab_flags += " --tokenizer %s_tokenizer.bin" % prefix
    n_val = int(len(tokens) * a.val_frac)
    write_shard(prefix + "_val_000.bin", tokens[:n_val])
    train = tokens[n_val:]
    for i in range(0, len(train), a.shard_tokens):
        write_shard(prefix + "_train_%03d.bin" % (i // a.shard_tokens), train[i:i + a.shard_tokens])
    print("train on them: ./train%s --data '%s_train_*.bin' --val-data %s_val_000.bin" % (vocab_flags, prefix, prefix))


if __name__ == "__main__":
    main()
