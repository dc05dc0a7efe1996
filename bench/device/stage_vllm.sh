#!/usr/bin/env bash
# A newer vLLM (default 0.33.0, with the torch it pins) for the lent GPU machines, beside (not over)
# their own torch: the machines have Python 3.12, CUDA 13 and torch 2.11.0 (the 0.26.0 that the
# gpu-stage payload serves), no vLLM and nothing to fetch from; a call carries 64 MiB.
#
#   here    bash bench/device/stage_vllm.sh build [VERSION] [EXTRA_REQ ...]
#               resolves vllm==VERSION for the machine (cp312, manylinux x86_64), keeps the wheels the
#               machine lacks or has at another version (what its torch 2.11.0 pins is compared by
#               version; packages outside torch's pins are taken as the machine has them), leaves out
#               toolchains and kernels a dense Llama on Hopper does not import (LEAVE_OUT, a regex of
#               wheel names; KEEP=regex keeps some of them), and cuts the wheels into pieces
#               .gpu-stage-next/p1 .. pN that each fit one call beside this tree
#   device  bash bench/device/stage_vllm.sh recv .gpu-stage-next/pK     (one call per piece, carry it)
#           bash bench/device/stage_vllm.sh install                    (in the call of the last piece)
#               checks the pieces, installs the wheels into $HOME/site-next (no index, no deps) and
#               checks that `import vllm` reports VERSION and torch sees CUDA; then every later call
#               starts with `source $HOME/site-next/env.sh` (the gpu-stage kit's env.sh is not needed)
# The tree travels with every call: the pieces are sized from what `git ls-files` leaves of 64 MiB.
# Needs a Python 3.12 interpreter here (pip resolves for the machine's interpreter).
set -euo pipefail
cd "$(dirname "$0")/../.."
STAGE=.gpu-stage-next
CALL_BYTES=$((64 * 1024 * 1024))
# the machine's image, by name (from the workplace's list of its packages, 2026-11-17); versions of
# the ones torch pins come from resolving torch 2.11.0 itself
MACHINE_PKGS="absl-py accelerate aiofiles aiohappyeyeballs aiohttp aiosignal annotated-doc anyio attrs
botorch build certifi charset-normalizer chex click cloudpickle cmake colorama contourpy coverage
cuda-bindings cuda-core cuda-pathfinder cuda-toolkit cupy-cuda13x cycler cython diffrax e3nn einops
equinox etils execnet filelock flatbuffers flax fonttools formulaic frozenlist fsspec gpytorch grpcio h11
h5py hf-xet httpcore httpx huggingface-hub humanize hypothesis idna imageio iniconfig interface-meta jax
jax-cuda13-pjrt jax-cuda13-plugin jaxlib jaxtyping jinja2 joblib kiwisolver lazy-loader lightning
lightning-utilities linear-operator lineax llvmlite lxml markdown markdown-it-py markupsafe matplotlib
mdurl meson ml-dtypes mpi4py mpmath msgpack multidict multipledispatch mypy-extensions nanobind narwhals
networkx ninja numba numba-cuda numpy numpyro nvidia-cublas nvidia-cuda-cupti nvidia-cuda-nvrtc
nvidia-cuda-runtime nvidia-cudnn-cu13 nvidia-cufft nvidia-cufile nvidia-curand nvidia-cusolver
nvidia-cusparse nvidia-cusparselt-cu13 nvidia-ml-py nvidia-nccl-cu13 nvidia-nvjitlink
nvidia-nvshmem-cu13 nvidia-nvtx onnx onnx-ir onnxruntime onnxscript opencv-python-headless optax
opt-einsum opt-einsum-fx optimistix orbax-checkpoint packaging pandas pathspec patsy peft pillow pip
pluggy portalocker prometheus-client propcache protobuf psutil pyarrow pybind11 py-cpuinfo pygments
pyparsing pyproject-hooks pyre-extensions pytest pytest-benchmark pytest-cov pytest-mock pytest-timeout
pytest-xdist python-dateutil pytorch-lightning pyyaml regex requests rich sacrebleu safetensors
scikit-build-core scikit-image scikit-learn scipy seaborn sentencepiece sentence-transformers setuptools
shellingham simplejson six sortedcontainers statsmodels sympy tabulate tensorboard
tensorboard-data-server tensorstore threadpoolctl tifffile tiktoken timm tokenizers toolz torch
torchaudio torchdiffeq torch-geometric torchmetrics torchvision tqdm transformers treescope triton typer
typing-extensions typing-inspect urllib3 uvloop wadler-lindig werkzeug wheel wrapt xarray xxhash yarl
zipp"
MACHINE_TORCH="torch==2.11.0 triton==3.6.0 torchvision==0.26.0 torchaudio==2.11.0"
# Left out as well, by default, ~1.15 GB of the ~2.6 GB: cuDNN (9.24 against the machine's 9.19: an LLM's
# step does not call it, and env.sh skips torch's check of its minor version), cuSPARSELt (0.8.1 against
# 0.8.0: 2:4 sparsity only) and cuBLAS (13.1.1.3 against 13.1.0.3, one minor line); NCCL (2.30.7
# against 2.28.9) is staged, as torch's own library links against it. KEEP='^nvidia_cublas' and the like
# take one back.
LEAVE_OUT=${LEAVE_OUT:-'^(nvidia_cudnn_cu13-|nvidia_cusparselt|nvidia_cublas-|nvidia_cuda_nvcc|nvidia_cuda_crt|nvidia_cuda_cccl|nvidia_nvvm|nvidia_cutlass_dsl|tilelang|pynvvideocodec|z3_solver|torchcodec|tokenspeed_|quack_kernels|humming_kernels|cuda_tile|fastsafetensors|torchaudio|setuptools)'}

