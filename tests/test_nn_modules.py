"""Every class in torch.nn.modules against eager: each is built from the constructor table below (small sizes) and
run forward and backward through jitcore in train and eval mode -- outputs, input and parameter gradients, and
buffers after the call (running statistics) equal to eager's -- or sits in SKIPPED with its reason. The count of
covered classes is asserted, so a module dropping out of the table is a failure, not a silent skip.
"""
from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.modules as modules
from torch import nn

import jitcore


def R(*shape):
    return torch.randn(*shape)


def U(*shape):  # values in (0.05, 0.95): probabilities
    return torch.rand(*shape) * 0.9 + 0.05


def L(high, *shape):
    return torch.randint(0, high, shape)


def S(*shape):  # signs +-1.0
    return torch.randint(0, 2, shape).float() * 2 - 1


def _unpool_inputs(dims):
    pool = {1: nn.MaxPool1d, 2: nn.MaxPool2d, 3: nn.MaxPool3d}[dims](2, return_indices=True)
    return pool(R(1, 2, *([4] * dims)))


def _ctc_inputs():
    return (R(6, 2, 5).log_softmax(2), torch.tensor([[1, 2, 2], [3, 4, 1]]), torch.tensor([6, 5]),
            torch.tensor([3, 2]))


# name -> (constructor, inputs); every float input gets requires_grad
TABLE = {
    "AdaptiveAvgPool1d": (lambda: nn.AdaptiveAvgPool1d(3), lambda: (R(2, 3, 7),)),
    "AdaptiveAvgPool2d": (lambda: nn.AdaptiveAvgPool2d((3, 2)), lambda: (R(2, 3, 7, 5),)),
    "AdaptiveAvgPool3d": (lambda: nn.AdaptiveAvgPool3d(2), lambda: (R(1, 2, 5, 4, 5),)),
    "AdaptiveLogSoftmaxWithLoss": (lambda: nn.AdaptiveLogSoftmaxWithLoss(8, 10, [4, 8]),
                                   lambda: (R(5, 8), torch.tensor([0, 3, 5, 9, 7]))),
    "AdaptiveMaxPool1d": (lambda: nn.AdaptiveMaxPool1d(3), lambda: (R(2, 3, 7),)),
    "AdaptiveMaxPool2d": (lambda: nn.AdaptiveMaxPool2d((3, 2)), lambda: (R(2, 3, 7, 5),)),
    "AdaptiveMaxPool3d": (lambda: nn.AdaptiveMaxPool3d(2), lambda: (R(1, 2, 5, 4, 5),)),
    "AlphaDropout": (lambda: nn.AlphaDropout(0.2), lambda: (R(4, 5),)),
    "AvgPool1d": (lambda: nn.AvgPool1d(3, 2), lambda: (R(2, 3, 9),)),
    "AvgPool2d": (lambda: nn.AvgPool2d(3, 2, padding=1), lambda: (R(2, 3, 7, 7),)),
    "AvgPool3d": (lambda: nn.AvgPool3d(2), lambda: (R(1, 2, 4, 4, 4),)),
    "BCELoss": (lambda: nn.BCELoss(), lambda: (U(4, 5), torch.rand(4, 5))),
    "BCEWithLogitsLoss": (lambda: nn.BCEWithLogitsLoss(pos_weight=torch.rand(5)), lambda: (R(4, 5), torch.rand(4, 5))),
    "BatchNorm1d": (lambda: nn.BatchNorm1d(3), lambda: (R(4, 3, 5),)),
    "BatchNorm2d": (lambda: nn.BatchNorm2d(3), lambda: (R(2, 3, 4, 4),)),
    "BatchNorm3d": (lambda: nn.BatchNorm3d(2), lambda: (R(2, 2, 3, 3, 3),)),
    "Bilinear": (lambda: nn.Bilinear(3, 4, 5), lambda: (R(6, 3), R(6, 4))),
    "CELU": (lambda: nn.CELU(0.7), lambda: (R(4, 5),)),
    "CTCLoss": (lambda: nn.CTCLoss(), _ctc_inputs),
    "ChannelShuffle": (lambda: nn.ChannelShuffle(2), lambda: (R(2, 4, 3, 3),)),
    "CircularPad1d": (lambda: nn.CircularPad1d((1, 2)), lambda: (R(2, 3, 5),)),
    "CircularPad2d": (lambda: nn.CircularPad2d((1, 1, 2, 0)), lambda: (R(2, 3, 4, 5),)),
    "CircularPad3d": (lambda: nn.CircularPad3d(1), lambda: (R(1, 2, 3, 3, 3),)),
    "ConstantPad1d": (lambda: nn.ConstantPad1d((1, 2), 0.5), lambda: (R(2, 3, 5),)),
    "ConstantPad2d": (lambda: nn.ConstantPad2d((1, 0, 2, 1), -1.0), lambda: (R(2, 3, 4, 5),)),
    "ConstantPad3d": (lambda: nn.ConstantPad3d(1, 2.0), lambda: (R(1, 2, 3, 3, 3),)),
    "Conv1d": (lambda: nn.Conv1d(3, 4, 3, padding=1), lambda: (R(2, 3, 8),)),
    "Conv2d": (lambda: nn.Conv2d(3, 4, 3, stride=2, padding=1), lambda: (R(2, 3, 7, 7),)),
    "Conv3d": (lambda: nn.Conv3d(2, 3, 2), lambda: (R(1, 2, 4, 4, 4),)),
    "ConvTranspose1d": (lambda: nn.ConvTranspose1d(3, 4, 3, stride=2), lambda: (R(2, 3, 5),)),
    "ConvTranspose2d": (lambda: nn.ConvTranspose2d(3, 2, 3, stride=2, padding=1, output_padding=1),
                        lambda: (R(1, 3, 4, 4),)),
    "ConvTranspose3d": (lambda: nn.ConvTranspose3d(2, 2, 2, stride=2), lambda: (R(1, 2, 3, 3, 3),)),
    "CosineEmbeddingLoss": (lambda: nn.CosineEmbeddingLoss(0.1), lambda: (R(4, 5), R(4, 5), S(4))),
    "CosineSimilarity": (lambda: nn.CosineSimilarity(dim=1), lambda: (R(4, 5), R(4, 5))),
    "CrossEntropyLoss": (lambda: nn.CrossEntropyLoss(label_smoothing=0.1), lambda: (R(4, 5), L(5, 4))),
    "CrossMapLRN2d": (lambda: nn.CrossMapLRN2d(3), lambda: (R(2, 4, 3, 3),)),
    "Dropout": (lambda: nn.Dropout(0.3), lambda: (R(4, 5),)),
    "Dropout1d": (lambda: nn.Dropout1d(0.3), lambda: (R(2, 3, 5),)),
    "Dropout2d": (lambda: nn.Dropout2d(0.3), lambda: (R(2, 3, 4, 4),)),
    "Dropout3d": (lambda: nn.Dropout3d(0.3), lambda: (R(1, 2, 3, 3, 3),)),
    "ELU": (lambda: nn.ELU(), lambda: (R(4, 5),)),
    "Embedding": (lambda: nn.Embedding(10, 4, padding_idx=0), lambda: (torch.tensor([[1, 0, 3], [9, 2, 2]]),)),
    "EmbeddingBag": (lambda: nn.EmbeddingBag(10, 4, mode="mean"), lambda: (torch.tensor([[1, 2, 3], [4, 5, 6]]),)),
    "FeatureAlphaDropout": (lambda: nn.FeatureAlphaDropout(0.2), lambda: (R(2, 3, 4, 4),)),
    "Flatten": (lambda: nn.Flatten(), lambda: (R(2, 3, 4),)),
    "Fold": (lambda: nn.Fold(output_size=(4, 5), kernel_size=2), lambda: (R(1, 12, 12),)),
    "FractionalMaxPool2d": (lambda: nn.FractionalMaxPool2d(2, output_size=(3, 3)), lambda: (R(1, 2, 6, 6),)),
    "FractionalMaxPool3d": (lambda: nn.FractionalMaxPool3d(2, output_size=2), lambda: (R(1, 1, 4, 4, 4),)),
    "GELU": (lambda: nn.GELU("tanh"), lambda: (R(4, 5),)),
    "GLU": (lambda: nn.GLU(), lambda: (R(4, 6),)),
    "GRU": (lambda: nn.GRU(4, 5, num_layers=2), lambda: (R(3, 2, 4),)),
    "GRUCell": (lambda: nn.GRUCell(4, 5), lambda: (R(3, 4),)),
    "GaussianNLLLoss": (lambda: nn.GaussianNLLLoss(), lambda: (R(4, 5), R(4, 5), U(4, 5))),
    "GroupNorm": (lambda: nn.GroupNorm(2, 4), lambda: (R(2, 4, 3),)),
    "Hardshrink": (lambda: nn.Hardshrink(0.3), lambda: (R(4, 5),)),
    "Hardsigmoid": (lambda: nn.Hardsigmoid(), lambda: (R(4, 5) * 4,)),
    "Hardswish": (lambda: nn.Hardswish(), lambda: (R(4, 5) * 4,)),
    "Hardtanh": (lambda: nn.Hardtanh(-0.5, 0.5), lambda: (R(4, 5),)),
    "HingeEmbeddingLoss": (lambda: nn.HingeEmbeddingLoss(), lambda: (R(4, 5), S(4, 5))),  # target: no grad
    "HuberLoss": (lambda: nn.HuberLoss(delta=0.5), lambda: (R(4, 5), R(4, 5))),
    "Identity": (lambda: nn.Identity(), lambda: (R(4, 5),)),
    "InstanceNorm1d": (lambda: nn.InstanceNorm1d(3, affine=True, track_running_stats=True), lambda: (R(2, 3, 5),)),
    "InstanceNorm2d": (lambda: nn.InstanceNorm2d(3, affine=True), lambda: (R(2, 3, 4, 4),)),
    "InstanceNorm3d": (lambda: nn.InstanceNorm3d(2), lambda: (R(1, 2, 3, 3, 3),)),
    "KLDivLoss": (lambda: nn.KLDivLoss(reduction="batchmean"), lambda: (R(4, 5).log_softmax(1), U(4, 5))),
    "L1Loss": (lambda: nn.L1Loss(), lambda: (R(4, 5), R(4, 5))),
    "LPPool1d": (lambda: nn.LPPool1d(2, 3), lambda: (R(2, 3, 9),)),
    "LPPool2d": (lambda: nn.LPPool2d(2, 2), lambda: (R(1, 2, 4, 4),)),
    "LPPool3d": (lambda: nn.LPPool3d(2, 2), lambda: (R(1, 1, 4, 4, 4),)),
    "LSTM": (lambda: nn.LSTM(4, 5, batch_first=True), lambda: (R(2, 3, 4),)),
    "LSTMCell": (lambda: nn.LSTMCell(4, 5), lambda: (R(3, 4),)),
    "LayerNorm": (lambda: nn.LayerNorm(5), lambda: (R(2, 3, 5),)),
    "LeakyReLU": (lambda: nn.LeakyReLU(0.2), lambda: (R(4, 5),)),
    "Linear": (lambda: nn.Linear(5, 3), lambda: (R(2, 4, 5),)),
    "LinearCrossEntropyLoss": (lambda: nn.LinearCrossEntropyLoss(5, 4, bias=True), lambda: (R(6, 5), L(4, 6))),
    "LocalResponseNorm": (lambda: nn.LocalResponseNorm(2), lambda: (R(2, 4, 3, 3),)),
    "LogSigmoid": (lambda: nn.LogSigmoid(), lambda: (R(4, 5),)),
    "LogSoftmax": (lambda: nn.LogSoftmax(dim=1), lambda: (R(4, 5),)),
    "MSELoss": (lambda: nn.MSELoss(), lambda: (R(4, 5), R(4, 5))),
    "MarginRankingLoss": (lambda: nn.MarginRankingLoss(0.1), lambda: (R(5), R(5), S(5))),
    "MaxPool1d": (lambda: nn.MaxPool1d(3, 2), lambda: (R(2, 3, 9),)),
    "MaxPool2d": (lambda: nn.MaxPool2d(2, return_indices=True), lambda: (R(2, 3, 4, 6),)),
    "MaxPool3d": (lambda: nn.MaxPool3d(2), lambda: (R(1, 2, 4, 4, 4),)),
    "MaxUnpool1d": (lambda: nn.MaxUnpool1d(2), lambda: _unpool_inputs(1)),
    "MaxUnpool2d": (lambda: nn.MaxUnpool2d(2), lambda: _unpool_inputs(2)),
    "MaxUnpool3d": (lambda: nn.MaxUnpool3d(2), lambda: _unpool_inputs(3)),
    "Mish": (lambda: nn.Mish(), lambda: (R(4, 5),)),
    "MultiLabelMarginLoss": (lambda: nn.MultiLabelMarginLoss(),
                             lambda: (R(3, 4), torch.tensor([[3, 0, -1, 1], [1, 2, 3, -1], [0, -1, 2, 2]]))),
    "MultiLabelSoftMarginLoss": (lambda: nn.MultiLabelSoftMarginLoss(), lambda: (R(3, 4), L(2, 3, 4).float())),
    "MultiMarginLoss": (lambda: nn.MultiMarginLoss(margin=0.5), lambda: (R(3, 4), torch.tensor([3, 0, 1]))),
    "MultiheadAttention": (lambda: nn.MultiheadAttention(8, 2), lambda: (R(3, 2, 8), R(4, 2, 8), R(4, 2, 8))),
    "NLLLoss": (lambda: nn.NLLLoss(weight=torch.rand(5)), lambda: (R(4, 5).log_softmax(1), L(5, 4))),
    "NLLLoss2d": (lambda: nn.NLLLoss2d(), lambda: (R(2, 3, 4, 4).log_softmax(1), L(3, 2, 4, 4))),
    "PReLU": (lambda: nn.PReLU(3), lambda: (R(2, 3, 4),)),
    "PairwiseDistance": (lambda: nn.PairwiseDistance(), lambda: (R(4, 5), R(4, 5))),
    "PixelShuffle": (lambda: nn.PixelShuffle(2), lambda: (R(1, 8, 3, 3),)),
    "PixelUnshuffle": (lambda: nn.PixelUnshuffle(2), lambda: (R(1, 2, 4, 4),)),
    "PoissonNLLLoss": (lambda: nn.PoissonNLLLoss(), lambda: (R(4, 5), torch.rand(4, 5) * 3)),
    "RMSNorm": (lambda: nn.RMSNorm(5), lambda: (R(2, 3, 5),)),
    "RNN": (lambda: nn.RNN(4, 5, nonlinearity="relu"), lambda: (R(3, 2, 4),)),
    "RNNCell": (lambda: nn.RNNCell(4, 5), lambda: (R(3, 4),)),
    "RReLU": (lambda: nn.RReLU(), lambda: (R(4, 5),)),
    "ReLU": (lambda: nn.ReLU(), lambda: (R(4, 5),)),
    "ReLU6": (lambda: nn.ReLU6(), lambda: (R(4, 5) * 5,)),
    "ReflectionPad1d": (lambda: nn.ReflectionPad1d((1, 2)), lambda: (R(2, 3, 5),)),
    "ReflectionPad2d": (lambda: nn.ReflectionPad2d(1), lambda: (R(1, 2, 4, 4),)),
    "ReflectionPad3d": (lambda: nn.ReflectionPad3d(1), lambda: (R(1, 1, 3, 3, 3),)),
    "ReplicationPad1d": (lambda: nn.ReplicationPad1d((1, 2)), lambda: (R(2, 3, 5),)),
    "ReplicationPad2d": (lambda: nn.ReplicationPad2d(1), lambda: (R(1, 2, 4, 4),)),
    "ReplicationPad3d": (lambda: nn.ReplicationPad3d(1), lambda: (R(1, 1, 3, 3, 3),)),
    "SELU": (lambda: nn.SELU(), lambda: (R(4, 5),)),
    "Sequential": (lambda: nn.Sequential(nn.Linear(5, 4), nn.ReLU(), nn.Linear(4, 2)), lambda: (R(3, 5),)),
    "SiLU": (lambda: nn.SiLU(), lambda: (R(4, 5),)),
    "Sigmoid": (lambda: nn.Sigmoid(), lambda: (R(4, 5),)),
    "SmoothL1Loss": (lambda: nn.SmoothL1Loss(beta=0.5), lambda: (R(4, 5), R(4, 5))),
    "SoftMarginLoss": (lambda: nn.SoftMarginLoss(), lambda: (R(4, 5), S(4, 5))),
    "Softmax": (lambda: nn.Softmax(dim=1), lambda: (R(4, 5),)),
    "Softmax2d": (lambda: nn.Softmax2d(), lambda: (R(2, 3, 4, 4),)),
    "Softmin": (lambda: nn.Softmin(dim=1), lambda: (R(4, 5),)),
    "Softplus": (lambda: nn.Softplus(beta=2), lambda: (R(4, 5),)),
    "Softshrink": (lambda: nn.Softshrink(0.3), lambda: (R(4, 5),)),
    "Softsign": (lambda: nn.Softsign(), lambda: (R(4, 5),)),
    "SyncBatchNorm": (lambda: nn.SyncBatchNorm(3), lambda: (R(4, 3, 5),)),
    "Tanh": (lambda: nn.Tanh(), lambda: (R(4, 5),)),
    "Tanhshrink": (lambda: nn.Tanhshrink(), lambda: (R(4, 5),)),
    "Threshold": (lambda: nn.Threshold(0.1, 20.0), lambda: (R(4, 5),)),
    "Transformer": (lambda: nn.Transformer(8, 2, 1, 1, 16), lambda: (R(5, 2, 8), R(4, 2, 8))),
    "TransformerDecoder": (lambda: nn.TransformerDecoder(nn.TransformerDecoderLayer(8, 2, 16), 2),
                           lambda: (R(4, 2, 8), R(5, 2, 8))),
    "TransformerDecoderLayer": (lambda: nn.TransformerDecoderLayer(8, 2, 16), lambda: (R(4, 2, 8), R(5, 2, 8))),
    "TransformerEncoder": (lambda: nn.TransformerEncoder(nn.TransformerEncoderLayer(8, 2, 16), 2,
                                                         enable_nested_tensor=False), lambda: (R(5, 2, 8),)),
    "TransformerEncoderLayer": (lambda: nn.TransformerEncoderLayer(8, 2, 16), lambda: (R(5, 2, 8),)),
    "TripletMarginLoss": (lambda: nn.TripletMarginLoss(), lambda: (R(4, 5), R(4, 5), R(4, 5))),
    "TripletMarginWithDistanceLoss": (lambda: nn.TripletMarginWithDistanceLoss(distance_function=nn.PairwiseDistance()),
                                      lambda: (R(4, 5), R(4, 5), R(4, 5))),
    "Unflatten": (lambda: nn.Unflatten(1, (2, 3)), lambda: (R(4, 6),)),
    "Unfold": (lambda: nn.Unfold(kernel_size=2), lambda: (R(1, 2, 4, 4),)),
    "Upsample": (lambda: nn.Upsample(scale_factor=2, mode="bilinear"), lambda: (R(1, 2, 3, 3),)),
    "UpsamplingBilinear2d": (lambda: nn.UpsamplingBilinear2d(scale_factor=2), lambda: (R(1, 2, 3, 3),)),
    "UpsamplingNearest2d": (lambda: nn.UpsamplingNearest2d(scale_factor=2), lambda: (R(1, 2, 3, 3),)),
    "ZeroPad1d": (lambda: nn.ZeroPad1d((1, 2)), lambda: (R(2, 3, 5),)),
    "ZeroPad2d": (lambda: nn.ZeroPad2d((1, 0, 2, 1)), lambda: (R(2, 3, 4, 5),)),
    "ZeroPad3d": (lambda: nn.ZeroPad3d(1), lambda: (R(1, 2, 3, 3, 3),)),
}

