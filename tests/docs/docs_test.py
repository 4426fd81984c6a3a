#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Docs are code: every code block of the docs compiled, run, or marked with why it is not.

Reads README.md, docs/*.md, tools/zklock/README.md, examples/**/README.md and the man page
(tools/zklock/zklock.1). From their code blocks it takes
  - each C++ snippet (```cpp): compiled against the library's headers, wrapped in a function
    with the usual includes and the reader's own names (snippet_context.hpp);
  - each zklock command line (after "$ ", a cron schedule, "ExecStart="): run as written against
    a ZooKeeper server started with testenv/zkenv.py, its ensemble (-z, --zk, $ZKLOCK_SERVERS)
    replaced by that server under a chroot of the command's own, so every path is unique;
  - each usage line ("zklock [options] ..."): it must be one of zklock --help's;
  - each ctest command line: listed (ctest -N) in the build directory, where every name its -R
    gives must match a test;
  - each line of a block marked "run": run as written from the source directory.
Every other block must say why it is not run: a marker in the doc, just before the block, "skip
(REASON)" naming the test or CI step that runs it instead, or "output" for output or a formula,
nothing to run. Markers also say what a block needs; tests/docs/README.md lists them. Prints what
it compiled, ran and skipped (with the reasons), and ends with "docs: N passed, N failed".

  docs_test.py --source-dir SRC --zklock BIN --build-dir DIR [--cxx g++ --include-dirs A:B]
               [--only snippets|commands]
"""

import argparse
import glob
import os
import re
import select
import shlex
import shutil
import subprocess
import sys
import tempfile
import time

COMMAND_TIMEOUT_S = 30
NETWORK_CLIENTS = ["curl", "wget"]
COMPILE_TIMEOUT_S = 120
MARKER = re.compile(r"docs-test:\s*(.*?)\s*(?:-->)?\s*$")
CRON_FIELD = r"[0-9*/,-]+|@\w+"


class Block:
    """A code block of a doc: where it starts, its language, its lines, the markers before it."""

    def __init__(self, doc, line, lang, lines, markers):
        self.doc, self.line, self.lang, self.lines, self.markers = doc, line, lang, lines, markers

    def where(self, offset=0):
        return f"{self.doc}:{self.line + offset}"


def parse_markers(texts):
    """'skip (reason)', 'output', 'run', 'given(stub a b)', 'expect(exit 3)' ->
    {'skip': reason, 'output': True, 'run': True, 'given': [...], 'expect_exit': 3}"""
    markers = {"given": [], "expect_exit": 0}
    for text in texts:
        skip = re.match(r"skip\s*\((.*)\)\s*$", text)
        if skip:
            if not skip.group(1).strip():
                raise SystemExit(f"docs-test marker: skip () needs a reason, in '{text}'")
            markers["skip"] = skip.group(1)
            continue
        if text.strip() in ("output", "run"):
            markers[text.strip()] = True
            continue
        if not re.findall(r"(\w+)\s*\(([^()]*)\)", text):
            raise SystemExit(f"docs-test marker: unknown marker '{text}'")
        for name, argument in re.findall(r"(\w+)\s*\(([^()]*)\)", text):
            if name == "given":
                markers["given"].append(argument.split())
            elif name == "expect":
                words = argument.split()
                if len(words) != 2 or words[0] != "exit" or not words[1].isdigit():
                    raise SystemExit(f"docs-test marker: expected expect(exit N), got expect({argument})")
                markers["expect_exit"] = int(words[1])
            elif name != "skip":
                raise SystemExit(f"docs-test marker: unknown {name}(...) in '{text}'")
    return markers


def markdown_blocks(doc, text):
    blocks, pending, lines = [], [], text.split("\n")
    i = 0
    while i < len(lines):
        line = lines[i]
        marker = re.match(r"\s*<!--\s*docs-test:", line)
        if marker:
            pending.append(MARKER.search(line).group(1))
            i += 1
            continue
        fence = re.match(r"^(\s*)```\s*(\S*)", line)
        if fence:
            start, body = i + 1, []
            i += 1
            while i < len(lines) and not re.match(r"^\s*```\s*$", lines[i]):
                body.append(lines[i])
                i += 1
            blocks.append(Block(doc, start + 1, fence.group(2) or "text", body, parse_markers(pending)))
            pending = []
            i += 1
            continue
        if line.startswith("    ") and (i == 0 or not lines[i - 1].strip()) and line.strip():
            start, body = i, []
            while i < len(lines) and (lines[i].startswith("    ") or not lines[i].strip()):
                body.append(lines[i][4:])
                i += 1
            while body and not body[-1].strip():
                body.pop()
            blocks.append(Block(doc, start + 1, "text", body, parse_markers(pending)))
            pending = []
            continue
        if line.strip():
            pending = [] if not line.lstrip().startswith("<!--") else pending
        i += 1
    return blocks


def unroff(line):
    line = line.replace(r"\-", "-").replace(r"\e", "\\").replace(r"\(en", "-")
    return re.sub(r"\\f[BIRP]", "", line)


def man_blocks(doc, text):
    """The man page's .nf/.fi blocks; a '.\\" docs-test: ...' comment before one is its marker."""
    blocks, pending, lines = [], [], text.split("\n")
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith('.\\"'):
            marker = MARKER.search(line)
            if marker and "docs-test:" in line:
                pending.append(marker.group(1))
        elif line == ".nf":
            start, body = None, []
            i += 1
            while i < len(lines) and lines[i] != ".fi":
                if not lines[i].startswith("."):
                    start = start or i + 1
                    body.append(unroff(lines[i]))
                i += 1
            blocks.append(Block(doc, start or i, "text", body, parse_markers(pending)))
            pending = []
        elif line.startswith(".SH") or line.startswith(".TP"):
            pending = []
        i += 1
    return blocks


def doc_blocks(source):
    docs = ["README.md", "tools/zklock/README.md"] + sorted(
        os.path.relpath(p, source) for p in glob.glob(os.path.join(source, "docs", "*.md")))
    docs += sorted(os.path.relpath(p, source)
                   for p in glob.glob(os.path.join(source, "examples", "**", "README.md"), recursive=True))
    blocks = []
    for doc in docs:
        with open(os.path.join(source, doc), encoding="utf-8") as f:
            blocks += markdown_blocks(doc, f.read())
    with open(os.path.join(source, "tools/zklock/zklock.1"), encoding="utf-8") as f:
        blocks += man_blocks("tools/zklock/zklock.1", f.read())
    return blocks


def inline_zklock_spans(source):
    """(where, span) for each `zklock ...` in the prose of the docs (outside code blocks)."""
    spans = []
    for doc in ["README.md", "tools/zklock/README.md"] + sorted(
            os.path.relpath(p, source) for p in glob.glob(os.path.join(source, "docs", "*.md"))):
        in_fence = False
        with open(os.path.join(source, doc), encoding="utf-8") as f:
            for number, line in enumerate(f, 1):
                if re.match(r"^\s*```", line):
                    in_fence = not in_fence
                if in_fence or line.startswith("    "):
                    continue
                spans += [(f"{doc}:{number}", span) for span in re.findall(r"`(zklock [^`]*)`", line)]
    man = "tools/zklock/zklock.1"
    with open(os.path.join(source, man), encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            spans += [(f"{man}:{number}", unroff(span)) for span in re.findall(r"\\fB(zklock .*?)\\fR", line)]
    return spans


def check_inline_options(span, help_text):
    """The options of an inline `zklock ...` must be zklock's: an error, or None."""
    long_names = set(re.findall(r"--([a-z][a-z-]*)", help_text))
    short_names = set(re.findall(r"^\s+-([A-Za-z]),", help_text, re.M))
    for word in span.split()[1:]:
        if word == "--" or word in ("-c", "--command") or word.startswith("/") or re.fullmatch(r"[A-Z][A-Z_]*", word) or word == "...":
            break
        if word.startswith("--"):
            name = word[2:].split("=")[0]
            if name not in long_names:
                return f"`{span}`: --{name} is not an option of zklock --help"
        elif word.startswith("-") and len(word) > 1:
            for letter in word[1:]:
                if letter not in short_names:
                    return f"`{span}`: -{letter} is not an option of zklock --help"
                if letter in "zwENkL":  # takes a value: the rest of the word is it
                    break
    return None


# ---------------------------------------------------------------------------------------------
# Command lines

def logical_lines(block):
    """(offset, text): lines joined across a trailing backslash, an open quote or a trailing pipe."""
    out, i = [], 0
    while i < len(block.lines):
        start, text = i, block.lines[i]
        while i + 1 < len(block.lines):
            stripped = text.rstrip()
            if stripped.endswith("\\"):
                text = stripped[:-1] + " " + block.lines[i + 1].strip()
            elif stripped.endswith("|") or stripped.endswith("&&") or stripped.endswith("||"):
                text = stripped + " " + block.lines[i + 1].strip()
            elif not quotes_balanced(text):
                text = text + "\n" + block.lines[i + 1]
            else:
                break
            i += 1
        out.append((start, text))
        i += 1
    return out


def quotes_balanced(text):
    try:
        shlex.split(text)
        return True
    except ValueError:
        return False


def zklock_command(text):
    """The zklock command in a line of a code block, or None: after '$ ', a cron schedule (with or
    without the user field of /etc/cron.d), or 'ExecStart='."""
    line = text.strip()
    if line.startswith("$ "):
        line = line[2:]
    if line.startswith("ExecStart="):
        line = line[len("ExecStart="):]
    cron = re.match(rf"^(?:(?:{CRON_FIELD})\s+){{5}}(.*)$", line, re.S)
    if cron:
        line = cron.group(1)
        words = line.split(None, 1)
        if len(words) == 2 and not is_zklock(words[0]) and is_zklock(words[1].split(None, 1)[0]):
            line = words[1]  # the user field of /etc/cron.d
    first = line.split(None, 1)[0] if line.split() else ""
    return line if is_zklock(first) else None


def is_zklock(word):
    return word in ("zklock", "/usr/bin/zklock", "/usr/local/bin/zklock")


def ctest_command(text):
    """The ctest command in a line of a code block (alone or after '$ '), or None."""
    line = text.strip()
    if line.startswith("$ "):
        line = line[2:]
    return line if line.split(None, 1)[:1] == ["ctest"] else None


def list_ctest(command, ctest, build_dir):
    """Lists the tests the doc's ctest command would run (its options, -N, in the build directory):
    an error if it fails, lists none, or a name of its -R matches no test; else None."""
    try:
        words = shlex.split(command, comments=True)
    except ValueError as error:
        return f"cannot split the ctest command ({error}):\n    {command}"
    argv, regexes, i = [ctest], [], 1
    while i < len(words):
        if words[i] == "--test-dir":
            i += 2
            continue
        if words[i] in ("-R", "--tests-regex") and i + 1 < len(words):
            regexes.append(words[i + 1])
        argv.append(words[i])
        i += 1
    argv += ["--test-dir", build_dir, "-N"]
    try:
        listed = subprocess.run(argv, cwd=build_dir, capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return f"ctest -N still running after {COMMAND_TIMEOUT_S} s:\n    {' '.join(argv)}"
    names = re.findall(r"^\s*Test\s+#\d+: (\S+)", listed.stdout, re.M)
    if listed.returncode != 0 or not names:
        output = (listed.stdout + listed.stderr).strip().replace("\n", "\n    ")
        return f"lists no test in {build_dir} (built? scripts/install-deps installs what every test needs):\n" \
               f"    {' '.join(argv)}\n  output:\n    {output}"
    for regex in regexes:
        for name in (regex.split("|") if "(" not in regex else [regex]):
            if not any(re.search(name, test) for test in names):
                return f"no test of {build_dir} matches '{name}':\n    {command}"
    return None


def run_line(source, command, expected_exit, workdir):
    """A line of a block marked 'run', run as written from the source directory: an error or None."""
    env = {"PATH": "/usr/bin:/bin", "HOME": workdir, "LANG": "C.UTF-8"}
    try:
        result = subprocess.run(["/bin/sh", "-c", command], cwd=source, env=env, capture_output=True, text=True,
                                timeout=COMMAND_TIMEOUT_S, start_new_session=True)
    except subprocess.TimeoutExpired:
        return f"still running after {COMMAND_TIMEOUT_S} s (a block marked run must be quick):\n    {command}"
    if result.returncode != expected_exit:
        output = (result.stdout + result.stderr).strip().replace("\n", "\n    ")
        return f"exit {result.returncode}, expected {expected_exit}:\n    {command}\n  output:\n    {output}"
    return None


class Ensemble:
    """One ZooKeeper server for the commands, with ZooKeeper's default tickTime (2 s), so that
    zklock's defaults (a 10 s session) are granted as they would be in production."""

    def __init__(self, source, workdir):
        self.zkenv = os.path.join(source, "testenv", "zkenv.py")
        self.dir = os.path.join(workdir, "zk")
        started = subprocess.run(
            ["/usr/bin/python3", self.zkenv, "start", "--servers", "1", "--tick-ms", "2000", "--dir", self.dir,
             "--owner-pid", str(os.getpid())], capture_output=True, text=True, timeout=180)
        if started.returncode != 0:
            raise SystemExit(f"docs: cannot start ZooKeeper: {started.stderr.strip()}")
        with open(os.path.join(self.dir, "connect_string")) as f:
            self.servers = f.read().strip()
        from kazoo.client import KazooClient
        self.client = KazooClient(hosts=self.servers, timeout=10)
        self.client.start(timeout=30)

    def ensure(self, path):
        self.client.ensure_path(path)

    def stop(self):
        try:
            self.client.stop()
            self.client.close()
        finally:
            subprocess.run(["/usr/bin/python3", self.zkenv, "stop", "--dir", self.dir], capture_output=True,
                           timeout=120)


def with_servers(value, servers, chroot):
    """HOSTS[/chroot] of the doc -> the test server, under this command's own chroot."""
    slash = value.find("/")
    doc_chroot = value[slash:] if slash >= 0 else ""
    return servers + chroot + doc_chroot.rstrip("/"), chroot + doc_chroot.rstrip("/")


def rewrite_command(command, servers, chroot, stubs):
    """The command with its ensemble replaced and stubbed programs' absolute paths pointed at the
    stubs. Returns (command, chroots to create)."""
    chroots = [chroot]

    def replace(match):
        option, separator, value = match.group(1), match.group(2), match.group(3)
        quoted = value[:1] in "'\""
        new_value, node = with_servers(value.strip("'\""), servers, chroot)
        chroots.append(node)
        return f"{option}{separator}{shlex.quote(new_value) if quoted else new_value}"

    command = re.sub(r"(?<![\w-])(-z|--zk)(=| +|)('[^']*'|\"[^\"]*\"|[^\s'\"]+)", replace, command)
    command = re.sub(r"(?<![\w/])/usr/(?:local/)?bin/zklock\b", "zklock", command)
    for stub_path, stub in stubs.items():
        if stub_path.startswith("/"):
            command = re.sub(rf"(?<![\w/]){re.escape(stub_path)}(?![\w/.-])", stub, command)
    return command, chroots


STUB = """#!/bin/sh
# A stand-in for {name}, made by docs_test.py: says it ran and with what.
echo "stub {name} ran: $*"
"""


def line_within(stream, expected, timeout_s):
    """True once `stream` gives the line `expected` within timeout_s; False at its end or then."""
    deadline = time.monotonic() + timeout_s
    while True:
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([stream], [], [], left)[0]:
            return False
        line = stream.readline()
        if not line:
            return False
        if line.strip() == expected:
            return True


class CommandRunner:
    def __init__(self, source, zklock, workdir):
        self.source, self.zklock, self.workdir = source, zklock, workdir
        self.ensemble = Ensemble(source, workdir)
        self.count = 0
        self.help_usage = None

    def usage_lines(self):
        if self.help_usage is None:
            help_text = subprocess.run([self.zklock, "--help"], capture_output=True, text=True, timeout=30).stdout
            usage = help_text.split("\n\n")[0]
            self.help_usage = {" ".join(line.split()) for line in usage.split("\n")[1:]}
        return self.help_usage

    def help_text(self):
        return subprocess.run([self.zklock, "--help"], capture_output=True, text=True, timeout=30).stdout

    def check_usage(self, line):
        normal = " ".join(line.split())
        if normal in self.usage_lines():
            return None
        return f"not a usage line of zklock --help:\n    {line.strip()}\n  --help has:\n    " + \
            "\n    ".join(sorted(self.usage_lines()))

    def run(self, block, offset, command):
        self.count += 1
        name = re.sub(r"[^A-Za-z0-9]+", "-", f"{block.doc}-{block.line + offset}").strip("-")
        chroot = f"/docs-test-{os.getpid()}/{name}"
        work = os.path.join(self.workdir, f"command-{self.count}")
        stub_dir = os.path.join(work, "bin")
        os.makedirs(stub_dir)
        zklock_dir = os.path.join(work, "zklock-bin")
        os.makedirs(zklock_dir)
        os.symlink(self.zklock, os.path.join(zklock_dir, "zklock"))
        stubs, holders, terminal_input, nodes = {}, [], None, []
        # Nothing a doc shows reaches the network from here: its HTTP clients are always stubs.
        for given in [["stub", *NETWORK_CLIENTS]] + block.markers["given"]:
            kind, args = given[0], given[1:]
            if kind == "stub":
                for program in args:
                    stub = os.path.join(stub_dir, os.path.basename(program))
                    with open(stub, "w") as f:
                        f.write(STUB.format(name=program))
                    os.chmod(stub, 0o755)
                    stubs[program] = stub
            elif kind == "holder":
                holders += args
            elif kind == "node":
                nodes += args
            elif kind == "terminal":
                terminal_input = " ".join(args) + "\n"
            else:
                raise SystemExit(f"{block.where(offset)}: unknown given({kind} ...)")
        command, chroots = rewrite_command(command, self.ensemble.servers, chroot, stubs)
        for node in chroots:
            self.ensemble.ensure(node)
        for node in nodes:
            self.ensemble.ensure(chroot + node)
        env = {
            "PATH": f"{stub_dir}:{zklock_dir}:/usr/bin:/bin",
            "HOME": work,
            "LANG": "C.UTF-8",
            "ZKLOCK_SERVERS": self.ensemble.servers + chroot,
        }
        started = []
        try:
            for path in holders:
                holder = subprocess.Popen([self.zklock, "--owner", "docs-test-holder", path, "sh", "-c",
                                           "echo held; exec sleep 600"], env=env, stdout=subprocess.PIPE,
                                          stderr=subprocess.STDOUT, text=True, start_new_session=True)
                started.append(holder)
                if not line_within(holder.stdout, "held", COMMAND_TIMEOUT_S):
                    return f"given(holder {path}): the holder did not get the lock within {COMMAND_TIMEOUT_S} s"
            argv = ["/bin/sh", "-c", command]
            if terminal_input is not None:
                argv = ["/usr/bin/script", "-qec", command, "/dev/null"]
            try:
                result = subprocess.run(argv, cwd=self.source, env=env, input=terminal_input or "",
                                        capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S,
                                        start_new_session=True)
            except subprocess.TimeoutExpired:
                return f"still running after {COMMAND_TIMEOUT_S} s (mark it skip (reason) if it waits for ever):\n" \
                       f"    {command}"
            expected = block.markers["expect_exit"]
            if result.returncode != expected:
                output = (result.stdout + result.stderr).strip().replace("\n", "\n    ")
                return f"exit {result.returncode}, expected {expected}:\n    {command}\n  output:\n    {output}"
            return None
        finally:
            for holder in started:
                holder.terminate()
                try:
                    holder.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    holder.kill()
                    holder.wait()

    def stop(self):
        self.ensemble.stop()


# ---------------------------------------------------------------------------------------------
# C++ snippets

FUNCTION_DEFINITION = re.compile(r"^[A-Za-z_][\w:<>,*& ]*\s+[\w:]+\([^()]*\)\s*(?:const\s*)?(?:noexcept\s*)?\{\s*$")


def snippet_parts(block, index):
    """(includes, code): the snippet's includes, for the top of the file, and its code: its function
    definitions at namespace scope, its statements in a function, in a namespace of its own. #line
    directives make the compiler name the doc's own lines."""
    includes, definitions, statements = [], [], []
    lines = block.lines
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("#include"):
            includes.append(line)
        elif FUNCTION_DEFINITION.match(line):
            body = [f'#line {block.line + i} "{block.doc}"', line]
            while i + 1 < len(lines) and not lines[i].startswith("}"):
                i += 1
                body.append(lines[i])
            definitions += body
        else:
            statements += [f'#line {block.line + i} "{block.doc}"', line]
        i += 1
    code = ([f"namespace snippet_{index} {{", "using namespace std::chrono_literals;"] + definitions +
            ["[[maybe_unused]] auto snippet() {"] + statements + ["}", "}  // namespace", ""])
    return includes, code


def compile_snippets(blocks, args, workdir):
    """All snippets in one translation unit (one compiler start instead of one per snippet); the
    errors, which name the doc's lines, are given back to the snippets they fall in."""
    if not blocks:
        return []
    includes, code = [], []
    for index, block in enumerate(blocks):
        snippet_includes, snippet_code = snippet_parts(block, index)
        includes += [line for line in snippet_includes if line not in includes]
        code += snippet_code
    asio = any("asio::" in line for block in blocks for line in block.lines)
    source = os.path.join(workdir, "snippets.cpp")
    with open(source, "w") as f:
        f.write("\n".join((["#define DOCS_SNIPPET_ASIO"] if asio else []) + ['#include "snippet_context.hpp"'] +
                          includes + ["namespace docs_context {"] + code + ["}  // namespace docs_context", ""]))
    include_flags = [f"-I{d}" for d in args.include_dirs.split(":") if d] + [f"-I{os.path.dirname(os.path.abspath(__file__))}"]
    argv = [args.cxx, "-std=c++20", "-fsyntax-only", "-Wall", "-Wno-unused-variable", "-Wno-unused-but-set-variable",
            "-Wno-unused-parameter", "-fdiagnostics-color=never", *include_flags, source]
    result = subprocess.run(argv, capture_output=True, text=True, timeout=COMPILE_TIMEOUT_S)
    if result.returncode == 0:
        return []
    failures, unplaced = {}, []
    for line in result.stderr.split("\n"):
        error = re.match(r"^(.+?):(\d+):\d+: error: ", line)
        if not error:
            continue
        doc, number = error.group(1), int(error.group(2))
        owner = next((b for b in blocks if b.doc == doc and b.line <= number <= b.line + len(b.lines)), None)
        if owner is None:
            unplaced.append(line)
        else:
            failures.setdefault(id(owner), (owner, []))[1].append(line)
    out = [(block, "does not compile:\n    " + "\n    ".join(errors)) for block, errors in failures.values()]
    if unplaced or not out:
        out.append((Block("(snippets)", 0, "cpp", [], {}), "the snippets do not compile:\n    " +
                    result.stderr.strip().replace("\n", "\n    ")))
    return out


# ---------------------------------------------------------------------------------------------

def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--source-dir", required=True)
    parser.add_argument("--zklock", help="the zklock binary (for the commands)")
    parser.add_argument("--build-dir", help="the build directory, whose tests the docs' ctest lines list")
    parser.add_argument("--ctest", default="ctest", help="the ctest to list them with")
    parser.add_argument("--cxx", default="g++")
    parser.add_argument("--include-dirs", default="", help="colon-separated, for the snippets")
    parser.add_argument("--only", choices=["snippets", "commands"])
    parser.add_argument("--jobs", type=int, default=2)
    args = parser.parse_args()
    source = os.path.abspath(args.source_dir)
    if not args.include_dirs:
        args.include_dirs = os.path.join(source, "include")

    blocks = doc_blocks(source)
    skipped, failures = [], []
    passed = {"compiled": 0, "run": 0, "usage": 0, "ctest": 0, "script": 0, "output": 0, "inline": 0}
    snippets, commands = [], []
    for block in blocks:
        if block.lang in ("cpp", "c++"):
            if args.only == "commands":
                continue
            if "skip" in block.markers:
                skipped.append((block.where(), "C++ snippet", block.markers["skip"]))
            else:
                snippets.append(block)
            continue
        if args.only == "snippets":
            continue
        found = []
        for offset, text in logical_lines(block):
            line = text.strip()
            if re.match(r"^zklock \[options\]", line):
                found.append((block, offset, "usage", line))
            elif zklock_command(text) is not None:
                found.append((block, offset, "command", zklock_command(text)))
            elif ctest_command(text) is not None:
                found.append((block, offset, "ctest", ctest_command(text)))
        kinds = [marker for marker in ("skip", "output", "run") if marker in block.markers]
        if len(kinds) > 1:
            failures.append((block.where(), f"marked {' and '.join(kinds)}: one of them at most"))
        elif "output" in block.markers:
            if found:
                failures.append((block.where(), "marked output, but it has a command the test runs: drop the marker"))
            passed["output"] += 1
        elif "run" in block.markers:
            if found:
                failures.append((block.where(), "marked run, but it has a zklock or ctest line, which the test runs "
                                                "its own way: drop the marker"))
            commands += [(block, offset, "script", text) for offset, text in logical_lines(block)
                         if text.strip() and not text.strip().startswith("#")]
        elif "skip" in block.markers:
            for b, offset, kind, command in found:
                if kind != "usage":
                    skipped.append((b.where(offset), command.split("\n")[0], b.markers["skip"]))
            commands += [entry for entry in found if entry[2] == "usage"]
            if not found:
                skipped.append((block.where(), block.lines[0] if block.lines else "", block.markers["skip"]))
        elif found:
            commands += found
        else:
            failures.append((block.where(), "a code block the test neither compiles nor runs: mark it "
                             "<!-- docs-test: skip (REASON) --> naming the test or CI step that runs it, "
                             "<!-- docs-test: output --> for output or a formula, or <!-- docs-test: run --> "
                             "to run its lines (tests/docs/README.md)\n    " +
                             (block.lines[0] if block.lines else "")))

    with tempfile.TemporaryDirectory(prefix="zkr-docs-test-") as workdir:
        started = time.monotonic()
        if args.only in (None, "snippets"):
            snippet_failures = compile_snippets(snippets, args, workdir)
            failures += [(block.where(), message) for block, message in snippet_failures]
            passed["compiled"] = len(snippets) - len(snippet_failures)
        if args.only in (None, "commands"):
            if not args.zklock:
                raise SystemExit("docs: --zklock is needed to run the commands")
            runner = CommandRunner(source, os.path.abspath(args.zklock), workdir)
            try:
                for block, offset, kind, command in commands:
                    if kind == "usage":
                        error = runner.check_usage(command)
                        passed["usage"] += error is None
                    elif kind == "ctest":
                        if not args.build_dir:
                            raise SystemExit("docs: --build-dir is needed to list the docs' ctest lines")
                        error = list_ctest(command, args.ctest, os.path.abspath(args.build_dir))
                        passed["ctest"] += error is None
                    elif kind == "script":
                        error = run_line(source, command, block.markers["expect_exit"], workdir)
                        passed["script"] += error is None
                    else:
                        error = runner.run(block, offset, command)
                        passed["run"] += error is None
                    if error:
                        failures.append((block.where(offset), error))
                help_text = runner.help_text()
                passed["inline"] = 0
                for where, span in inline_zklock_spans(source):
                    error = check_inline_options(span, help_text)
                    passed["inline"] += error is None
                    if error:
                        failures.append((where, error))
            finally:
                runner.stop()
        elapsed = time.monotonic() - started

    for where, message in failures:
        print(f"FAILED {where}: {message}\n")
    done = []
    if args.only in (None, "snippets"):
        done.append(f"{passed['compiled']} C++ snippets compiled")
    if args.only in (None, "commands"):
        done += [f"{passed['run']} zklock commands run", f"{passed['usage']} usage lines found in --help",
                 f"{passed['ctest']} ctest lines listed", f"{passed['script']} lines of run blocks run",
                 f"{passed['output']} output blocks", f"{passed['inline']} inline zklock spans with options of --help"]
    print(f"docs: {', '.join(done)}, {len(skipped)} skipped ({elapsed:.1f} s){':' if skipped else ''}")
    for where, what, reason in skipped:
        print(f"  skipped {where}: {what.strip()[:70]} ({reason})")
    total = sum(count for kind, count in passed.items() if kind != "output")
    print(f"docs: {total} passed, {len(failures)} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
