"""``mcf run --checkpoint DIR --prompt-tokens FILE --numerics float|int``: a Hugging Face
checkpoint written by transformers runs as transformers computes it (float, golden backend), as
``mcf accuracy``'s integer model computes it (int, golden backend) and, on the simulated cluster,
bit for bit as golden's integer model; every bad checkpoint, prompt file and option combination is
one line and exit code 2."""
import json

import pytest
import torch

from tests.host._checkpoint import CORRUPTIONS, copy_checkpoint, write_checkpoint, write_transformers_checkpoint
from tests.cli_helpers import last_line as _last, run as _run

pytestmark = pytest.mark.filterwarnings("ignore:.*created but never used")

PROMPT = [3, 17, 200, 45, 9, 130, 77, 250, 1, 64, 99, 12, 180, 33, 5, 240, 111, 90, 7, 150]


@pytest.fixture(scope="module")
def hf(tmp_path_factory):
    """(transformers model, its checkpoint directory, a prompt file of PROMPT)."""
    base = tmp_path_factory.mktemp("hf")
    model, d = write_transformers_checkpoint(base / "ckpt")
    f = base / "prompt.json"
    f.write_text(json.dumps(PROMPT))
    return model, d, f


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    """A valid checkpoint (golden's save_hf, head_dim 64) that every corruption starts from."""
    return write_checkpoint(tmp_path_factory.mktemp("ckpt") / "base")


def _greedy_transformers(model, prompt, k):
    """transformers' greedy tokens: argmax of the last logits, the whole sequence each step."""
    ids = list(prompt)
    with torch.no_grad():
        for _ in range(k):
            logits = model(input_ids=torch.tensor([ids])).logits[0, -1]
            ids.append(int(torch.argmax(logits)))
    return ids[len(prompt):]


def test_float_golden_equals_transformers(capsys, hf):
    model, d, f = hf
    rc, out, err = _run(capsys, ["run", "--checkpoint", str(d), "--prompt-tokens", str(f), "--numerics", "float",
                                 "--backend", "golden", "--max-new-tokens", "8", "--json"])
    assert rc == 0, err
    o = json.loads(out)
    assert o["numerics"] == "float" and o["checkpoint"] == str(d) and o["backend"] == "golden"
    assert o["prompt"] == PROMPT
    want = _greedy_transformers(model, PROMPT, 8)
    assert o["tokens"] == want
    assert o["matches_golden"] is None and o["ttft_cycles"] is None and o["runs"] == {}
    # the text output names the numerics, the checkpoint and the tokens
    rc, out, err = _run(capsys, ["run", "--checkpoint", str(d), "--prompt-tokens", str(f), "--numerics", "float",
                                 "--backend", "golden", "--max-new-tokens", "8"])
    assert rc == 0 and f"checkpoint {d}" in out and "numerics float" in out and f"tokens {want}" in out


def test_int_golden_equals_accuracy_integer_model(capsys, hf):
    """The integer path on the golden backend generates what ``mcf accuracy``'s integer model
    generates for the same checkpoint and prompt."""
    _model, d, f = hf
    rc, out, err = _run(capsys, ["run", "--checkpoint", str(d), "--prompt-tokens", str(f), "--backend", "golden",
                                 "--nodes", "2", "--max-new-tokens", "4", "--json"])
    assert rc == 0, err
    o = json.loads(out)
    assert o["numerics"] == "int" and o["checkpoint"] == str(d) and o["prompt"] == PROMPT
    assert o["matches_golden"] is True and set(o["runs"]) == {"mars", "ring"}
    rc, out, err = _run(capsys, ["accuracy", "--checkpoint", str(d), "--prompt-tokens", str(f),
                                 "--max-new-tokens", "4", "--json"])
    assert rc == 0, err
    acc = json.loads(out)
    assert o["tokens"] == acc["int_tokens"]
    for r in o["runs"].values():
        assert r["tokens"] == acc["int_tokens"]
    rc, out, err = _run(capsys, ["run", "--checkpoint", str(d), "--prompt-tokens", str(f), "--backend", "golden",
                                 "--nodes", "2", "--max-new-tokens", "4"])
    assert rc == 0 and f"checkpoint {d}" in out and "numerics int" in out


@pytest.fixture(scope="module")
def golden_int_tokens(hf):
    """The golden integer path's tokens for the cluster runs below (IntModel, group 128)."""
    from mcf_fpga.golden.int_model import IntModel, quantize_model
    from mcf_fpga.golden.model import load_hf
    _model, d, _f = hf
    return IntModel(quantize_model(load_hf(d))).generate(PROMPT, 3)


@pytest.mark.slow
@pytest.mark.parametrize("backend", [["--backend", "rtl"], ["--backend", "board", "--simulate-boards"]])
def test_int_cluster_equals_golden(capsys, hf, golden_int_tokens, backend):
    """The Verilated cluster (the default chip node: a group-32 GEMM; the checkpoint quantised with
    group 128 as mcf accuracy does) and the simulated boards give the golden integer path's
    logits and tokens bit for bit."""
    _model, d, f = hf
    rc, out, err = _run(capsys, ["run", "--checkpoint", str(d), "--prompt-tokens", str(f), "--nodes", "2",
                                 "--schedules", "mars", "--max-new-tokens", "3", "--json", "--no-progress"]
                        + backend)
    assert rc == 0, err
    o = json.loads(out)
    r = o["runs"]["mars"]
    assert o["numerics"] == "int" and o["backend"] == backend[1] and o["checkpoint"] == str(d)
    assert r["tokens"] == golden_int_tokens and r["golden_tokens"] == golden_int_tokens
    assert r["logits_match"] and o["matches_golden"] is True and r["ttft_cycles"] > 0