# name -> indices of inputs that are targets (no requires_grad: eager refuses it or gives them no gradient)
TARGETS = {"HingeEmbeddingLoss": {1}, "SoftMarginLoss": {1}, "CosineEmbeddingLoss": {2}, "MarginRankingLoss": {2},
           "MultiLabelSoftMarginLoss": {1}, "BCELoss": {1}, "BCEWithLogitsLoss": {1}, "PoissonNLLLoss": {1},
           "MaxUnpool1d": {1}, "MaxUnpool2d": {1}, "MaxUnpool3d": {1}}
_LAZY = "lazy module: its first call materializes parameters and changes its class; jitted before it, refused " \
        "clearly (test_lazy_module_refused_before_its_first_call); after it, the ordinary module in the table"
# name -> why it is not run here
SKIPPED = {
    "Module": "the base class (no forward)",
    "Container": "deprecated base container (no forward)",
    "ModuleDict": "container with no forward (its members run inside models: Sequential here, tests/test_models.py)",
    "ModuleList": "container with no forward (its members run inside models: Sequential here, tests/test_models.py)",
    "ParameterDict": "container with no forward (parameters read inside models: tests/test_module_guards.py)",
    "ParameterList": "container with no forward (parameters read inside models: tests/test_module_guards.py)",
    "RNNBase": "abstract base of RNN / LSTM / GRU (each in the table)",
    "RNNCellBase": "abstract base of RNNCell / LSTMCell / GRUCell (each in the table)",
    "LinearCrossEntropyOptions": "an options dataclass, not a module",
    **{f"Lazy{n}": _LAZY for n in ("BatchNorm1d", "BatchNorm2d", "BatchNorm3d", "Conv1d", "Conv2d", "Conv3d",
                                   "ConvTranspose1d", "ConvTranspose2d", "ConvTranspose3d", "InstanceNorm1d",
                                   "InstanceNorm2d", "InstanceNorm3d", "Linear")},
}
# in TABLE, refused clearly today: name -> (the error's text, why); the test asserts the refusal, so the entry fails
# (and is moved to the covered ones) when the support lands
REFUSED = {
    "CrossMapLRN2d": ("resize_as_", "its legacy autograd.Function resizes tensors in place (resize_as_)"),
}


