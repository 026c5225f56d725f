"""trlX's utility API under rlkit's paths behaves as trlX's does."""

import logging
from dataclasses import dataclass

import pytest
import torch
from torch.utils.data import DataLoader

from rlkit_core.errors import ConfigError, RegistryError
from rlkit_core.loading import get_pipeline, get_trainer
from rlkit_methods.common.optim import OptimizerName, SchedulerName, get_optimizer_class, get_scheduler_class
from rlkit_methods.data.batching import MiniBatchIterator
from rlkit_methods.ilql.store import ILQLSeq2SeqRolloutStorage, make_experience


# --- optimizer and scheduler names -------------------------------------------------------


@pytest.mark.parametrize("name", [o.value for o in OptimizerName if "bnb" not in o.value])
def test_every_optimizer_name_gives_a_torch_optimizer(name):
    cls = get_optimizer_class(name)
    assert issubclass(cls, torch.optim.Optimizer)
    assert get_optimizer_class(OptimizerName(name)) is cls  # the enum member works too
    assert get_optimizer_class(name.upper()) is cls


def test_trlx_optimizer_and_scheduler_names_are_all_there():
    assert {"adam", "adamw", "adam_8bit_bnb", "adamw_8bit_bnb", "sgd"} <= {o.value for o in OptimizerName}
    assert {"cosine_annealing", "linear"} <= {s.value for s in SchedulerName}
    assert get_optimizer_class("adamw") is torch.optim.AdamW
    assert get_scheduler_class("cosine_annealing") is torch.optim.lr_scheduler.CosineAnnealingLR
    assert get_scheduler_class(SchedulerName.LINEAR) is torch.optim.lr_scheduler.LinearLR


@pytest.mark.parametrize("name", [s.value for s in SchedulerName])
def test_every_scheduler_name_gives_a_torch_scheduler(name):
    made = get_scheduler_class(name)
    if name.endswith("_with_warmup"):  # transformers' schedule functions: (optimizer, ...) -> a torch scheduler
        optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
        made = type(made(optimizer, num_warmup_steps=1, **({} if name.startswith("constant") else {"num_training_steps": 2})))
    assert issubclass(made, torch.optim.lr_scheduler.LRScheduler)


def test_unknown_names_say_what_is_supported():
    with pytest.raises(ValueError, match=r"optimizer.name: unknown optimizer 'adamm'; choose one of adam, adamw"):
        get_optimizer_class("adamm")
    with pytest.raises(ValueError, match=r"scheduler.name: unknown scheduler 'cosine'; choose one of cosine_annealing"):
        get_scheduler_class("cosine")


def test_8bit_optimizers_need_bitsandbytes():
    pytest.importorskip("torch")
    try:
        import bitsandbytes  # noqa: F401
    except ImportError:
        with pytest.raises(ImportError, match="adamw_8bit_bnb needs bitsandbytes"):
            get_optimizer_class("adamw_8bit_bnb")
    else:
        assert get_optimizer_class("adamw_8bit_bnb").__name__ == "AdamW8bit"


def test_the_accelerate_engine_builds_optimizers_from_the_same_names():
    from rlkit_accelerate.optim import make_optimizer, make_scheduler

    params = [torch.nn.Parameter(torch.zeros(2))]
    optimizer = make_optimizer("RMSprop", {"lr": 0.1}, params)
    assert isinstance(optimizer, torch.optim.RMSprop)
    assert isinstance(make_scheduler("linear", {}, optimizer), torch.optim.lr_scheduler.LinearLR)
    with pytest.raises(ConfigError, match="optimizer.name: unknown optimizer 'lion'"):
        make_optimizer("lion", {}, params)


# --- get_trainer / get_pipeline ----------------------------------------------------------


def test_get_trainer_and_get_pipeline_find_registered_names_in_any_case(rlkit_host):
    from rlkit_methods.data.prompts import PromptPipeline

    assert get_pipeline("PromptPipeline") is PromptPipeline
    assert get_pipeline("promptpipeline") is PromptPipeline
    trainer = get_trainer("acceleratepppotrainer".replace("ppp", "pp"))
    assert trainer.__name__ == "AcceleratePPOTrainer"
    with pytest.raises(RegistryError, match="unknown trainer 'NoSuchTrainer'; installed: .*AcceleratePPOTrainer"):
        get_trainer("NoSuchTrainer")
    with pytest.raises(RegistryError, match="unknown pipeline 'nope'"):
        get_pipeline("nope")


# --- MiniBatchIterator ------------------------------------------------------------------


@dataclass
class Batch:
    x: torch.Tensor
    y: torch.Tensor


def loader(n, batch_size):
    rows = [(torch.tensor([float(i)]), torch.tensor(i)) for i in range(n)]
    return DataLoader(rows, batch_size=batch_size, shuffle=False,
                      collate_fn=lambda items: Batch(torch.stack([a for a, _ in items]), torch.stack([b for _, b in items])))


