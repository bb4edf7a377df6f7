"""Benchmarks: the workloads of `python -m benchmarks.run`, grouped in suites (tiny add, elementwise, MLP,
transformer, HuggingFace, cache). A workload builds (callable, inputs, params) with random weights, no downloads;
`params` are what fwd+bwd differentiates (None: the inputs themselves).
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from benchmarks.models import GPT, Block, GPTConfig, elementwise_chain, mlp


@dataclass
class Workload:
    suite: str
    name: str
    make: Callable  # () -> (fn, inputs, params | None)
    backward: bool = True
    tol: float = 1e-4  # rtol = atol for comparing against eager
    shapes: list = field(default_factory=list)  # cache suite: the input shapes called in sequence


def tiny_add(a, b):
    return a + b


def gelu_mlp_fn(x, w1, w2):
    """A functional MLP for the cache suite: the batch size changes, the weights do not."""
    return torch.nn.functional.gelu(x @ w1) @ w2


class LastHidden(torch.nn.Module):
    """A HuggingFace model called with input ids, returning its first output as a plain tensor."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, ids):
        out = self.model(input_ids=ids, use_cache=False, return_dict=True)
        return out.logits if hasattr(out, "logits") else out.last_hidden_state


def _seeded(make):
    def wrapped():
        torch.manual_seed(0)
        return make()

    return wrapped


def core_workloads(quick: bool) -> list[Workload]:
    n = 512 if quick else 1024
    rows = 128 if quick else 512
    batch = 4 if quick else 8
    cfg = GPTConfig(n_embd=128, n_head=4, block_size=64, vocab_size=256, n_layer=2)

    def gpt():
        model = GPT(cfg)
        ids = torch.randint(0, cfg.vocab_size, (batch, cfg.block_size))
        return (lambda ids: model(ids)), (ids,), list(model.parameters())  # logits only (no loss)

    def block():
        model = Block(cfg)
        return model, (torch.randn(batch, cfg.block_size, cfg.n_embd),), list(model.parameters())

    def mlp_case():
        model = mlp(256, 3)
        return model, (torch.randn(rows, 256),), list(model.parameters())

    work = [
        Workload("tiny add", "add 2x2", _seeded(lambda: (tiny_add, (torch.randn(2, 2), torch.randn(2, 2)), None))),
        Workload("elementwise", f"chain {n}x{n}", _seeded(lambda: (elementwise_chain, (torch.randn(n, n),), None))),
        Workload("mlp", f"mlp 256x3 b{rows}", _seeded(mlp_case)),
        Workload("transformer", "gpt2 block", _seeded(block), tol=1e-3),
    ]
    if not quick:
        work += [
            Workload("elementwise", "chain 64x64", _seeded(lambda: (elementwise_chain, (torch.randn(64, 64),), None))),
            Workload("mlp", "mlp 512x4 b256", _seeded(lambda: _mlp_params(mlp(512, 4), (256, 512)))),
            Workload("transformer", "nanogpt 2 layers", _seeded(gpt), tol=1e-3),
        ]
    return work


def _mlp_params(model, shape):
    return model, (torch.randn(*shape),), list(model.parameters())


def cache_workloads(quick: bool) -> list[Workload]:
    """Calls over a sequence of shapes: how many compiles each variant pays and what the sequence costs."""
    seq = [(16, 32), (32, 32), (64, 32), (16, 32), (48, 32)]
    if not quick:
        seq += [(128, 32), (7, 32), (64, 32), (256, 32)]

    def chain():
        return elementwise_chain, (torch.randn(*seq[0]),), None

    def gelu_mlp():
        w1, w2 = torch.randn(32, 64) * 0.1, torch.randn(64, 32) * 0.1
        return gelu_mlp_fn, (torch.randn(*seq[0]), w1, w2), None

    work = [Workload("cache", "gelu mlp over batch sizes", _seeded(gelu_mlp), shapes=seq, tol=1e-3)]
    return work if quick else [Workload("cache", "chain over shapes", _seeded(chain), shapes=seq), *work]


def hf_workloads(quick: bool) -> tuple[list[Workload], str | None]:
    """Small configs of HuggingFace models (random weights); ([], why) when transformers is not installed."""
    try:
        import transformers
    except ImportError:
        return [], "transformers is not installed"
    seq_len, batch = (32, 2) if quick else (64, 4)

    def build(config_cls, model_cls, **cfg):
        def make():
            config = getattr(transformers, config_cls)(**cfg)
            config._attn_implementation = "sdpa"
            model = LastHidden(getattr(transformers, model_cls)(config).eval())
            ids = torch.randint(0, cfg["vocab_size"], (batch, seq_len))
            return model, (ids,), list(model.parameters())

        return _seeded(make)

    common = {"vocab_size": 512, "hidden_size": 64, "num_attention_heads": 4, "num_hidden_layers": 2,
              "intermediate_size": 128}
    work = [  # --quick: gpt2 only
        Workload("huggingface", "gpt2", build("GPT2Config", "GPT2LMHeadModel", vocab_size=512, n_embd=64, n_head=4,
                                              n_layer=2, n_positions=128, bos_token_id=0, eos_token_id=0), tol=1e-3),
        Workload("huggingface", "llama", build("LlamaConfig", "LlamaForCausalLM", num_key_value_heads=2,
                                               max_position_embeddings=128, **common), tol=1e-3),
    ]
    if quick:
        return work[:1], None
    work.append(Workload("huggingface", "bert", build("BertConfig", "BertModel", max_position_embeddings=128,
                                                          **common), tol=1e-3))
    return work, None