def _tensors(x):
    if isinstance(x, torch.Tensor):
        return [x]
    if isinstance(x, (tuple, list)):
        return [t for v in x for t in _tensors(v)]
    if isinstance(x, dict):
        return [t for v in x.values() for t in _tensors(v)]
    return []


def _run(module, inputs, call, seed, no_grad=(), kwargs=None):
    """One forward and backward: outputs, input grads, parameter grads, buffers after."""
    inputs = [i.detach().clone().requires_grad_(i.is_floating_point() and k not in no_grad)
              for k, i in enumerate(inputs)]
    torch.manual_seed(seed)
    out = call(*inputs, **(kwargs or {}))
    outs = _tensors(out)
    g = torch.Generator().manual_seed(seed + 1)
    diff = [o for o in outs if o.requires_grad]
    if diff:
        loss = sum((o * torch.randn(o.shape, generator=g, dtype=o.dtype)).sum() for o in diff)
        loss.backward()
    grads = [i.grad for i in inputs if i.requires_grad] + [p.grad for p in module.parameters()]
    return [o.detach() for o in outs], grads, [b.clone() for b in module.buffers()]


def check_module(name, cache="constant values", modes=("train", "eval")):
    if not hasattr(nn, name):  # (a module newer than this torch: LinearCrossEntropyLoss is not in 2.10)
        pytest.skip(f"torch {torch.__version__} has no torch.nn.{name}")
    make, make_inputs = TABLE[name]
    torch.manual_seed(0)
    base = make()
    inputs = make_inputs()
    eager_m, jit_m = copy.deepcopy(base), copy.deepcopy(base)
    jm = jitcore.jit(jit_m, cache=cache)
    for i, mode in enumerate(modes):
        eager_m.train(mode == "train")
        jit_m.train(mode == "train")
        no_grad = TARGETS.get(name, ())
        want = _run(eager_m, inputs, eager_m, seed=10 + i, no_grad=no_grad)
        got = _run(jit_m, inputs, jm, seed=10 + i, no_grad=no_grad)
        _compare(f"{name} {mode}", want, got)
        _zero_grads(eager_m, jit_m)


