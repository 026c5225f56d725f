"""Stand-in for ``deepspeed`` in the trlX peer's venv (bench/.venv-trlx), on sys.path only for
the trlX worker.

trlX 0.7 imports deepspeed at module level (``trlx.models.modeling_ilql``, ``modeling_ppo``)
and uses one thing on a single CPU process: ``deepspeed.zero.GatheredParameters`` around the
copy of the top blocks for PPO's hydra reference, which deepspeed itself makes a no-op for
parameters that ZeRO-3 did not partition. The pinned deepspeed 0.10.1 does not import with
torch 2.13 (``torch.distributed.elastic...api.log`` is gone), so this module stands in: the
same no-op for unpartitioned parameters, an error for partitioned ones (``ds_id``) and for
anything else trlX might call. It has no distribution metadata, so accelerate's
``is_deepspeed_available()`` stays False.
"""

import contextlib


def _unexpected(*args, **kwargs):
    raise RuntimeError("bench stand-in for deepspeed was called: the trlX peer is expected to run without DeepSpeed "
                       "(one CPU process); install a deepspeed that imports with this torch to run ZeRO")


class _Namespace:
    def __getattr__(self, name):
        return _unexpected


class _Zero(_Namespace):
    @staticmethod
    @contextlib.contextmanager
    def GatheredParameters(params, modifier_rank=None, fwd_module=None, enabled=True):  # noqa: N802 (deepspeed's name)
        """deepspeed's behaviour without ZeRO-3: nothing to gather."""
        params = [params] if not isinstance(params, (list, tuple)) else params
        if enabled and any(hasattr(p, "ds_id") for p in params):
            _unexpected()
        yield


zero = _Zero()
comm = _Namespace()
__version__ = "0.0.0+bench-standin"
