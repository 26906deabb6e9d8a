"""Package a KR260 build as a dfx-mgr app folder: <app>.bit.bin, <app>.dtbo, shell.json.

Reads the build directory written by `mcf build`. The bitstream comes from
Vivado's `-bin_file` output (<app>.bit.bin), or from <app>.bit through bootgen
when bootgen is on PATH; without either this says what is missing and fails —
it never writes a fake bitstream. The device-tree overlay is generated
(<app>.dtsi, kept in the build directory) and compiled with dtc.

Examples:
  mcf package -d build/kr260-node0
"""
NAME = "package"
HELP = "make the dfx-mgr app folder (<app>.bit.bin, <app>.dtbo, shell.json) from a build"


def add_arguments(p):
    p.add_argument("-d", "--build-dir", default="build/kr260-node0",
                   help="build directory from `mcf build` (default build/kr260-node0)")
    p.add_argument("--app", default=None, help="app name (default: the one recorded by mcf build)")


def run(args) -> int:
    from mcf_fpga.boards.package import package
    res = package(args.build_dir, app=args.app)
    print(f"app folder: {res.folder}")
    for f in res.files:
        print(f"  {f}")
    return 0
