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
text is cut into documents after each blank line and each starts with <|endoftext|> (as llm.c's
tinyshakespeare: 338,028 tokens). It also writes PREFIX_tokenizer.bin, llm.c's tokenizer file, so that
samples print as text, and PREFIX_tokenizer_hf/ (vocab.json, merges.txt: the same BPE for
Hugging Face transformers), which ./train --export-hf copies beside the exported model:

  python3 data/prepare.py --tokenizer gpt2 ../shared/data/tinyshakespeare.txt data/shakespeare_gpt2
  ./train --model gpt2-124m --data 'data/shakespeare_gpt2_train_*.bin' \\
          --val-data data/shakespeare_gpt2_val_000.bin --tokenizer data/shakespeare_gpt2_tokenizer.bin

GPT-2's merge ranks come, in this order, from --bpe-file FILE (tiktoken's format, one
"base64-token rank" per line, or openai-whisper's source distribution .tar.gz, which ships
GPT-2's as whisper/assets/gpt2.tiktoken; <|endoftext|> is then the id after the last rank),
from data/gpt2.tiktoken or data/openai_whisper-*.tar.gz when present (no network), or from
tiktoken's download (cached in TIKTOKEN_CACHE_DIR). Offline, get them from PyPI once:

  pip download --no-deps --no-binary :all: openai-whisper -d data/

(0.8 MB; nothing is installed) and run prepare.py again: it finds the .tar.gz in data/ and
checks the ranks are GPT-2's (50,256 of them, ' gazed' = 50255).

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


def byte_to_unicode():
    """GPT-2's printable stand-in for each byte in vocab.json and merges.txt: the printable
    Latin-1 bytes stand for themselves, the others (controls, space, ...) for 256, 257, ..."""
    keep = [b for b in range(256) if ord("!") <= b <= ord("~") or ord("\xa1") <= b <= ord("\xac") or ord("\xae") <= b]
    shifted = [b for b in range(256) if b not in keep]
    table = {b: chr(b) for b in keep}
    table.update({b: chr(256 + i) for i, b in enumerate(shifted)})
    return table


def write_hf_tokenizer(folder, ranks, eot):
    """vocab.json and merges.txt for transformers' GPT2Tokenizer. The merges come from the
    ranks: the token of rank r was made by merging the two parts BPE cuts its bytes into when
    only the ranks below r may merge."""
    import json
    shown = byte_to_unicode()
    text = lambda token: "".join(shown[b] for b in token)
    merges = []
    for token, rank in sorted(ranks.items(), key=lambda kv: kv[1]):
        parts = [bytes([b]) for b in token]
        while len(parts) > 2:
            pairs = [(ranks.get(parts[i] + parts[i + 1], rank), i) for i in range(len(parts) - 1)]
            best, i = min(pairs)
            if best >= rank:
                break
            parts[i:i + 2] = [parts[i] + parts[i + 1]]
        if len(parts) == 2:
            merges.append("%s %s" % (text(parts[0]), text(parts[1])))
        elif len(parts) > 2:
            sys.exit("prepare: token of rank %d is not a merge of lower ranks: not a BPE vocabulary" % rank)
    os.makedirs(folder, exist_ok=True)
    vocab = {text(t): r for t, r in ranks.items()}
    vocab["<|endoftext|>"] = eot
    files = {"vocab.json": json.dumps(vocab, ensure_ascii=False),
             "merges.txt": "#version: 0.2\n" + "\n".join(merges) + "\n",
             "tokenizer_config.json": json.dumps({"tokenizer_class": "GPT2Tokenizer", "bos_token": "<|endoftext|>",
                                                  "eos_token": "<|endoftext|>", "unk_token": "<|endoftext|>"})}
    for name, content in files.items():
        with open(os.path.join(folder, name), "w", encoding="utf-8") as f:
            f.write(content)
    print("wrote %s/ (vocab.json, merges.txt: %d merges, tokenizer_config.json)" % (folder, len(merges)))


WHISPER_SDIST = "openai_whisper-*.tar.gz"  # PyPI's source distribution of openai-whisper ships GPT-2's ranks
WHISPER_MEMBER = "whisper/assets/gpt2.tiktoken"
PIP_WHISPER = "pip download --no-deps --no-binary :all: openai-whisper -d %s"


def parse_ranks(text, where):
    """tiktoken's ranks format: one "base64-token rank" per line."""
    import base64
    ranks = {}
    try:
        for line in text.splitlines():
            if line.strip():
                token, rank = line.split()
                ranks[base64.b64decode(token, validate=True)] = int(rank)
    except Exception as e:
        sys.exit("prepare: %s: not a tiktoken ranks file (%s)" % (where, str(e)[:200]))
    if not ranks:
        sys.exit("prepare: %s: no ranks in it" % where)
    return ranks