@pytest.mark.parametrize("numerics", ["int", "float"])
@pytest.mark.parametrize("corruption", sorted(CORRUPTIONS))
def test_corrupt_checkpoint(capsys, checkpoint, tmp_path, corruption, numerics):
    corrupt, message = CORRUPTIONS[corruption]
    d = copy_checkpoint(checkpoint, tmp_path / "c")
    corrupt(d)
    rc, out, err = _run(capsys, ["run", "--checkpoint", str(d), "--backend", "golden", "--numerics", numerics,
                                 "--nodes", "2", "--prompt-len", "8", "--max-new-tokens", "1"])
    assert rc == 2, err
    line = _last(err)
    assert line.startswith(f"mcf run: error: checkpoint {d}") and message in line, err
    assert out == ""


def test_checkpoint_not_a_directory(capsys, tmp_path):
    rc, out, err = _run(capsys, ["run", "--checkpoint", str(tmp_path / "nowhere"), "--backend", "golden"])
    assert rc == 2 and _last(err) == f"mcf run: error: checkpoint {tmp_path / 'nowhere'}: not a directory"


def test_valid_checkpoint_is_accepted(capsys, checkpoint):
    """The base of the corruptions runs (so each refusal above is the corruption's)."""
    for numerics in ("int", "float"):
        rc, out, err = _run(capsys, ["run", "--checkpoint", str(checkpoint), "--backend", "golden", "--nodes", "2",
                                     "--numerics", numerics, "--prompt-len", "8", "--max-new-tokens", "1", "--json"])
        assert rc == 0, err
        assert json.loads(out)["numerics"] == numerics


@pytest.mark.parametrize("argv, message", [
    (["--model", "micro"], "--model=micro with --checkpoint: the checkpoint's config.json gives the model shape, "
                           "drop --model"),
    (["--numerics", "float", "--backend", "rtl"], "--numerics float needs --backend golden: the simulated node "
                                                  "(--backend rtl) computes in integer arithmetic only"),
    (["--numerics", "float", "--backend", "board", "--simulate-boards"],
     "--numerics float needs --backend golden: a board's node (--backend board) computes in integer arithmetic"),
    (["--layers", "2"], "--layers=2 must be in 1..1 (checkpoint {d} has 1 layers)"),
    (["--max-new-tokens", "237"], "--prompt-tokens (20 tokens) + --max-new-tokens=237 = 257 exceeds checkpoint "
                                  "{d}'s max_position=256"),
])
def test_bad_options_with_checkpoint(capsys, hf, argv, message):
    _model, d, f = hf
    rc, out, err = _run(capsys, ["run", "--checkpoint", str(d), "--prompt-tokens", str(f), "--nodes", "2"] + argv)
    assert rc == 2, err
    assert message.format(d=d) in _last(err) and _last(err).startswith("mcf run: error:"), err


@pytest.mark.parametrize("content, message", [
    ("[1, 2, 256]", "token id 256 at position 2 outside [0, 256) (vocab_size=256)"),
    ("5 -1 7", "token id -1 at position 1 outside [0, 256) (vocab_size=256)"),
    ("[1, true]", "token true is not an integer token id"),
    ("", "expected a non-empty list of integer token ids"),
])
def test_prompt_tokens_refused(capsys, hf, tmp_path, content, message):
    _model, d, _f = hf
    f = tmp_path / "toks"
    f.write_text(content)
    rc, out, err = _run(capsys, ["run", "--checkpoint", str(d), "--prompt-tokens", str(f), "--backend", "golden"])
    assert rc == 2, err
    assert _last(err) == f"mcf run: error: --prompt-tokens {f}: {message}"


@pytest.mark.parametrize("backend", [["--backend", "rtl"], ["--backend", "board", "--simulate-boards"]])
def test_shape_that_does_not_fit_the_node(capsys, checkpoint, backend):
    """head_dim 64 on the simulated node (head_dim 16): one line before any build."""
    rc, out, err = _run(capsys, ["run", "--checkpoint", str(checkpoint), "--nodes", "2", "--prompt-len", "8",
                                 "--max-new-tokens", "1"] + backend)
    assert rc == 2, err
    node = "--node chip" if backend[1] == "rtl" else "the board's node"
    assert _last(err) == (f"mcf run: error: the model's head_dim=64 does not fit the engine of {node}: its "
                          f"attention unit computes head_dim=16 exactly")
    assert "[mcf run]" not in err


def test_prompt_tokens_without_checkpoint(capsys, tmp_path):
    """``--prompt-tokens`` with a named model: the prompt is the file's, float and int on golden."""
    from mcf_fpga.golden.config import CONFIGS
    from mcf_fpga.golden.model import FloatModel, random_weights
    f = tmp_path / "toks"
    f.write_text("5 9 200 31 7 0 255 64")
    rc, out, err = _run(capsys, ["run", "--prompt-tokens", str(f), "--backend", "golden", "--nodes", "2",
                                 "--layers", "1", "--max-new-tokens", "2", "--numerics", "float", "--json"])
    assert rc == 0, err
    o = json.loads(out)
    prompt = [5, 9, 200, 31, 7, 0, 255, 64]
    assert o["prompt"] == prompt and o["checkpoint"] is None and o["model"] == "micro"
    cfg = CONFIGS["micro"].replace(num_layers=1)
    assert o["tokens"] == FloatModel(random_weights(cfg, 0)).generate(torch.tensor(prompt), 2)
    rc, out, err = _run(capsys, ["run", "--prompt-tokens", str(f), "--backend", "golden", "--nodes", "2",
                                 "--layers", "1", "--max-new-tokens", "2", "--json"])
    assert rc == 0, err
    o = json.loads(out)
    assert o["prompt"] == prompt and o["numerics"] == "int" and o["matches_golden"] is True
