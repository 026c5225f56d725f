"""``model.num_layers_unfrozen`` on the NeMo engine: the lower blocks and the embedding are frozen
and stay bit-identical through PPO steps while the top block trains; PPO's reference shares the
frozen parameters with the policy (one copy in memory, as trlX's hydra branch) and keeps the
initial values of the others, so its log-probs equal the policy's exactly at step 0."""

import pytest
import torch

from rlkit_core import hookimpl

import nemo_walks

pytestmark = [pytest.mark.usefixtures("megatron_cpu"), pytest.mark.slow]


class AtStart:
    """Records the policy's parameters and |policy - reference| log-probs when training starts."""

    def __init__(self):
        self.params, self.ref_gap = None, None

    @hookimpl
    def rlkit_train_start(self, trainer, config, is_main_process):
        engine = trainer.engine
        self.params = {n: p.detach().clone() for n, p in engine.module.named_parameters()}
        g = torch.Generator().manual_seed(0)
        batch = {"query_tensors": torch.randint(3, 300, (3, 5), generator=g),
                 "response_tensors": torch.randint(3, 300, (3, 4), generator=g),
                 "attention_mask": torch.ones(3, 9, dtype=torch.long)}
        out = engine.forward("response", batch, want=("ref_logprobs",))
        self.ref_gap = float((out["logprobs"] - out["ref_logprobs"]).abs().max())


@pytest.mark.parametrize("unfrozen", [1, -1])
def test_frozen_blocks_stay_put_and_the_reference_shares_them(tmp_path, unfrozen):
    start = AtStart()
    trainer = nemo_walks.run("ppo", tmp_path, plugins=[start], config_overrides=dict(
        train=dict(total_steps=4), model=dict(num_layers_unfrozen=unfrozen)))
    engine = trainer.engine
    assert start.ref_gap == 0.0  # the reference is the initial policy, exactly
    after = dict(engine.module.named_parameters())
    frozen = sorted(n for n, p in after.items() if not p.requires_grad)
    ref = dict(engine.ref.named_parameters())
    if unfrozen == -1:
        assert frozen == [] and not any(ref[n] is after[n] for n in ref)
    else:
        assert any(n.startswith("embedding.") for n in frozen) and any(n.startswith("decoder.layers.0.") for n in frozen)
        assert not any(n.startswith(("decoder.layers.1.", "heads.")) for n in frozen)
        for name in frozen:
            assert torch.equal(after[name], start.params[name]), name  # unchanged after 4 optimizer steps
            assert ref[name] is after[name], name  # one tensor for both
    top = [n for n in after if n.startswith("decoder.layers.1.")]
    assert any(not torch.equal(after[n], start.params[n]) for n in top)  # the top block trained
    for name, param in ref.items():  # the reference's own parameters keep the initial values
        if name not in frozen:
            assert param is not after[name] and torch.equal(param, start.params[name]), name