def read_ranks(path):
    """Ranks from a .tiktoken file, or from openai-whisper's source distribution (its gpt2.tiktoken)."""
    import tarfile
    if not os.path.isfile(path):
        sys.exit("prepare: --bpe-file %s: not a file" % path)
    if path.endswith((".tar.gz", ".tgz")):
        try:
            with tarfile.open(path) as tar:
                member = next((m for m in tar.getmembers() if m.name.endswith("/" + WHISPER_MEMBER)), None)
                if member is None:
                    sys.exit("prepare: %s: holds no %s (openai-whisper's source distribution does)" %
                             (path, WHISPER_MEMBER))
                return parse_ranks(tar.extractfile(member).read().decode("ascii", "replace"), path)
        except (tarfile.TarError, OSError, EOFError) as e:
            sys.exit("prepare: %s: not a readable .tar.gz (%s)" % (path, e))
    with open(path, "rb") as f:
        return parse_ranks(f.read().decode("ascii", "replace"), "--bpe-file " + path)


def check_gpt2_ranks(ranks, where):
    """GPT-2's are 50,256 ranks (then <|endoftext|> = 50256), the last ' gazed'."""
    if len(ranks) != 50256 or ranks.get(b" gazed") != 50255:
        sys.exit("prepare: %s: not GPT-2's ranks (%d ranks, ' gazed' = %s; GPT-2's: 50256, 50255)" %
                 (where, len(ranks), ranks.get(b" gazed")))
    return ranks


def local_gpt2_ranks(data_dir):
    """GPT-2's ranks from this machine, no network: data/gpt2.tiktoken, or openai-whisper's source
    distribution in data/ (what PIP_WHISPER leaves there). None when neither is there."""
    import glob
    plain = os.path.join(data_dir, "gpt2.tiktoken")
    found = [plain] if os.path.isfile(plain) else sorted(glob.glob(os.path.join(data_dir, WHISPER_SDIST)))
    if not found:
        return None
    print("prepare: GPT-2's ranks from %s (no download)" % found[-1])
    return check_gpt2_ranks(read_ranks(found[-1]), found[-1])


def gpt2_encoding(bpe_file, data_dir):
    """GPT-2's BPE: the ranks from --bpe-file, else from data/ (local_gpt2_ranks), else tiktoken's
    download; where that host is not reachable, one line says how to get them from PyPI."""
    try:
        import tiktoken
    except ImportError:
        sys.exit("prepare: --tokenizer gpt2 needs tiktoken (pip install tiktoken)")
    ranks = read_ranks(bpe_file) if bpe_file else local_gpt2_ranks(data_dir)
    if ranks is None:
        try:
            return tiktoken.get_encoding("gpt2")
        except Exception as e:  # no network, a proxy, a blocked host: every way a download fails
            where = os.path.relpath(data_dir)
            sys.exit("prepare: GPT-2's ranks: tiktoken's download failed (%s: %s); offline, get them from PyPI "
                     "once: %s, then run this again (it reads %s), or pass --bpe-file FILE" %
                     (type(e).__name__, str(e).splitlines()[0][:120] if str(e) else "", PIP_WHISPER % where,
                      os.path.join(where, WHISPER_SDIST)))
    return tiktoken.Encoding("gpt2-local", pat_str=GPT2_SPLIT, mergeable_ranks=ranks,
                             special_tokens={"<|endoftext|>": len(ranks)})


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    default = os.path.join(here, "..", "..", "shared", "data", "tinyshakespeare.txt")
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("text", nargs="?", default=default)
    ap.add_argument("prefix", nargs="?", default=None,
                    help="output prefix (default data/shakespeare or data/shakespeare_gpt2)")
    ap.add_argument("--tokenizer", choices=["bytes", "gpt2"], default="bytes")
    ap.add_argument("--bpe-file", help="BPE ranks in tiktoken's format (a .tiktoken file, or openai-whisper's "
                    "source distribution .tar.gz, whose gpt2.tiktoken is GPT-2's), read instead of downloaded")
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
    os.makedirs(os.path.dirname(os.path.abspath(prefix)), exist_ok=True)
    data = open(a.text, "rb").read()
    if not data:
        sys.exit("prepare: %s is empty" % a.text)
    if a.tokenizer == "bytes":
        tokens = list(data)
        vocab_flags = ""
    else:
        enc = gpt2_encoding(a.bpe_file, here)
        eot = enc.eot_token
        text = data.decode("utf-8", errors="replace")
        tokens = []
        docs = text.split("\n\n")
        for i, doc in enumerate(docs):  # each keeps its blank line: the text is the shards' pieces joined
            tokens.append(eot)
            tokens.extend(enc.encode_ordinary(doc + ("\n\n" if i + 1 < len(docs) else "")))
        pieces = [enc.decode_single_token_bytes(i) for i in range(enc.n_vocab)]
        write_tokenizer(prefix + "_tokenizer.bin", pieces, eot)
        write_hf_tokenizer(prefix + "_tokenizer_hf", enc._mergeable_ranks, eot)
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