def _compare(what_call, want, got):
    for what, w, g in zip(("outputs", "grads", "buffers"), want, got):
        assert len(w) == len(g), f"{what_call}: {len(g)} {what} vs eager's {len(w)}"
        for k, (a, b) in enumerate(zip(w, g)):
            assert (a is None) == (b is None), f"{what_call}: {what}[{k}] is {b} where eager has {a}"
            if a is not None:
                torch.testing.assert_close(b, a, atol=1e-5, rtol=1e-4, equal_nan=True,
                                           msg=lambda m: f"{what_call} {what}[{k}]: {m}")  # noqa: B023


def _zero_grads(*ms):
    for m in ms:
        for p in m.parameters():
            p.grad = None


def test_every_module_is_covered_or_skipped():
    names = [n for n in modules.__all__ if isinstance(getattr(modules, n), type)]
    missing = [n for n in names if n not in TABLE and n not in SKIPPED]
    assert not missing, f"torch.nn.modules classes neither in TABLE nor in SKIPPED: {missing}"
    assert not set(TABLE) & set(SKIPPED)
    covered = len(TABLE) - len(REFUSED)
    print(f"\ntorch.nn modules covered: {covered} / {len(names)} ({len(REFUSED)} refused clearly, {len(SKIPPED)} "
          "skipped)")
    assert covered >= 139


