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
text is cut into documents after each blank line (a line of nothing but spaces, tabs or a CR
counts: CRLF text too) and each starts with <|endoftext|> (as llm.c's
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

Safety (as the trainer's outputs, runtime/files.h): every file is written to a temporary of a
name only this script makes (PREFIX_x.bin.tmp.prepare-<pid>-<hex>), created exclusively (never
through a planted symbolic link); only when all are written (and what was printed reached standard
output) are they renamed into place, so a failure or a stop (Ctrl-C, SIGTERM, SIGHUP) leaves the
earlier outputs as they were and no temporary. No output may be the input text or --bpe-file,
nor may standard output or error (`> FILE`) be one of them; a rerun removes its own earlier
shards that it no longer writes (only names PREFIX_train_NNN.bin / PREFIX_val_000.bin), so the
printed glob never trains on stale ones. --val-frac 0 writes no validation shard (./train then
splits its own). Text that is not UTF-8 is refused under --tokenizer gpt2 with the count of such
bytes and the first one's offset. Every failure is one "error: prepare: ..." line and exit 1 (a
stop: 128 + the signal; a reader of standard output gone, `| head`: 141, quietly).
"""
import argparse, array, codecs, os, re, secrets, signal, stat, struct, sys

MAGIC, VERSION = 20240520, 1
TOKENIZER_MAGIC, TOKENIZER_VERSION = 20240328, 2
# GPT-2's pre-tokenizer: contractions, letters, digits, other symbols, spaces (its encoder.py)
GPT2_SPLIT = r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
# a document ends at a blank line: a line break, then a line of nothing but white space and another
# break, whichever the text uses (LF, CRLF, a lone CR, U+2028, U+0085, a form feed, a vertical tab),
# or at a paragraph separator, U+2029, which ends a paragraph by itself
LINE_BREAK = "\r\n|[\n\r\x0b\x0c\x85\u2028\u2029]"
INLINE_SPACE = "[^\\S\n\r\x0b\x0c\x85\u2028\u2029]"
BLANK_LINES = re.compile("(?:%s)(?:%s*(?:%s))+|\u2029" % (LINE_BREAK, INLINE_SPACE, LINE_BREAK))


class Failure(Exception):
    """A failure of the run: main prints it as one 'error:' line and exits 1."""


class Stopped(Exception):
    """A stop signal (SIGTERM, SIGHUP): main removes the temporaries and exits 128 + the signal."""


def stop_on(signum, frame):
    raise Stopped(signum)


class Parser(argparse.ArgumentParser):
    """argparse, but a bad flag is one error line (its own is a usage block and exit 2)."""

    def error(self, message):
        raise Failure("%s (see --help)" % message)


# Temporaries: <path>.tmp.prepare-<pid>-<12 hex>, created exclusively (O_EXCL: never an existing
# file or a planted symbolic link), renamed over the output when complete, removed on every
# failure (main's finally). Nothing else this script makes has such a name.
temporaries = set()


# The outputs written and waiting to be renamed into place: (temporary, path), in order (commit).
written = []

STOPS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class StopsHeld:
    """A stop that comes inside the block is acted on after it (its handler runs once they are let through): a
    temporary is created and registered as one step, the outputs are renamed all or none. A SIGTERM between the
    creation and the registration left the temporary behind."""

    def __enter__(self):
        signal.pthread_sigmask(signal.SIG_BLOCK, STOPS)

    def __exit__(self, *exc):
        signal.pthread_sigmask(signal.SIG_UNBLOCK, STOPS)


def write_atomic(path, chunks):
    """Write the byte strings `chunks` (any iterable) to a temporary of path's own; commit() renames it."""
    if os.path.lexists(path) and not os.path.isfile(path) or os.path.islink(path):
        raise Failure("%s: exists and is not a regular file; only a regular file is ever replaced" % path)
    tmp = "%s.tmp.prepare-%d-%s" % (path, os.getpid(), secrets.token_hex(6))
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    with StopsHeld():
        fd = os.open(tmp, flags, 0o644)
        temporaries.add(tmp)
    try:
        with os.fdopen(fd, "wb") as f:
            for chunk in chunks:
                f.write(chunk)
            f.flush()
            os.fsync(f.fileno())
    except OSError as e:  # a full disk, a file-size limit: name the file (a write's error names none)
        raise Failure("%s: write failed: %s" % (tmp, e.strerror or e))
    written.append((tmp, path))


def say(text=None):
    """text and a newline to standard output (None: its buffer written out). A failure (a full disk,
    > /dev/full) is an error of the run; a reader gone (| head) stays BrokenPipeError (main: exit 141)."""
    try:
        if text is None:
            sys.stdout.flush()
        else:
            print(text)
    except BrokenPipeError:
        raise
    except OSError as e:
        raise Failure("standard output: write failed: %s" % (e.strerror or e))


def commit():
    """Every output into place, once all are written and standard output took what was printed."""
    say()
    for tmp, path in written:
        if os.path.lexists(path) and not os.path.isfile(path) or os.path.islink(path):
            raise Failure("%s: exists and is not a regular file; only a regular file is ever replaced" % path)
    with StopsHeld():
        for tmp, path in written:
            os.replace(tmp, path)
            temporaries.discard(tmp)


def write_shard(path, tokens):
    """tokens: an array of uint16 (GPT-2's ids) or bytes (the bytes tokenizer's)."""
    header = struct.pack("<256i", MAGIC, VERSION, len(tokens), *([0] * 253))
    if isinstance(tokens, array.array):
        ids = tokens.tobytes()  # little-endian on the hosts this runs on
    else:
        ids = bytearray(2 * len(tokens))
        ids[0::2] = tokens  # each byte as a little-endian uint16
    write_atomic(path, [header, ids])
    say("wrote %s (%d tokens)" % (path, len(tokens)))


def write_tokenizer(path, pieces, eot):
    """llm.c's tokenizer file, version 2: 256 uint32 (magic, version, vocab size, eot id),
    then per id a uint8 length and the piece's bytes. Every piece is checked before the file is
    opened."""
    for i, p in enumerate(pieces):
        if not 0 < len(p) < 256:
            raise Failure("token %d is %d bytes; llm.c's tokenizer file holds 1 to 255" % (i, len(p)))
    header = struct.pack("<256I", TOKENIZER_MAGIC, TOKENIZER_VERSION, len(pieces), eot, *([0] * 252))
    write_atomic(path, [header] + [bytes([len(p)]) + p for p in pieces])
    say("wrote %s (%d tokens, <|endoftext|> = %d)" % (path, len(pieces), eot))


def byte_to_unicode():
    """GPT-2's printable stand-in for each byte in vocab.json and merges.txt: the printable
    Latin-1 bytes stand for themselves, the others (controls, space, ...) for 256, 257, ..."""
    keep = [b for b in range(256) if ord("!") <= b <= ord("~") or ord("\xa1") <= b <= ord("\xac") or ord("\xae") <= b]
    shifted = [b for b in range(256) if b not in keep]
    table = {b: chr(b) for b in keep}
    table.update({b: chr(256 + i) for i, b in enumerate(shifted)})
    return table


HF_FILES = ("vocab.json", "merges.txt", "tokenizer_config.json")


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
            raise Failure("token of rank %d is not a merge of lower ranks: not a BPE vocabulary" % rank)
    if os.path.lexists(folder) and not os.path.isdir(folder) or os.path.islink(folder):
        raise Failure("%s: exists and is not a directory" % folder)
    os.makedirs(folder, exist_ok=True)
    vocab = {text(t): r for t, r in ranks.items()}
    vocab["<|endoftext|>"] = eot
    files = {"vocab.json": json.dumps(vocab, ensure_ascii=False),
             "merges.txt": "#version: 0.2\n" + "\n".join(merges) + "\n",
             "tokenizer_config.json": json.dumps({"tokenizer_class": "GPT2Tokenizer", "bos_token": "<|endoftext|>",
                                                  "eos_token": "<|endoftext|>", "unk_token": "<|endoftext|>"})}
    for name in HF_FILES:
        write_atomic(os.path.join(folder, name), [files[name].encode("utf-8")])
    say("wrote %s/ (vocab.json, merges.txt: %d merges, tokenizer_config.json)" % (folder, len(merges)))


def check_byte_level(ranks, where):
    """Byte-level BPE needs every single byte as a token and ranks 0..n-1 (tiktoken fails on
    either with a traceback, or encodes what it cannot)."""
    missing = [b for b in range(256) if bytes([b]) not in ranks]
    if missing:
        raise Failure("%s: %d of the 256 single-byte tokens are missing (the first: byte %d): byte-level BPE needs "
                      "them all" % (where, len(missing), missing[0]))
    if sorted(ranks.values()) != list(range(len(ranks))):
        raise Failure("%s: the ranks are not 0..%d, each once" % (where, len(ranks) - 1))


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
        raise Failure("%s: not a tiktoken ranks file (%s)" % (where, str(e)[:200]))
    if not ranks:
        raise Failure("%s: no ranks in it" % where)
    return ranks


RANKS_CAP = 64 << 20  # bytes of a ranks file read at most (GPT-2's: 1.6 MB); a larger one is not read into memory


def read_ranks(path):
    """Ranks from a .tiktoken file, or from openai-whisper's source distribution (its gpt2.tiktoken)."""
    import tarfile
    if not os.path.isfile(path):
        raise Failure("--bpe-file %s: not a file" % path)
    if path.endswith((".tar.gz", ".tgz")):
        try:
            with tarfile.open(path) as tar:
                member = next((m for m in tar.getmembers() if m.name.endswith("/" + WHISPER_MEMBER)), None)
                if member is None:
                    raise Failure("%s: holds no %s (openai-whisper's source distribution does)" %
                                  (path, WHISPER_MEMBER))
                if not member.isfile() or member.size > RANKS_CAP:  # (extractfile gives None for a directory)
                    raise Failure("%s: its %s is %s, not a ranks file" % (path, member.name, "larger than %d MiB" % (
                        RANKS_CAP >> 20) if member.isfile() else "not a regular file"))
                return parse_ranks(tar.extractfile(member).read().decode("ascii", "replace"), path)
        except (tarfile.TarError, OSError, EOFError) as e:
            raise Failure("%s: not a readable .tar.gz (%s)" % (path, e))
    if os.path.getsize(path) > RANKS_CAP:
        raise Failure("--bpe-file %s: larger than %d MiB: not a ranks file" % (path, RANKS_CAP >> 20))
    with open(path, "rb") as f:
        return parse_ranks(f.read().decode("ascii", "replace"), "--bpe-file " + path)


def check_gpt2_ranks(ranks, where):
    """GPT-2's are 50,256 ranks (then <|endoftext|> = 50256), the last ' gazed'."""
    if len(ranks) != 50256 or ranks.get(b" gazed") != 50255:
        raise Failure("%s: not GPT-2's ranks (%d ranks, ' gazed' = %s; GPT-2's: 50256, 50255)" %
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
    say("prepare: GPT-2's ranks from %s (no download)" % found[-1])
    return check_gpt2_ranks(read_ranks(found[-1]), found[-1])


def gpt2_encoding(bpe_file, data_dir):
    """GPT-2's BPE: the ranks from --bpe-file, else from data/ (local_gpt2_ranks), else tiktoken's
    download; where that host is not reachable, one line says how to get them from PyPI."""
    try:
        import tiktoken
    except ImportError:
        raise Failure("--tokenizer gpt2 needs tiktoken (pip install -r requirements/data.txt)")
    ranks = read_ranks(bpe_file) if bpe_file else local_gpt2_ranks(data_dir)
    if ranks is None:
        try:
            return tiktoken.get_encoding("gpt2")
        except Exception as e:  # no network, a proxy, a blocked host: every way a download fails
            where = os.path.relpath(data_dir)
            raise Failure("GPT-2's ranks: tiktoken's download failed (%s: %s); offline, get them from PyPI "
                          "once: %s, then run this again (it reads %s), or pass --bpe-file FILE" %
                          (type(e).__name__, str(e).splitlines()[0][:120] if str(e) else "", PIP_WHISPER % where,
                           os.path.join(where, WHISPER_SDIST)))
    check_byte_level(ranks, bpe_file or "the ranks")
    return tiktoken.Encoding("gpt2-local", pat_str=GPT2_SPLIT, mergeable_ranks=ranks,
                             special_tokens={"<|endoftext|>": len(ranks)})


def decode_utf8(data, path):
    """data as text; bytes that are not UTF-8 are an error that says how many and where the first is
    (GPT-2's BPE reads text: replacing them would train on U+FFFD where the file had something else)."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        first = e.start
    bad = [0]

    def count(err):
        bad[0] += err.end - err.start
        return ("", err.end)
    codecs.register_error("prepare_count", count)
    data.decode("utf-8", errors="prepare_count")
    raise Failure("%s: %d bytes are not UTF-8 (the first at byte offset %d); --tokenizer gpt2 reads UTF-8 text: "
                  "convert the file (iconv) or use --tokenizer bytes" % (path, bad[0], first))


def split_documents(text):
    """The text cut after each blank line (kept with the document before it, so that the pieces
    joined are the text)."""
    docs, at = [], 0
    for m in BLANK_LINES.finditer(text):
        docs.append(text[at:m.end()])
        at = m.end()
    if at < len(text) or not docs:
        docs.append(text[at:])
    return docs


def file_id(path):
    st = os.stat(path)
    return (st.st_dev, st.st_ino)


def std_streams():
    """Standard output and error where they are regular files (`> log.txt`): outputs as the others
    are, though not of each other (`> log.txt 2>&1`)."""
    streams = {}
    for fd, name in ((1, "standard output"), (2, "standard error")):
        try:
            st = os.fstat(fd)
        except OSError:
            continue
        if stat.S_ISREG(st.st_mode):
            streams[(st.st_dev, st.st_ino)] = name
    return streams


def check_outputs(inputs, outputs):
    """No output is an input or another output: by (device, inode) where a file exists, else by its
    resolved path (the trainer's rule, runtime/files.h)."""
    seen = {}
    ids = {}
    for flag, path in inputs:
        if path and os.path.exists(path):
            ids[file_id(path)] = (flag, path)
            ids[os.path.realpath(path)] = (flag, path)
    for key, name in std_streams().items():
        for path in outputs:
            if os.path.exists(path) and file_id(path) == key:
                raise Failure("%s is the output %s: send it elsewhere" % (name, path))
        if key in ids:
            raise Failure("%s is the %s %s: send it elsewhere" % (name, ids[key][0], ids[key][1]))
    for path in outputs:
        keys = [os.path.realpath(path)] + ([file_id(path)] if os.path.exists(path) else [])
        for k in keys:
            if k in ids:
                raise Failure("output %s is the %s %s; it is not overwritten" % (path, ids[k][0], ids[k][1]))
            if k in seen and seen[k] != path:
                raise Failure("outputs %s and %s are one file" % (seen[k], path))
            seen[k] = path


MAX_TRAIN_SHARDS = 1000  # PREFIX_train_000.bin .. _999.bin


def stale_shards(prefix, n_train, has_val):
    """This script's shards of an earlier run under prefix that this run does not write: train
    shards past n_train (and the validation shard when this run has none). Only names this script
    makes (PREFIX_train_NNN.bin, PREFIX_val_000.bin), only regular files."""
    folder, base = os.path.split(prefix)
    own = re.compile(re.escape(base) + r"_train_(\d{3,})\.bin\Z")
    stale = []
    for name in os.listdir(folder or "."):
        m = own.match(name)
        path = os.path.join(folder, name)
        if (m and int(m.group(1)) >= n_train or not has_val and name == base + "_val_000.bin") and \
                os.path.isfile(path) and not os.path.islink(path):
            stale.append(path)
    return sorted(stale)


def run(a, here):
    if a.bpe_file and a.tokenizer != "gpt2":
        raise Failure("--bpe-file goes with --tokenizer gpt2")
    if not 0 <= a.val_frac < 1 or a.shard_tokens < 1:
        raise Failure("--val-frac must be in [0, 1) and --shard-tokens >= 1")
    prefix = a.prefix if a.prefix is not None else os.path.join(
        here, "shakespeare" if a.tokenizer == "bytes" else "shakespeare_gpt2")
    if not os.path.basename(prefix):
        raise Failure("the output prefix '%s' has no file name part (give e.g. data/mytext)" % prefix)
    if not os.path.exists(a.text):
        raise Failure("%s not found (pass a text file)" % a.text)
    if not os.path.isfile(a.text):
        raise Failure("%s is %s: pass a text file" % (a.text, "a directory" if os.path.isdir(a.text) else
                                                      "not a regular file (a FIFO, a device or a socket)"))
    os.makedirs(os.path.dirname(os.path.abspath(prefix)), exist_ok=True)
    with open(a.text, "rb") as f:
        data = f.read()
    if not data:
        raise Failure("%s is empty" % a.text)
    if a.tokenizer == "bytes":
        tokens = data  # a token a byte: the bytes themselves (a list of them would take 8 bytes each)
        vocab_flags, enc = "", None
    else:
        enc = gpt2_encoding(a.bpe_file, here)
        eot = enc.eot_token
        if enc.n_vocab > 65536:
            raise Failure("the BPE has %d tokens; llm.c's shards hold ids below 65536" % enc.n_vocab)
        tokens = array.array("H")  # 2 bytes a token
        for doc in split_documents(decode_utf8(data, a.text)):
            tokens.append(eot)
            tokens.extend(enc.encode_ordinary(doc))
        vocab_flags = " --model gpt2-124m" if enc.n_vocab == 50257 else " --vocab %d" % enc.n_vocab
        vocab_flags += " --tokenizer %s_tokenizer.bin" % prefix
    n_val = int(len(tokens) * a.val_frac)
    train = tokens[n_val:]
    n_train = (len(train) + a.shard_tokens - 1) // a.shard_tokens
    if n_train > MAX_TRAIN_SHARDS:  # the names' three digits keep ./train's name order the data's order
        raise Failure("--shard-tokens %d makes %d train shards of %d tokens (at most %d): give a larger --shard-tokens"
                      % (a.shard_tokens, n_train, len(train), MAX_TRAIN_SHARDS))
    outputs = [prefix + "_train_%03d.bin" % i for i in range(n_train)] + ([prefix + "_val_000.bin"] if n_val else [])
    if enc:
        outputs += [prefix + "_tokenizer.bin"] + [os.path.join(prefix + "_tokenizer_hf", n) for n in HF_FILES]
    stale = stale_shards(prefix, n_train, n_val > 0)
    # the stale shards are deleted: they may not be an input either
    check_outputs([("input text", a.text), ("--bpe-file", a.bpe_file)], outputs + stale)
    if enc:
        write_tokenizer(prefix + "_tokenizer.bin", [enc.decode_single_token_bytes(i) for i in range(enc.n_vocab)],
                        eot)
        write_hf_tokenizer(prefix + "_tokenizer_hf", enc._mergeable_ranks, eot)
    if n_val:
        write_shard(prefix + "_val_000.bin", tokens[:n_val])
    for i in range(n_train):
        write_shard(prefix + "_train_%03d.bin" % i, train[i * a.shard_tokens:(i + 1) * a.shard_tokens])
    commit()
    for path in stale:
        os.unlink(path)
        say("removed %s (a shard of an earlier run that this one does not write)" % path)
    val_flags = " --val-data %s_val_000.bin" % prefix if n_val else ""  # --val-frac 0: ./train splits its own
    say("train on them: ./train%s --data '%s_train_*.bin'%s" % (vocab_flags, prefix, val_flags))


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    default = os.path.join(here, "..", "..", "shared", "data", "tinyshakespeare.txt")
    ap = Parser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter, add_help=False)
    ap.add_argument("-h", "--help", action="store_true", help="show this help message and exit")
    ap.add_argument("text", nargs="?", default=default,
                    help="the text file (default ../shared/data/tinyshakespeare.txt, beside this repository)")
    ap.add_argument("prefix", nargs="?", default=None,
                    help="output prefix (default data/shakespeare or data/shakespeare_gpt2)")
    ap.add_argument("--tokenizer", choices=["bytes", "gpt2"], default="bytes", help="bytes (default) or GPT-2's BPE")
    ap.add_argument("--bpe-file", help="BPE ranks in tiktoken's format (a .tiktoken file, or openai-whisper's "
                    "source distribution .tar.gz, whose gpt2.tiktoken is GPT-2's), read instead of downloaded")
    ap.add_argument("--val-frac", type=float, default=0.1, help="share of the tokens for validation (default 0.1)")
    ap.add_argument("--shard-tokens", type=int, default=10_000_000,
                    help="tokens per train shard (default 10000000; at most 1000 shards)")
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, stop_on)
    code = 0
    try:
        a = ap.parse_args()
        if a.help:  # printed here: argparse's own --help drops a write error and exits 0
            say(ap.format_help().rstrip("\n"))
        else:
            run(a, here)
        say()  # what was printed must reach standard output: else not exit 0
    except Failure as e:
        print("error: prepare: %s" % e, file=sys.stderr)
        code = 1
    except BrokenPipeError:  # the reader of standard output is gone (| head): quietly, as other tools
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # Python's flush at exit must not fail
        code = 128 + signal.SIGPIPE
    except OSError as e:  # an unwritable prefix, a full disk: the file and the system's reason
        print("error: prepare: %s%s" % (e.filename + ": " if e.filename else "", e.strerror or e), file=sys.stderr)
        code = 1
    except MemoryError:
        print("error: prepare: out of memory (the text is read whole; split it into smaller files)", file=sys.stderr)
        code = 1
    except KeyboardInterrupt:
        print("prepare: stopped by signal 2", file=sys.stderr)
        code = 130
    except Stopped as e:
        print("prepare: stopped by signal %d" % e.args[0], file=sys.stderr)
        code = 128 + e.args[0]
    finally:
        for tmp in list(temporaries):
            try:
                os.unlink(tmp)
            except OSError:
                pass
    if code:  # nothing more to standard output: Python's flush at exit must not add a second message
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    sys.exit(code)


if __name__ == "__main__":
    main()
