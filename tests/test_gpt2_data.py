#!/usr/bin/env python3
"""BPE data end to end, offline: data/prepare.py --tokenizer gpt2 with a small BPE made here
(--bpe-file: tiktoken's format, 256 bytes and a few merges, the GPT-2 split pattern), its
shards and tokenizer file read by ./train, samples decoded to text from <|endoftext|>, and
the errors and notes a GPT-2 vocabulary gets.

  make train && python3 tests/test_gpt2_data.py

One line per check, "N passed, N failed" last. Without tiktoken the prepare.py checks are
skipped (said, and counted) and the trainer's checks use a tokenizer file written here.
"""
import base64, glob, io, os, re, shutil, struct, subprocess, sys, tarfile, tempfile

from harness import Checks

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
MERGES = [b"th", b"he", b"the", b" the", b"on", b"ce", b" u", b"up", b" up", b"on", b"ti", b"me", b" a", b"in", b"an"]
check = Checks("gpt2_data")


def train(*flags):
    p = subprocess.run(["./train", "--model", "tiny", "--eval-every", "0", "--quiet"] + list(flags), cwd=ROOT,
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, errors="replace", timeout=300)
    return p.returncode, p.stdout, p.stderr


def write_shard(path, ids):
    with open(path, "wb") as f:
        f.write(struct.pack("<256i", 20240520, 1, len(ids), *([0] * 253)) + struct.pack("<%dH" % len(ids), *ids))


def read_shard(path):
    raw = open(path, "rb").read()
    h = struct.unpack("<3i", raw[:12])
    return h, list(struct.unpack("<%dH" % h[2], raw[1024:]))


def read_tokenizer(path):
    raw = open(path, "rb").read()
    magic, version, vocab, eot = struct.unpack("<4I", raw[:16])
    pieces, at = [], 1024
    for _ in range(vocab):
        pieces.append(raw[at + 1:at + 1 + raw[at]])
        at += 1 + raw[at]
    return (magic, version, vocab, eot), pieces, at == len(raw)


def sample_of(stdout):
    if "sample:\n" not in stdout:
        return None
    return re.split(r"\n(?:exported|measured:)", stdout.split("sample:\n", 1)[1])[0].rstrip("\n")


def offline(tmp, *args):
    """data/prepare.py (copied to tmp/data, so that its data/ is tmp's) with the network blocked: every
    proxy a refused port, an empty tiktoken cache."""
    os.makedirs(os.path.join(tmp, "data"), exist_ok=True)
    script = os.path.join(tmp, "data", "prepare.py")
    shutil.copy(os.path.join(ROOT, "data", "prepare.py"), script)
    env = dict(os.environ, TIKTOKEN_CACHE_DIR=os.path.join(tmp, "empty_cache"))
    for k in ("HTTPS_PROXY", "HTTP_PROXY", "https_proxy", "http_proxy", "ALL_PROXY", "all_proxy"):
        env[k] = "http://127.0.0.1:9"
    env.pop("NO_PROXY", None), env.pop("no_proxy", None)
    return subprocess.run([sys.executable, script, "--tokenizer", "gpt2"] + list(args), cwd=tmp, env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=300)


def whisper_sdist(path, ranks_text):
    """A .tar.gz laid out as openai-whisper's source distribution, holding ranks_text as its gpt2.tiktoken."""
    data = ranks_text.encode()
    with tarfile.open(path, "w:gz") as tar:
        info = tarfile.TarInfo("openai_whisper-0/whisper/assets/gpt2.tiktoken")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))