@pytest.mark.parametrize("name", sorted(TABLE))
def test_module_against_eager(name):
    if name in REFUSED:
        with pytest.raises(jitcore.errors.UnsupportedError, match=REFUSED[name][0]):
            check_module(name)
        return
    check_module(name)


# -- attention and transformer modules: masks, causality, batch_first, train / eval / eval's fast path ----------------
def _masks(L, S, N, kind):
    """(attn_mask, key_padding_mask, is_causal) of one kind for target length L, source length S, batch N."""
    pad = torch.zeros(N, S, dtype=torch.bool)
    pad[0, -1] = True
    if kind == "none":
        return None, None, False
    if kind == "bool":
        return torch.rand(L, S) > 0.7, pad, False
    if kind == "float":
        return torch.randn(L, S), pad.float() * -1e4, False
    assert kind == "causal" and L == S
    return nn.Transformer.generate_square_subsequent_mask(L), None, True


def _seq(N, L, E, batch_first):
    return R(N, L, E) if batch_first else R(L, N, E)


TRANSFORMER_CASES = {
    # name -> (constructor(batch_first), call(module, x, y, attn_mask, key_padding_mask, is_causal), inputs)
    "mha": (lambda bf: nn.MultiheadAttention(8, 2, dropout=0.2, batch_first=bf),
            lambda m, x, y, am, kpm, c: m(x, y, y, attn_mask=am, key_padding_mask=kpm, is_causal=c,
                                          average_attn_weights=False)),
    "mha_kdim": (lambda bf: nn.MultiheadAttention(8, 2, kdim=6, vdim=5, bias=False, add_bias_kv=True,
                                                  add_zero_attn=True, batch_first=bf),
                 lambda m, x, y, am, kpm, c: m(x, y[..., :6].contiguous(), y[..., :5].contiguous(),
                                                   key_padding_mask=kpm, need_weights=False)),
    "encoder_layer": (lambda bf: nn.TransformerEncoderLayer(8, 2, 16, dropout=0.2, batch_first=bf),
                      lambda m, x, y, am, kpm, c: m(x, src_mask=am, src_key_padding_mask=kpm, is_causal=c)),
    "encoder_layer_norm_first": (lambda bf: nn.TransformerEncoderLayer(8, 2, 16, activation="gelu", norm_first=True,
                                                                       batch_first=bf),
                                 lambda m, x, y, am, kpm, c: m(x, src_mask=am, src_key_padding_mask=kpm)),
    "decoder_layer": (lambda bf: nn.TransformerDecoderLayer(8, 2, 16, dropout=0.2, batch_first=bf),
                      lambda m, x, y, am, kpm, c: m(x, y, tgt_mask=am if c else None, memory_mask=None if c else am,
                                                    memory_key_padding_mask=kpm, tgt_is_causal=c)),
    "transformer": (lambda bf: nn.Transformer(8, 2, 1, 1, 16, batch_first=bf),
                    lambda m, x, y, am, kpm, c: m(y, x, tgt_mask=am if c else None, src_key_padding_mask=kpm,
                                                  memory_key_padding_mask=kpm, tgt_is_causal=c)),
}


