"""Blocks of the models users bring, written here after their published code (no timm / torchvision dependency):
a DenseNet dense block (conv, batchnorm, relu and the growing torch.cat of features), an EVA-02 block (rotary
embeddings, SwiGLU, and F.linear called with keyword weight/bias as timm does) and a Swin block (window partition
by view/permute/contiguous, the relative position bias table indexed by a buffer, shifted windows with torch.roll and
an attention mask). Each trains like eager under jitcore.jit: outputs, every parameter's gradient, buffers after the
call (batchnorm's running stats) and the parameters after optimizer steps, in train and eval mode, in constant and
symbolic values, over calls with different batch sizes.
"""
from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import jitcore


# -- DenseNet (torchvision.models.densenet: _DenseLayer, _DenseBlock, _Transition) -------------------------------------
class DenseLayer(nn.Module):
    def __init__(self, num_input_features, growth_rate, bn_size):
        super().__init__()
        self.norm1 = nn.BatchNorm2d(num_input_features)
        self.relu1 = nn.ReLU(inplace=True)
        self.conv1 = nn.Conv2d(num_input_features, bn_size * growth_rate, kernel_size=1, stride=1, bias=False)
        self.norm2 = nn.BatchNorm2d(bn_size * growth_rate)
        self.relu2 = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(bn_size * growth_rate, growth_rate, kernel_size=3, stride=1, padding=1, bias=False)

    def bn_function(self, inputs):
        concated_features = torch.cat(inputs, 1)
        return self.conv1(self.relu1(self.norm1(concated_features)))

    def forward(self, input):
        prev_features = [input] if isinstance(input, torch.Tensor) else input
        bottleneck_output = self.bn_function(prev_features)
        return self.conv2(self.relu2(self.norm2(bottleneck_output)))


class DenseBlock(nn.ModuleDict):
    def __init__(self, num_layers, num_input_features, bn_size, growth_rate):
        super().__init__()
        for i in range(num_layers):
            layer = DenseLayer(num_input_features + i * growth_rate, growth_rate, bn_size)
            self.add_module(f"denselayer{i + 1}", layer)

    def forward(self, init_features):
        features = [init_features]
        for _name, layer in self.items():
            features.append(layer(features))
        return torch.cat(features, 1)


class Transition(nn.Sequential):
    def __init__(self, num_input_features, num_output_features):
        super().__init__()
        self.norm = nn.BatchNorm2d(num_input_features)
        self.relu = nn.ReLU(inplace=True)
        self.conv = nn.Conv2d(num_input_features, num_output_features, kernel_size=1, stride=1, bias=False)
        self.pool = nn.AvgPool2d(kernel_size=2, stride=2)


class DenseNetStage(nn.Module):
    def __init__(self, c_in=4, growth=3, layers=3):
        super().__init__()
        self.block = DenseBlock(layers, c_in, bn_size=2, growth_rate=growth)
        self.transition = Transition(c_in + layers * growth, 5)

    def forward(self, x):
        out = F.relu(self.transition(self.block(x)))
        return F.adaptive_avg_pool2d(out, (1, 1)).flatten(1)


# -- EVA-02 (timm.models.eva: EvaAttention, SwiGLU, EvaBlock; timm.layers.pos_embed_sincos) ---------------------------
def rot(x):
    return torch.stack([-x[..., 1::2], x[..., ::2]], -1).reshape(x.shape)


def apply_rot_embed_cat(x, emb):
    sin_emb, cos_emb = emb.tensor_split(2, -1)
    return x * cos_emb + rot(x) * sin_emb


