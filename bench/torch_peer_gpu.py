#!/usr/bin/env python3
"""PyTorch's training step on gpu_step_bench's shapes, on the same GPU: the peer that check.sh
(bench/package_check.sh) sets our tokens/s against.

Each case builds transformers' LlamaForCausalLM / MixtralForCausalLM from the same config as
gpu_step_bench's case (bench/gpu_step_bench.cpp), trains it the way fsdp_train trains on a GPU:
fp32 master weights, bf16 compute (torch.autocast), SDPA attention on the flash backend, fused
AdamW (lr 3e-4, betas 0.9/0.95, eps 1e-5, weight decay 0.1), gradient clipping at 1.0, the same
tokens per step (random ids, labels = ids), and times the steps after a warm-up with the device
synchronised. One line per case:

    peer <case> <ms/step> <tokens/s> <peak GiB>

after a `versions:` line. PyTorch and transformers are whatever this Python has; without them
(or without a CUDA device) it prints one `torch_peer_gpu: skipped: ...` line and exits 0. A case
that runs out of memory says so and the others still run (exit 1).

    python3 bench/torch_peer_gpu.py --case llama2-7b-8L --case mixtral-8x7b-2L --steps 10
    python3 bench/torch_peer_gpu.py --case tiny --steps 2 --device cpu     # the code path, no GPU
"""
import argparse
import sys
import time

# gpu_step_bench's cases: (model family, config keys, sequences per step, sequence length).
CASES = {
    "llama2-7b-8L": ("llama", dict(vocab_size=32000, hidden_size=4096, intermediate_size=11008, num_hidden_layers=8,
                                   num_attention_heads=32, num_key_value_heads=32, max_position_embeddings=4096,
                                   rms_norm_eps=1e-5, rope_theta=10000.0), 1, 4096),
    "mixtral-8x7b-2L": ("mixtral", dict(vocab_size=32000, hidden_size=4096, intermediate_size=14336,
                                        num_hidden_layers=2, num_attention_heads=32, num_key_value_heads=8,
                                        num_local_experts=8, num_experts_per_tok=2, max_position_embeddings=4096,
                                        rms_norm_eps=1e-5, rope_theta=1e6, output_router_logits=True,
                                        router_aux_loss_coef=0.02), 1, 4096),
    # The tiny preset (configs/tiny.yaml's model), for exercising this script without a GPU.
    "tiny": ("llama", dict(vocab_size=1024, hidden_size=128, intermediate_size=352, num_hidden_layers=4,
                           num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                           rms_norm_eps=1e-5, rope_theta=10000.0), 2, 32),
}


def build(torch, transformers, family, keys, device):
    cls_config = transformers.LlamaConfig if family == "llama" else transformers.MixtralConfig
    cls_model = transformers.LlamaForCausalLM if family == "llama" else transformers.MixtralForCausalLM
    config = cls_config(tie_word_embeddings=False, **keys)
    config._attn_implementation = "sdpa"  # torch.nn.functional.scaled_dot_product_attention
    with torch.device(device):  # parameters made on the device, in fp32 (the master weights)
        model = cls_model(config)
    model.train()
    return model


def run_case(torch, transformers, name, steps, warmup, device):
    family, keys, batch, seq = CASES[name]
    model = build(torch, transformers, family, keys, device)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, betas=(0.9, 0.95), eps=1e-5, weight_decay=0.1,
                            fused=device == "cuda")
    from torch.nn.attention import SDPBackend, sdpa_kernel
    backend = SDPBackend.FLASH_ATTENTION if device == "cuda" else SDPBackend.MATH
    gen = torch.Generator(device=device).manual_seed(0)
    ids = torch.randint(0, keys["vocab_size"], (batch, seq), device=device, generator=gen)

    def step():
        with torch.autocast(device_type=device, dtype=torch.bfloat16), sdpa_kernel(backend):
            loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    for _ in range(warmup):
        step()
    sync()
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    for _ in range(steps):
        loss = step()
    sync()
    ms = (time.perf_counter() - t0) * 1e3 / steps
    peak = torch.cuda.max_memory_allocated() / 2**30 if device == "cuda" else 0.0
    print(f"peer {name} {ms:.1f} {batch * seq / ms * 1e3:.0f} {peak:.2f}  (loss {float(loss):.4f}, "
          f"{sum(p.numel() for p in model.parameters()) / 1e9:.2f}B parameters, {batch}x{seq} tokens/step, "
          f"{steps} timed steps after {warmup})", flush=True)
    del model, opt


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--case", action="append", choices=sorted(CASES), help="a case (repeatable; default: both GPU cases)")
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    args = p.parse_args()
    cases = args.case or ["llama2-7b-8L", "mixtral-8x7b-2L"]
    try:
        import torch
        import transformers
    except Exception as e:  # noqa: BLE001 (any import failure means: no usable peer here)
        print(f"torch_peer_gpu: skipped: no PyTorch/transformers in {sys.executable} ({type(e).__name__}: {e})")
        return 0
    if args.device == "cuda" and not torch.cuda.is_available():
        print(f"torch_peer_gpu: skipped: torch {torch.__version__} sees no CUDA device")
        return 0
    where = torch.cuda.get_device_name(0) if args.device == "cuda" else "cpu"
    print(f"versions: torch {torch.__version__} (CUDA {torch.version.cuda}), transformers {transformers.__version__}, "
          f"python {sys.version.split()[0]}, on {where}", flush=True)
    status = 0
    for name in cases:
        try:
            run_case(torch, transformers, name, args.steps, args.warmup, args.device)
        except torch.cuda.OutOfMemoryError as e:
            print(f"peer-failed {name}: out of GPU memory ({str(e).splitlines()[0]})", flush=True)
            status = 1
        except Exception as e:  # noqa: BLE001 (report the case and go on with the next)
            print(f"peer-failed {name}: {type(e).__name__}: {e}", flush=True)
            status = 1
        if args.device == "cuda":
            torch.cuda.empty_cache()
    return status


if __name__ == "__main__":
    sys.exit(main())