def _transformer_case(case, batch_first, masks, cache="constant values"):
    make, call = TRANSFORMER_CASES[case]
    torch.manual_seed(0)
    base = make(batch_first)
    N, L = 2, 4
    S = L if masks == "causal" or case.startswith("encoder") else 5  # self-attention: a square mask
    x, y = _seq(N, L, 8, batch_first), _seq(N, S, 8, batch_first)
    am, kpm, causal = _masks(L, S, N, masks)
    eager_m, jit_m = copy.deepcopy(base), copy.deepcopy(base)
    jm = jitcore.jit(jit_m, cache=cache)
    kw = {"am": am, "kpm": kpm, "c": causal}
    for i, mode in enumerate(("train", "eval")):
        eager_m.train(mode == "train")
        jit_m.train(mode == "train")
        want = _run(eager_m, (x, y), lambda a, b: call(eager_m, a, b, **kw), seed=20 + i)
        got = _run(jit_m, (x, y), lambda a, b: call(jm, a, b, **kw), seed=20 + i)
        _compare(f"{case} batch_first={batch_first} masks={masks} {mode}", want, got)
        _zero_grads(eager_m, jit_m)
    # eval under no_grad: eager may take its fused "fast path" kernels; the values agree
    with torch.no_grad():
        want = call(eager_m, x, y, **kw)
        got = call(jm, x, y, **kw)
    _compare(f"{case} {masks} eval no_grad", (_tensors(want), [], []), (_tensors(got), [], []))


