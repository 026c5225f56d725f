"""trlX's model classes and hf_get_* helpers under rlkit's paths."""

import accelerate
import pytest
import torch
import transformers
from tiny_models import CONFIGS, TOKENS, VOCAB, build, left_padded

from rlkit_accelerate.models import (
    AutoModelForCausalLMWithHydraValueHead,
    AutoModelForCausalLMWithILQLHeads,
    AutoModelForCausalLMWithValueHead,
    AutoModelForSeq2SeqLMWithHydraValueHead,
    AutoModelForSeq2SeqLMWithILQLHeads,
    AutoModelForSeq2SeqLMWithValueHead,
    hf_get_decoder,
    hf_get_decoder_blocks,
    hf_get_decoder_final_norm,
    hf_get_hidden_size,
    hf_get_lm_head,
    hf_get_num_hidden_layers,
)


def t5_config():
    return transformers.T5Config(num_layers=2, num_decoder_layers=3, d_model=32, d_ff=64, num_heads=4, d_kv=8,
                                 vocab_size=VOCAB, decoder_start_token_id=0, pad_token_id=0, eos_token_id=1)


# --- hf_get_* ----------------------------------------------------------------------------


@pytest.mark.parametrize("arch", sorted(CONFIGS))
def test_hf_getters_find_every_piece_even_on_the_meta_device(arch):
    config = CONFIGS[arch](3)
    with accelerate.init_empty_weights():
        model = transformers.AutoModelForCausalLM.from_config(config)
    blocks = hf_get_decoder_blocks(model)
    assert len(blocks) == 3 == hf_get_num_hidden_layers(config)
    assert any(child is blocks for child in hf_get_decoder(model).children())
    norm = hf_get_decoder_final_norm(model)
    assert "norm" in type(norm).__name__.lower()
    assert hf_get_lm_head(model) is model.get_output_embeddings()
    assert hf_get_hidden_size(config) == 32


def test_final_norm_is_what_the_model_applies_last():
    model = build("opt", 2)
    assert hf_get_decoder_final_norm(model) is model.model.decoder.final_layer_norm  # registered before the blocks
    t5 = transformers.AutoModelForSeq2SeqLM.from_config(t5_config())
    assert hf_get_decoder(t5) is t5.decoder and len(hf_get_decoder_blocks(t5)) == 3
    assert hf_get_decoder_final_norm(t5) is t5.decoder.final_layer_norm
    with pytest.raises(ValueError, match="has none of the attributes hidden_size, n_embd, d_model"):
        hf_get_hidden_size(object())


# --- causal value-head classes -------------------------------------------------------------


def test_from_config_forward_and_tuple_output():
    model = AutoModelForCausalLMWithValueHead.from_config(CONFIGS["gpt2"](2)).eval()
    assert model.reference is None and model.frozen_head is None
    input_ids, attention_mask = left_padded()
    out = model(input_ids=input_ids, attention_mask=attention_mask, return_dict=True, output_hidden_states=True)
    assert out.logits.shape == (3, 9, VOCAB) and out.value.shape == (3, 9)
    assert len(out.hidden_states) == 3  # embeddings + 2 blocks (the last after the final norm)
    as_tuple = model(input_ids=input_ids, attention_mask=attention_mask, return_dict=False)
    assert torch.equal(as_tuple[0], out.logits) and torch.equal(as_tuple[-1], out.value)