def test_minibatch_iterator_works_with_next_and_ends_with_stop_iteration():
    iterator = MiniBatchIterator(loader(6, 8), mb_size=2, num_mb=4)
    minibatches = next(iterator)
    assert [mb.y.tolist() for mb in minibatches] == [[0, 1], [2, 3], [4, 5]]
    with pytest.raises(StopIteration):
        next(iterator)


def test_minibatch_iterator_remainder_and_content_in_order():
    iterator = MiniBatchIterator(loader(36, 8), mb_size=2, num_mb=4)
    for _ in range(4):
        assert [len(mb.y) for mb in next(iterator)] == [2, 2, 2, 2]
    last = next(iterator)  # the last loader batch holds 4 rows: two micro-batches
    assert [mb.y.tolist() for mb in last] == [[32, 33], [34, 35]]
    seen = [mb.y.tolist() for mbs in MiniBatchIterator(loader(16, 8), mb_size=4, num_mb=2) for mb in mbs]
    assert sum(seen, []) == list(range(16))


def test_minibatch_iterator_is_one_pass_as_in_trlx():
    iterator = MiniBatchIterator(loader(8, 4), mb_size=2, num_mb=2)
    assert len(list(iterator)) == 2
    assert list(iterator) == []
    with pytest.raises(ValueError, match="mb_size and num_mb must be > 0"):
        MiniBatchIterator(loader(8, 4), mb_size=0, num_mb=2)


# --- ILQL stores ------------------------------------------------------------------------


def test_ilql_seq2seq_storage_takes_trlx_arguments_and_pads_on_the_right():
    input_ids = [torch.tensor([5, 6, 7]), torch.tensor([8])]
    attention_mask = [torch.ones(3, dtype=torch.long), torch.ones(1, dtype=torch.long)]
    decoder_input_ids = [torch.tensor([0, 11, 12]), torch.tensor([0, 13])]
    rewards = [torch.tensor([0.0, 1.0]), torch.tensor([-1.0])]
    states_ixs = [torch.tensor([0, 1, 2]), torch.tensor([0, 1])]
    actions_ixs = [torch.tensor([0, 1]), torch.tensor([0])]
    dones = [torch.tensor([1, 1, 0]), torch.tensor([1, 0])]
    store = ILQLSeq2SeqRolloutStorage(input_ids, attention_mask, decoder_input_ids, rewards, states_ixs, actions_ixs, dones)
    assert len(store) == 2
    batch = next(iter(store.create_loader(batch_size=2, shuffle=False)))
    assert batch.input_ids.tolist() == [[5, 6, 7], [8, 0, 0]]
    assert batch.attention_mask.tolist() == [[1, 1, 1], [1, 0, 0]]
    assert batch.decoder_input_ids.tolist() == [[0, 11, 12], [0, 13, 0]]
    assert batch.decoder_attention_mask.tolist() == [[1, 1, 1], [1, 1, 0]]
    assert batch.rewards.tolist() == [[0.0, 1.0], [-1.0, 0.0]]
    assert batch.dones.tolist() == [[1, 1, 0], [1, 0, 0]]
    minibatches = next(MiniBatchIterator(store.create_loader(batch_size=2, shuffle=False), mb_size=1, num_mb=2))
    assert [mb.decoder_input_ids.tolist() for mb in minibatches] == [[[0, 11, 12]], [[0, 13, 0]]]



def test_create_loader_keeps_each_stores_trlx_defaults(monkeypatch, char_tokenizer):
    from torch.utils.data import RandomSampler, SequentialSampler

    from rlkit_methods.sft.store import make_sft_experience

    ilql = make_experience([["ab", "cd"], ["e", "fgh"], ["i", "j"]], [1.0, 0.0, 0.5], char_tokenizer, max_length=16)
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    loader = ilql.create_loader(2)
    assert isinstance(loader.sampler, RandomSampler) and not loader.drop_last  # trlX's ILQL loaders shuffled
    assert len(list(loader)) == 2 and type(next(iter(loader))).__name__ == "ILQLBatch"
    monkeypatch.setenv("WORLD_SIZE", "2")
    assert ilql.create_loader(2).drop_last and not ilql.create_loader(2, drop_last=False).drop_last
    sft = make_sft_experience(["ab", "cd", "e"], char_tokenizer).create_loader(2)
    assert isinstance(sft.sampler, SequentialSampler) and not sft.drop_last

