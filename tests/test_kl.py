"""estimate_kl: Schulman's k1/k2/k3 estimators and the ratio-weighted one.

Values are checked by hand; what each estimator does to the gradient is checked by exact
enumeration over a small categorical π = softmax(θ), samples x ~ π held fixed (no gradient through
the sampling): E_x[∇_θ k(x)] = Σ_x π(x) ∇_θ k(x), with δ(x) = log π(x) − log π_ref(x).

On paper, using Σ_x π ∇log π = ∇Σ_x π = 0:
  k1 = δ            E[∇k1] = Σ π ∇log π                         = 0
  k2 = δ²/2         E[∇k2] = Σ π δ ∇log π = Σ ∇π · δ            = ∇ KL(π‖π_ref)   (reverse)
  k3 = e^{−δ}−1+δ   E[∇k3] = Σ π (1 − π_ref/π) ∇log π = −Σ π_ref ∇log π = ∇ KL(π_ref‖π)  (forward)
  k4 = r·δ, r = π/sg(π_old), x ~ π_old:
                    E[∇k4] = Σ π_old ∇(π/π_old · δ) = ∇ Σ π δ   = ∇ KL(π‖π_ref)   (reverse, even
                    off-policy; with r detached instead it would be E_{π_old}[∇δ] = 0 on-policy)
So the issue's "k1 → 0, k2 → reverse-KL gradient, k3 → forward-KL gradient" holds.
"""

import math

import pytest
import torch

from course import estimate_kl

F64 = torch.float64


def test_hand_worked_values():
    # log π = ln 0.5, log π_ref = ln 0.25: δ = ln 2 = 0.6931471805599453
    # k1 = 0.6931471805599453; k2 = δ²/2 = 0.2402265069591007; k3 = 1/2 − 1 + ln 2 = 0.1931471805599453
    # ratio_k1 with ratio 1.5: 1.5 ln 2 = 1.0397207708399179
    new = torch.tensor([[math.log(0.5), 0.0]], dtype=F64)
    ref = torch.tensor([[math.log(0.25), 0.0]], dtype=F64)  # second token: δ = 0, every estimator 0
    ratio = torch.tensor([[1.5, 1.5]], dtype=F64)
    expected = {"k1": 0.6931471805599453, "k2": 0.2402265069591007, "k3": 0.1931471805599453,
                "ratio_k1": 1.0397207708399179}
    for estimator, value in expected.items():
        k = estimate_kl(new, ref, estimator, ratio=ratio)
        assert k.shape == (1, 2)
        torch.testing.assert_close(k, torch.tensor([[value, 0.0]], dtype=F64), rtol=0, atol=1e-15)


def test_negative_delta():
    # δ = −ln 2: k1 = −0.693..., k2 = 0.240..., k3 = 2 − 1 − ln 2 = 0.3068528194400547
    new, ref = torch.tensor([math.log(0.25)], dtype=F64), torch.tensor([math.log(0.5)], dtype=F64)
    assert estimate_kl(new, ref, "k1").item() == pytest.approx(-math.log(2), abs=1e-15)
    assert estimate_kl(new, ref, "k2").item() == pytest.approx(math.log(2) ** 2 / 2, abs=1e-15)
    assert estimate_kl(new, ref, "k3").item() == pytest.approx(1 - math.log(2), abs=1e-15)


def _categorical():
    theta = torch.tensor([0.3, -1.2, 0.8, 0.1, -0.4], dtype=F64, requires_grad=True)
    ref_logits = torch.tensor([-0.5, 0.7, 0.2, -1.0, 0.9], dtype=F64)
    old_logits = torch.tensor([0.1, 0.1, -0.6, 0.5, 0.0], dtype=F64)
    return theta, torch.log_softmax(ref_logits, 0), torch.log_softmax(old_logits, 0)


def _expected_gradient(estimator, sample_log_probs=None):
    """Σ_x q(x) ∇θ k(x) with q = π (detached) or the given sampling distribution."""
    theta, log_ref, _ = _categorical()
    log_pi = torch.log_softmax(theta, 0)
    log_q = log_pi.detach() if sample_log_probs is None else sample_log_probs
    ratio = torch.exp(log_pi - log_q)  # π / sg(q): 1 on-policy, with a gradient
    k = estimate_kl(log_pi[None], log_ref[None], estimator, ratio=ratio[None])[0]  # (V,)
    (torch.exp(log_q) * k).sum().backward()
    return theta.grad


def _kl_gradient(direction):
    theta, log_ref, _ = _categorical()
    log_pi = torch.log_softmax(theta, 0)
    if direction == "reverse":  # KL(π‖π_ref)
        value = (log_pi.exp() * (log_pi - log_ref)).sum()
    else:  # KL(π_ref‖π)
        value = (log_ref.exp() * (log_ref - log_pi)).sum()
    value.backward()
    return theta.grad


def test_gradients_differ_between_directions():
    # the distributions are far enough apart that the two KL gradients are distinguishable
    assert (_kl_gradient("reverse") - _kl_gradient("forward")).abs().max() > 0.05


def test_k1_expected_gradient_is_zero():
    torch.testing.assert_close(_expected_gradient("k1"), torch.zeros(5, dtype=F64), rtol=0, atol=1e-15)


def test_k2_expected_gradient_is_reverse_kl_gradient():
    torch.testing.assert_close(_expected_gradient("k2"), _kl_gradient("reverse"), rtol=0, atol=1e-14)


def test_k3_expected_gradient_is_forward_kl_gradient():
    torch.testing.assert_close(_expected_gradient("k3"), _kl_gradient("forward"), rtol=0, atol=1e-14)


def test_ratio_weighted_estimator_gradient_is_reverse_kl_on_and_off_policy():
    _, _, log_old = _categorical()
    torch.testing.assert_close(_expected_gradient("ratio_k1"), _kl_gradient("reverse"), rtol=0, atol=1e-14)
    torch.testing.assert_close(_expected_gradient("ratio_k1", log_old), _kl_gradient("reverse"),
                               rtol=0, atol=1e-14)


def test_k1_and_k3_are_unbiased_k2_is_not():
    theta, log_ref, _ = _categorical()
    with torch.no_grad():
        log_pi = torch.log_softmax(theta, 0)
        pi = log_pi.exp()
        true_kl = (pi * (log_pi - log_ref)).sum()
        means = {e: (pi * estimate_kl(log_pi, log_ref, e)).sum() for e in ("k1", "k2", "k3")}
    torch.testing.assert_close(means["k1"], true_kl, rtol=0, atol=1e-15)
    torch.testing.assert_close(means["k3"], true_kl, rtol=0, atol=1e-15)
    assert abs(means["k2"] - true_kl) > 1e-3


@pytest.mark.parametrize("kwargs, argument", [
    ({"estimator": "k4"}, "estimator"),
    ({"estimator": 2}, "estimator"),  # the old numbering is refused, by name
    ({"estimator": "ratio_k1"}, "ratio"),  # the ratio-weighted estimator needs the ratio
    ({"estimator": "k1", "ref_logprobs": torch.zeros(2, 4)}, "ref_logprobs|new_logprobs"),
])
def test_bad_inputs_raise_naming_the_argument(kwargs, argument):
    arguments = {"new_logprobs": torch.zeros(2, 3), "ref_logprobs": torch.zeros(2, 3)}
    arguments.update(kwargs)
    with pytest.raises(ValueError, match=argument):
        estimate_kl(**arguments)