class RotaryEmbeddingCat(nn.Module):
    """sin/cos of a 2-D position grid, built on every call as timm's get_embed does."""

    def __init__(self, dim, grid, temperature=10000.0):
        super().__init__()
        self.grid = grid
        exponents = torch.arange(0, dim // 4, dtype=torch.float) / (dim // 4)
        self.register_buffer("bands", 1.0 / (temperature ** exponents), persistent=False)

    def get_embed(self):
        t = [torch.arange(s, device=self.bands.device, dtype=self.bands.dtype) for s in self.grid]
        grid = torch.stack(torch.meshgrid(t, indexing="ij"), dim=-1).unsqueeze(-1)
        pos = (grid * self.bands).flatten(0, 1).flatten(1)  # (H*W, dim // 2)
        sin_emb, cos_emb = pos.sin().repeat_interleave(2, -1), pos.cos().repeat_interleave(2, -1)
        return torch.cat([sin_emb, cos_emb], -1)


class EvaAttention(nn.Module):
    def __init__(self, dim, num_heads, num_prefix_tokens=1):
        super().__init__()
        self.num_heads, self.head_dim = num_heads, dim // num_heads
        self.scale = self.head_dim ** -0.5
        self.num_prefix_tokens = num_prefix_tokens
        self.qkv = nn.Linear(dim, dim * 3, bias=False)
        self.q_bias = nn.Parameter(torch.randn(dim) * 0.1)
        self.register_buffer("k_bias", torch.zeros(dim), persistent=False)
        self.v_bias = nn.Parameter(torch.randn(dim) * 0.1)
        self.norm = nn.LayerNorm(dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x, rope=None, attn_mask=None):
        B, N, C = x.shape
        qkv_bias = torch.cat((self.q_bias, self.k_bias, self.v_bias))
        qkv = F.linear(x, weight=self.qkv.weight, bias=qkv_bias)
        qkv = qkv.reshape(B, N, 3, self.num_heads, -1).permute(2, 0, 3, 1, 4)
        q, k, v = qkv.unbind(0)
        if rope is not None:
            npt = self.num_prefix_tokens
            q = torch.cat([q[:, :, :npt, :], apply_rot_embed_cat(q[:, :, npt:, :], rope)], dim=2).type_as(v)
            k = torch.cat([k[:, :, :npt, :], apply_rot_embed_cat(k[:, :, npt:, :], rope)], dim=2).type_as(v)
        if attn_mask is None:
            x = F.scaled_dot_product_attention(q, k, v)
        else:  # timm's path without fused attention
            attn = (q * self.scale) @ k.transpose(-2, -1)
            attn = attn.masked_fill(~attn_mask[:, None, None, :], float("-inf")).softmax(dim=-1)
            x = attn @ v
        x = x.transpose(1, 2).reshape(B, N, C)
        return self.proj(self.norm(x))


class SwiGLU(nn.Module):
    def __init__(self, dim, hidden):
        super().__init__()
        self.fc1_g = nn.Linear(dim, hidden)
        self.fc1_x = nn.Linear(dim, hidden)
        self.act = nn.SiLU()
        self.norm = nn.LayerNorm(hidden)
        self.fc2 = nn.Linear(hidden, dim)

    def forward(self, x):
        x = self.act(self.fc1_g(x)) * self.fc1_x(x)
        return self.fc2(self.norm(x))


class EvaBlock(nn.Module):
    def __init__(self, dim=16, num_heads=2, grid=(3, 3), init_values=0.1, masked=False):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.attn = EvaAttention(dim, num_heads)
        self.gamma_1 = nn.Parameter(init_values * torch.ones(dim))
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = SwiGLU(dim, int(dim * 4 * 2 / 3))
        self.gamma_2 = nn.Parameter(init_values * torch.ones(dim))
        self.rope = RotaryEmbeddingCat(dim // num_heads, grid)
        self.cls_token = nn.Parameter(torch.randn(1, 1, dim) * 0.02)
        self.masked = masked

    def forward(self, x):
        x = torch.cat([self.cls_token.expand(x.shape[0], -1, -1), x], dim=1)
        mask = (x.abs().sum(-1) > 0) if self.masked else None  # a key-padding mask computed from the tokens
        x = x + self.gamma_1 * self.attn(self.norm1(x), rope=self.rope.get_embed(), attn_mask=mask)
        x = x + self.gamma_2 * self.mlp(self.norm2(x))
        return x[:, 0]


# -- Swin (timm.models.swin_transformer: window_partition, WindowAttention, SwinTransformerBlock) ---------------------
def window_partition(x, window_size):
    B, H, W, C = x.shape
    x = x.view(B, H // window_size, window_size, W // window_size, window_size, C)
    return x.permute(0, 1, 3, 2, 4, 5).contiguous().view(-1, window_size, window_size, C)


def window_reverse(windows, window_size, H, W):
    C = windows.shape[-1]
    x = windows.view(-1, H // window_size, W // window_size, window_size, window_size, C)
    return x.permute(0, 1, 3, 2, 4, 5).contiguous().view(-1, H, W, C)


def relative_position_index(win_h, win_w):
    coords = torch.stack(torch.meshgrid(torch.arange(win_h), torch.arange(win_w), indexing="ij"))
    coords_flatten = torch.flatten(coords, 1)
    relative_coords = coords_flatten[:, :, None] - coords_flatten[:, None, :]
    relative_coords = relative_coords.permute(1, 2, 0).contiguous()
    relative_coords[:, :, 0] += win_h - 1
    relative_coords[:, :, 1] += win_w - 1
    relative_coords[:, :, 0] *= 2 * win_w - 1
    return relative_coords.sum(-1)


class WindowAttention(nn.Module):
    def __init__(self, dim, num_heads, window_size):
        super().__init__()
        self.window_size, self.num_heads = window_size, num_heads
        self.scale = (dim // num_heads) ** -0.5
        self.relative_position_bias_table = nn.Parameter(torch.randn((2 * window_size - 1) ** 2, num_heads) * 0.02)
        self.register_buffer("relative_position_index", relative_position_index(window_size, window_size),
                             persistent=False)
        self.qkv = nn.Linear(dim, dim * 3)
        self.proj = nn.Linear(dim, dim)
        self.softmax = nn.Softmax(dim=-1)

    def _get_rel_pos_bias(self):
        n = self.window_size ** 2
        bias = self.relative_position_bias_table[self.relative_position_index.view(-1)].view(n, n, -1)
        return bias.permute(2, 0, 1).contiguous().unsqueeze(0)

    def forward(self, x, mask=None):
        B_, N, _ = x.shape
        qkv = self.qkv(x).reshape(B_, N, 3, self.num_heads, -1).permute(2, 0, 3, 1, 4)
        q, k, v = qkv.unbind(0)
        q = q * self.scale
        attn = q @ k.transpose(-2, -1)
        attn = attn + self._get_rel_pos_bias()
        if mask is not None:
            num_win = mask.shape[0]
            attn = attn.view(-1, num_win, self.num_heads, N, N) + mask.unsqueeze(1).unsqueeze(0)
            attn = attn.view(-1, self.num_heads, N, N)
        attn = self.softmax(attn)
        x = (attn @ v).transpose(1, 2).reshape(B_, N, -1)
        return self.proj(x)


class SwinBlock(nn.Module):
    def __init__(self, dim=8, input_resolution=(4, 4), num_heads=2, window_size=2, shift_size=1):
        super().__init__()
        self.input_resolution, self.window_size, self.shift_size = input_resolution, window_size, shift_size
        self.norm1 = nn.LayerNorm(dim)
        self.attn = WindowAttention(dim, num_heads, window_size)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))
        self.register_buffer("attn_mask", self.get_attn_mask() if shift_size else None, persistent=False)

    def get_attn_mask(self):
        H, W = self.input_resolution
        img_mask = torch.zeros((1, H, W, 1))
        cnt = 0
        for h in ((0, -self.window_size), (-self.window_size, -self.shift_size), (-self.shift_size, None)):
            for w in ((0, -self.window_size), (-self.window_size, -self.shift_size), (-self.shift_size, None)):
                img_mask[:, h[0]:h[1], w[0]:w[1], :] = cnt
                cnt += 1
        mask_windows = window_partition(img_mask, self.window_size).view(-1, self.window_size * self.window_size)
        attn_mask = mask_windows.unsqueeze(1) - mask_windows.unsqueeze(2)
        return attn_mask.masked_fill(attn_mask != 0, -100.0).masked_fill(attn_mask == 0, 0.0)

    def _attn(self, x):
        _, H, W, C = x.shape
        if self.shift_size > 0:
            shifted_x = torch.roll(x, shifts=(-self.shift_size, -self.shift_size), dims=(1, 2))
        else:
            shifted_x = x
        x_windows = window_partition(shifted_x, self.window_size).view(-1, self.window_size * self.window_size, C)
        attn_windows = self.attn(x_windows, mask=self.attn_mask)
        attn_windows = attn_windows.view(-1, self.window_size, self.window_size, C)
        shifted_x = window_reverse(attn_windows, self.window_size, H, W)
        if self.shift_size > 0:
            return torch.roll(shifted_x, shifts=(self.shift_size, self.shift_size), dims=(1, 2))
        return shifted_x

    def forward(self, x):
        B, H, W, C = x.shape
        x = x + self._attn(self.norm1(x))
        x = x.reshape(B, -1, C)
        x = x + self.mlp(self.norm2(x))
        return x.reshape(B, H, W, C).mean((1, 2))


class SwinStage(nn.Module):
    """A regular block, then a shifted one, as Swin alternates them."""

    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList([SwinBlock(shift_size=0), SwinBlock(shift_size=1)])
        self.head = nn.Linear(8, 3)

    def forward(self, x):
        out = 0
        for blk in self.blocks:
            out = out + blk(x)
        return self.head(out)


# -- the checks --------------------------------------------------------------------------------------------------------
BLOCKS = {
    "densenet": (DenseNetStage, lambda b: torch.randn(b, 4, 6, 6)),
    "eva02": (EvaBlock, lambda b: torch.randn(b, 9, 16)),
    "eva02_masked": (lambda: EvaBlock(masked=True),
                     lambda b: torch.cat([torch.randn(b, 7, 16), torch.zeros(b, 2, 16)], 1)),  # two padding tokens
    "swin": (SwinStage, lambda b: torch.randn(b, 4, 4, 8)),
}
CACHES = ("constant values", "symbolic values")
# blocks that compile once per batch size under symbolic values, and why
RECOMPILES: dict = {}


def _close(got, want, what):
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-4, msg=lambda m: f"{what}: {m}")


def _step(model, opt, x, seed):
    opt.zero_grad()
    out = model(x)
    loss = F.mse_loss(out, torch.randn(out.shape, generator=torch.Generator().manual_seed(seed)))
    loss.backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    opt.step()
    return out.detach(), grads


# (block, cache) pairs whose compile takes long enough to run only with -m slow (none now: the masked EVA-02 block
# under symbolic values was one while its size arithmetic was recorded as predicates; see the test below)
SLOW: set = set()
CASES = [pytest.param(name, train, cache, marks=[pytest.mark.slow] if (name, cache) in SLOW else [],
                      id=f"{name}-{'train' if train else 'eval'}-{cache}")
         for name in BLOCKS for train in (True, False) for cache in CACHES]


@pytest.mark.parametrize("name,train,cache", CASES)
def test_block_trains_like_eager(name, train, cache):
    build, make_input = BLOCKS[name]
    torch.manual_seed(0)
    eager = build().train(train)
    model = copy.deepcopy(eager)
    jitted = jitcore.jit(model, cache=cache)
    opt_e = torch.optim.SGD(eager.parameters(), lr=0.1)
    opt_j = torch.optim.SGD(model.parameters(), lr=0.1)
    for step, batch in enumerate((2, 3, 2, 5)):  # other batch sizes: a new entry or the same symbolic one
        x = make_input(batch)
        out_e, grads_e = _step(eager, opt_e, x, step)
        out_j, grads_j = _step(jitted, opt_j, x, step)
        _close(out_j, out_e, f"{name} step {step}: output")
        assert grads_j.keys() == grads_e.keys(), f"{name}: parameters with a gradient differ"
        for n in grads_e:
            _close(grads_j[n], grads_e[n], f"{name} step {step}: gradient of {n}")
        for (n, b_j), b_e in zip(model.named_buffers(), eager.buffers()):
            _close(b_j, b_e, f"{name} step {step}: buffer {n} after the call")
        for (n, p_j), p_e in zip(model.named_parameters(), eager.parameters()):
            _close(p_j, p_e, f"{name} step {step}: parameter {n} after the optimizer step")
    if cache == "symbolic values":
        most = 3 if name in RECOMPILES else 1  # three batch sizes
        assert jitcore.cache_misses(jitted) <= most, "symbolic values: batch sizes 3 and 5 reuse the entry of 2"


def test_linear_keywords_in_an_eva_attention_backward():
    """The reproducer of issue 17 item 7: timm's EVA attention calls F.linear(x, weight=..., bias=...)."""
    torch.manual_seed(0)
    eager = EvaAttention(8, 2)
    model = copy.deepcopy(eager)
    x = torch.randn(2, 5, 8, requires_grad=True)
    x2 = x.detach().clone().requires_grad_()
    jitcore.jit(model)(x2).sum().backward()
    eager(x).sum().backward()
    _close(x2.grad, x.grad, "input gradient")
    for (n, p_j), p_e in zip(model.named_parameters(), eager.parameters()):
        _close(p_j.grad, p_e.grad, f"gradient of {n}")


def test_masked_eva02_compiles_once_under_symbolic_values():
    """Issue 16: one entry serves the masked EVA-02 block over batch sizes and counts of padding tokens, with eager's
    outputs and gradients. Its prologue checks two predicates, the sizes the block pins (the embedding, 16, by its
    weights; the token count, 9, by the rotary grid); the size arithmetic (the qkv reshape's -1, the prefix token's
    slices and their clamps) is decided by the bounds. Measured: 53 prologue lines (51 of them the module, global and
    tensor checks the eva02 block has too), was 83 with 32 predicates; the bound leaves room for other guards only
    (the code of the two module-level helpers it calls, rot and apply_rot_embed_cat, is checked too: 62 lines)."""
    torch.manual_seed(0)
    eager = EvaBlock(masked=True)
    model = copy.deepcopy(eager)
    jitted = jitcore.jit(model, cache="symbolic values")
    for batch, pad in [(2, 2), (3, 0), (5, 4), (4, 1), (7, 3)]:
        x = torch.cat([torch.randn(batch, 9 - pad, 16), torch.zeros(batch, pad, 16)], 1)
        x_e, x_j = x.clone().requires_grad_(), x.clone().requires_grad_()
        cotangent = torch.randn(batch, 16)
        out_e, out_j = eager(x_e), jitted(x_j)
        _close(out_j, out_e, f"batch {batch}, {pad} padding tokens: output")
        out_e.backward(cotangent)
        out_j.backward(cotangent)
        _close(x_j.grad, x_e.grad, f"batch {batch}: input gradient")
        for (n, p_j), p_e in zip(model.named_parameters(), eager.parameters()):
            _close(p_j.grad, p_e.grad, f"batch {batch}: gradient of {n}")
            p_j.grad = p_e.grad = None
    assert jitcore.cache_misses(jitted) == 1, jitcore.cache_miss_reasons(jitted)
    prologue = str(jitcore.last_prologue_traces(jitted)[-1]).splitlines()
    checks = [ln.strip() for ln in prologue if ln.strip().startswith("if not (")]
    assert checks == ["if not (16 == i2): return None", "if not (9 == i1): return None"], checks
    assert len(prologue) <= 64, len(prologue)
