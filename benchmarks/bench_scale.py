"""Benchmark: real size (issue 35). A Qwen2-VL-7B-shaped checkpoint (8.3B parameters, bf16,
16.6 GB; built once by ``_big_checkpoint.py``), each operation in a fresh process:

* ``cp``: a copy of the checkpoint's files (the floor of anything that reads them all);
* ``forward``: stock transformers, ``from_pretrained(dtype=bfloat16)`` and one forward on a
  448x336 image plus text through the model's own processor (what a user runs);
* ``plan``, ``load`` (``fusion-core load --dtype bfloat16``);
* ``check``: ``fusion-core check --fusion patch_embeddings --dtype bfloat16 --image F
  --no-upstream --time-budget 1 --json``, on one copy of the weights;
* ``check 6GiB``: the same with ``--max-memory 6GiB`` (blocks beyond it read from disk);
* ``export``: ``fusion-core export --fusion patch_embeddings --json`` (verified by its consumers).

For each: wall time, and the peak of *memory in use* (MemTotal - MemAvailable, sampled every
0.1 s; the page cache of mapped files is reclaimable and does not count) above the value
before it started, as a ratio to the checkpoint's bytes. Times are also shown as ratios to
the forward's and the copy's of the same round. With ``--runs N`` (N >= 3) the ratios come
with their 95% interval (``_ratios.py``); one run prints the ratio of that run, no interval.

    .venv/bin/python benchmarks/bench_scale.py [--folder F] [--runs N] [--only NAME ...]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from _machine import machine, machine_line

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
PY = sys.executable
GIB = 2**30

FORWARD = """
import sys, torch
from PIL import Image
from transformers import AutoImageProcessor, AutoTokenizer, Qwen2VLForConditionalGeneration
folder, image = sys.argv[1], sys.argv[2]
model = Qwen2VLForConditionalGeneration.from_pretrained(folder, dtype=torch.bfloat16).eval()
# the image processor and tokenizer alone: AutoProcessor also wants a video processor (torchvision)
pixels = AutoImageProcessor.from_pretrained(folder)(images=[Image.open(image).convert("RGB")], return_tensors="pt")
n = int(pixels["image_grid_thw"].prod()) // 4  # image tokens after the 2x2 merge
tokenizer = AutoTokenizer.from_pretrained(folder)
ids = [502] + [500] * n + [503] + tokenizer(" describe this picture in detail, please" * 8)["input_ids"]
inputs = {**pixels, "input_ids": torch.tensor([ids]), "attention_mask": torch.ones(1, len(ids), dtype=torch.long)}
inputs["mm_token_type_ids"] = (inputs["input_ids"] == 500).long()
with torch.inference_mode():
    model(**inputs)
