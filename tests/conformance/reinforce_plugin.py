"""A third-party method in 30 lines: REINFORCE with a learned baseline on PPO's rollout store.
Installed by test_third_party_method.py as its own distribution (an entry point and this
module, nothing else); it runs on every engine with no backend code."""

import attrs

from rlkit_core import MethodSpec, hookimpl
from rlkit_methods.ppo.config import PPOConfig
from rlkit_methods.ppo.trainer import PPOTrainer


@attrs.define
class ReinforceConfig(PPOConfig):
    """PPO's fields (rollouts, KL penalty, gamma); lam = 1 makes the returns Monte-Carlo."""


class ReinforceTrainer(PPOTrainer):
    def loss(self, outputs, batch):
        """L = -sum_t m_t (G_t - b(s_t)) log pi(a_t|s_t) / sum m + vf_coef * (V(s_t) - G_t)^2."""
        mask, returns = batch.rollouts.response_mask.float(), batch.returns
        advantage = (returns - batch.rollouts.values).detach()  # baseline: V at rollout time
        pg = -(advantage * outputs["logprobs"] * mask).sum() / mask.sum()
        vf = ((outputs["values"] - returns) ** 2 * mask).sum() / mask.sum()
        loss = pg + self.config.method.vf_coef * vf
        return loss, {"losses/total_loss": loss.item(), "losses/policy_loss": pg.item(), "losses/value_loss": vf.item()}


@hookimpl
def rlkit_register_methods():
    return [MethodSpec("reinforce", f"{__name__}:ReinforceConfig", mode="online", trainer=f"{__name__}:ReinforceTrainer")]
