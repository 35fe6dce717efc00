#!/usr/bin/env bash
# Roofline of one FSDP training step, computed without a GPU: for each kernel of the step,
# its FLOPs and the bytes it must move to and from HBM, and the time they imply on the
# named device as max(FLOPs / peak, bytes / bandwidth); then the step's bound and the MFU
# bound. So the gap to the limit is known before the first GPU run, and a measured kernel
# can be held to its row (bench/README.md, "Roofline").
#
#   bash bench/roofline/roofline.sh                 # Llama 2 7B, seq 4096, micro-batch 1, 8 x H100 SXM
#   RANKS=64 SEQ=2048 bash bench/roofline/roofline.sh
#   EXPERTS=8 TOPK=2 INTER=14336 KV_HEADS=8 RANKS=32 bash bench/roofline/roofline.sh   # Mixtral 8x7B
#   EXPERTS=8 TOPK=2 INTER=14336 KV_HEADS=8 RANKS=8 EXPERT_PARALLEL=8 bash bench/roofline/roofline.sh  # EP8
#   NF4=1 bash bench/roofline/roofline.sh          # + QLoRA's NF4 dequantization kernel per weight
#
# Every input is an environment variable (defaults: Llama 2 7B on H100 SXM):
#   VOCAB HIDDEN INTER LAYERS HEADS KV_HEADS    model shape (the llama2_7b preset)
#   EXPERTS TOPK                                a mixture of experts (Mixtral); EXPERTS=0 (default) is dense
#   EXPERT_PARALLEL                             experts spread over this many ranks (parallel.expert; 1 = FSDP alone)
#   SEQ MICRO_BATCH RANKS                       sequence length, sequences per rank, FSDP ranks
#   PEAK_TFLOPS HBM_TBS LINK_GBS                dense bf16 peak, HBM bandwidth, NVLink per direction
#   NF4                                         1 = also the table of NF4 dequantization (QLoRA) below
# Assumptions (each row's bytes are the compulsory traffic: every operand read once and
# every result written once; caches only make a kernel slower than its row, never faster):
#   * bf16 activations, weights and gradients; fp32 master weights and AdamW moments (the
#     GPU default of issue 7); gradients reduce-scattered in bf16 (fsdp.reduce_dtype);
#   * FULL_SHARD: each unit is all-gathered for forward and again for backward, and its
#     gradient reduce-scattered; the bytes are what one rank sends (communicator.h's ring
#     volume, (N-1)/N of the unit), at LINK_GBS;
#   * no activation checkpointing (recomputing the forward would add one forward's rows);
#   * attention is flash-style: causal (half the s x s products), scores never in HBM,
#     backward = 2.5 x forward FLOPs (recomputed QK^T plus dV, dP, dQ, dK products);
#   * QKV and gate/up are single fused GEMMs; residual add is fused into RMSNorm; the
#     cross-entropy kernel reads the logits once and writes their gradient in place;
#   * the step bound assumes communication overlaps compute on its own stream (Note [NCCL
#     stream ordering]); the line after it gives the time without overlap.
#   * a mixture of experts: the expert GEMMs run per expert over its group of the T x TOPK
#     (token, choice) rows, shown as one row of their total (a balanced load); router,
#     sort, gather and combine are rows of their own; every expert is gathered and reduced.
#   * expert parallelism (EXPERT_PARALLEL = Ep > 1, docs/expert-parallelism.md): each rank
#     holds EXPERTS / Ep whole experts, FSDP-sharded over the RANKS / Ep ranks holding the
#     same ones, so only those are gathered and reduced there; the other parameters are
#     sharded over every rank as before. Tokens travel instead: per MoE layer an all-to-all
#     dispatches the (token, choice) rows routed to other ranks' experts ((Ep-1)/Ep of them
#     under uniform routing) and another brings their outputs back, both mirrored in the
#     backward: 4 all-to-alls of rows x hidden in bf16 per layer, inside one node at LINK_GBS.
# No Python at run time: bash and awk only.
set -euo pipefail
export LC_ALL=C  # awk prints decimal points, whatever the locale

awk -v vocab="${VOCAB:-32000}" -v h="${HIDDEN:-4096}" -v f="${INTER:-11008}" -v L="${LAYERS:-32}" \
    -v H="${HEADS:-32}" -v KVH="${KV_HEADS:-32}" -v s="${SEQ:-4096}" -v b="${MICRO_BATCH:-1}" \
    -v N="${RANKS:-8}" -v peak_tf="${PEAK_TFLOPS:-989}" -v hbm_tb="${HBM_TBS:-3.35}" \
    -v link_gb="${LINK_GBS:-450}" -v E="${EXPERTS:-0}" -v k="${TOPK:-2}" -v nf4="${NF4:-0}" \
    -v ep="${EXPERT_PARALLEL:-1}" '