@pytest.mark.parametrize("batch_first", [True, False])
@pytest.mark.parametrize("masks", ["none", "bool", "float", "causal"])
@pytest.mark.parametrize("case", sorted(TRANSFORMER_CASES))
def test_attention_modules_against_eager(case, masks, batch_first):
    # (nn.TransformerEncoder in eval with a padding mask, batch_first, without grad takes eager's nested-tensor
    # fast path: padded positions come out as zeros; jitcore models it densely, jitcore/ops/torch_misc.py)
    _transformer_case(case, batch_first, masks)


@pytest.mark.parametrize("cache", ["constant values", "symbolic values", "no caching"])
@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("batch_first", [True, False])
def test_transformer_encoder_nested_fast_path(batch_first, norm_first, cache):
    """Eval without grad with a padding mask: eager runs the layers on a nested tensor of the valid rows (the padded
    rows come out as zeros); jitcore keeps the batch dense and gives the same values, zeros included."""
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(8, 2, 16, batch_first=batch_first, norm_first=norm_first)
    enc = nn.TransformerEncoder(layer, 2, enable_nested_tensor=True, norm=nn.LayerNorm(8)).eval()
    jm = jitcore.jit(enc, cache=cache)
    for lengths in ([5, 3, 4], [2, 5, 5], [5, 5, 1]):
        x = R(3, 5, 8) if batch_first else R(5, 3, 8)
        pad = torch.arange(5)[None, :] >= torch.tensor(lengths)[:, None]
        with torch.no_grad():
            torch.testing.assert_close(jm(x, src_key_padding_mask=pad), enc(x, src_key_padding_mask=pad))


@pytest.mark.parametrize("padding", [False, True])
@pytest.mark.parametrize("case", sorted(TRANSFORMER_CASES))
def test_attention_modules_symbolic_lengths(case, padding):
    """cache="symbolic values": eager's outputs and gradients over sequence lengths, train mode with dropout
    (F.multi_head_attention_forward is interpreted, so its sizes stay symbolic): one compile without a padding mask.
    With one, the masked_fill_ of F._canonical_mask makes functionalization specialise the sizes today (guarded:
    a compile per length)."""
    make, call = TRANSFORMER_CASES[case]
    torch.manual_seed(0)
    base = make(True)
    eager_m, jit_m = copy.deepcopy(base), copy.deepcopy(base)
    jm = jitcore.jit(jit_m, cache="symbolic values")
    for i, length in enumerate((3, 5, 6)):
        x, y = R(2, length, 8), R(2, length + 1, 8)
        kpm = torch.zeros(2, length if case.startswith("encoder") else length + 1, dtype=torch.bool)
        kpm[1, 0] = True
        kw = {"am": None, "kpm": kpm if padding else None, "c": False}
        want = _run(eager_m, (x, y), lambda a, b: call(eager_m, a, b, **kw), seed=30 + i)  # noqa: B023
        got = _run(jit_m, (x, y), lambda a, b: call(jm, a, b, **kw), seed=30 + i)  # noqa: B023
        _compare(f"{case} symbolic length={length}", want, got)
        _zero_grads(eager_m, jit_m)
    if not padding:
        assert jitcore.cache_misses(jm) == 1, jitcore.cache_miss_reasons(jm)