def offline_ranks(tmp, text_path, merges):
    """GPT-2's ranks without network: one line saying how to get them; a whisper source distribution
    as --bpe-file or in data/ (checked to be GPT-2's); the real one when .ci/run fetched it to data/."""
    work = os.path.join(tmp, "offline")
    p = offline(work, text_path, os.path.join(work, "none"))
    line = p.stdout.strip()
    check(p.returncode == 1 and "Traceback" not in line and len(line.splitlines()) == 1 and
          "pip download --no-deps --no-binary :all: openai-whisper -d data" in line,
          "offline: no ranks, no network: one line saying how to get them", line[-200:])
    ranks = "".join("%s %d\n" % (base64.b64encode(t).decode(), r)
                    for r, t in enumerate([bytes([b]) for b in range(256)] + merges))
    sdist = os.path.join(work, "whisper_small.tar.gz")
    whisper_sdist(sdist, ranks)
    p = offline(work, "--bpe-file", sdist, text_path, os.path.join(work, "small"))
    check(p.returncode == 0 and "--vocab %d" % (257 + len(merges)) in p.stdout,
          "offline: --bpe-file of a whisper source distribution reads its gpt2.tiktoken", p.stdout.strip()[-120:])
    whisper_sdist(os.path.join(work, "data", "openai_whisper-0.tar.gz"), ranks)
    p = offline(work, text_path, os.path.join(work, "auto"))
    check(p.returncode == 1 and "not GPT-2's ranks" in p.stdout and "Traceback" not in p.stdout,
          "offline: a source distribution in data/ is checked to hold GPT-2's ranks", p.stdout.strip()[-160:])
    os.remove(os.path.join(work, "data", "openai_whisper-0.tar.gz"))
    real = sorted(glob.glob(os.path.join(ROOT, "data", "openai_whisper-*.tar.gz")))
    shakespeare = os.path.join(ROOT, "..", "shared", "data", "tinyshakespeare.txt")
    if not real or not os.path.isfile(shakespeare):
        print("SKIP gpt2_data/offline: GPT-2 itself: no data/openai_whisper-*.tar.gz (.ci/run fetches it: "
              "pip download --no-deps --no-binary :all: openai-whisper -d data/) or no tinyshakespeare")
        return
    shutil.copy(real[-1], os.path.join(work, "data"))
    p = offline(work, shakespeare, os.path.join(work, "shakespeare"))
    n = sum(read_shard(os.path.join(work, "shakespeare_%s.bin" % s))[0][2] for s in ("val_000", "train_000"))
    check(p.returncode == 0 and "no download" in p.stdout and n == 338028,
          "offline: GPT-2's ranks from openai-whisper's source distribution: tinyshakespeare is 338,028 tokens "
          "(llm.c's count)", "%d tokens" % n)


