"""Package a KR260 build as a dfx-mgr app folder: <app>.bit.bin, <app>.dtbo, shell.json.

Reads the build directory written by `mcf build`. The bitstream comes from
Vivado's `-bin_file` output (<app>.bit.bin), or from <app>.bit through bootgen
when bootgen is on PATH; without either this says what is missing and fails —
it never writes a fake bitstream. The device-tree overlay is generated
(<app>.dtsi, kept in the build directory) and compiled with dtc.

With --pynq it first writes a PYNQ overlay folder, package/pynq/<app>/: <app>.bit (Vivado's),
<app>.hwh (Vivado's, with the node's registers added from the build's regmap.json, so PYNQ's
ip_dict lists them) and <app>.dtbo (without the firmware-name fragment). docs/ip.md.

Examples:
  mcf package -d build/kr260-node0
  mcf package -d build/kr260-node0 --pynq
"""
NAME = "package"
HELP = "make the dfx-mgr app folder (<app>.bit.bin, <app>.dtbo, shell.json) from a build"


def add_arguments(p):
    p.add_argument("-d", "--build-dir", default="build/kr260-node0",
                   help="build directory from `mcf build` (default build/kr260-node0)")
    p.add_argument("--app", default=None, help="app name (default: the one recorded by mcf build)")
    p.add_argument("--pynq", action="store_true",
                   help="also write the PYNQ overlay folder package/pynq/<app>/ (<app>.bit, "
                        "<app>.hwh with the register map, <app>.dtbo)")
    p.add_argument("--json", action="store_true",
                   help="print one JSON object on stdout (folder, files; pynq folder and files)")


def run(args) -> int:
    from mcf_fpga.boards.package import package
    res = package(args.build_dir, app=args.app, pynq=args.pynq)
    if args.json:
        import json
        out = {"folder": res.folder, "files": res.files}
        if res.pynq is not None:
            out["pynq"] = {"folder": res.pynq.folder, "files": res.pynq.files}
        print(json.dumps(out))
        return 0
    if res.pynq is not None:
        print(f"PYNQ overlay folder: {res.pynq.folder}")
        for f in res.pynq.files:
            print(f"  {f}")
    print(f"app folder: {res.folder}")
    for f in res.files:
        print(f"  {f}")
    return 0
