"""The KL estimators every method uses (common/kl.py): under x ~ p both k1 and k3 of
log p(x) - log q(x) average to KL(p || q) exactly; k3 is never negative, k1 can be."""

import torch

from rlkit_methods.common.kl import k1, k3


def test_k1_and_k3_are_unbiased_for_kl_p_q_and_k3_is_never_negative():
    p = torch.tensor([0.5, 0.3, 0.2], dtype=torch.float64)
    q = torch.tensor([0.2, 0.2, 0.6], dtype=torch.float64)
    kl = (p * (p / q).log()).sum()
    log_ratio = p.log() - q.log()  # for each outcome x, sampled with probability p(x)
    torch.testing.assert_close((p * k1(log_ratio)).sum(), kl)
    torch.testing.assert_close((p * k3(log_ratio)).sum(), kl)
    assert (k3(log_ratio) >= 0).all() and (k1(log_ratio) < 0).any()
    # trlX's approx_kl reads the ratio the other way round: (r - 1) - log r with r = p/q
    torch.testing.assert_close(k3(-log_ratio), (p / q - 1) - (p / q).log())