@pytest.mark.parametrize("arch", ["gpt2", "llama"])
@pytest.mark.parametrize("unfrozen", [-1, 0, 2])
def test_forward_hydra_equals_the_policy_at_the_start(arch, unfrozen):
    torch.manual_seed(0)
    model = AutoModelForCausalLMWithHydraValueHead(build(arch, 3), num_layers_unfrozen=unfrozen).eval()
    input_ids, attention_mask = left_padded()
    with torch.no_grad():
        policy = model(input_ids=input_ids, attention_mask=attention_mask, return_dict=True, output_hidden_states=True)
        hydra = model.forward_hydra(input_ids=input_ids, attention_mask=attention_mask, return_dict=True,
                                    output_hidden_states=True)
    assert torch.equal(policy.logits, hydra.logits)
    assert torch.equal(policy.hidden_states[-1], hydra.hidden_states[-1])
    assert torch.equal(model.forward_hydra(input_ids=input_ids, attention_mask=attention_mask), hydra.logits)
    if unfrozen >= 0:
        assert all(not p.requires_grad for p in model.frozen_head.parameters())
        assert torch.equal(model.frozen_head.lm_head(policy.hidden_states[-1]), policy.logits)
    else:
        assert model.frozen_head is None


def test_rlkit_arguments_reach_rlkit_forward():
    model = AutoModelForCausalLMWithHydraValueHead(build("gpt2", 2), num_layers_unfrozen=1)
    input_ids, attention_mask = left_padded()
    response = torch.randint(3, VOCAB, (3, 4))
    out = model(input_ids, attention_mask, response_ids=response)
    assert out.logits.shape == (3, 4, VOCAB) and out.values.shape == (3, 4)


def test_state_dict_has_no_reference_and_heads_only_has_the_heads():
    model = AutoModelForCausalLMWithHydraValueHead(build("gpt2", 3), num_layers_unfrozen=2, num_value_layers_unfrozen=1)
    keys = list(model.state_dict())
    assert keys and not any(k.startswith(("reference.", "frozen_head.")) for k in keys)
    assert {k.split(".")[0] for k in model.state_dict(heads_only=True)} == {"v_head", "value_branch"}
    parent = torch.nn.ModuleDict({"policy": model})  # nested, as inside a wrapper
    assert not any(".reference." in k for k in parent.state_dict())


def sample(model, input_ids, attention_mask):
    torch.manual_seed(5)
    return model.generate(input_ids=input_ids, attention_mask=attention_mask, max_new_tokens=6, do_sample=True,
                          pad_token_id=TOKENS["pad_token_id"])


@pytest.mark.parametrize("saved_with, loaded_with", [(2, -1), (-1, 2), (2, 0)])
def test_checkpoint_loads_across_num_layers_unfrozen_and_generates_the_same(saved_with, loaded_with, tmp_path):
    torch.manual_seed(0)
    trained = AutoModelForCausalLMWithHydraValueHead(build("gpt2", 3, seed=1), num_layers_unfrozen=saved_with)
    with torch.no_grad():  # "training": move the policy away from its reference
        for p in trained.parameters():
            if p.requires_grad:
                p.add_(torch.randn_like(p) * 0.05)
    torch.save(trained.state_dict(), tmp_path / "model.pt")
    fresh = AutoModelForCausalLMWithHydraValueHead(build("gpt2", 3, seed=2), num_layers_unfrozen=loaded_with)
    fresh.load_state_dict(torch.load(tmp_path / "model.pt", weights_only=True))
    input_ids, attention_mask = left_padded()
    assert torch.equal(sample(fresh.eval(), input_ids, attention_mask), sample(trained.eval(), input_ids, attention_mask))
    with torch.no_grad():
        want = trained(input_ids=input_ids, attention_mask=attention_mask, return_dict=True)
        got = fresh(input_ids=input_ids, attention_mask=attention_mask, return_dict=True)
        assert torch.equal(got.logits, want.logits) and torch.equal(got.value, want.value)
        # the reference is rebuilt from what was loaded: the loaded policy is the starting point
        assert torch.equal(fresh.forward_hydra(input_ids=input_ids, attention_mask=attention_mask), got.logits)


def test_load_state_dict_is_strict_about_the_policy_and_drops_trlx_frozen_head_keys():
    model = AutoModelForCausalLMWithHydraValueHead(build("gpt2", 2), num_layers_unfrozen=1)
    state = model.state_dict()
    state["frozen_head.decoder_blocks.0.attn.c_attn.weight"] = torch.zeros(1)  # what trlX's checkpoints held
    model.load_state_dict(state)
    del state["v_head.0.weight"]
    with pytest.raises(RuntimeError, match=r"missing keys \['v_head.0.weight'\]"):
        model.load_state_dict(state)
    assert model.load_state_dict(state, strict=False).missing_keys == ["v_head.0.weight"]


