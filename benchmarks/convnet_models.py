"""Benchmarks: plain torch.nn ports of torchvision's ResNet-18, MobileNetV3-small, EfficientNet-B0, RegNetY-400MF,
ShuffleNetV2 x1.0 and DenseNet-121 (its stem and first dense block), and a plain 5-layer conv network: same layers
and widths, BatchNorm, in-place activations as torchvision's Conv2dNormActivation has them; random weights. Used by
benchmarks/convnets.py and tests/test_convnets.py; torchvision itself is not a dependency.
"""
from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F


def make_divisible(v: float, divisor: int = 8) -> int:
    new_v = max(divisor, int(v + divisor / 2) // divisor * divisor)
    return new_v + divisor if new_v < 0.9 * v else new_v


def conv_bn_act(cin, cout, k, stride=1, groups=1, act=nn.ReLU, eps=1e-5, momentum=0.1):
    """torchvision's Conv2dNormActivation: conv (no bias), BatchNorm, an in-place activation (or none)."""
    layers = [nn.Conv2d(cin, cout, k, stride, (k - 1) // 2, groups=groups, bias=False),
              nn.BatchNorm2d(cout, eps=eps, momentum=momentum)]
    if act is not None:
        layers.append(act(inplace=True))
    return nn.Sequential(*layers)


class SqueezeExcite(nn.Module):
    """torchvision.ops.SqueezeExcitation: avg-pool, 1x1 conv, activation, 1x1 conv, gate, scale."""

    def __init__(self, channels, squeeze, act=nn.ReLU, gate=nn.Sigmoid):
        super().__init__()
        self.fc1, self.fc2 = nn.Conv2d(channels, squeeze, 1), nn.Conv2d(squeeze, channels, 1)
        self.act, self.gate = act(), gate()

    def forward(self, x):
        s = F.adaptive_avg_pool2d(x, 1)
        return x * self.gate(self.fc2(self.act(self.fc1(s))))


# -- ResNet-18 ------------------------------------------------------------------------------------------------------
class BasicBlock(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False), nn.BatchNorm2d(cout)
        self.relu = nn.ReLU(inplace=True)
        self.conv2, self.bn2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False), nn.BatchNorm2d(cout)
        self.downsample = None
        if stride != 1 or cin != cout:
            self.downsample = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        out += identity
        return self.relu(out)


class ResNet18(nn.Module):
    def __init__(self, num_classes=1000):
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64)
        self.relu, self.maxpool = nn.ReLU(inplace=True), nn.MaxPool2d(3, 2, 1)
        layers, cin = [], 64
        for cout, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
            layers.append(nn.Sequential(BasicBlock(cin, cout, stride), BasicBlock(cout, cout, 1)))
            cin = cout
        self.layer1, self.layer2, self.layer3, self.layer4 = layers
        self.avgpool, self.fc = nn.AdaptiveAvgPool2d(1), nn.Linear(512, num_classes)

    def forward(self, x):
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(self.avgpool(x), 1))


# -- MobileNetV3-small ----------------------------------------------------------------------------------------------
MBV3_SMALL = [  # input, kernel, expanded, output, squeeze-excite, activation (RE/HS), stride
    (16, 3, 16, 16, True, "RE", 2), (16, 3, 72, 24, False, "RE", 2), (24, 3, 88, 24, False, "RE", 1),
    (24, 5, 96, 40, True, "HS", 2), (40, 5, 240, 40, True, "HS", 1), (40, 5, 240, 40, True, "HS", 1),
    (40, 5, 120, 48, True, "HS", 1), (48, 5, 144, 48, True, "HS", 1), (48, 5, 288, 96, True, "HS", 2),
    (96, 5, 576, 96, True, "HS", 1), (96, 5, 576, 96, True, "HS", 1)]


