#!/usr/bin/env python3
"""Convert the layouts study's per-run sheets (Hagemann et al. 2023: data/*.xlsx and data/seqpara/*.xlsx of
Aleph-Alpha/NeurIPS-WANT-submission-efficient-parallelization-layouts) to the schema of
../shared/data/layouts_study/calibration.csv, to score them with scripts/validate_planner.py:

    G=PATH/TO/THE/AUTHORS/REPO/.git; mkdir -p /tmp/sheets/seqpara
    for f in $(git --git-dir=$G ls-tree -r --name-only HEAD data); do
        git --git-dir=$G show HEAD:$f > /tmp/sheets/${f#data/}; done
    python3 dev/study_sheets.py /tmp/sheets/*.xlsx /tmp/sheets/seqpara/*.xlsx > /tmp/sheets.csv

Given calibration.csv's five sheets (13B 64 GPUs all runs and the four seqpara sheets but 30B 8k) in that order it
writes calibration.csv again, row for row (CRLF aside). Reads the .xlsx with the standard library alone (a zip of XML:
the first worksheet, its shared strings). The sheets' columns: kernel "flash_attention2 + RMS kernel" is flash2 with
the RMSNorm kernel, "flash_attentionv1.0.8" and "flash_attention" FlashAttention 1, "fused" Megatron's fused softmax,
"torch" unfused; activation_checkpointing_type every_layer is full recomputation; "OOM Error" oom, "Kernel not
available" unavailable, another error text error; the seqpara sheets' sequence_parallel column is sp.
"""
import csv
import os
import re
import sys
import zipfile
import xml.etree.ElementTree as ET

NS = "{http://schemas.openxmlformats.org/spreadsheetml/2006/main}"
KERNEL = {"flash_attention2": ("flash2", 0), "flash_attention2 + RMS kernel": ("flash2", 1),
          "flash_attentionv1.0.8": ("flash1", 0), "flash_attention": ("flash1", 0),
          "fused": ("fused_softmax", 0), "torch": ("torch", 0)}
COLUMNS = ("sheet,model,seq_len,gpus,gpus_per_node,global_batch_tokens,schedule,zero,tp,pp,dp,micro_batch,recompute,"
           "attention,rms_kernel,sp,status,step_time_s,mfu_pct").split(",")


def column_index(ref):  # "C12" -> 2
    n = 0
    for ch in re.match(r"[A-Z]+", ref).group(0):
        n = n * 26 + ord(ch) - 64
    return n - 1


def read_rows(path):
    """The first worksheet's rows as lists of values (str, float, bool or None)."""
    with zipfile.ZipFile(path) as z:
        shared = []
        if "xl/sharedStrings.xml" in z.namelist():
            for si in ET.fromstring(z.read("xl/sharedStrings.xml")).iter(NS + "si"):
                shared.append("".join(t.text or "" for t in si.iter(NS + "t")))
        sheet = ET.fromstring(z.read("xl/worksheets/sheet1.xml"))
    rows = []
    for row in sheet.iter(NS + "row"):
        values = {}
        for cell in row.iter(NS + "c"):
            kind, v = cell.get("t"), cell.find(NS + "v")
            if kind == "inlineStr":
                values[column_index(cell.get("r"))] = "".join(t.text or "" for t in cell.iter(NS + "t"))
            elif v is not None:
                text = v.text or ""
                value = shared[int(text)] if kind == "s" else text == "1" if kind == "b" else \
                    text if kind == "str" else float(text)
                values[column_index(cell.get("r"))] = value
        rows.append([values.get(i) for i in range(max(values) + 1)] if values else [])
    return rows


def number(x):
    return float(x) if not isinstance(x, str) else float(x.strip())


def convert(path):
    name = os.path.basename(path)[:-len(".xlsx")]
    size = re.match(r"llama_(\d+)B_", name)
    if not path.endswith(".xlsx") or not size:
        sys.exit("error: %s: not one of the study's sheets (llama_<size>B_....xlsx)" % path)
    model = "llama-%sb" % size.group(1)
    seq_len = 8192 if "8k" in name else 2048
    rows = read_rows(path)
    header, out = rows[1], []
    for r in rows[2:]:
        if not r or r[0] is None:
            continue
        d = dict(zip(header, r))
        gpus, tp, pp = int(number(d["World Size"])), int(number(d["model_parallel_size"])), \
            int(number(d["pipe_parallel_size"]))
        attention, rms = KERNEL[d["kernel"]]
        step, mfu, status, t, u = d["Average Step Time"], d["Average MFU"], "ok", "", ""
        if step == "OOM Error":
            status = "oom"
        elif step == "Kernel not available":
            status = "unavailable"
        elif isinstance(step, str) and "Error" in step:
            status = "error"
        else:
            t, u = "%g" % round(number(step), 3), "%g" % round(100 * number(mfu), 3)
        sp = 1 if d.get("sequence_parallel") in (True, "True", "TRUE") else 0
        recompute = "full" if d["activation_checkpointing_type"] == "every_layer" else "none"
        out.append([name, model, seq_len, gpus, 8, 4194304, "1f1b", 1, tp, pp, gpus // (tp * pp),
                    int(number(d["micro_batch_size"])), recompute, attention, rms, sp, status, t, u])
    return out


def main():
    if sys.argv[1:] in (["-h"], ["--help"]):
        print(__doc__)
        return
    if len(sys.argv) < 2:
        sys.exit("usage: dev/study_sheets.py SHEET.xlsx... > RUNS.csv")
    w = csv.writer(sys.stdout, lineterminator="\n")
    w.writerow(COLUMNS)
    for path in sys.argv[1:]:
        for row in convert(path):
            w.writerow(row)


if __name__ == "__main__":
    main()
