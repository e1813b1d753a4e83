#!/usr/bin/env python3
"""--export-hf against Hugging Face transformers: train a tiny model a few steps with
./train --export-hf DIR --ckpt-dir CK, load DIR with AutoModelForCausalLM.from_pretrained
(no conversion), and compare its fp32 logits on the same tokens with ours (./hf_logits on
the final checkpoint: the sampler's forward); then --import-hf of the export, which must give
the checkpoint's logits bit for bit. Last, a model transformers saved itself (its own
config.json's fields) imported with --import-hf: our logits against transformers'.

  make train hf_logits && python3 tests/test_export_hf.py

Tolerance: max |ours - theirs| <= 1e-4 * max |ours| per model (fp32 sums in another order:
measured 2.6e-7 to 3.4e-7; q and k without RoPE's row permutation give 7.2e-2). Prints one
line per check and "N passed, N failed" last; without
torch or transformers it says so and counts one skipped.
"""
import os, subprocess, sys, tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
TOL = 1e-4

# (name, model, layout flags): GPT-2 (Conv1D transposes, tied head, biases), LLaMA with
# grouped-query attention (RoPE's row order, untied head), and both trained over several ranks
# (the export gathers the shards; GPT-2's pp2 holds wte on both stages).
CASES = [
    ("gpt2", "tiny", ""),
    ("llama_gqa", "llama-tiny", ""),
    ("llama_gqa_tp2", "llama-tiny", "--tp 2"),
    ("gpt2_tp2_pp2", "tiny", "--tp 2 --pp 2"),
]
STEPS = 30  # at lr 1e-2 the weights move well away from the init (norms, biases too)


def run(cmd):
    p = subprocess.run(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=300)
    if p.returncode != 0:
        raise RuntimeError("%s exited %d:\n%s" % (" ".join(cmd), p.returncode, p.stdout[-2000:]))
    return p.stdout


def check_case(name, model_name, layout, tmp, torch, transformers, np):
    d = os.path.join(tmp, name)
    hf, ck = os.path.join(d, "hf"), os.path.join(d, "ck")
    os.makedirs(d)
    run(["./train", "--model", model_name] + layout.split() +
        ["--steps", str(STEPS), "--lr", "1e-2", "--eval-every", "0", "--sample-len", "0", "--quiet", "--ckpt-dir", ck,
         "--export-hf", hf])
    text = b"alice paints the red boat by the sea."
    tokens = [256] + list(text[:30])  # <|endoftext|>, then bytes: 31 of the tiny models' 32 positions
    ours_path = os.path.join(d, "ours.f32")
    run(["./hf_logits", ours_path, ",".join(map(str, tokens)), "--model", model_name] +
        ["--resume", os.path.join(ck, "ckpt_%08d.bin" % STEPS)])
    model = transformers.AutoModelForCausalLM.from_pretrained(hf, torch_dtype=torch.float32)
    model.eval()
    with torch.no_grad():
        theirs = model(torch.tensor([tokens])).logits[0].numpy()
    ours = np.fromfile(ours_path, dtype=np.float32).reshape(len(tokens), -1)
    if ours.shape != theirs.shape:
        return False, "shape ours %s, transformers %s" % (ours.shape, theirs.shape)
    err = float(np.abs(ours - theirs).max()) / float(np.abs(ours).max())
    # --import-hf of the export gives back the checkpoint's weights: the same logits, bit for bit
    back_path = os.path.join(d, "imported.f32")
    run(["./hf_logits", back_path, ",".join(map(str, tokens)), "--model", model_name, "--import-hf", hf])
    back = np.fromfile(back_path, dtype=np.float32).reshape(len(tokens), -1)
    same = bool((back == ours).all())
    kind = type(model).__name__
    imported = "--import-hf: the same logits" if same else "--import-hf: OTHER logits"
    return err <= TOL and same, "%s, %d tokens x %d logits: max |diff| / max |logit| = %.2e (tol %.0e); %s" % (
        kind, len(tokens), ours.shape[1], err, TOL, imported)


def check_transformers_saved(name, model_name, tmp, torch, transformers, np):
    """A model transformers made and saved itself (save_pretrained: its own config.json, with fields
    such as add_cross_attention, dtype, rope_parameters) imported with --import-hf: our logits
    against transformers' on the same tokens. The shape is our export's (check_case's config.json),
    the weights transformers' random initialization."""
    d = os.path.join(tmp, name)
    saved = os.path.join(d, "saved")
    torch.manual_seed(0)
    config = transformers.AutoConfig.from_pretrained(os.path.join(d, "hf"))
    model = transformers.AutoModelForCausalLM.from_config(config)
    with torch.no_grad():  # biases and norm weights away from their 0 and 1, so their order matters too
        for p in model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    model.save_pretrained(saved)
    model.eval()
    tokens = [256] + list(b"the quick brown fox jumps over")
    with torch.no_grad():
        theirs = model(torch.tensor([tokens])).logits[0].numpy()
    ours_path = os.path.join(d, "saved.f32")
    run(["./hf_logits", ours_path, ",".join(map(str, tokens)), "--model", model_name, "--import-hf", saved])
    ours = np.fromfile(ours_path, dtype=np.float32).reshape(len(tokens), -1)
    if ours.shape != theirs.shape:
        return False, "shape ours %s, transformers %s" % (ours.shape, theirs.shape)
    err = float(np.abs(ours - theirs).max()) / float(np.abs(theirs).max())
    return err <= TOL, "%s saved by transformers %s, imported: max |diff| / max |logit| = %.2e (tol %.0e)" % (
        type(model).__name__, transformers.__version__, err, TOL)


def main():
    try:
        import numpy as np
        import torch
        import transformers
    except ModuleNotFoundError as e:  # missing; a package that is there but fails to load is a failure
        print("SKIP test_export_hf: %s (pip install -r requirements/hf.txt)" % e)
        print("0 passed, 0 failed, 1 skipped")
        return 0
    except Exception as e:
        print("FAIL export_hf/import: %s: %s" % (type(e).__name__, e))
        print("0 passed, 1 failed")
        return 1
    transformers.logging.set_verbosity_error()
    transformers.logging.disable_progress_bar()
    torch.set_num_threads(2)
    passed = failed = 0
    with tempfile.TemporaryDirectory(prefix="test_export_hf_") as tmp:
        for name, model_name, layout in CASES:
            try:
                ok, msg = check_case(name, model_name, layout, tmp, torch, transformers, np)
            except Exception as e:  # a failed run or load is a failed check, with its reason
                ok, msg = False, "%s: %s" % (type(e).__name__, e)
            print("%s export_hf/%s: %s" % ("PASS" if ok else "FAIL", name, msg))
            passed += ok
            failed += not ok
        for name, model_name, layout in CASES:
            if layout:
                continue
            try:
                ok, msg = check_transformers_saved(name, model_name, tmp, torch, transformers, np)
            except Exception as e:
                ok, msg = False, "%s: %s" % (type(e).__name__, e)
            print("%s import_hf/%s_transformers_saved: %s" % ("PASS" if ok else "FAIL", name, msg))
            passed += ok
            failed += not ok
    print("%d passed, %d failed" % (passed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