def test_lazy_module_refused_before_its_first_call():
    with pytest.raises(jitcore.errors.UnsupportedError, match="uninitialized parameter"):
        jitcore.jit(nn.LazyLinear(3))(R(2, 5))
    m = nn.LazyLinear(3)
    x = R(2, 5)
    m(x)  # materialized eagerly: now an ordinary Linear
    torch.testing.assert_close(jitcore.jit(m)(x), m(x))


@pytest.mark.parametrize("name", sorted(set(TABLE) - set(REFUSED)))
def test_module_against_eager_symbolic(name):
    """The same under cache="symbolic values": ops jitcore has no op for (torch.gru, alpha_dropout, ...) keep their
    sizes symbolic where torch's fake tensors say how (jitcore/ops/opaque_symbolic.py), else pin them."""
    check_module(name, cache="symbolic values")


@pytest.mark.parametrize("cache", ["constant values", "symbolic values"])
@pytest.mark.parametrize("name", ["GRU", "LSTM", "RNN", "GRUCell", "LSTMCell", "RNNCell"])
def test_recurrent_modules_compile_once(name, cache):
    """nn.RNNBase checks its weak references to its weights on every call (`ref() is weight`): read as the inputs
    they refer to, the check holds and the module's own weight list is not rebuilt, so a call is a cache hit (each
    call recompiled before). Under symbolic values the recurrent kernels keep batch and length symbolic."""
    torch.manual_seed(0)
    cell = name.endswith("Cell")
    m = getattr(nn, name)(4, 6)
    jm = jitcore.jit(copy.deepcopy(m), cache=cache)
    shapes = [(3, 5)] * 3 if cache == "constant values" else [(2, 5), (3, 7), (4, 6)]
    for b, t in shapes:
        x = R(b, 4) if cell else R(t, b, 4)
        got, want = _tensors(jm(x)), _tensors(m(x))
        for g, w in zip(got, want):
            torch.testing.assert_close(g, w)
    assert jitcore.cache_misses(jm) == 1, jitcore.cache_miss_reasons(jm)


@pytest.mark.parametrize("mode", ["constant values", "symbolic values", "no caching"])
@pytest.mark.parametrize("cls,features", [(nn.BatchNorm1d, (5,)), (nn.BatchNorm2d, (5, 2, 2)),
                                          (nn.BatchNorm3d, (5, 2, 1, 2))])
def test_batch_norm_training_with_empty_batches_between_others(cls, features, mode):
    """An empty batch in training mode gives an empty output, leaves the running stats as they were and zero
    parameter gradients, as eager's kernels (it was refused as "more than 1 value per channel")."""
    m = cls(5)
    mj = copy.deepcopy(m)
    jm = jitcore.jit(mj, cache=mode)
    for batch in (0, 3, 0, 4):
        x = torch.randn(batch, *features)
        xe, xj = x.clone().requires_grad_(), x.clone().requires_grad_()
        ye, yj = m(xe), jm(xj)
        seed = torch.randn_like(ye)
        ye.backward(seed)
        yj.backward(seed)
        torch.testing.assert_close(yj, ye)
        torch.testing.assert_close(xj.grad, xe.grad)
        for a, b in zip(list(m.buffers()) + [p.grad for p in m.parameters()],
                        list(mj.buffers()) + [p.grad for p in mj.parameters()]):
            torch.testing.assert_close(b, a)
        m.zero_grad()
        mj.zero_grad()


@pytest.mark.parametrize("mode", ["constant values", "symbolic values", "no caching"])
@pytest.mark.parametrize("cls,features", [(nn.BatchNorm1d, (4,)), (nn.BatchNorm2d, (4, 3, 3))])
def test_batch_norm_cumulative_average_momentum_none(cls, features, mode):
    """BatchNorm(momentum=None) averages over all batches with 1 / float(num_batches_tracked), read after the
    counter's in-place add: a number read when the program runs (it was refused as data-dependent). Running stats,
    outputs and gradients equal eager's over train/eval calls; one program per mode, not one per step."""
    m = nn.Sequential(nn.Linear(features[0], features[0]) if len(features) == 1 else nn.Identity(),
                      cls(4, momentum=None))
    mj = copy.deepcopy(m)
    jm = jitcore.jit(mj, cache=mode)
    for step, training in enumerate((True, True, True, False, True, True)):
        m.train(training)
        mj.train(training)
        x = torch.randn(5 + step % 2, *features)
        ye, yj = m(x), jm(x)
        ye.sum().backward()
        yj.sum().backward()
        torch.testing.assert_close(yj, ye)
        for a, b in zip(list(m.buffers()) + [p.grad for p in m.parameters()],
                        list(mj.buffers()) + [p.grad for p in mj.parameters()]):
            torch.testing.assert_close(b, a)
    if mode != "no caching":
        assert jitcore.cache_misses(jm) <= 3  # (train and eval; a batch size under constant values)
