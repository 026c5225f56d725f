"""Stand-in for ``deepspeed`` in the trlX peer's venv (bench/.venv-trlx), on sys.path only for
the trlX worker.

trlX 0.7 imports deepspeed at module level (``trlx.models.modeling_ilql``, ``modeling_ppo``)
but calls it only under ZeRO-3 (``deepspeed.zero.GatheredParameters``, ``deepspeed.comm``),
which a single CPU process without a DeepSpeed plugin never runs. The pinned deepspeed 0.10.1
does not import with torch 2.13 (``torch.distributed.elastic...api.log`` is gone), so this
module stands in; any call into it is an error rather than a silent no-op. It has no
distribution metadata, so accelerate's ``is_deepspeed_available()`` stays False.
"""


def _unexpected(*args, **kwargs):
    raise RuntimeError("bench stand-in for deepspeed was called: the trlX peer is expected to run without DeepSpeed "
                       "(one CPU process); install a deepspeed that imports with this torch to run ZeRO")


class _Namespace:
    def __getattr__(self, name):
        return _unexpected


zero = _Namespace()
comm = _Namespace()
__version__ = "0.0.0+bench-standin"
