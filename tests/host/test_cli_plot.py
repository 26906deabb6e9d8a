from mcf_fpga.host.cli import main


def test_mcf_plot_writes_pngs(tmp_path, capsys):
    assert main(["plot", "fig4", "fig3", "--model", "micro", "--nodes", "4", "--prompt-len", "512",
                 "--seq-lens", "256,512", "-o", str(tmp_path)]) == 0
    for name in ("fig4_memory_replica.png", "fig3_ttft.png"):
        data = (tmp_path / name).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000
    assert "wrote" in capsys.readouterr().out


def test_mcf_plot_bad_input(tmp_path, capsys):
    assert main(["plot", "fig9", "-o", str(tmp_path)]) == 2
    assert "figure 'fig9' unknown" in capsys.readouterr().err
    assert main(["plot", "fig3", "--seq-lens", "0", "-o", str(tmp_path)]) == 2
    assert "--seq-lens" in capsys.readouterr().err
