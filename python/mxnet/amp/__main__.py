"""Command line: ``python -m mxnet.amp {demo,...}``.

Each command lives in its own module, which provides ``add_arguments(parser)`` and ``run(args) -> int``;
user mistakes print one line (``error: ...``) and exit with status 2, never a traceback.
"""
import argparse
import importlib
import sys

#: command name -> (module, one-line help)
COMMANDS = {
    "demo": ("mxnet.amp.cli.demo", "train a small CNN on the digits data set with AMP next to fp32"),
    "lists": ("mxnet.amp.cli.lists", "show the operator categories, or one operator's category and why"),
    "doctor": ("mxnet.amp.cli.doctor", "find the ops and gradients that overflow or underflow in low precision"),
    "hardware": ("mxnet.amp.cli.hardware", "which low precision dtypes and ops run natively on this machine"),
    "convert": ("mxnet.amp.cli.convert", "convert a saved float32 model to float16/bfloat16 and report what changed"),
}


class _Parser(argparse.ArgumentParser):
    """Reports a bad command line in one line (``error: ... (see --help)``), without the usage block."""

    def error(self, message):
        self.exit(2, "error: %s (see %s --help)\n" % (message, self.prog))


def main(argv=None):
    """Parse ``argv`` and run the chosen command; return the exit status."""
    parser = _Parser(prog="python -m mxnet.amp", description="MXNet automatic mixed precision")
    sub = parser.add_subparsers(dest="command", required=True)
    modules = {}
    for name, (module, help_text) in COMMANDS.items():
        modules[name] = importlib.import_module(module)
        modules[name].add_arguments(sub.add_parser(name, help=help_text, description=help_text))
    args = parser.parse_args(argv)
    try:
        return modules[args.command].run(args)
    except (ValueError, TypeError, FileNotFoundError) as err:
        print("error: %s" % err, file=sys.stderr)
        return 2
    except BrokenPipeError:  # output piped into `head` and the like
        sys.stderr.close()
        return 0


if __name__ == "__main__":
    sys.exit(main())
