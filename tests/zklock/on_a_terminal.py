#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""on_a_terminal.py RELEASE_FILE COMMAND...: runs COMMAND with a pseudo-terminal as its stdin,
stdout and stderr; once it has said "queued for", creates RELEASE_FILE (a holder in the test waits
for it). Prints what COMMAND wrote (CR LF as LF) and exits with its status. Gives up after 60 s."""
import os
import pty
import select
import sys
import time

release, command = sys.argv[1], sys.argv[2:]
pid, terminal = pty.fork()
if pid == 0:
    os.execv(command[0], command)
output = b""
deadline = time.monotonic() + 60
while time.monotonic() < deadline:
    ready, _, _ = select.select([terminal], [], [], 0.1)
    if not ready:
        continue
    try:
        chunk = os.read(terminal, 4096)
    except OSError:  # EIO: the child closed the terminal
        break
    if not chunk:
        break
    output += chunk
    if b"queued for" in output and not os.path.exists(release):
        open(release, "w").close()
else:
    os.kill(pid, 9)
sys.stdout.write(output.decode("utf-8", "replace").replace("\r\n", "\n"))
_, status = os.waitpid(pid, 0)
sys.exit(os.waitstatus_to_exitcode(status) if os.WIFEXITED(status) else 128 + os.WTERMSIG(status))
