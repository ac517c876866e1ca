"""A stand-in for an agent harness (Claude Code) in the session-end tests: it runs its hook command
through a shell, as the harness does, once per line of its stdin (the line is the event's JSON,
given to the hook on its stdin), and answers each with a line of JSON on its stdout: the hook's
exit code, stdout and stderr. Between events, and once its stdin is closed, it lives on until the
test kills it.

    python hook_harness.py 'gctl hook claude-code'
"""

from __future__ import annotations

import json
import subprocess
import sys
import time


def main(command: str) -> int:
    for line in sys.stdin:
        # `; exit $?` keeps the shell between the harness and the hook (a shell may exec a lone
        # command instead): the hook must look past it for the harness.
        done = subprocess.run(
            ["sh", "-c", f"{command}; exit $?"],  # noqa: S603, S607
            input=line,
            capture_output=True,
            text=True,
        )
        answer = {"rc": done.returncode, "stdout": done.stdout, "stderr": done.stderr}
        print(json.dumps(answer), flush=True)
    while True:
        time.sleep(3600)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