def main():
    stories = "\n\n".join("once upon a time %s the %s sat on the %s." % (w, x, y) for w, x, y in
                          [("in the north", "cat", "mat"), ("there", "dog", "log"), ("in the south", "bird", "tree"),
                           ("long ago", "frog", "stone"), ("at dawn", "fox", "hill")] * 60)
    with tempfile.TemporaryDirectory(prefix="test_gpt2_data_") as tmp:
        text_path = os.path.join(tmp, "stories.txt")
        open(text_path, "w").write(stories)
        prefix = os.path.join(tmp, "stories")
        try:
            import transformers
            transformers.logging.set_verbosity_error()
        except ModuleNotFoundError:
            transformers = None
        try:
            import tiktoken  # noqa: F401
            have_tiktoken = True
        except ModuleNotFoundError:
            have_tiktoken = False
            print("SKIP gpt2_data/prepare: tiktoken is not installed (pip install -r requirements/data.txt); "
                  "the trainer's checks use a tokenizer file written here")
        merges = list(dict.fromkeys(MERGES))  # in rank order, each once
        vocab = 256 + len(merges) + 1
        eot = vocab - 1
        if have_tiktoken:
            bpe = os.path.join(tmp, "small.tiktoken")
            with open(bpe, "w") as f:
                for rank, tok in enumerate([bytes([b]) for b in range(256)] + merges):
                    f.write("%s %d\n" % (base64.b64encode(tok).decode(), rank))
            p = subprocess.run([sys.executable, "data/prepare.py", "--tokenizer", "gpt2", "--bpe-file", bpe, text_path,
                                prefix], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=120)
            check(p.returncode == 0 and "--vocab %d" % vocab in p.stdout,
                  "prepare: shards, tokenizer and the train command",
                  p.stdout.strip().splitlines()[-1] if p.stdout.strip() else "exit %d" % p.returncode)
            (magic, version, n, tok_eot), pieces, whole = read_tokenizer(prefix + "_tokenizer.bin")
            good = (magic, version, n, tok_eot) == (20240328, 2, vocab, eot)
            check(good and whole and pieces[eot] == b"<|endoftext|>",
                  "prepare: llm.c tokenizer file v2", "vocab %d, eot %d" % (n, tok_eot))
            hv, val = read_shard(prefix + "_val_000.bin")
            ht, tr = read_shard(prefix + "_train_000.bin")
            ids = val + tr
            decoded = b"".join(b"" if i == eot else pieces[i] for i in ids).decode()
            check(hv[:2] == (20240520, 1) and decoded == stories and ids[0] == eot and ids.count(eot) == 300,
                  "prepare: shards decode to the text, <|endoftext|> before each of 300 documents",
                  "%d tokens for %d bytes" % (len(ids), len(stories)))
            hf_tok = prefix + "_tokenizer_hf"
            merges_txt = open(os.path.join(hf_tok, "merges.txt")).read().split("\n")
            check(merges_txt[1:-1] == [" ".join(m.decode().replace(" ", "\u0120") for m in pair) for pair in
                                       [(b"t", b"h"), (b"h", b"e"), (b"th", b"e"), (b" ", b"the"), (b"o", b"n")]]
                  + merges_txt[6:-1] and len(merges_txt) == len(merges) + 2,
                  "prepare: merges.txt from the ranks (GPT-2's byte symbols)", " | ".join(merges_txt[1:6]))
            if transformers:
                tok = transformers.AutoTokenizer.from_pretrained(hf_tok)
                first = ids[1:ids.index(eot, 1)]
                check(tok.encode(stories.split("\n\n")[0] + "\n\n") == first and tok.eos_token_id == eot,
                      "prepare: transformers' GPT2Tokenizer from vocab.json and merges.txt gives the shards' ids",
                      "%d ids" % len(first))
            p = subprocess.run([sys.executable, "data/prepare.py", "--tokenizer", "gpt2", "--bpe-file", text_path,
                                text_path, prefix + "_bad"], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            check(p.returncode != 0 and "not a tiktoken ranks file" in p.stdout and "Traceback" not in p.stdout,
                  "prepare: a --bpe-file that is not one is one line", p.stdout.strip())
        else:  # the same files, from a tokenizer written here: bytes and the merges
            pieces = [bytes([b]) for b in range(256)] + merges + [b"<|endoftext|>"]
            with open(prefix + "_tokenizer.bin", "wb") as f:
                f.write(struct.pack("<256I", 20240328, 2, vocab, eot, *([0] * 252)))
                f.write(b"".join(bytes([len(p)]) + p for p in pieces))
            ids = []
            for doc in stories.split("\n\n"):
                ids += [eot] + list(doc.encode()) + [10, 10]
            write_shard(prefix + "_val_000.bin", ids[:len(ids) // 10])
            write_shard(prefix + "_train_000.bin", ids[len(ids) // 10:])
        data = ["--data", prefix + "_train_*.bin", "--val-data", prefix + "_val_000.bin"]
        if have_tiktoken:
            offline_ranks(tmp, text_path, merges)

        # a shard of ids past the byte-level vocabulary: the error names the vocabulary it needs
        rc, out, err = train(*data, "--steps", "1")
        check(rc == 1 and "its largest id is %d" % (vocab - 1) in err and "--vocab" in err,
              "train: ids >= vocab 257 get a hint",
              err.strip())
        gpt2_like = os.path.join(tmp, "gpt2ids.bin")
        write_shard(gpt2_like, [50256, 15496, 11, 995, 25247, 13] * 20)
        rc, out, err = train("--data", gpt2_like, "--steps", "1")
        check(rc == 1 and "--model gpt2-124m" in err and "--vocab 50257" in err,
              "train: GPT-2 ids suggest --model gpt2-124m",
              err.strip())

        # the end-of-text id: GPT-2's 50256 in llm.c shards whatever the (padded) vocabulary, another number from
        # the tokenizer file; an id that is an ordinary token is refused
        rc, out, err = train("--data", gpt2_like, "--vocab", "50304", "--steps", "1", "--sample-len", "0")
        check(rc == 0 and "end-of-text tokens (id 50256) start documents" in out, "eot: llm.c shards at --vocab 50304: GPT-2's 50256 starts documents",
              (re.findall(r"\| documents.*", out) or [err.strip()])[0])
        rc, out, err = train("--data", gpt2_like, "--vocab", "50304", "--eot", "995", "--steps", "1")
        check(rc == 1 and "995 is an ordinary token" in err, "eot: --eot 995 in shards holding 50256 refused",
              err.strip())
        rc, out, err = train(*data, "--vocab", "384", "--tokenizer", prefix + "_tokenizer.bin", "--steps", "1",
                             "--sample-len", "0", "--export-hf", os.path.join(tmp, "hf384"))
        config = open(os.path.join(tmp, "hf384", "config.json")).read() if rc == 0 else ""
        check(rc == 0 and "(id %d)" % eot in out and '"eos_token_id": %d' % eot in config,
              "eot: the tokenizer file's id at a padded --vocab 384: documents and --export-hf's eos_token_id",
              (re.findall(r"\| documents.*", out) or [err.strip()])[0])
        rc, out, err = train(*data, "--vocab", str(vocab), "--tokenizer", prefix + "_tokenizer.bin", "--eot", "256",
                             "--steps", "1")
        check(rc == 1 and "256 is an ordinary token of it" in err, "eot: --eot of a tokenizer's ordinary piece refused",
              err.strip())

        # trained with the tokenizer: samples are text, from <|endoftext|> (every document starts "once upon a time")
        export = os.path.join(tmp, "hf")
        rc, out, err = train(*data, "--vocab", str(vocab), "--tokenizer", prefix + "_tokenizer.bin", "--steps", "150",
                             "--lr", "1e-2", "--sample-len", "24", "--export-hf", export)
        s = sample_of(out)
        check(rc == 0 and s is not None and s.startswith("once upon a time"),
              "train: the sample is text, from <|endoftext|>",
              repr(s) if s is not None else err.strip()[-300:])
        check("| samples" in out and "text (--tokenizer" in out, "train: the start-up table says how samples print")
        copied = all(os.path.isfile(os.path.join(export, f)) for f in ("vocab.json", "merges.txt", "tokenizer_config.json"))
        check(copied == have_tiktoken, "train: --export-hf copies the tokenizer data/prepare.py wrote beside --tokenizer",
              "copied" if copied else "none (none written)")

        # a sample is a forward of the window a token: on the CPU a model over 50M parameters samples 32 by default
        rc, out, err = train("--n-layer", "6", "--d-model", "896", "--n-head", "4", "--steps", "0")
        check(rc == 0 and "32 tokens (the CPU build's default above 50M parameters" in out,
              "train: a CPU run of a model over 50M parameters samples 32 tokens by default, the table says so",
              (re.findall(r"\| samples.*", out) or [err.strip()])[0])
        # no --tokenizer with a vocabulary larger than bytes: samples print ids, and the table says so
        rc, out, err = train(*data, "--vocab", str(vocab), "--steps", "2", "--sample-len", "5")
        s = sample_of(out)
        check(rc == 0 and s is not None and re.fullmatch(r"(\[\d+\]){5}", s) is not None and "token ids" in out,
              "train: no --tokenizer: samples print token ids, the table says so", repr(s))
    return check.finish("" if have_tiktoken else ", 1 skipped")


if __name__ == "__main__":
    sys.exit(main())
