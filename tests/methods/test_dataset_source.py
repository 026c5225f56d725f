"""The `dataset` source: HF datasets from local files, offline."""

import json

import pytest

from rlkit_core.errors import ConfigError
from rlkit_methods.data.hf_datasets import dataset_source

datasets = pytest.importorskip("datasets", reason="rlkit-methods[datasets] is not installed")

ROWS = [{"text": "the movie was great", "reward": 1.0}, {"text": "a dull film", "reward": 0.0},
        {"text": "fine acting", "reward": 0.5}]


@pytest.fixture(autouse=True)
def offline(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "hf-cache"))


def write(tmp_path, kind):
    table = datasets.Dataset.from_list(ROWS)
    path = tmp_path / f"rows.{kind}"
    if kind == "jsonl":
        path.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    elif kind == "csv":
        table.to_csv(str(path), index=False)
    elif kind == "parquet":
        table.to_parquet(str(path))
    elif kind == "saved":
        path = tmp_path / "saved"
        datasets.DatasetDict({"train": table, "test": table.select([0])}).save_to_disk(str(path))
    return path


@pytest.mark.parametrize("kind", ["jsonl", "csv", "parquet", "saved"])
def test_local_files_give_samples_with_rewards(tmp_path, kind):
    items = dataset_source(str(write(tmp_path, kind)))
    assert items == [{"sample": r["text"], "reward": r["reward"]} for r in ROWS]


def test_prompts_without_rewards_a_split_and_n(tmp_path):
    path = write(tmp_path, "saved")
    assert dataset_source(str(path), split="test", reward_column="none") == ["the movie was great"]
    assert dataset_source(str(path), column="text", reward_column="none", n=2) == ["the movie was great", "a dull film"]


def test_an_arrow_file(tmp_path):
    path = write(tmp_path, "saved")
    arrow = next((path / "train").glob("*.arrow"))
    assert dataset_source(str(arrow), reward_column="none") == [r["text"] for r in ROWS]


def test_bad_input_is_one_line_naming_the_fix(tmp_path):
    path = write(tmp_path, "jsonl")
    with pytest.raises(ConfigError, match="no column 'review'; found text, reward"):
        dataset_source(str(path), column="review")
    with pytest.raises(ConfigError, match="no split 'validation'; found train, test"):
        dataset_source(str(write(tmp_path, "saved")), split="validation")
    odd = tmp_path / "rows.xml"
    odd.write_text("<rows/>")
    with pytest.raises(ConfigError, match="unknown file type '.xml'"):
        dataset_source(str(odd))


def test_rlkit_run_reads_prompts_through_the_registered_source(tmp_path, methods_host):
    from rlkit_core.config import SourceConfig
    from rlkit_core.run import load_source

    path = write(tmp_path, "parquet")
    source = SourceConfig(pipeline="dataset", kwargs={"path": str(path), "column": "text", "reward_column": "none"})
    assert load_source(source, methods_host.registry, "data.prompts") == [r["text"] for r in ROWS]
