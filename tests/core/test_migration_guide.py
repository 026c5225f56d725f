"""docs/migrating-from-trlx.md stays true: every rlkit path in its import table imports, and
its list of the config fields rlkit adds matches the schema."""

import importlib
import re
import types
from pathlib import Path

import attrs
import pytest

ROOT = Path(__file__).resolve().parents[2]
GUIDE = ROOT / "docs" / "migrating-from-trlx.md"
NONE = "—"


def section(title):
    text = GUIDE.read_text()
    start = text.index(f"## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end > 0 else None]


def table_rows(text):
    """Cells of the markdown table rows below the header separator."""
    rows = [line for line in text.splitlines() if line.startswith("| ")]
    return [[cell.strip() for cell in row.strip("|").split("|")] for row in rows[1:] if not row.startswith("|---")]


def import_table():
    rows = []
    for trlx, rlkit, note in table_rows(section("Import paths")):
        rows.append((trlx.strip("`"), rlkit.strip("`"), note))
    return rows


def resolve(path):
    """A module or a ``module.attribute`` (the longest importable module prefix)."""
    parts = path.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        for name in parts[cut:]:
            obj = getattr(obj, name)
        return obj
    raise ModuleNotFoundError(path)


# Every trlX name that trlX 0.7's own examples/ and tests/ import or read (commit 3340c2f: the
# ``from trlx... import``/``import trlx...`` statements of their .py files, and the attributes
# read through a module so imported, e.g. ``trlx.train``, ``utils.get_optimizer_class``).
TRLX_USED = {
    "": "trlx trlx.train trlx.utils trlx.utils.logging trlx.utils.modeling",
    "examples.randomwalks": "generate_random_walks",
    "trlx.data.configs": "ModelConfig OptimizerConfig SchedulerConfig TRLConfig TokenizerConfig TrainConfig",
    "trlx.data.default_configs": "ILQLConfig ModelConfig OptimizerConfig PPOConfig SFTConfig SchedulerConfig TRLConfig "
                                 "TokenizerConfig TrainConfig default_ilql_config default_nemo_1_3b_config "
                                 "default_nemo_20b_config default_nemo_2b_config default_ppo_config default_sft_config",
    "trlx.models.modeling_ilql": "AutoModelForCausalLMWithILQLHeads AutoModelForSeq2SeqLMWithILQLHeads ILQLBatch ILQLConfig "
                                 "ILQLHeads batched_index_select",
    "trlx.models.modeling_ppo": "AutoModelForCausalLMWithHydraValueHead AutoModelForCausalLMWithValueHead "
                                "AutoModelForSeq2SeqLMWithHydraValueHead AutoModelForSeq2SeqLMWithValueHead PPOConfig",
    "trlx.pipeline": "MiniBatchIterator",
    "trlx.pipeline.offline_pipeline": "DialogMessage ILQLRolloutStorage ILQLSeq2SeqRolloutStorage PromptPipeline tokenize_dialogue",
    "trlx.trainer.accelerate_ilql_trainer": "AccelerateILQLTrainer make_experience",
    "trlx.trainer.accelerate_ppo_trainer": "AcceleratePPOTrainer",
    "trlx.trainer.accelerate_rft_trainer": "RFTConfig",
    "trlx.trainer.accelerate_sft_trainer": "AccelerateSFTTrainer",
    "trlx.trainer.nemo_ilql_trainer": "ILQLGPT megatron_trainer",
    "trlx.trainer.nemo_ppo_trainer": "PPOGPT megatron_trainer",
    "trlx.utils": "OptimizerName SchedulerName get_optimizer_class get_scheduler_class",
    "trlx.utils.loading": "get_pipeline get_trainer",
    "trlx.utils.logging": "ERROR disable_progress_bar set_verbosity",
    "trlx.utils.modeling": "RunningMoments hf_get_decoder hf_get_decoder_blocks hf_get_decoder_final_norm hf_get_hidden_size "
                           "hf_get_lm_head hf_get_num_hidden_layers",
}


def test_the_table_covers_every_name_trlx_examples_and_tests_use():
    trlx_names = [trlx for trlx, _, _ in import_table()]
    assert len(set(trlx_names)) == len(trlx_names), "a trlX path is listed twice"
    used = {f"{module}.{name}" if module else name for module, names in TRLX_USED.items() for name in names.split()}
    assert len(used) == 69
    assert sorted(used - set(trlx_names)) == []


@pytest.mark.parametrize("trlx, rlkit, note", import_table(), ids=lambda v: v if isinstance(v, str) and v.startswith(("trlx", "examples")) else "")
def test_every_rlkit_path_in_the_table_imports(trlx, rlkit, note):
    if rlkit == NONE:
        assert note, f"{trlx}: a name without a counterpart needs a note saying what to use"
        return
    obj = resolve(rlkit)
    if not isinstance(obj, types.ModuleType):  # a name keeps trlX's name; a module may not
        assert rlkit.rsplit(".", 1)[-1] == trlx.rsplit(".", 1)[-1]


# trlX 0.7's config fields (trlx/data/configs.py and the method configs), by section
TRLX_FIELDS = {
    "TrainConfig": "total_steps seq_length epochs batch_size checkpoint_interval eval_interval pipeline trainer "
                   "trainer_kwargs project_name run_name entity_name group_name checkpoint_dir rollout_logging_dir "
                   "save_best save_optimizer resume_from_checkpoint tracker logging_dir tags seed minibatch_size",
    "ModelConfig": "model_path model_arch_type num_layers_unfrozen peft_config model_extra_configs",
    "TokenizerConfig": "tokenizer_path padding_side truncation_side tokenizer_extra_configs",
    "OptimizerConfig": "name kwargs",
    "SchedulerConfig": "name kwargs",
    "PPOConfig": "name ppo_epochs num_rollouts chunk_size init_kl_coef target horizon gamma lam cliprange "
                 "cliprange_value vf_coef scale_reward ref_mean ref_std cliprange_reward gen_kwargs "
                 "gen_experience_kwargs num_value_layers_unfrozen",
    "ILQLConfig": "name tau gamma cql_scale awac_scale alpha beta steps_for_target_q_sync two_qs gen_kwargs",
    "SFTConfig": "name gen_kwargs",
    "RFTConfig": "name gen_kwargs start_percentile end_percentile n_improve_steps n_generations_per_prompt",
}
SECTION = {"TrainConfig": "train", "ModelConfig": "model", "TokenizerConfig": "tokenizer",
           "OptimizerConfig": "optimizer", "SchedulerConfig": "scheduler"}


def rlkit_config_classes():
    from rlkit_core.config import schema
    from rlkit_methods.ilql.config import ILQLConfig
    from rlkit_methods.ppo.config import PPOConfig
    from rlkit_methods.rft.config import RFTConfig
    from rlkit_methods.sft.config import SFTConfig

    methods = {"PPOConfig": PPOConfig, "ILQLConfig": ILQLConfig, "SFTConfig": SFTConfig, "RFTConfig": RFTConfig}
    return {**{name: getattr(schema, name) for name in SECTION}, **methods}


def test_every_trlx_field_is_kept_and_every_added_field_is_in_the_guide():
    listed = {cells[0].split()[0].strip("`") for cells in table_rows(section("Config fields"))}
    for name, cls in rlkit_config_classes().items():
        fields = {f.name for f in attrs.fields(cls)}
        trlx = set(TRLX_FIELDS[name].split())
        assert trlx <= fields, f"{name} lost trlX fields {sorted(trlx - fields)}"
        for added in sorted(fields - trlx):
            where = f"{SECTION[name]}.{added}" if name in SECTION else f"method.{added}"
            assert where in listed, f"{where}: a field trlX lacks; add it to the 'Config fields' table of {GUIDE.name}"