def test_make_experience_verbose_logs_what_trlx_printed(char_tokenizer, caplog):
    samples, rewards = [["ab", "cd"], ["e", "fgh"]], [1.0, 0.0]
    with caplog.at_level(logging.INFO, logger="rlkit_methods.ilql.store"):
        store = make_experience(samples, rewards, char_tokenizer, max_length=16, verbose=True)
    assert "ILQL sample 0: prompt 'ab', output 'cd</s>', reward 1.0" in caplog.text
    assert "ILQL output length: mean 3.50 in [3, 4]" in caplog.text  # EOS ends each output
    assert "ILQL prompt length: mean 1.50 in [1, 2]" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="rlkit_methods.ilql.store"):
        quiet = make_experience(samples, rewards, char_tokenizer, max_length=16, verbose=False)
    assert caplog.text == ""
    assert [x.tolist() for x in quiet.input_ids] == [x.tolist() for x in store.input_ids]


# --- randomwalks task with trlX's signature -----------------------------------------------


def test_generate_random_walks_has_trlx_signature_and_results():
    from rlkit_methods.rewards.randomwalks import generate_random_walks, random_walks

    metric_fn, eval_prompts, walks, adjacency = generate_random_walks(seed=1000)
    task = random_walks(1000)
    assert walks == task.walks and len(walks) == 1000 and eval_prompts == task.eval_prompts
    assert adjacency.dtype == torch.bool and adjacency.shape == (21, 21)
    assert torch.equal(adjacency, ~task.logit_mask)  # trlX's "logit_mask" is the adjacency itself
    assert set(metric_fn(walks[:4])) == {"lengths", "optimality"}
    _, prompts, piped, _ = generate_random_walks(seed=1000, gpt2_tokenizer=True)
    assert prompts[0] == eval_prompts[0] + "|" and piped[0] == "|".join(walks[0])


# --- trlx.utils.logging ----------------------------------------------------------------------


def test_logging_sets_every_rlkit_logger_and_turns_progress_off(capsys, monkeypatch):
    import rlkit_core.logging as rlkit_logging
    from rlkit_methods.run.console import progress

    monkeypatch.delenv(rlkit_logging.PROGRESS_ENV, raising=False)
    before = {p: logging.getLogger(p).level for p in rlkit_logging.PACKAGES}
    try:
        rlkit_logging.set_verbosity(rlkit_logging.ERROR)
        assert all(logging.getLogger(p).level == logging.ERROR for p in rlkit_logging.PACKAGES)
        assert rlkit_logging.get_verbosity() == logging.ERROR
    finally:
        for package, level in before.items():
            logging.getLogger(package).setLevel(level)
    rlkit_logging.disable_progress_bar()
    assert not rlkit_logging.is_progress_bar_enabled()
    with progress(4, 0, enabled=True) as bar:
        bar.update(4, {"loss": 1.0})
    assert capsys.readouterr().err == ""
    rlkit_logging.enable_progress_bar()
    with progress(4, 0, enabled=True) as bar:
        bar.update(4, {"loss": 1.0})
    assert "progress: step" in capsys.readouterr().err


# --- trlx.utils.modeling statistics ---------------------------------------------------------


def test_running_moments_return_tensors_like_trlx():
    from rlkit_methods.common.stats import RunningMoments

    moments = RunningMoments()
    batches = [torch.arange(100, dtype=torch.float64), torch.ones(100, dtype=torch.float64),
               torch.exp(torch.arange(10, dtype=torch.float64)), torch.tensor([-10.0, -1, 0, 1, 10], dtype=torch.float64)]
    for batch in batches:
        mean, std = moments.update(batch)
        assert isinstance(std, torch.Tensor) and std.dtype == torch.float64
        assert torch.isclose(mean, batch.mean(), atol=1e-6) and torch.isclose(std, batch.std(), atol=1e-6)
    everything = torch.cat(batches)
    assert torch.isclose(moments.mean, everything.mean(), atol=1e-6)
    assert torch.isclose(moments.std, everything.std(), atol=1e-6)
    # float32 scores give float32 results; the running sums stay float64
    small = RunningMoments()
    mean, std = small.update(torch.tensor([1.0, 2.0, 4.0]))
    assert mean.dtype == std.dtype == small.std.dtype == torch.float32
    restored = RunningMoments()
    restored.load_state_dict(small.state_dict())
    assert float(restored.std) == pytest.approx(float(small.std)) and restored.count == small.count


def test_whiten_reads_trlx_positional_shift_mean():
    from rlkit_methods.common.stats import logprobs_of_labels, whiten

    xs = torch.tensor([1.0, 2.0, 3.0, 6.0])
    centred = whiten(xs)
    assert centred.mean().abs() < 1e-6
    kept = whiten(xs, False)  # trlX: whiten(xs, shift_mean=False)
    assert torch.allclose(kept, centred + xs.mean())
    assert torch.equal(whiten(xs, shift_mean=False), kept)
    logits = torch.tensor([[[0.0, 0.0], [2.0, 0.0]]])
    assert torch.allclose(logprobs_of_labels(logits, torch.tensor([[1, 0]])), torch.log_softmax(logits, -1)[0, [0, 1], [1, 0]])
