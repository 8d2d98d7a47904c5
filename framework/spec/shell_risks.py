"""Shell allow patterns that reach past what they seem to allow: the warnings of ``ca validate``.

A pattern of ``capabilities.shell.allow`` matches the command line and nothing more: once it
matches, the program runs with the user's rights and does whatever its arguments say. A
wildcard in the arguments lets the agent choose them, so ``find *`` allows ``find . -exec sh
-c '...' +`` and ``cat *`` allows ``cat /etc/passwd``. :data:`RISKY_PROGRAMS` names the
programs for which that is known to matter, each with the reason; a pattern whose program
is one of them and whose arguments hold a wildcard (``*`` or ``?``) gets a warning pointing
at the wildcard. A wildcard in the program's own name lets any program run.

Absence from the table proves nothing: it lists well-known ways out, it is not a sandbox.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import PurePath

_SHELL = "it is a shell: -c runs any command line"
_CODE = "it is an interpreter: -c or a script path runs any code"
_RUNS = "it runs whatever program its arguments name"
_READS = "it reads any path it is given, such as '/etc' or '..'"
_WRITES = "it changes any path it is given, such as '/etc' or '..'"
_COPIES = "it copies from and to any path it is given, such as '/etc' or '..'"
_NETWORK = "it reaches any host (network.allow governs http.get only) and sends or saves any file"
_PACKAGES = "it installs or runs any package or script"

RISKY_PROGRAMS: dict[str, str] = {
    # Programs that run other programs.
    "find": "-exec, -execdir and -ok run any program, and it reads any path such as '/' or '..'",
    "git": "-c, -C, aliases and options such as 'difftool -x' or 'grep -O' run any program; "
    "--no-index and --output reach paths outside the project",
    "env": _RUNS,
    "xargs": _RUNS,
    "sudo": _RUNS,
    "doas": _RUNS,
    "su": _RUNS,
    "nice": _RUNS,
    "nohup": _RUNS,
    "timeout": _RUNS,
    "time": _RUNS,
    "watch": _RUNS,
    "stdbuf": _RUNS,
    "setsid": _RUNS,
    "chroot": _RUNS,
    "flock": _RUNS,
    "strace": _RUNS,
    "parallel": _RUNS,
    "make": "--eval and -f run any recipe",
    "awk": "system() and pipes in its program run any command, and it reads any path",
    "gawk": "system() and pipes in its program run any command, and it reads any path",
    "mawk": "system() and pipes in its program run any command, and it reads any path",
    "sed": "GNU sed's 'e' command runs any command and 'w' writes any path",
    "tar": "--to-command and --checkpoint-action run any program, and it reads and writes any path",
    "rsync": "-e runs any program, and it copies any path",
    "zip": "-TT runs any program, and it reads any path",
    "vi": "':!' runs any command, and it reads and writes any path",
    "vim": "':!' runs any command, and it reads and writes any path",
    "less": "'!' runs any command, and it reads any path",
    "busybox": "it holds a shell and every other tool: 'busybox sh -c' runs any command line",
    "docker": "'run -v /:/host' reaches the whole machine",
    "podman": "'run -v /:/host' reaches the whole machine",
    "ssh": "it runs commands on other hosts, and -o ProxyCommand runs any program here",
    # Shells and interpreters.
    "sh": _SHELL,
    "bash": _SHELL,
    "dash": _SHELL,
    "zsh": _SHELL,
    "ksh": _SHELL,
    "fish": _SHELL,
    "csh": _SHELL,
    "tcsh": _SHELL,
    "cmd": _SHELL,
    "pwsh": _SHELL,
    "powershell": _SHELL,
    "python": _CODE,
    "pypy": _CODE,
    "perl": _CODE,
    "ruby": _CODE,
    "node": _CODE,
    "deno": _CODE,
    "bun": _CODE,
    "php": _CODE,
    "lua": _CODE,
    "tclsh": _CODE,
    "Rscript": _CODE,
    # Package managers and runners.
    "npm": _PACKAGES,
    "npx": _PACKAGES,
    "pnpm": _PACKAGES,
    "yarn": _PACKAGES,
    "pip": _PACKAGES,
    "pipx": _PACKAGES,
    "uv": _PACKAGES,
    "uvx": _PACKAGES,
    # Network clients.
    "curl": _NETWORK,
    "wget": _NETWORK,
    "nc": _NETWORK,
    "ncat": _NETWORK,
    "netcat": _NETWORK,
    "socat": _NETWORK,
    "scp": _NETWORK,
    # Programs that read the paths they are given.
    "ls": _READS,
    "cat": _READS,
    "tac": _READS,
    "head": _READS,
    "tail": _READS,
    "more": _READS,
    "nl": _READS,
    "grep": _READS,
    "egrep": _READS,
    "fgrep": _READS,
    "rg": _READS,
    "ag": _READS,
    "jq": _READS,
    "wc": _READS,
    "sort": _READS,
    "uniq": _READS,
    "cut": _READS,
    "paste": _READS,
    "diff": _READS,
    "cmp": _READS,
    "od": _READS,
    "xxd": _READS,
    "hexdump": _READS,
    "strings": _READS,
    "base64": _READS,
    "file": _READS,
    "stat": _READS,
    "du": _READS,
    "tree": _READS,
    "readlink": _READS,
    "realpath": _READS,
    # Programs that change the paths they are given.
    "cp": _COPIES,
    "mv": _COPIES,
    "rm": _WRITES,
    "ln": _WRITES,
    "mkdir": _WRITES,
    "rmdir": _WRITES,
    "touch": _WRITES,
    "chmod": _WRITES,
    "chown": _WRITES,
    "tee": _WRITES,
    "dd": _COPIES,
    "truncate": _WRITES,
    "shred": _WRITES,
    "install": _COPIES,
}
"""Program name -> why a wildcard in its arguments lets the agent reach past the pattern."""

_WILDCARD = re.compile(r"[*?]")
_VERSION = re.compile(r"[0-9][0-9.]*$")
_FIRST_WORD = re.compile(r"\s*(\S+)")


@dataclass(frozen=True, slots=True)
class ShellRisk:
    """Why a pattern is risky; ``offset`` is the wildcard's index in the pattern (for the column)."""

    message: str
    hint: str
    offset: int


def _program_key(word: str) -> str:
    """The table key for a program word: its file name, without ``.exe`` or a version (``python3.12``)."""
    try:
        words = shlex.split(word)
    except ValueError:  # an unbalanced quote: look the word up as written
        words = [word]
    name = PurePath(words[0] if words else word).name.removesuffix(".exe")
    return _VERSION.sub("", name) or name


def shell_risk(pattern: str) -> ShellRisk | None:
    """The risk of one allow pattern, or None when its wildcards cannot reach past it (as far as known)."""
    first = _FIRST_WORD.match(pattern)
    if first is None:
        return None
    word = first.group(1)
    if wildcard := _WILDCARD.search(word):
        return ShellRisk(
            f"shell pattern {pattern!r} lets any program run: its first word is a wildcard",
            "start the pattern with the program's name, such as 'pytest *'",
            first.start(1) + wildcard.start(),
        )
    reason = RISKY_PROGRAMS.get(_program_key(word))
    wildcard = _WILDCARD.search(pattern, first.end(1))
    if reason is None or wildcard is None:
        return None
    return ShellRisk(
        f"shell pattern {pattern!r} lets {word!r} run with arguments the agent chooses: {reason}",
        f"allow the exact command lines the agent needs, without a wildcard after {word!r}; "
        "a pattern only matches the command line, it does not confine what the program does",
        wildcard.start(),
    )