function row(name, calls, flops, bytes,    tc, tm, t) {
  tc = flops / peak; tm = bytes / hbm; t = (tc > tm ? tc : tm)
  printf "%-44s %5d %11.2f %10.1f %8.1f  %-7s %9.1f %9.2f\n", name, calls, flops / 1e9, bytes / 1e6,
         (bytes > 0 ? flops / bytes : 0), (tc > tm ? "compute" : "memory"), t * 1e6, calls * t * 1e3
  step_flops += calls * flops; step_bytes += calls * bytes; step_time += calls * t
  if (tc > tm) compute_time += calls * t; else memory_time += calls * t
}
function gemm(name, calls, M, K, Nn) {  # C[M,Nn] = A[M,K] B[K,Nn], bf16 in and out
  row(sprintf("%s [%dx%dx%d]", name, M, K, Nn), calls, 2 * M * K * Nn, 2 * (M * K + K * Nn + M * Nn))
}
function comm(name, calls, bytes,    t) {
  t = bytes / link
  printf "%-44s %5d %11s %10.1f %8s  %-7s %9.1f %9.2f\n", name, calls, "-", bytes / 1e6, "-", "link", t * 1e6, calls * t * 1e3
  comm_bytes += calls * bytes; comm_time += calls * t
}
BEGIN {
  peak = peak_tf * 1e12; hbm = hbm_tb * 1e12; link = link_gb * 1e9
  d = h / H; kv = KVH * d; T = b * s  # tokens per rank per micro-batch
  mlp_all = (E > 0 ? h * E + E * 3 * h * f : 3 * h * f)     # the parameters of one MLP
  mlp_active = (E > 0 ? h * E + k * 3 * h * f : 3 * h * f)  # those one token uses
  block_params = h * (h + 2 * kv) + h * h + mlp_all + 2 * h
  params = 2 * vocab * h + L * block_params + h
  matmul_params = L * (h * (h + 2 * kv) + h * h + mlp_active) + vocab * h
  shard = params / N  # with expert parallelism too: the experts over Ep x RANKS/Ep ranks
  expert_params = (E > 0 ? L * E * 3 * h * f : 0)
  if (ep > 1 && (E == 0 || E % ep != 0 || N % ep != 0)) {
    printf "roofline.sh: EXPERT_PARALLEL=%d must divide EXPERTS (%d) and RANKS (%d)\n", ep, E, N > "/dev/stderr"; exit 2
  }

  if (E > 0) { printf "Roofline of one training step: Mixtral shape (%.2fB parameters, %.2fB active: hidden %d, %d experts of intermediate %d, top-%d, %d layers, %d/%d heads, vocab %d)\n", params / 1e9, (params - L * (E - k) * 3 * h * f) / 1e9, h, E, f, k, L, H, KVH, vocab }
  else { printf "Roofline of one training step: Llama 2 shape (%.2fB parameters: hidden %d, intermediate %d, %d layers, %d/%d heads, vocab %d)\n", params / 1e9, h, f, L, H, KVH, vocab }
  printf "seq %d, micro-batch %d (%d tokens per rank per step), bf16, FULL_SHARD on %d ranks (shard %.0fM parameters)", s, b, T, N, shard / 1e6
  if (ep > 1) printf ", experts over %d ranks (%d per rank, sharded over %d)", ep, E / ep, N / ep
  printf "\n"
  printf "device: %g TFLOP/s dense bf16, %g TB/s HBM, %g GB/s link per direction; ridge point %.0f FLOP/byte\n\n", peak_tf, hbm_tb, link_gb, peak / hbm
  printf "%-44s %5s %11s %10s %8s  %-7s %9s %9s\n", "kernel", "calls", "GFLOP/call", "MB/call", "FLOP/B", "bound", "us/call", "ms/step"

  # ---- forward ----
  row("embedding fwd (gather)", 1, 0, 2 * (2 * T * h))
  row("rmsnorm+residual fwd", 2 * L + 1, 5 * T * h, 2 * (4 * T * h + h) + 4 * T)
  gemm("gemm qkv fwd", L, T, h, h + 2 * kv)
  row("rope fwd (q, k)", L, 3 * T * (h + kv), 2 * 2 * T * (h + kv) + 4 * s * d)
  attn_fwd = 2 * b * H * s * s * d  # QK^T and PV over the causal half
  row("attention fwd (flash, causal)", L, attn_fwd, 2 * (2 * T * h + 2 * T * kv) + 4 * T * H)
  gemm("gemm o fwd", L, T, h, h)
  if (E > 0) {
    R = T * k  # (token, choice) rows
    gemm("gemm router fwd", L, T, h, E)
    row("router softmax+top-k+stats fwd", L, 6 * T * E, 2 * T * E + 4 * T * E + 8 * T * k)
    row("permutation plan (stable count sort)", L, 0, 4 * 3 * R)
    row("gather rows to experts", L, 0, 2 * 2 * R * h + 4 * R)
    gemm("gemm experts gate+up fwd", L, R, h, 2 * f)
    row("swiglu fwd (routed rows)", L, 5 * R * f, 2 * 3 * R * f)
    gemm("gemm experts down fwd", L, R, f, h)
    row("combine (k outputs per token)", L, 2 * R * h, 2 * (R * h + 2 * T * h) + 4 * R)
  } else {
    gemm("gemm gate+up fwd", L, T, h, 2 * f)
    row("swiglu fwd", L, 5 * T * f, 2 * 3 * T * f)
    gemm("gemm down fwd", L, T, f, h)
  }
  gemm("gemm lm_head fwd", 1, T, h, vocab)
  row("cross-entropy fwd+bwd (fused)", 1, 6 * T * vocab, 2 * 2 * T * vocab)
  # ---- backward: dX and dW GEMMs (same FLOPs and bytes as the forward each) ----
  gemm("gemm lm_head bwd (dX + dW)", 2, T, h, vocab)
  if (E > 0) {
    row("combine bwd (dys, dweights)", L, 3 * R * h, 2 * (2 * R * h + T * h) + 8 * R)
    gemm("gemm experts down bwd (dX + dW)", 2 * L, R, f, h)
    row("swiglu bwd (routed rows)", L, 12 * R * f, 2 * 5 * R * f)
    gemm("gemm experts gate+up bwd (dX + dW)", 2 * L, R, h, 2 * f)
    row("router bwd (softmax, top-k weights, aux)", L, 8 * T * E, 4 * 2 * T * E + 2 * T * E + 8 * T * k)
    gemm("gemm router bwd (dX + dW)", 2 * L, T, h, E)
    row("gather rows bwd (sum k per token)", L, R * h, 2 * (R * h + 2 * T * h) + 4 * R)
  } else {
    gemm("gemm down bwd (dX + dW)", 2 * L, T, f, h)
    row("swiglu bwd", L, 12 * T * f, 2 * 5 * T * f)
    gemm("gemm gate+up bwd (dX + dW)", 2 * L, T, h, 2 * f)
  }
  gemm("gemm o bwd (dX + dW)", 2 * L, T, h, h)
  row("attention bwd (flash, causal)", L, 2.5 * attn_fwd, 2 * (4 * T * h + 4 * T * kv + 2 * T * kv) + 8 * T * H)
  row("rope bwd (dq, dk)", L, 3 * T * (h + kv), 2 * 2 * T * (h + kv) + 4 * s * d)
  gemm("gemm qkv bwd (dX + dW)", 2 * L, T, h, h + 2 * kv)
  row("rmsnorm+residual bwd", 2 * L + 1, 10 * T * h, 2 * (5 * T * h + h) + 4 * T + 4 * h)
  row("embedding bwd (zero + scatter-add)", 1, T * h, 2 * (vocab * h + 3 * T * h))
  # ---- optimizer, over the shard of this rank ----
  row("grad-norm (sum of squares, shard)", 1, 2 * shard, 2 * shard)
  # reads fp32 master, m, v and the bf16 gradient; writes master, m, v and the bf16 copy
  row("adamw (fused, shard)", 1, 15 * shard, 28 * shard)
  # ---- communication: what one rank sends ----
  printf "\n"
  if (ep > 1) {
    dense_sent = (N - 1) / N * 2 * (params - expert_params)
    expert_sent = (N / ep - 1) / (N / ep) * 2 * expert_params / ep
    comm("all-gather fwd (bf16 non-expert params)", 1, dense_sent)
    comm("all-gather bwd (bf16 non-expert params)", 1, dense_sent)
    comm("reduce-scatter (bf16 non-expert grads)", 1, dense_sent)
    comm("all-gather fwd (bf16 local experts)", 1, expert_sent)
    comm("all-gather bwd (bf16 local experts)", 1, expert_sent)
    comm("reduce-scatter (bf16 local experts)", 1, expert_sent)
    a2a = (ep - 1) / ep * T * k * h * 2
    comm(sprintf("a2a fwd dispatch+combine [%dx%d]", (ep - 1) / ep * T * k, h), 2 * L, a2a)
    comm(sprintf("a2a bwd dispatch+combine [%dx%d]", (ep - 1) / ep * T * k, h), 2 * L, a2a)
  } else {
    unit_sent = (N - 1) / N * 2 * params
    comm("all-gather fwd (bf16 params)", 1, unit_sent)
    comm("all-gather bwd (bf16 params)", 1, unit_sent)
    comm("reduce-scatter (bf16 grads)", 1, unit_sent)
  }

  model_flops = 6 * matmul_params * T + 3 * L * attn_fwd
  step_bound = (step_time > comm_time ? step_time : comm_time)
  printf "\n"
  printf "kernels: %.1f TFLOP, %.1f GB of HBM traffic; %.1f ms bound (%.1f ms compute-bound rows, %.1f ms memory-bound rows)\n", step_flops / 1e12, step_bytes / 1e9, step_time * 1e3, compute_time * 1e3, memory_time * 1e3
  block_sent = (ep > 1 ? (N - 1) / N * 2 * (block_params - E * 3 * h * f) + (N / ep - 1) / (N / ep) * 2 * E / ep * 3 * h * f + 2 * a2a : (N - 1) / N * 2 * block_params)
  printf "communication: %.1f GB sent per rank, %.1f ms at %g GB/s; per block %.1f MB per %s = %.2f ms vs %.2f ms of its forward\n", comm_bytes / 1e9, comm_time * 1e3, link_gb, block_sent / 1e6, (ep > 1 ? "forward (gathers and all-to-alls)" : "collective"), block_sent / link * 1e3, (step_time > 0 ? (2 * T * (h * (h + 2 * kv) + h * h + mlp_active) + attn_fwd) / peak * 1e3 : 0)
  printf "step bound: %.1f ms with communication overlapped (%.1f ms without); %.0f tokens/s per GPU\n", step_bound * 1e3, (step_time + comm_time) * 1e3, T / step_bound
  printf "model FLOPs (6 x %.2fB matmul parameters x %d tokens + causal attention fwd+bwd at 3x fwd): %.1f TFLOP\n", matmul_params / 1e9, T, model_flops / 1e12
  printf "MFU bound: %.1f%% (model FLOPs / (step bound x peak)); %.1f%% without overlap\n", 100 * model_flops / (step_bound * peak), 100 * model_flops / ((step_time + comm_time) * peak)
  if (nf4) nf4_table()
}
# QLoRA (src/ops/cuda/nf4.cu): each frozen NF4 weight is dequantized into bf16 right before
# its GEMM, in the forward and again in the backward (dX only: no dW for a frozen weight).
# Compulsory bytes per weight of n elements: the packed codes (n/2), the 8-bit absmax (n/64),
# the nested absmax (4n/16384) and the two code tables (1088 bytes) in, bf16 out (2n); 2 FLOPs
# per element. The last column is the kernel against the GEMM it feeds (2 x tokens x n FLOPs).
function nf4_row(name, n,    bytes, t, tg) {
  bytes = n / 2 + n / 64 + 4 * n / 16384 + 1088 + 2 * n
  t = bytes / hbm; tg = 2 * T * n / peak
  printf "%-44s %5d %11.3f %10.1f %8.2f  %-7s %9.1f %8.1f%%\n", name, 2 * L, 2 * n / 1e9, bytes / 1e6, 2 * n / bytes, "memory", t * 1e6, 100 * t / tg
  nf4_time += 2 * L * t
}
function nf4_table() {
  printf "\nNF4 dequantization (QLoRA), per frozen weight, forward + backward:\n"
  printf "%-44s %5s %11s %10s %8s  %-7s %9s %9s\n", "kernel", "calls", "GFLOP/call", "MB/call", "FLOP/B", "bound", "us/call", "of GEMM"
  nf4_row(sprintf("nf4 dequantize qkv [%dx%d]", h + 2 * kv, h), h * (h + 2 * kv))
  nf4_row(sprintf("nf4 dequantize o [%dx%d]", h, h), h * h)
  nf4_row(sprintf("nf4 dequantize gate+up [%dx%d]", 2 * f, h), 2 * f * h)
  nf4_row(sprintf("nf4 dequantize down [%dx%d]", h, f), f * h)
  printf "NF4 dequantization: %.2f ms per step at %g TB/s (0.516 bytes in and 2 out per weight element)\n", nf4_time * 1e3, hbm_tb
}'
