"""The Hugging Face side of tests/CLI/hf-oracle.test, through transformers.

  hf_llama.py make DIR --tie 0|1 --kv-heads K [--dtype D] [--shard-bytes N]
      A randomly initialised LlamaForCausalLM saved with save_pretrained
      (sharded with model.safetensors.index.json when --shard-bytes is
      given), and DIR/tokens.txt: seq + 1 fixed token ids.
  hf_llama.py edit DIR --drop NAME | --add NAME
      DIR's model.safetensors without tensor NAME, or with a tensor NAME more.
  hf_llama.py compare DIR KILN.json [--weights FILE] --loss-tol X --logits-tol Y
      transformers' loss and logits on DIR/tokens.txt, with DIR's weights
      or FILE's (a Kiln checkpoint's model.safetensors, loaded strictly),
      against Kiln's (kiln-hf-oracle's JSON): exit 1 past the tolerances.
"""
import argparse
import json
import sys

import torch
from safetensors.torch import load_file, save_file
from transformers import LlamaConfig, LlamaForCausalLM

SEQ = 16


def make(args):
    torch.manual_seed(args.seed)
    config = LlamaConfig(
        vocab_size=256, hidden_size=64, intermediate_size=160,
        num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=args.kv_heads, max_position_embeddings=64,
        rope_theta=10000.0, rms_norm_eps=1e-5,
        tie_word_embeddings=bool(args.tie))
    model = LlamaForCausalLM(config).to(getattr(torch, args.dtype))
    kwargs = {"safe_serialization": True}
    if args.shard_bytes:
        kwargs["max_shard_size"] = args.shard_bytes
    model.save_pretrained(args.dir, **kwargs)
    tokens = torch.randint(0, 256, (SEQ + 1,), generator=torch.Generator().manual_seed(7))
    with open(args.dir + "/tokens.txt", "w") as f:
        f.write(" ".join(str(int(t)) for t in tokens) + "\n")


def edit(args):
    path = args.dir + "/model.safetensors"
    state = load_file(path)
    if args.drop:
        del state[args.drop]
    if args.add:
        state[args.add] = torch.zeros(4)
    save_file(state, path, metadata={"format": "pt"})


def compare(args):
    model = LlamaForCausalLM.from_pretrained(args.dir, torch_dtype=torch.float32,
                                             attn_implementation="eager")
    if args.weights:
        state = load_file(args.weights)
        if model.config.tie_word_embeddings:
            state["lm_head.weight"] = state["model.embed_tokens.weight"]
        model.load_state_dict(state, strict=True)
    model.eval()
    ids = [int(t) for t in open(args.dir + "/tokens.txt").read().split()]
    x = torch.tensor([ids])
    with torch.no_grad():
        out = model(input_ids=x, labels=x)
    logits = out.logits[0, :SEQ].reshape(-1)
    kiln = json.load(open(args.kiln))
    kiln_logits = torch.tensor(kiln["logits"])
    loss_err = abs(kiln["loss"] - out.loss.item()) / abs(out.loss.item())
    logits_err = (kiln_logits - logits).abs().max().item()
    print(f"loss: kiln {kiln['loss']:.7f} transformers {out.loss.item():.7f} "
          f"(relative {loss_err:.1e}); logits: max difference {logits_err:.1e}")
    if loss_err > args.loss_tol or logits_err > args.logits_tol:
        sys.exit("past the tolerances")


def main():
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="command", required=True)
    m = sub.add_parser("make")
    m.add_argument("dir")
    m.add_argument("--tie", type=int, required=True)
    m.add_argument("--kv-heads", type=int, required=True)
    m.add_argument("--dtype", default="float32")
    m.add_argument("--shard-bytes", type=int, default=0)
    m.add_argument("--seed", type=int, default=0)
    e = sub.add_parser("edit")
    e.add_argument("dir")
    e.add_argument("--drop")
    e.add_argument("--add")
    c = sub.add_parser("compare")
    c.add_argument("dir")
    c.add_argument("kiln")
    c.add_argument("--weights")
    c.add_argument("--loss-tol", type=float, required=True)
    c.add_argument("--logits-tol", type=float, required=True)
    args = p.parse_args()
    {"make": make, "edit": edit, "compare": compare}[args.command](args)


main()
