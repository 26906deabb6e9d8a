"""Copy a packaged app to a KR260 over ssh and load it with xmutil.

The folder from `mcf package` goes to /lib/firmware/xilinx/<app>/ on the board
(via a temporary directory and sudo), then `xmutil unloadapp` and
`xmutil loadapp <app>` run there. --dry-run prints the commands instead.

Examples:
  mcf flash -d build/kr260-node0 --host ubuntu@kria.local
  mcf flash -d build/kr260-node0 --host ubuntu@kria.local --dry-run
"""
from mcf_fpga.host.errors import int_in

NAME = "flash"
HELP = "copy a packaged app to a board over ssh and load it (xmutil loadapp)"


def add_arguments(p):
    p.add_argument("-d", "--build-dir", default="build/kr260-node0",
                   help="build directory holding package/<app>/ (default build/kr260-node0)")
    p.add_argument("--host", required=True, help="ssh destination, user@board")
    p.add_argument("--app", default=None, help="app name (default: the one recorded by mcf build)")
    p.add_argument("--port", type=int_in(1, 65535), default=None, help="ssh port, 1..65535")
    p.add_argument("--dry-run", action="store_true", help="print the commands, run nothing")


def run(args) -> int:
    from mcf_fpga.boards.package import flash
    flash(args.build_dir, args.host, app=args.app, port=args.port, dry_run=args.dry_run)
    return 0
