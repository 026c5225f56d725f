"""Run by test_trainer_fsdp.py under torchrun (2 CPU processes, gloo): a PPO policy sharded
with FSDP2 generates, exports and trains like the unsharded policy."""

import copy
import sys
from pathlib import Path

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard

sys.path.insert(0, str(Path(__file__).parents[1] / "models"))
from tiny_models import build  # noqa: E402

from rlkit_accelerate.models.policy import CausalLMWithValueHead  # noqa: E402
from rlkit_accelerate.sharding import full_parameters, full_state_dict, is_sharded  # noqa: E402

out = Path(sys.argv[1])
dist.init_process_group("gloo")
rank = dist.get_rank()
policy = CausalLMWithValueHead(build("gpt2", 3), num_layers_unfrozen=1).eval()
plain = copy.deepcopy(policy)
mesh = init_device_mesh("cpu", (2,))
for block in policy.base_model.transformer.h:
    fully_shard(block, mesh=mesh)
fully_shard(policy, mesh=mesh)
assert is_sharded(policy) and not is_sharded(plain)

# each rank generates a different number of tokens: inside full_parameters no forward pass
# waits on the other rank (outside it, the ranks would deadlock in their all-gathers)
prompt = torch.tensor([[5 + rank, 6, 7, 8]])
settings = dict(max_new_tokens=3 + 9 * rank, min_new_tokens=3 + 9 * rank, do_sample=False, pad_token_id=2, eos_token_id=1)
with full_parameters(policy), full_parameters(policy):  # nested use is free
    generated = policy.generate(input_ids=prompt, attention_mask=torch.ones_like(prompt), **settings)
expected = plain.generate(input_ids=prompt, attention_mask=torch.ones_like(prompt), **settings)
assert torch.equal(generated, expected), (generated, expected)

state = full_state_dict(policy)
if rank == 0:
    policy.save_pretrained(out / "export", state_dict=state)
dist.barrier()

# sharded again afterwards: a training step runs through FSDP's hooks
ids = torch.tensor([[3, 4, 5, 6, 7, 8]])
result = policy(input_ids=ids, attention_mask=torch.ones_like(ids))
(result.logits.float().pow(2).mean() + result.values.pow(2).mean()).backward()
top_grad = policy.base_model.transformer.h[-1].mlp.c_fc.weight.grad
assert top_grad is not None and float(top_grad.full_tensor().abs().sum()) > 0
assert policy.base_model.transformer.h[0].mlp.c_fc.weight.grad is None  # frozen trunk
torch.save({"tokens": generated, "state_keys": sorted(state)}, out / f"rank_{rank}.pt")
if rank == 0:
    reloaded = CausalLMWithValueHead.from_pretrained(out / "export", num_layers_unfrozen=1).eval()
    check = torch.tensor([[9, 10, 11, 12]])
    a = reloaded(input_ids=check, attention_mask=torch.ones_like(check))
    b = plain(input_ids=check, attention_mask=torch.ones_like(check))
    torch.save({"logits": (a.logits - b.logits).abs().max(), "values": (a.values - b.values).abs().max()}, out / "export_diff.pt")
# both ranks leave together: a rank that tore gloo down while rank 0 still checked the export
# once aborted rank 0 ("terminate called without an active exception")
dist.barrier()
dist.destroy_process_group()