def test_save_pretrained_and_from_pretrained_round_trip(tmp_path):
    model = AutoModelForCausalLMWithHydraValueHead.from_pretrained(build("gpt2", 2), num_layers_unfrozen=1)
    model.save_pretrained(tmp_path)
    loaded = AutoModelForCausalLMWithHydraValueHead.from_pretrained(str(tmp_path), num_layers_unfrozen=-1)
    assert model.state_dict().keys() == loaded.state_dict().keys()
    for key, value in model.state_dict().items():
        assert torch.equal(value, loaded.state_dict()[key]), key
    assert transformers.AutoModelForCausalLM.from_pretrained(str(tmp_path)) is not None  # plain HF export


def test_from_pretrained_with_peft_config(tmp_path):
    pytest.importorskip("peft")
    build("gpt2", 2).save_pretrained(tmp_path / "base")
    lora = {"peft_type": "LORA", "r": 4, "lora_alpha": 8, "target_modules": ["c_attn"]}
    model = AutoModelForCausalLMWithHydraValueHead.from_pretrained(str(tmp_path / "base"), peft_config=lora,
                                                                   num_layers_unfrozen=2)
    assert model.peft_type == "LORA" and model.frozen_head is None
    trainable = {n.split(".")[0] for n, p in model.named_parameters() if p.requires_grad}
    assert trainable == {"base_model", "v_head"}
    assert all("lora" in n for n, p in model.base_model.named_parameters() if p.requires_grad)
    input_ids, attention_mask = left_padded()
    model.eval()
    with torch.no_grad():
        hydra = model.forward_hydra(input_ids=input_ids, attention_mask=attention_mask)
        plain = model(input_ids=input_ids, attention_mask=attention_mask, return_dict=True, ignore_peft_adapter=True)
    assert torch.equal(hydra, plain.logits)
    model.save_pretrained(tmp_path / "adapter")
    again = AutoModelForCausalLMWithHydraValueHead.from_pretrained(str(tmp_path / "adapter"))
    assert again.peft_type == "LORA"
    assert torch.equal(again.v_head[0].weight, model.v_head[0].weight)


# --- seq2seq value-head classes --------------------------------------------------------------


def seq2seq_inputs():
    input_ids = torch.tensor([[5, 6, 7, 1], [8, 9, 1, 0]])
    decoder_input_ids = torch.tensor([[0, 11, 12], [0, 13, 14]])
    return dict(input_ids=input_ids, attention_mask=(input_ids != 0).long(), decoder_input_ids=decoder_input_ids)


@pytest.mark.parametrize("unfrozen", [-1, 2])
def test_seq2seq_forward_over_decoder_input_ids_and_hydra(unfrozen):
    torch.manual_seed(0)
    model = AutoModelForSeq2SeqLMWithHydraValueHead.from_config(t5_config(), num_layers_unfrozen=unfrozen).eval()
    inputs = seq2seq_inputs()
    with torch.no_grad():
        out = model(**inputs, return_dict=True, output_hidden_states=True)
        hydra = model.forward_hydra(**inputs, return_dict=True, output_hidden_states=True)
    assert out.logits.shape == (2, 3, VOCAB) and out.value.shape == (2, 3)
    assert torch.equal(out.logits, hydra.logits)
    assert (model.frozen_head is None) == (unfrozen < 0)
    plain = AutoModelForSeq2SeqLMWithValueHead.from_config(t5_config())
    assert plain.reference is None and plain(**inputs).value.shape == (2, 3)