platform_flags() {
  local f="--only-binary=:all: --python-version 3.12 --implementation cp" n
  for n in 5 12 17 18 24 25 26 27 28 29 30 31 32 33 34 35 36 37 38 39; do
    f="$f --platform manylinux_2_${n}_x86_64"; done
  echo "$f --platform manylinux2014_x86_64 --platform manylinux2010_x86_64 --platform manylinux1_x86_64 --platform any"
}

build() {
  local version=${1:-0.33.0}; [ $# -gt 0 ] && shift
  local py=""; for c in python3.12 "$(pyenv root 2>/dev/null)"/versions/3.12*/bin/python3.12; do
    "$c" -c "" 2>/dev/null && { py=$c; break; }; done
  [ -n "$py" ] || { echo "stage_vllm: needs a Python 3.12 interpreter here (pyenv install 3.12)" >&2; exit 2; }
  local work=$STAGE/work; mkdir -p "$work/whl"
  [ -x "$work/venv/bin/pip" ] || { "$py" -m venv "$work/venv"; "$work/venv/bin/pip" install -q -U pip; }
  local pip=$work/venv/bin/pip plat; plat=$(platform_flags)
  # shellcheck disable=SC2086  # the flags are words
  "$pip" install --dry-run --ignore-installed -q $plat --target "$work/dry-new" --report "$work/new.json" \
    "vllm==$version" "$@"
  # shellcheck disable=SC2086
  "$pip" install --dry-run --ignore-installed -q $plat --target "$work/dry-old" --report "$work/old.json" \
    $MACHINE_TORCH
  MACHINE_PKGS=$MACHINE_PKGS LEAVE_OUT=$LEAVE_OUT KEEP=${KEEP:-} python3 - "$work" > "$work/stage.txt" <<'PY'
import json, os, re, sys
work = sys.argv[1]
norm = lambda s: re.sub(r"[-_.]+", "-", s).lower()
machine = {norm(x) for x in os.environ["MACHINE_PKGS"].split()}
pinned = {norm(i["metadata"]["name"]): i["metadata"]["version"]
          for i in json.load(open(f"{work}/old.json"))["install"]}
leave, keep = re.compile(os.environ["LEAVE_OUT"]), os.environ.get("KEEP")
for item in json.load(open(f"{work}/new.json"))["install"]:
    name, version = norm(item["metadata"]["name"]), item["metadata"]["version"]
    wheel = item["download_info"]["url"].rsplit("/", 1)[-1]
    missing = name not in machine
    other = name in pinned and pinned[name] != version
    if not (missing or other):
        continue
    if leave.search(wheel) and not (keep and re.search(keep, wheel)):
        print(f"# left out: {wheel}")
        continue
    print(f"{item['metadata']['name']}=={version}")
PY
  echo "stage_vllm: $(grep -vc '^#' "$work/stage.txt") wheels to stage, $(grep -c '^#' "$work/stage.txt") left out"
  # shellcheck disable=SC2086
  grep -v '^#' "$work/stage.txt" | "$pip" download -q --no-deps $plat -d "$work/whl" -r /dev/stdin
  # only this resolution's wheels (a folder reused for another VERSION keeps older ones)
  rm -rf "$work/pack"; mkdir -p "$work/pack"
  local spec name ver f
  while read -r spec; do
    name=${spec%%==*}; ver=${spec##*==}
    f=$(ls "$work/whl" | grep -i -E "^$(echo "$name" | sed 's/[-_.]/[-_.]/g')-$ver-" | head -1) || true
    [ -n "$f" ] || { echo "stage_vllm: no wheel for $spec" >&2; exit 1; }
    ln "$work/whl/$f" "$work/pack/$f" 2>/dev/null || cp "$work/whl/$f" "$work/pack/"
  done < <(grep -v '^#' "$work/stage.txt")
  (cd "$work/pack" && sha256sum ./*.whl) > "$work/wheels.sha256"
  echo "$version" > "$work/version"
  # the pieces: one tar of the wheels (already compressed), cut to fit a call beside the tree
  local tree; tree=$(git ls-files -z | du -cb --files0-from=- | tail -1 | cut -f1)
  local bytes=${PIECE_BYTES:-$((CALL_BYTES - tree - 2000000))}
  rm -rf "$STAGE"/p[0-9]* "$work/cut"; mkdir -p "$work/cut"
  tar -C "$work" -cf - pack wheels.sha256 version | split -b "$bytes" -d -a 3 - "$work/cut/piece."
  local n=0 total; total=$(ls "$work/cut" | wc -l)
  for f in "$work"/cut/piece.*; do
    n=$((n + 1)); mkdir -p "$STAGE/p$n"; mv "$f" "$STAGE/p$n/"; echo "$total" > "$STAGE/p$n/count"
  done
  rm -rf "$work/cut"
  echo "stage_vllm: vllm $version: $(du -sh "$work/pack" | cut -f1) of wheels in $n pieces of <= $bytes bytes;"
  echo "  on the device, one call each: bash bench/device/stage_vllm.sh recv $STAGE/pK (carry $STAGE/pK),"
  echo "  and in the last: ... && bash bench/device/stage_vllm.sh install"
}

recv() {  # one piece into $HOME/stage-next (it stays while the machine is held)
  local dir=${1:?usage: stage_vllm.sh recv DIR}
  mkdir -p "$HOME/stage-next"; mv "$dir"/piece.* "$HOME/stage-next/"; cp "$dir/count" "$HOME/stage-next/"
  echo "recv: $(ls "$HOME"/stage-next/piece.* | wc -l) of $(cat "$HOME/stage-next/count") pieces"
}

install() {  # join the pieces, check them, install the wheels beside the machine's torch
  local s=$HOME/stage-next site=$HOME/site-next t0=$SECONDS
  local have; have=$(ls "$s"/piece.* 2>/dev/null | wc -l)
  [ "$have" -eq "$(cat "$s/count")" ] || { echo "install: $have of $(cat "$s/count") pieces here: send the rest first" >&2; exit 1; }
  rm -rf "$s/unpacked" "$site"; mkdir -p "$s/unpacked" "$site"
  cat "$s"/piece.* | tar -x -C "$s/unpacked"
  (cd "$s/unpacked/pack" && sha256sum -c --quiet ../wheels.sha256) || { echo "install: a wheel does not match its checksum" >&2; exit 1; }
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$site" "$s"/unpacked/pack/*.whl
  rm -rf "$site/bin"
  cat > "$site/env.sh" <<EOF
# the staged vLLM $(cat "$s/unpacked/version") and its torch ahead of the machine's own
export PYTHONPATH=$site\${PYTHONPATH:+:\$PYTHONPATH}
export VLLM_NO_USAGE_STATS=1 DO_NOT_TRACK=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
# cuDNN's minor version differs from the one the machine's driver stack was seen with
export PYTORCH_SKIP_CUDNN_COMPATIBILITY_CHECK=1
EOF
  # shellcheck disable=SC1091
  source "$site/env.sh"
  python3 -c "import torch, vllm; assert torch.cuda.is_available(), 'torch sees no GPU'; print('vllm', vllm.__version__, 'torch', torch.__version__, 'cuda', torch.version.cuda)"
  local want; want=$(cat "$s/unpacked/version")
  python3 -c "import vllm, sys; sys.exit(0 if vllm.__version__ == sys.argv[1] else 1)" "$want" \
    || { echo "install: import vllm does not report $want" >&2; exit 1; }
  echo "install: vllm $want staged in $((SECONDS - t0)) s into $site ($(du -sh "$site" | cut -f1))"
}

case ${1:-} in
  build) shift; build "$@" ;;
  recv) shift; recv "$@" ;;
  install) install ;;
  *) echo "usage: $0 {build [VERSION] [EXTRA_REQ ...] | recv DIR | install}" >&2; exit 2 ;;
esac
