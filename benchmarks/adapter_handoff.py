"""Adapter hand-off: time from "adapter written" to "first answer from the new revision".

- **load-adapter** (what `rsi update` does): the embedded server is already running with the frozen
  base; `POST /v1/load_lora_adapter` under a fresh serve name, then one chat completion naming it.
- **restart with merged weights** (the baseline): merge the same adapter into a copy of the base
  (PEFT merge_and_unload, saved as a transformers directory), stop the running server, start
  `rsi model serve --model <merged dir>`, wait until it answers, then the same chat completion.

Both measured in this run, `--repeats` times each (medians); prints one line per figure and the ratio
(the seed reports up to 18.3x for its platform's hand-off). The adapter is a rank-16 LoRA with random
weights on q/k/v/o (`--adapter DIR` times a real one, e.g. one `rsi update` wrote).

    python benchmarks/adapter_handoff.py [--repeats 2] [--adapter DIR]
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from _records import Recorder  # noqa: E402

from rsi.models.client import ChatClient  # noqa: E402
from rsi.models.embedded import DEFAULT_MODEL_ID  # noqa: E402

PROMPT = [{"role": "user", "content": "Name one colour."}]
MAX_TOKENS = 8


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start(port: int, log: Path, model: str | None = None) -> subprocess.Popen[bytes]:
    cmd = [sys.executable, "-m", "rsi.cli.model", "serve", "--port", str(port)]
    if model:
        cmd += ["--model", model]
    env = dict(os.environ, HF_HUB_OFFLINE="1", PYTHONPATH=str(ROOT))
    return subprocess.Popen(cmd, stdout=log.open("ab"), stderr=subprocess.STDOUT, env=env, start_new_session=True)


def wait_healthy(url: str, proc: subprocess.Popen[bytes], timeout: float = 600) -> None:
    deadline = time.monotonic() + timeout
    with ChatClient(url, max_attempts=1) as c:
        while not c.healthy():
            if proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"server on {url} did not start")
            time.sleep(0.05)


def stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def make_adapter(base_dir: Path, out: Path) -> Path:
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    m = AutoModelForCausalLM.from_pretrained(str(base_dir), dtype=torch.float32)
    cfg = LoraConfig(r=16, lora_alpha=32, target_modules=["q_proj", "k_proj", "v_proj", "o_proj"],
                     init_lora_weights=False, task_type="CAUSAL_LM")
    get_peft_model(m, cfg).save_pretrained(str(out))
    return out


def merge(base_dir: Path, adapter: Path, out: Path) -> Path:
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    m = AutoModelForCausalLM.from_pretrained(str(base_dir), dtype=torch.float32)
    merged = PeftModel.from_pretrained(m, str(adapter)).merge_and_unload()
    merged.save_pretrained(str(out))
    AutoTokenizer.from_pretrained(str(base_dir)).save_pretrained(str(out))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--adapter", type=Path, default=None)
    args = ap.parse_args()
    from rsi.models.server.model_files import resolve_model

    base_dir = resolve_model(None)[0]
    tmp = Path(tempfile.mkdtemp(prefix="rsi-handoff-"))
    log = tmp / "server.log"
    adapter = args.adapter or make_adapter(base_dir, tmp / "adapter")
    loads: list[float] = []
    restarts: list[float] = []
    port = free_port()
    url = f"http://127.0.0.1:{port}/v1"
    proc = start(port, log)
    try:
        wait_healthy(url, proc)
        with ChatClient(url) as c:
            c.chat(DEFAULT_MODEL_ID, PROMPT, max_tokens=MAX_TOKENS)  # warm
            for i in range(args.repeats):
                name = f"handoff-{i}"
                t0 = time.monotonic()
                c.load_adapter(name, str(adapter.resolve()))
                c.chat(name, PROMPT, max_tokens=MAX_TOKENS)
                loads.append(time.monotonic() - t0)
                c.unload_adapter(name)
        for i in range(args.repeats):
            t0 = time.monotonic()
            merged = merge(base_dir, adapter, tmp / f"merged-{i}")
            stop(proc)
            proc = start(port, log, str(merged))
            wait_healthy(url, proc)
            with ChatClient(url) as c:
                c.chat(merged.name, PROMPT, max_tokens=MAX_TOKENS)
            restarts.append(time.monotonic() - t0)
    finally:
        stop(proc)
        shutil.rmtree(tmp, ignore_errors=True)
    a, b = statistics.median(loads), statistics.median(restarts)
    print(f"load-adapter on a running server: {a:.3f} s (median of {len(loads)}: "
          f"{', '.join(f'{x:.3f}' for x in loads)})")
    print(f"restart with merged weights: {b:.3f} s (median of {len(restarts)}: "
          f"{', '.join(f'{x:.3f}' for x in restarts)})")
    print(f"hand-off ratio (restart / load-adapter): {b / a:.1f}x (the seed reports up to 18.3x)")
    rec = Recorder("adapter_handoff", "Adapter hand-off: load on a running server vs restart merged",
                   context=f"SmolLM2-135M; a LoRA loaded into the running embedded server and answered once, against "
                           f"merging it and restarting the server (median of {args.repeats}).")
    rec.add("load_adapter_sec", "load-adapter on a running server, then one answer", a, "s")
    rec.add("restart_sec", "merge + restart + one answer", b, "s")
    rec.add("handoff_ratio", "restart / load-adapter", b / a, "x", compare={"seed": "up to 18.3"})
    rec.write()


if __name__ == "__main__":
    main()
