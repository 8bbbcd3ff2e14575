"""Build a tiny, random, offline model directory that vLLM (CPU build) can serve.

Standalone script: run it with the testbed virtualenv's python (the one that has
torch, transformers and tokenizers); the plugin never imports it::

    python build_model.py --out DIR --variant tiny|head16|huge|hybrid|long [--seed N]

Variants:

* ``tiny``   - LlamaForCausalLM, hidden 128, 2 heads (head_dim 64), 2 layers,
  max_position_embeddings 8192. The healthy default; builds in a few seconds.
* ``head16`` - same size but 8 heads (head_dim 16). vLLM's CPU attention backend
  accepts it at init and dies at the first request ("Unsupported CPU attention
  configuration").
* ``huge``   - config.json + tokenizer only, for a model whose weights cannot fit
  (vocab 2,000,000 x hidden 8192). Serve it with ``--load-format dummy``.
* ``hybrid`` - Qwen3NextForCausalLM, a Kimi-K3-like hybrid: 3 gated-delta-net (linear
  attention, recurrent state) layers and 1 full-attention layer, hidden 128, head_dim 64, and
  one MoE layer (4 experts, top-2; vLLM's Qwen3Next needs one). With prefix caching vLLM runs
  it in ``mamba_cache_mode="align"`` (block size 128 on CPU), as it runs K3.
* ``long``   - ``tiny`` with ``max_position_embeddings`` 1,048,576 (K3's context): serve it with
  ``--max-model-len`` up to 1M. Its KV cache is 1 KiB per token (2 layers x 2 KV heads x 64 x
  K and V x bf16), so 1 GiB holds ~1M tokens; prefill time grows with the square of the
  prompt on the CPU build (measured here: 8K tokens 3.4 s, 32K 26 s on 2 loaded cores).

The directory is built in a temporary sibling directory and renamed into place,
so a half-written model is never visible at ``--out``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import sys
import time
from pathlib import Path
from typing import Any

SPECIAL_TOKENS = ["<pad>", "<s>", "</s>", "<|im_start|>", "<|im_end|>"]
# Plain (non-special) added tokens, so they survive skip_special_tokens and the
# hermes tool parser finds them in the decoded text.
TOOL_TOKENS = ["<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>"]
VOCAB_SIZE = 2048

CHAT_TEMPLATE = r"""
{%- macro text(c) -%}
{%- if c is string -%}{{ c }}
{%- elif c -%}{%- for p in c -%}{%- if p.type == 'text' -%}{{ p.text }}{%- endif -%}{%- endfor -%}
{%- endif -%}
{%- endmacro -%}
{{- bos_token -}}
{%- set has_system = messages and messages[0].role == 'system' -%}
{%- if tools -%}
{{- '<|im_start|>system\n' -}}
{%- if has_system -%}{{- text(messages[0].content) + '\n\n' -}}{%- endif -%}
{{- 'You may call one or more functions. Available tools:\n<tools>\n' -}}
{%- for tool in tools -%}
{{- (tool.function if tool.function is defined else tool) | tojson -}}{{- '\n' -}}
{%- endfor -%}
{{- '</tools>\nTo call a function reply with <tool_call>{"name": NAME, "arguments": ARGS}</tool_call><|im_end|>\n' -}}
{%- elif has_system -%}
{{- '<|im_start|>system\n' + text(messages[0].content) + '<|im_end|>\n' -}}
{%- endif -%}
{%- for m in messages -%}
{%- if m.role == 'system' and loop.first -%}
{%- elif m.role == 'tool' -%}
{{- '<|im_start|>tool\n<tool_response>\n' + text(m.content) + '\n</tool_response><|im_end|>\n' -}}
{%- elif m.role == 'assistant' -%}
{{- '<|im_start|>assistant\n' + text(m.content) -}}
{%- for tc in (m.tool_calls or []) -%}
{%- set f = tc.function if tc.function is defined else tc -%}
{{- '<tool_call>{"name": "' + f.name + '", "arguments": ' -}}
{{- f.arguments if f.arguments is string else (f.arguments | tojson) -}}
{{- '}</tool_call>' -}}
{%- endfor -%}
{{- '<|im_end|>\n' -}}
{%- else -%}
{{- '<|im_start|>' + m.role + '\n' + text(m.content) + '<|im_end|>\n' -}}
{%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\n' -}}{%- endif -%}
""".strip()

_SUBJECTS = ["the server", "a request", "the model", "our team", "the scheduler",
             "each worker", "the cache", "this node", "the operator", "a user",
             "the engine", "the agent", "the queue", "every client", "the router"]
_VERBS = ["loads", "serves", "measures", "rejects", "accepts", "stores", "reads",
          "writes", "restarts", "allocates", "frees", "returns", "checks",
          "streams", "records", "compares", "waits for", "sends", "builds"]
_OBJECTS = ["the weights", "a long prompt", "the first token", "memory", "tokens",
            "the prefix", "a tool call", "the response", "ten requests", "a report",
            "the context", "its metrics", "the driver", "an error", "the latency",
            "a new image", "the logs", "the schedule", "a small batch"]
_TAILS = ["before lunch", "under load", "at startup", "after a failure", "quickly",
          "every minute", "on the second try", "without errors", "in order",
          "when the cache is full", "for the whole day", "with care", "again"]
_WORDS = ("time day year people way thing world life hand part child eye woman "
          "place work week case point number group problem fact water room "
          "mother area money story month lot right study book word business "
          "issue side kind head house service friend father power hour game line "
          "end member law car city community name president team minute idea "
          "kid body information back parent face others level office door health "
          "person art war history party result change morning reason research "
          "girl guy moment air teacher force education good new first last long "
          "great little own other old big high different small large next early "
          "young important few public bad same able red blue green quiet happy").split()
_NAMES = ["get_weather", "search_docs", "add_numbers", "send_email", "read_file",
          "city", "query", "unit", "celsius", "limit", "path", "result", "status"]


def make_corpus(seed: int, n_lines: int = 6000) -> list[str]:
    """Return a deterministic pseudo-English corpus (plus some JSON and numbers)."""
    rng = random.Random(seed)
    lines: list[str] = []
    for i in range(n_lines):
        kind = i % 6
        if kind in (0, 1, 2):
            s = f"{rng.choice(_SUBJECTS)} {rng.choice(_VERBS)} {rng.choice(_OBJECTS)}"
            s = (s + " " + rng.choice(_TAILS)).capitalize() + rng.choice([".", ".", "!", "?"])
            lines.append(s)
        elif kind == 3:
            lines.append(" ".join(rng.choice(_WORDS) for _ in range(rng.randint(5, 14))).capitalize() + ".")
        elif kind == 4:
            obj = {"name": rng.choice(_NAMES), "arguments": {rng.choice(_NAMES): rng.choice(_WORDS),
                                                             "count": rng.randint(0, 9999)}}
            lines.append(json.dumps(obj))
        else:
            lines.append(f"Step {rng.randint(1, 99)}: {rng.randint(0, 10**6)} tokens in "
                         f"{rng.random() * 100:.2f} s, {rng.randint(1, 64)} users, "
                         f"{rng.randint(0, 100)}% of {rng.randint(1, 8)} GiB.")
    return lines


def build_tokenizer(seed: int) -> Any:
    """Train a byte-level BPE tokenizer and wrap it in PreTrainedTokenizerFast."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE, min_frequency=2, special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(make_corpus(seed), trainer=trainer)
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in TOOL_TOKENS])
    bos_id = tok.token_to_id("<s>")
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A", pair="<s> $A <s> $B", special_tokens=[("<s>", bos_id)])
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token="<s>", eos_token="<|im_end|>", pad_token="<pad>",
        model_max_length=8192, clean_up_tokenization_spaces=False)
    fast.chat_template = CHAT_TEMPLATE
    return fast


