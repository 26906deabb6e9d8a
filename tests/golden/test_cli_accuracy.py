import json

from mcf_fpga.host.cli import main


def test_mcf_accuracy_json(capsys):
    assert main(["accuracy", "--model", "micro", "--prompt-len", "12", "--max-new-tokens", "3", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert len(out["prompt"]) == 12 and len(out["tokens"]) == 3
    assert 0.0 <= out["top1_agreement"] <= 1.0 and -1.0 <= out["logits_cos_mean"] <= 1.0
    assert out["int_tokens"] == out["tokens"]


def test_mcf_accuracy_bad_input(capsys, tmp_path):
    assert main(["accuracy", "--prompt-len", "0"]) == 2
    assert "argument --prompt-len: 0 must be >= 1" in capsys.readouterr().err
    f = tmp_path / "toks.txt"
    f.write_text("1 2 99999")
    assert main(["accuracy", "--model", "micro", "--prompt-tokens", str(f)]) == 2
    assert "token id 99999 at position 2 outside [0, 256) (vocab_size=256)" in capsys.readouterr().err
    assert main(["accuracy", "--model", "nope"]) == 2
    assert "model='nope' unknown" in capsys.readouterr().err
