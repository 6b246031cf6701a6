"""aggregate_loss_across_microbatch, masked_mean, calculate_loss_and_backward (SPEC §3)."""

import pytest
import torch
from naive import aggregate

from course import aggregate_loss_across_microbatch, calculate_loss_and_backward, masked_mean

pytestmark = pytest.mark.usefixtures("single_thread")

F64 = torch.float64


def test_token_normalization_weighs_every_token_equally():
    # two responses, 1 and 3 tokens, per-token loss 1.0 everywhere
    loss = torch.ones(2, 3, dtype=F64)
    mask = torch.tensor([[1, 0, 0], [1, 1, 1]])
    assert aggregate_loss_across_microbatch(loss, mask, "token", 4) == 1.0      # 4 / 4
    assert aggregate_loss_across_microbatch(loss, mask, "sequence") == 1.0      # (1/1 + 3/3) / 2
    loss[0, 0] = 5.0
    assert aggregate_loss_across_microbatch(loss, mask, "token", 4) == 2.0      # 8 / 4
    assert aggregate_loss_across_microbatch(loss, mask, "sequence") == 3.0      # (5 + 1) / 2
    assert aggregate_loss_across_microbatch(loss, mask, "constant", 16) == 0.5  # 8 / 16
    # the masked-out positions never count, whatever they hold
    loss[0, 1:] = 1e6
    assert aggregate_loss_across_microbatch(loss, mask, "token", 4) == 2.0
    assert aggregate_loss_across_microbatch(loss, mask.bool(), "sequence") == 3.0  # bool mask too


def test_sequence_mode_counts_an_empty_response_as_zero():
    # row 1 has no response tokens: it contributes 0 but still counts in B = 3, and is not NaN
    loss = torch.tensor([[2.0, 4.0], [7.0, 7.0], [6.0, 0.0]], dtype=F64)
    mask = torch.tensor([[1, 1], [0, 0], [1, 0]])
    value = aggregate_loss_across_microbatch(loss, mask, "sequence")
    assert torch.isfinite(value)
    assert value.item() == pytest.approx((3.0 + 0.0 + 6.0) / 3)  # (mean(2,4) + 0 + 6) / 3 = 3
    value = aggregate_loss_across_microbatch(loss, mask, "token", 3)
    assert value.item() == pytest.approx((2 + 4 + 6) / 3)


@pytest.mark.parametrize("mode", ["sequence", "token", "constant"])
@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
def test_masked_positions_never_leak_inf_or_nan(mode, bad):
    # the hand-worked batch of test_token_normalization...: tokens 5 | 1 1 1, losses 8 in 4 tokens
    loss = torch.tensor([[5.0, bad, bad], [1.0, 1.0, 1.0]], dtype=F64, requires_grad=True)
    mask = torch.tensor([[1, 0, 0], [1, 1, 1]])
    value = aggregate_loss_across_microbatch(loss, mask, mode, None if mode == "sequence" else 16)
    assert value.item() == {"sequence": 3.0, "token": 0.5, "constant": 0.5}[mode]  # (5+1)/2, 8/16
    value.backward()
    assert torch.isfinite(loss.grad).all() and (loss.grad[0, 1:] == 0).all()  # no nan in the gradient
    assert masked_mean(loss.detach(), mask).item() == 2.0  # 8 / 4
    assert masked_mean(loss.detach(), mask, 1).tolist() == [5.0, 1.0]


@pytest.mark.parametrize("mode", ["sequence", "token", "constant"])
def test_matches_naive_values_and_gradients(mode):
    gen = torch.Generator().manual_seed(3)
    loss = torch.randn(6, 9, generator=gen, dtype=F64, requires_grad=True)
    mask = (torch.rand(6, 9, generator=gen) < 0.6).long()
    mask[2] = 0
    constant = 54 if mode == "constant" else int(mask.sum()) + 5  # token: a step bigger than this batch
    value = aggregate_loss_across_microbatch(loss, mask, mode, None if mode == "sequence" else constant)
    value.backward()
    grad = loss.grad.clone()
    loss.grad = None
    expected = aggregate(loss, mask, mode, constant)
    expected.backward()
    assert value.item() == pytest.approx(expected.item(), rel=1e-12)
    torch.testing.assert_close(grad, loss.grad, rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize("mode", ["token", "constant"])
@pytest.mark.parametrize("constant", [0, -1, -0.5])
def test_non_positive_constants_raise(mode, constant):
    with pytest.raises(ValueError, match="normalization_constant"):
        aggregate_loss_across_microbatch(torch.ones(2, 2), torch.ones(2, 2), mode, constant)


def test_bad_inputs_raise_naming_the_argument():
    loss, mask = torch.ones(2, 3), torch.ones(2, 3)
    with pytest.raises(ValueError, match="normalization_constant"):
        aggregate_loss_across_microbatch(loss, mask, "constant", None)
    with pytest.raises(ValueError, match="loss_normalization"):
        aggregate_loss_across_microbatch(loss, mask, "mean")
    with pytest.raises(ValueError, match="mask"):
        aggregate_loss_across_microbatch(loss, torch.ones(2, 4), "sequence")


def test_masked_mean_hand_worked():
    values = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], dtype=F64)
    mask = torch.tensor([[1, 1, 0], [0, 0, 0]])
    assert masked_mean(values, mask).item() == pytest.approx(1.5)            # (1 + 2) / 2
    torch.testing.assert_close(masked_mean(values, mask, 1),                 # per row; empty row 0
                               torch.tensor([1.5, 0.0], dtype=F64))
    assert masked_mean(values, mask, denominator=6).item() == pytest.approx(0.5)  # 3 / 6


# ----------------------------------------------------------------------------- per micro-batch backward


@pytest.mark.parametrize("mode", ["sequence", "token", "constant"])
@pytest.mark.parametrize("split", [[6], [2, 4], [1, 1, 4], [1] * 6])
def test_micro_batch_backwards_add_up_to_the_full_batch_gradient(mode, split):
    gen = torch.Generator().manual_seed(5)
    loss = torch.randn(6, 7, generator=gen, dtype=F64, requires_grad=True)
    mask = torch.zeros(6, 7, dtype=torch.long)
    for i, length in enumerate([1, 7, 2, 0, 5, 3]):  # ragged, one empty
        mask[i, :length] = 1
    constant = 42.0
    full = aggregate(loss, mask, mode, int(mask.sum()) if mode == "token" else constant)
    full.backward()
    expected = loss.grad.clone()
    loss.grad = None
    total = 0.0
    for rows in torch.arange(6).split(split):
        total += calculate_loss_and_backward(loss[rows], mask[rows], mode, step_sequence_count=6,
                                             step_token_count=int(mask.sum()),
                                             normalization_constant=constant).item()
    assert total == pytest.approx(full.item(), rel=1e-12)
    torch.testing.assert_close(loss.grad, expected, rtol=1e-12, atol=1e-15)


def test_world_size_undoes_ddp_averaging():
    loss = torch.tensor([[1.0, 2.0]], dtype=F64, requires_grad=True)
    mask = torch.ones(1, 2)
    value = calculate_loss_and_backward(loss, mask, "token", 1, 2, world_size=2)
    assert value.item() == pytest.approx(3.0)  # (1 + 2) / 2 · 2
    torch.testing.assert_close(loss.grad, torch.ones(1, 2, dtype=F64))
