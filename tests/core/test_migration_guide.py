"""docs/migrating-from-trlx.md stays true: every rlkit path in its import table imports, and
its list of the config fields rlkit adds matches the schema."""

import importlib
import re
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


def test_the_table_covers_the_names_trlx_scripts_use():
    trlx_names = {trlx for trlx, _, _ in import_table()}
    assert len(trlx_names) == len(import_table()), "a trlX path is listed twice"
    # the names trlX's randomwalks examples import, which the script tests rewrite with this table
    assert {"trlx", "trlx.data.default_configs.TRLConfig", "trlx.data.default_configs.PPOConfig",
            "trlx.data.default_configs.ILQLConfig", "trlx.trainer.accelerate_rft_trainer.RFTConfig",
            "examples.randomwalks.generate_random_walks"} <= trlx_names


@pytest.mark.parametrize("trlx, rlkit, note", import_table(), ids=lambda v: v if isinstance(v, str) and v.startswith(("trlx", "examples")) else "")
def test_every_rlkit_path_in_the_table_imports(trlx, rlkit, note):
    if rlkit == NONE:
        assert note, f"{trlx}: a name without a counterpart needs a note saying what to use"
        return
    obj = resolve(rlkit)
    last = trlx.rsplit(".", 1)[-1]
    if last != "trlx":  # the same name as in trlX
        assert rlkit.rsplit(".", 1)[-1] == last


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