def test_seq2seq_state_dict_loads_across_num_layers_unfrozen():
    saved = AutoModelForSeq2SeqLMWithHydraValueHead.from_config(t5_config(), num_layers_unfrozen=2)
    loaded = AutoModelForSeq2SeqLMWithHydraValueHead.from_config(t5_config(), num_layers_unfrozen=-1)
    loaded.load_state_dict(saved.state_dict())
    inputs = seq2seq_inputs()
    with torch.no_grad():
        assert torch.equal(saved.eval()(**inputs).logits, loaded.eval()(**inputs).logits)


# --- ILQL classes -------------------------------------------------------------------------


def test_causal_ilql_forward_tuple_dict_and_generate_max_length():
    model = AutoModelForCausalLMWithILQLHeads.from_config(CONFIGS["gpt2"](2), two_qs=True, alpha=0.8).eval()
    assert model.two_qs and model.ilql_heads.alpha == 0.8
    input_ids, attention_mask = left_padded()
    logits, qs, target_qs, vs, _ = model(input_ids=input_ids, attention_mask=attention_mask)
    assert logits.shape == (3, 9, VOCAB) and len(qs) == 2 and vs.shape == (3, 9, 1)
    out = model(input_ids=input_ids, attention_mask=attention_mask, return_dict=True, output_hidden_states=True)
    assert torch.equal(out.logits, logits) and len(out.hidden_states) == 3
    samples = model.generate(input_ids, attention_mask, max_new_tokens=8, max_length=12, eos_token_id=1, pad_token_id=2)
    assert samples.shape[1] <= 12 and torch.equal(samples[:, :9], input_ids)
    assert set(model.state_dict()) == set(AutoModelForCausalLMWithILQLHeads.from_config(CONFIGS["gpt2"](2)).state_dict())


def test_seq2seq_ilql_forward_and_generate_from_decoder_input_ids():
    torch.manual_seed(0)
    model = AutoModelForSeq2SeqLMWithILQLHeads.from_config(t5_config(), two_qs=False)
    inputs = seq2seq_inputs()
    logits, qs, target_qs, vs, _, encoder = model(**inputs)
    assert logits.shape == (2, 3, VOCAB) and len(qs) == 1 and vs.shape == (2, 3, 1)
    assert encoder[0].shape == (2, 4, 32)
    prefix = inputs["decoder_input_ids"]
    out = model.generate(inputs["input_ids"], inputs["attention_mask"], decoder_input_ids=prefix, max_new_tokens=3,
                         eos_token_id=1, pad_token_id=0)
    assert torch.equal(out[:, :3], prefix) and out.shape[1] <= 6
    # with a logit mask that allows only token 40 after the prefix's last tokens, the first
    # new token follows the prefix, not the prompt
    mask = torch.ones(VOCAB, VOCAB, dtype=torch.bool)
    mask[12, 40] = mask[14, 40] = False
    masked = model.generate(inputs["input_ids"], inputs["attention_mask"], decoder_input_ids=prefix, max_new_tokens=1,
                            eos_token_id=1, pad_token_id=0, logit_mask=mask)
    assert masked[:, 3].tolist() == [40, 40]
    start_only = model.generate(inputs["input_ids"], inputs["attention_mask"], max_new_tokens=2, eos_token_id=1,
                                pad_token_id=0)
    assert start_only[:, 0].tolist() == [0, 0]


@pytest.mark.parametrize("cls", [AutoModelForCausalLMWithHydraValueHead, AutoModelForCausalLMWithILQLHeads])
def test_outputs_carry_the_cache_under_either_transformers_name(cls):
    """transformers 5.24 renamed outputs' past_key_values to cache; trlX's spelling still reads it."""
    from rlkit_accelerate.models.cache_name import output_cache

    model = cls(build("llama", 2)).eval()
    input_ids, attention_mask = left_padded()
    with torch.no_grad():
        out = model(input_ids=input_ids, attention_mask=attention_mask, use_cache=True, return_dict=True)
    cache = output_cache(out)
    assert cache is not None and cache.get_seq_length() == input_ids.shape[1]
    assert out.past_key_values is cache
