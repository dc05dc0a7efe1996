#!/usr/bin/env bash
# Recipes for models that outgrow one GPU or one node, using vLLM's own parallelism
# (tensor / pipeline / data parallel, Ray for several nodes). No router of our own.
#
#   Llama 3.1 405B on 2 nodes x 8 GPUs (TP 8 inside a node, PP 2 across the nodes, Ray):
#     node 1:  NODE_IP=10.0.0.1 scripts/multinode.sh ray-head
#     node 2:  NODE_IP=10.0.0.2 HEAD_IP=10.0.0.1 scripts/multinode.sh ray-worker
#     node 1:  scripts/multinode.sh ray-check 405b-2node # 2 live nodes, 16 GPUs, or exit 2
#     node 1:  MODEL=... DATASET=... scripts/multinode.sh 405b-2node Offline
#   Llama 2 70B over 2 nodes x 2 GPUs (TP 2 inside a node, PP 2 across the nodes, Ray), the same
#   steps with GPUS_PER_NODE=2 and `ray-check 70b-2node`:
#     node 1:  MODEL=... DATASET=... scripts/multinode.sh 70b-2node Offline
#   Two "nodes" on one host (each raylet given its own GPUs): CUDA_VISIBLE_DEVICES=0,1 for
#   ray-head, =2,3 for ray-worker, NODE_IP 127.0.0.1 and 127.0.0.2 (both on the host's loopback).
#   Start ray-head / ray-worker from a directory that outlives the runs (the raylets start their
#   workers in it). With PP on 80 GB cards pass --gpu-memory-utilization 0.85 (0.9 ran out).
#   OBJECT_STORE_BYTES caps each node's Ray object store (Ray's default takes 30% of the memory;
#   vLLM's workers pass tensors over NCCL, not through it).
#   Ray comes with the `ray` extra (pip install 'mlperf-vllm[ray]'; `make install` has it).
#   `run` checks the cluster itself before its engine starts (RAY_ADDRESS, or the cluster
#   started on this node) and never starts a Ray cluster of its own.
#   Llama 2 70B on one node:
#     MODEL=... DATASET=... scripts/multinode.sh 70b-2gpu Server     # TP 2 (FP8 fits)
#     MODEL=... DATASET=... scripts/multinode.sh 70b-8gpu Offline    # DP 4 x TP 2, one LoadGen SUT
#   Llama 3.1 8B on 2 GPUs:
#     MODEL=... DATASET=... scripts/multinode.sh 8b-dp2 Offline      # one replica per GPU
#
# --dry-run (first argument) prints every command instead of running it. Extra arguments after
# the scenario go to `mlperf-vllm run` (any vLLM engine flag).
# What to check after a run: result.json's engine_args (tensor/pipeline/data parallel sizes and
# distributed_executor_backend as intended), `Result is : VALID` in performance/, and for Ray
# runs result.json's `cluster` (every node alive, its devices, the layout).
set -euo pipefail
source "$(dirname "$0")/_common.sh"
[ "${1:-}" = --dry-run ] && { DRY_RUN=1; shift; }
USAGE="usage: multinode.sh [--dry-run] RECIPE [SCENARIO] [run args...]; RECIPE: ray-head, ray-worker, ray-check [RECIPE], 405b-2node, 70b-2node, 70b-2gpu, 70b-8gpu, 8b-dp2"
what=${1:-}
[ -n "$what" ] || { echo "$USAGE" >&2; exit 2; }
shift
RAY_PORT=${RAY_PORT:-6379}
GPUS_PER_NODE=${GPUS_PER_NODE:-8}
STORE=(); [ -n "${OBJECT_STORE_BYTES:-}" ] && STORE=(--object-store-memory "$OBJECT_STORE_BYTES")

# NCCL/Gloo must use the interface that carries NODE_IP; Ray's dashboard stays on loopback.
net_env() {
  need NODE_IP "this node's address on the fast interconnect"
  export VLLM_HOST_IP=$NODE_IP
  if [ -n "${IFNAME:-}" ]; then export NCCL_SOCKET_IFNAME=$IFNAME GLOO_SOCKET_IFNAME=$IFNAME; fi
}

run_bench() {  # benchmark scenario parallel-args... -- extra...
  local bench=$1 scenario=$2; shift 2
  need MODEL "checkpoint folder"; need DATASET "preprocessed dataset file"
  local conf_name; conf_name=$(echo "$scenario" | tr '[:upper:]' '[:lower:]')
  local pickle=(); case "$DATASET" in *.pkl|*.pickle) pickle=(--allow-pickle) ;; esac
  run_cmd "${MLPERF_VLLM[@]}" run --benchmark "$bench" --scenario "$scenario" --mode both \
    --model "$MODEL" --dataset "$DATASET" "${pickle[@]}" \
    --output "${OUTDIR:-runs/$bench/$conf_name-$what}" \
    --user-conf "${USER_CONF:-$ROOT/user_confs/$bench/$conf_name.conf}" "$@"
}

case "$what" in
  ray-head)
    net_env
    run_cmd ray start --head --node-ip-address "$NODE_IP" --port "$RAY_PORT" \
      --num-gpus "$GPUS_PER_NODE" --dashboard-host 127.0.0.1 "${STORE[@]}" ;;
  ray-worker)
    net_env; need HEAD_IP "the head node's address"
    run_cmd ray start --address "$HEAD_IP:$RAY_PORT" --node-ip-address "$NODE_IP" \
      --num-gpus "$GPUS_PER_NODE" "${STORE[@]}" ;;
  ray-check)  # the layout of a Ray recipe against the cluster's live nodes
    case "${1:-405b-2node}" in
      405b-2node) run_cmd "${MLPERF_VLLM[@]}" ray-check --tensor-parallel-size 8 \
        --pipeline-parallel-size 2 --nodes 2 ;;
      70b-2node) run_cmd "${MLPERF_VLLM[@]}" ray-check --tensor-parallel-size 2 \
        --pipeline-parallel-size 2 --nodes 2 ;;
      *) echo "error: ray-check knows the Ray recipes 405b-2node and 70b-2node; $USAGE" >&2; exit 2 ;;
    esac ;;
  405b-2node)
    scenario=${1:-Offline}; shift || true
    run_bench llama3_1-405b "$scenario" --tensor-parallel-size 8 --pipeline-parallel-size 2 \
      --distributed-executor-backend ray "$@" ;;
  70b-2node)
    scenario=${1:-Offline}; shift || true
    run_bench llama2-70b "$scenario" --tensor-parallel-size 2 --pipeline-parallel-size 2 \
      --distributed-executor-backend ray --quantization fp8 --kv-cache-dtype fp8 "$@" ;;
  70b-2gpu)
    scenario=${1:-Offline}; shift || true
    run_bench llama2-70b "$scenario" --tensor-parallel-size 2 --quantization fp8 \
      --kv-cache-dtype fp8 "$@" ;;
  70b-8gpu)
    scenario=${1:-Offline}; shift || true
    run_bench llama2-70b "$scenario" --tensor-parallel-size 2 --data-parallel-size 4 \
      --quantization fp8 --kv-cache-dtype fp8 "$@" ;;
  8b-dp2)
    scenario=${1:-Offline}; shift || true
    run_bench llama3_1-8b "$scenario" --data-parallel-size 2 "$@" ;;
  *) echo "error: unknown recipe $what; $USAGE" >&2; exit 2 ;;
esac