"""


def in_use() -> int:
    fields = {}
    with open("/proc/meminfo", encoding="ascii") as f:
        for line in f:
            key, value = line.split(":")
            fields[key] = int(value.split()[0]) * 1024
    return fields["MemTotal"] - fields["MemAvailable"]


def measure(cmd: list[str]) -> dict:
    """Run ``cmd``: its wall time, exit code, and peak memory in use above the start."""
    base = in_use()
    peak = base
    t0 = time.perf_counter()
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT)
    out: list[str] = []

    def drain() -> None:
        out.append(proc.stdout.read())

    reader = threading.Thread(target=drain)
    reader.start()
    while proc.poll() is None:
        peak = max(peak, in_use())
        time.sleep(0.1)
    reader.join()
    err = proc.stderr.read()
    return {
        "seconds": time.perf_counter() - t0,
        "above": peak - base,
        "rc": proc.returncode,
        "stdout": out[0] if out else "",
        "stderr": err[-2000:],
    }


def operations(folder: Path, image: Path, scratch: Path) -> dict[str, list[str]]:
    cli = [PY, "-m", "fusion_core"]
    check = [*cli, "check", str(folder), "--fusion", "patch_embeddings", "--dtype", "bfloat16"]
    check += ["--image", str(image), "--no-upstream", "--time-budget", "1", "--json"]
    return {
        "cp": ["cp", "-r", "--reflink=never", str(folder), str(scratch / "copy")],
        "forward": [PY, "-c", FORWARD, str(folder), str(image)],
        "plan": [*cli, "plan", str(folder), "--fusion", "patch_embeddings"],
        "load": [*cli, "load", str(folder), "--fusion", "patch_embeddings", "--dtype", "bfloat16"],
        "check": check,
        "check 6GiB": [*check, "--max-memory", "6GiB"],
        "export": [*cli, "export", str(folder), str(scratch / "out"), "--fusion", "patch_embeddings", "--json"],
    }


def _image(path: Path) -> Path:
    import numpy as np
    from PIL import Image

    if not path.exists():
        rng = np.random.default_rng(0)
        Image.fromarray((rng.random((336, 448, 3)) * 255).astype("uint8")).save(path)
    return path


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--folder", type=Path, default=HERE / ".bench" / "qwen2vl7b")
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--only", nargs="*", default=None, help="operations to run (default: all)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    if not (args.folder / "model.safetensors.index.json").exists():
        print(f"building {args.folder} (about 2 minutes, 16.6 GB)", file=sys.stderr)
        subprocess.run([PY, str(HERE / "_big_checkpoint.py"), str(args.folder)], check=True)
    ckpt = sum(f.stat().st_size for f in args.folder.glob("*.safetensors"))
    image = _image(args.folder.parent / "bench_scale.png")
    rounds: list[dict[str, dict]] = []
    for r in range(args.runs):
        with tempfile.TemporaryDirectory(prefix="bench-scale-", dir=args.folder.parent) as tmp:
            ops = operations(args.folder, image, Path(tmp))
            names = [n for n in ops if args.only is None or n in args.only or n in ("cp", "forward")]
            got = {}
            for name in names:
                subprocess.run(["sync"], check=False)
                got[name] = m = measure(ops[name])
                shutil.rmtree(Path(tmp) / "copy", ignore_errors=True)
                print(
                    f"round {r + 1} {name}: {m['seconds']:.1f} s, +{m['above'] / GIB:.2f} GiB in use, rc {m['rc']}",
                    file=sys.stderr,
                    flush=True,
                )
                if m["rc"] != 0:
                    print(m["stderr"], file=sys.stderr)
            rounds.append(got)
    rows = []
    for name in rounds[0]:
        secs = [r[name]["seconds"] for r in rounds]
        rows.append(
            {
                "operation": name,
                "seconds": secs,
                "peak_in_use_gib": [round(r[name]["above"] / GIB, 2) for r in rounds],
                "peak_vs_checkpoint": max(r[name]["above"] for r in rounds) / ckpt,
                "vs_forward": _ratio(secs, [r["forward"]["seconds"] for r in rounds]),
                "vs_cp": _ratio(secs, [r["cp"]["seconds"] for r in rounds]),
                "rc": [r[name]["rc"] for r in rounds],
            }
        )
    if args.json:
        print(json.dumps({"machine": machine(), "checkpoint_bytes": ckpt, "runs": args.runs, "rows": rows}, indent=2))
        return 0
    print(machine_line())
    print(f"checkpoint: {args.folder} ({ckpt / 1e9:.1f} GB); {args.runs} run(s)")
    print(f"{'operation':<12} {'time':>9} {'÷ forward':>22} {'÷ cp':>22} {'peak in use':>12} {'÷ ckpt':>7}  rc")
    for row in rows:
        t = min(row["seconds"])
        peak = max(row["peak_in_use_gib"])
        print(
            f"{row['operation']:<12} {t:>8.1f}s {row['vs_forward']:>22} {row['vs_cp']:>22} "
            f"{peak:>9.2f} GiB {row['peak_vs_checkpoint']:>7.2f}  {row['rc']}"
        )
    return 0


def _ratio(num: list[float], den: list[float]) -> str:
    if len(num) >= 3:
        from _ratios import cost

        return cost(num, den)["text"]
    return f"{num[0] / den[0]:.2f}x (1 run)"


if __name__ == "__main__":
    raise SystemExit(main())
