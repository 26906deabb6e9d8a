"""``host.engine_fit.check_engine_fits``: a model shape against a node's engine parameters, one
message per limit naming the model's dimension and the engine's limit."""
import pytest

from mcf_fpga.golden.config import CONFIGS, ModelConfig
from mcf_fpga.host.engine_fit import check_engine_fits
from mcf_fpga.host.executors.rtl import SIM_ENGINE

# fits SIM_ENGINE (head_dim 16, group 32, pn 4, pk 16 x kc_max 8 = 128, d_max 128) at its limits
FITS = ModelConfig("fits", vocab_size=256, hidden_size=128, intermediate_size=128, num_layers=1, num_heads=8,
                   num_kv_heads=2, head_dim=16, max_position=256, group_size=128)


def test_fitting_models_pass():
    check_engine_fits(FITS, SIM_ENGINE)
    check_engine_fits(CONFIGS["micro"], SIM_ENGINE)


@pytest.mark.parametrize("change, engine, message", [
    (dict(head_dim=32, num_heads=4), {}, "the model's head_dim=32 does not fit the engine of N: its attention "
                                         "unit computes head_dim=16 exactly"),
    (dict(group_size=64, hidden_size=64, intermediate_size=64, num_heads=4), {"group": 128},
     "the model's INT4 weight group_size=64 does not fit the engine of N: not a multiple of its GEMM group=128"),
    (dict(intermediate_size=256), {}, "the model's intermediate_size=256 does not fit the engine of N: GEMM "
                                      "inputs are at most pk*kc_max=128"),
    (dict(num_heads=16, num_kv_heads=2), {}, "the model's num_heads*head_dim=256 does not fit the engine of N: "
                                             "GEMM inputs are at most pk*kc_max=128"),
    (dict(), {"d_max": 64}, "the model's hidden_size=128 does not fit the engine of N: vector rows are at most "
                            "d_max=64"),
    (dict(vocab_size=254), {}, "the model's vocab_size=254 does not fit the engine of N: GEMM outputs are whole "
                               "tiles of pn=4 rows"),
    (dict(), {"pn": 3}, "the model's vocab_size=256 does not fit the engine of N: GEMM outputs are whole tiles "
                        "of pn=3 rows"),
])
def test_each_limit_is_named(change, engine, message):
    with pytest.raises(ValueError) as exc:
        check_engine_fits(FITS.replace(**change), dict(SIM_ENGINE, **engine), node="N")
    assert str(exc.value) == message