class MBV3Block(nn.Module):
    def __init__(self, cin, k, cexp, cout, se, act, stride):
        super().__init__()
        act = nn.Hardswish if act == "HS" else nn.ReLU
        bn = {"eps": 0.001, "momentum": 0.01}
        layers = [conv_bn_act(cin, cexp, 1, act=act, **bn)] if cexp != cin else []
        layers.append(conv_bn_act(cexp, cexp, k, stride, groups=cexp, act=act, **bn))
        if se:
            layers.append(SqueezeExcite(cexp, make_divisible(cexp // 4), nn.ReLU, nn.Hardsigmoid))
        layers.append(conv_bn_act(cexp, cout, 1, act=None, **bn))
        self.block, self.residual = nn.Sequential(*layers), stride == 1 and cin == cout

    def forward(self, x):
        out = self.block(x)
        return out + x if self.residual else out


class MobileNetV3Small(nn.Module):
    def __init__(self, num_classes=1000):
        super().__init__()
        bn = {"eps": 0.001, "momentum": 0.01}
        layers = [conv_bn_act(3, 16, 3, 2, act=nn.Hardswish, **bn)] + [MBV3Block(*c) for c in MBV3_SMALL]
        layers.append(conv_bn_act(96, 576, 1, act=nn.Hardswish, **bn))
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Sequential(nn.Linear(576, 1024), nn.Hardswish(inplace=True), nn.Dropout(0.2, inplace=True),
                                        nn.Linear(1024, num_classes))

    def forward(self, x):
        return self.classifier(torch.flatten(F.adaptive_avg_pool2d(self.features(x), 1), 1))


# -- EfficientNet-B0 ------------------------------------------------------------------------------------------------
EFFNET_B0 = [(1, 3, 1, 32, 16, 1), (6, 3, 2, 16, 24, 2), (6, 5, 2, 24, 40, 2), (6, 3, 2, 40, 80, 3),
             (6, 5, 1, 80, 112, 3), (6, 5, 2, 112, 192, 4), (6, 3, 1, 192, 320, 1)]  # expand, k, stride, in, out, n


class MBConv(nn.Module):
    """EfficientNet's MBConv (stochastic depth off: it is the identity in the benchmark's deterministic setting)."""

    def __init__(self, expand, k, stride, cin, cout):
        super().__init__()
        cexp = make_divisible(cin * expand)
        layers = [conv_bn_act(cin, cexp, 1, act=nn.SiLU)] if cexp != cin else []
        layers += [conv_bn_act(cexp, cexp, k, stride, groups=cexp, act=nn.SiLU),
                   SqueezeExcite(cexp, max(1, cin // 4), nn.SiLU, nn.Sigmoid), conv_bn_act(cexp, cout, 1, act=None)]
        self.block, self.residual = nn.Sequential(*layers), stride == 1 and cin == cout

    def forward(self, x):
        out = self.block(x)
        return out + x if self.residual else out


class EfficientNetB0(nn.Module):
    def __init__(self, num_classes=1000):
        super().__init__()
        layers = [conv_bn_act(3, 32, 3, 2, act=nn.SiLU)]
        for expand, k, stride, cin, cout, n in EFFNET_B0:
            layers.append(nn.Sequential(*[MBConv(expand, k, stride if i == 0 else 1, cin if i == 0 else cout, cout)
                                          for i in range(n)]))
        layers.append(conv_bn_act(320, 1280, 1, act=nn.SiLU))
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Sequential(nn.Dropout(0.2, inplace=True), nn.Linear(1280, num_classes))

    def forward(self, x):
        return self.classifier(torch.flatten(F.adaptive_avg_pool2d(self.features(x), 1), 1))


# -- RegNetY-400MF --------------------------------------------------------------------------------------------------
class RegNetBlock(nn.Module):
    """torchvision's ResBottleneckBlock (bottleneck multiplier 1, group width 8, squeeze-excite ratio 0.25)."""

    def __init__(self, cin, cout, stride, group_width=8, se_ratio=0.25):
        super().__init__()
        self.proj = None
        if cin != cout or stride != 1:
            self.proj = conv_bn_act(cin, cout, 1, stride, act=None)
        groups = cout // group_width
        self.f = nn.Sequential(conv_bn_act(cin, cout, 1), conv_bn_act(cout, cout, 3, stride, groups=groups),
                               SqueezeExcite(cout, round(se_ratio * cin)), conv_bn_act(cout, cout, 1, act=None))
        self.activation = nn.ReLU(inplace=True)

    def forward(self, x):
        shortcut = x if self.proj is None else self.proj(x)
        return self.activation(shortcut + self.f(x))


class RegNetY400MF(nn.Module):
    def __init__(self, num_classes=1000):
        super().__init__()
        self.stem = conv_bn_act(3, 32, 3, 2)
        stages, cin = [], 32
        for width, depth in ((48, 1), (104, 3), (208, 6), (440, 6)):
            stages.append(nn.Sequential(*[RegNetBlock(cin if i == 0 else width, width, 2 if i == 0 else 1)
                                          for i in range(depth)]))
            cin = width
        self.trunk_output = nn.Sequential(*stages)
        self.fc = nn.Linear(440, num_classes)

    def forward(self, x):
        x = self.trunk_output(self.stem(x))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


# -- ShuffleNetV2 x1.0 ----------------------------------------------------------------------------------------------
def channel_shuffle(x, groups: int):
    b, c, h, w = x.size()
    x = x.view(b, groups, c // groups, h, w)
    return torch.transpose(x, 1, 2).contiguous().view(b, -1, h, w)


class ShuffleBlock(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.stride, bf = stride, cout // 2
        self.branch1 = nn.Sequential()
        if stride > 1:
            self.branch1 = nn.Sequential(conv_bn_act(cin, cin, 3, stride, groups=cin, act=None),
                                         conv_bn_act(cin, bf, 1))
        self.branch2 = nn.Sequential(conv_bn_act(cin if stride > 1 else bf, bf, 1),
                                     conv_bn_act(bf, bf, 3, stride, groups=bf, act=None), conv_bn_act(bf, bf, 1))

    def forward(self, x):
        if self.stride == 1:
            x1, x2 = x.chunk(2, dim=1)
            out = torch.cat((x1, self.branch2(x2)), dim=1)
        else:
            out = torch.cat((self.branch1(x), self.branch2(x)), dim=1)
        return channel_shuffle(out, 2)


class ShuffleNetV2(nn.Module):
    def __init__(self, num_classes=1000):
        super().__init__()
        self.conv1, self.maxpool = conv_bn_act(3, 24, 3, 2), nn.MaxPool2d(3, 2, 1)
        stages, cin = [], 24
        for repeats, cout in ((4, 116), (8, 232), (4, 464)):
            stages.append(nn.Sequential(ShuffleBlock(cin, cout, 2), *[ShuffleBlock(cout, cout, 1)
                                                                      for _ in range(repeats - 1)]))
            cin = cout
        self.stage2, self.stage3, self.stage4 = stages
        self.conv5, self.fc = conv_bn_act(464, 1024, 1), nn.Linear(1024, num_classes)

    def forward(self, x):
        x = self.stage4(self.stage3(self.stage2(self.maxpool(self.conv1(x)))))
        return self.fc(self.conv5(x).mean([2, 3]))


# -- DenseNet-121: stem and the first dense block -------------------------------------------------------------------
class DenseLayer(nn.Module):
    def __init__(self, cin, growth=32, bn_size=4):
        super().__init__()
        self.norm1, self.relu1 = nn.BatchNorm2d(cin), nn.ReLU(inplace=True)
        self.conv1 = nn.Conv2d(cin, bn_size * growth, 1, bias=False)
        self.norm2, self.relu2 = nn.BatchNorm2d(bn_size * growth), nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(bn_size * growth, growth, 3, 1, 1, bias=False)

    def forward(self, features):
        x = torch.cat(features, 1)
        x = self.conv1(self.relu1(self.norm1(x)))
        return self.conv2(self.relu2(self.norm2(x)))


class DenseNet121Block(nn.Module):
    """DenseNet-121's stem (7x7 conv, BN, ReLU, max-pool) and dense block 1 (6 layers, growth 32), then a norm and a
    classifier as at the network's end."""

    def __init__(self, num_classes=1000):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64), nn.ReLU(inplace=True),
                                  nn.MaxPool2d(3, 2, 1))
        self.layers = nn.ModuleList([DenseLayer(64 + 32 * i) for i in range(6)])
        self.norm5, self.classifier = nn.BatchNorm2d(256), nn.Linear(256, num_classes)

    def forward(self, x):
        features = [self.stem(x)]
        for layer in self.layers:
            features.append(layer(features))
        x = F.relu(self.norm5(torch.cat(features, 1)), inplace=True)
        return self.classifier(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


class PlainConvNet(nn.Module):
    """Five conv + BatchNorm + in-place ReLU layers (32 -> 64 -> 128 channels, two strided), pooled, a classifier."""

    def __init__(self, num_classes=1000):
        super().__init__()
        widths, layers, cin = ((32, 1), (32, 1), (64, 2), (64, 1), (128, 2)), [], 3
        for cout, stride in widths:
            layers.append(conv_bn_act(cin, cout, 3, stride))
            cin = cout
        self.features, self.fc = nn.Sequential(*layers), nn.Linear(128, num_classes)

    def forward(self, x):
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(self.features(x), 1), 1))


CONVNETS = {"resnet18": ResNet18, "mobilenet_v3_small": MobileNetV3Small, "efficientnet_b0": EfficientNetB0,
            "regnet_y_400mf": RegNetY400MF, "shufflenet_v2": ShuffleNetV2, "densenet121_block": DenseNet121Block,
            "plain5": PlainConvNet}