def model_config(variant: str, tokenizer: Any) -> Any:
    """Return the LlamaConfig for a variant."""
    from transformers import LlamaConfig

    ids = {
        "bos_token_id": tokenizer.convert_tokens_to_ids("<s>"),
        "eos_token_id": tokenizer.convert_tokens_to_ids("<|im_end|>"),
        "pad_token_id": tokenizer.convert_tokens_to_ids("<pad>"),
    }
    common: dict[str, Any] = dict(hidden_act="silu", rms_norm_eps=1e-6, tie_word_embeddings=False,
                                  architectures=["LlamaForCausalLM"], dtype="bfloat16", **ids)
    if variant == "tiny":
        return LlamaConfig(vocab_size=len(tokenizer), hidden_size=128, intermediate_size=256,
                           num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=2,
                           head_dim=64, max_position_embeddings=8192, **common)
    if variant == "long":
        return LlamaConfig(vocab_size=len(tokenizer), hidden_size=128, intermediate_size=256,
                           num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=2,
                           head_dim=64, max_position_embeddings=1 << 20, **common)
    if variant == "head16":
        return LlamaConfig(vocab_size=len(tokenizer), hidden_size=128, intermediate_size=256,
                           num_hidden_layers=2, num_attention_heads=8, num_key_value_heads=8,
                           head_dim=16, max_position_embeddings=8192, **common)
    if variant == "huge":
        # embed_tokens alone is 2e6 * 8192 * 2 bytes = 32.8 GB in bf16 (lm_head too).
        return LlamaConfig(vocab_size=2_000_000, hidden_size=8192, intermediate_size=28672,
                           num_hidden_layers=4, num_attention_heads=64, num_key_value_heads=8,
                           head_dim=128, max_position_embeddings=8192, **common)
    if variant == "hybrid":
        from transformers import Qwen3NextConfig

        hybrid = {**common, "architectures": ["Qwen3NextForCausalLM"]}
        return Qwen3NextConfig(
            vocab_size=len(tokenizer), hidden_size=128, intermediate_size=256,
            num_hidden_layers=4, layer_types=["linear_attention"] * 3 + ["full_attention"],
            num_attention_heads=2, num_key_value_heads=2, head_dim=64,
            linear_num_key_heads=2, linear_num_value_heads=2, linear_key_head_dim=64,
            linear_value_head_dim=64, linear_conv_kernel_dim=4,
            num_experts=4, num_experts_per_tok=2, moe_intermediate_size=64,
            shared_expert_intermediate_size=64, mlp_only_layers=[0, 1, 2], decoder_sparse_step=1,
            max_position_embeddings=8192, **hybrid)
    raise ValueError(f"unknown variant {variant!r}")


