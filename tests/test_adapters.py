"""sqlenv.train.adapters: under autocast, LoRA layers keep no copy of their input for the backward pass, and
compute the same numbers; outside autocast they still cast (an fp32 adapter on a bf16 input)."""

from __future__ import annotations

import copy

import pytest
import torch
from peft import LoraConfig, get_peft_model
from torch import nn

from sqlenv.train.adapters import skip_casts_under_autocast


class _Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.q = nn.Linear(64, 64)
        self.k = nn.Linear(64, 64)  # q, k and v read the same input, as in attention
        self.v = nn.Linear(64, 64)
        self.out = nn.Linear(64, 64)

    def forward(self, x):
        return self.out(torch.relu(self.q(x)) * self.k(x) + self.v(x))


def _lora_net() -> nn.Module:
    torch.manual_seed(0)
    net = _Net().to(torch.bfloat16)
    # init_lora_weights=False: B is random too, so every adapter's gradient is non-zero
    return get_peft_model(net, LoraConfig(r=4, target_modules=["q", "k", "v", "out"], init_lora_weights=False))


def _step(model: nn.Module, x: torch.Tensor, autocast: bool):
    """Output, parameter gradients, and the bytes of the distinct tensors autograd saved."""
    saved: dict[int, int] = {}

    def pack(t):
        saved[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t

    model.zero_grad()
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            y = model(x)
    y.float().square().sum().backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.requires_grad}
    return y.detach(), grads, sum(saved.values())


def test_adapters_stay_float32_on_a_bf16_model():
    model = _lora_net()
    dtypes = {p.dtype for n, p in model.named_parameters() if "lora_" in n}
    assert dtypes == {torch.float32}, "peft no longer upcasts adapters: the optimizer would step bf16 weights"


def test_under_autocast_no_input_copy_is_saved_and_numbers_are_unchanged():
    x = torch.randn(256, 64, dtype=torch.bfloat16)
    plain = _lora_net()
    hooked = copy.deepcopy(plain)
    assert skip_casts_under_autocast(hooked) == 4
    y0, g0, saved0 = _step(plain, x, autocast=True)
    y1, g1, saved1 = _step(hooked, x, autocast=True)
    assert torch.equal(y0, y1)
    assert g0.keys() == g1.keys() and all(torch.equal(g0[n], g1[n]) for n in g0)
    # Without the hook q, k and v each save their own bf16 copy of the one 256 x 64 input; with it, the
    # input itself, once (`out`'s copy replaces an input nothing else keeps: no saving there).
    assert saved0 - saved1 == 2 * 256 * 64 * 2, (saved0, saved1)


def test_outside_autocast_the_cast_still_happens():
    x = torch.randn(8, 64, dtype=torch.bfloat16)
    plain = _lora_net()
    hooked = copy.deepcopy(plain)
    skip_casts_under_autocast(hooked)
    _step(hooked, x, autocast=True)  # a step under autocast first: the switch must turn back on
    y0, g0, _ = _step(plain, x, autocast=False)
    y1, g1, _ = _step(hooked, x, autocast=False)  # an fp32 adapter on a bf16 input: fails without the cast
    assert torch.equal(y0, y1) and all(torch.equal(g0[n], g1[n]) for n in g0)


def test_hooking_twice_adds_no_second_hook():
    model = _lora_net()
    assert skip_casts_under_autocast(model) == 4
    assert skip_casts_under_autocast(model) == 0


def test_peft_still_reads_the_switch():
    """With the switch off and no autocast, an fp32 adapter meets a bf16 input: a dtype error. If peft stops
    reading `cast_input_dtype_enabled`, it casts anyway and this fails."""
    model = _lora_net()
    for module in model.modules():
        if hasattr(module, "cast_input_dtype_enabled"):
            module.cast_input_dtype_enabled = False
    with pytest.raises(RuntimeError):
        _step(model, torch.randn(4, 64, dtype=torch.bfloat16), autocast=False)
