import pytest

from mcf_fpga.golden.config import CONFIGS, ModelConfig, get_config


def test_named_configs_are_valid():
    assert get_config("qwen2.5-1.5b").head_dim == 128
    assert get_config("qwen2.5-0.5b").num_kv_heads == 2
    assert set(CONFIGS) >= {"qwen2.5-0.5b", "qwen2.5-1.5b", "tiny", "micro"}


@pytest.mark.parametrize("changes, field", [
    (dict(num_heads=5), "num_heads"),
    (dict(head_dim=15), "head_dim"),
    (dict(group_size=48), "group_size"),
    (dict(hidden_size=0), "hidden_size"),
])
def test_bad_config_names_field(changes, field):
    with pytest.raises(ValueError, match=rf"{field}=.*expected"):
        get_config("micro").replace(**changes)


def test_unknown_model():
    with pytest.raises(ValueError, match="model='nope' unknown"):
        get_config("nope")


def test_hf_dict_round_trip():
    cfg = get_config("tiny")
    back = ModelConfig.from_hf_dict(cfg.to_hf_dict(), name="tiny")
    assert back == cfg.replace(group_size=128)


def test_rms_norm_eps_limit_matches_the_engine_field():
    """RMS_NORM_EPS_MAX: EPS_Q = eps * 2**(2*FA) fits the engine's eps_q instruction field."""
    from amaranth.hdl import Shape

    from mcf_fpga.golden import numerics as nx
    from mcf_fpga.golden.config import RMS_NORM_EPS_MAX
    from mcf_fpga.hdl.compute.engine import INSTR
    width = Shape.cast(dict(iter(INSTR))["eps_q"].shape).width
    assert RMS_NORM_EPS_MAX * 2 ** (2 * nx.FA) == 2 ** width
    with pytest.raises(ValueError, match=r"rms_norm_eps=1000000000000.0, expected a number in \(0, 256\)"):
        get_config("micro").replace(rms_norm_eps=1e12)