def build(out: Path, variant: str, seed: int) -> Path:
    """Build the model directory for ``variant`` into a temp dir, then rename it to ``out``."""
    import torch
    from transformers import AutoModelForCausalLM, GenerationConfig

    out = out.resolve()
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.parent / f".{out.name}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    try:
        torch.manual_seed(seed)
        tokenizer = build_tokenizer(seed)
        tokenizer.save_pretrained(tmp)
        # transformers 5 writes "TokenizersBackend"; the old name loads everywhere.
        tc_path = tmp / "tokenizer_config.json"
        tc = json.loads(tc_path.read_text())
        tc["tokenizer_class"] = "PreTrainedTokenizerFast"
        tc_path.write_text(json.dumps(tc, indent=2) + "\n")
        config = model_config(variant, tokenizer)
        if variant == "huge":
            config.save_pretrained(tmp)
        else:
            model = AutoModelForCausalLM.from_config(config).to(torch.bfloat16)
            model.save_pretrained(tmp)
        GenerationConfig(bos_token_id=config.bos_token_id, pad_token_id=config.pad_token_id,
                         eos_token_id=[config.eos_token_id, tokenizer.convert_tokens_to_ids("</s>")],
                         ).save_pretrained(tmp)
        info = {"variant": variant, "seed": seed, "vocab_size": config.vocab_size,
                "tokenizer_vocab": len(tokenizer), "hidden_size": config.hidden_size,
                "head_dim": config.head_dim, "weights": variant != "huge",
                "built_at": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
        (tmp / "k3-testbed.json").write_text(json.dumps(info, indent=2) + "\n")
        try:
            os.rename(tmp, out)
        except OSError:
            if not (out / "k3-testbed.json").exists():
                raise
            # Someone else finished the same build first: keep theirs.
            shutil.rmtree(tmp, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, type=Path, help="model directory to create")
    ap.add_argument("--variant", default="tiny", choices=["tiny", "head16", "huge", "hybrid", "long"])
    ap.add_argument("--seed", default=0, type=int)
    ap.add_argument("--force", action="store_true", help="rebuild even if --out exists")
    args = ap.parse_args(argv)
    if args.out.exists():
        if not args.force:
            print(f"{args.out} already exists; nothing to do (use --force to rebuild)")
            return 0
        shutil.rmtree(args.out)
    t0 = time.monotonic()
    out = build(args.out, args.variant, args.seed)
    print(f"built {args.variant} model in {time.monotonic() - t0:.1f} s: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
