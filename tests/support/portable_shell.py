"""A lint for shell scripts that must run on macOS's bash 3.2 and BSD tools (tests/unit/deploy/test_laptop_scripts.py).

`code_of` blanks what bash does not run (comments, the literal text of quoted strings and here-documents), so
that the rules match commands, not messages that name them; parameter expansions and command substitutions stay,
inside double quotes too. `violations` applies the rules: bash >= 4 syntax (BASH4), GNU-only tools and flags
(GNU), and arrays that may be empty expanded without the `${a[@]+"${a[@]}"}` guard (bash < 4.4 calls them unbound
under set -u). A known limit: a `case` pattern's `)` inside `$( ... )` ends the substitution early.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# Where a `#` starts a comment: at the start of a word.
_WORD_START = " \t\n;&|()"
_HEREDOC = re.compile(r"<<(-?)\s*(['\"]?)([\w.-]+)\2")
_KEPT_IN_HEREDOC = re.compile(r"\$\{[^}\n]*\}|\$\([^)\n]*\)|\$\w+")


class _Scanner:
    """One pass over a script; contexts on a stack: code (the script, or inside $( )), dq (inside "..."),
    brace (inside ${ }). Parentheses are counted per code context, to find the `)` that ends a $( )."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.out = list(text)
        self.i = 0
        self.stack: list[list] = [["code", 0]]
        self.heredocs: list[tuple[str, bool, bool]] = []
        self.comments: list[tuple[int, int]] = []

    def blank(self, start: int, end: int) -> None:
        for k in range(start, min(end, len(self.text))):
            if self.out[k] != "\n":
                self.out[k] = " "

    def run(self) -> str:
        steps = {"code": self.code, "dq": self.dq, "brace": self.brace}
        while self.i < len(self.text):
            steps[self.stack[-1][0]]()
        return "".join(self.out)

    def expansion(self) -> bool:
        """$( and ${ open a context in any other; True when one did."""
        if self.text.startswith("$(", self.i):
            self.stack.append(["code", 0])
        elif self.text.startswith("${", self.i):
            self.stack.append(["brace", 0])
        else:
            return False
        self.i += 2
        return True

    def code(self) -> None:
        text, i = self.text, self.i
        c = text[i]
        if c == "\\":
            self.i += 2
        elif self.expansion():
            return
        elif c == "'" or text.startswith("$'", i):
            self.single_quoted(i + (c == "$"), ansi=c == "$")
        elif c == '"':
            self.stack.append(["dq", 0])
            self.i += 1
        elif c == "#" and (i == 0 or text[i - 1] in _WORD_START):
            self.comment()
        elif text.startswith("<<", i) and not text.startswith("<<<", i) and _HEREDOC.match(text, i):
            match = _HEREDOC.match(text, i)
            self.heredocs.append((match.group(3), bool(match.group(2)), bool(match.group(1))))
            self.i = match.end()
        elif c == "\n" and self.heredocs:
            self.i += 1
            self.heredoc_bodies()
        else:
            self.paren(c)
            self.i += 1

    def comment(self) -> None:
        end = self.text.find("\n", self.i)
        end = len(self.text) if end < 0 else end
        self.comments.append((self.i, end))
        self.blank(self.i, end)
        self.i = end

    def paren(self, c: str) -> None:
        frame = self.stack[-1]
        if c == "(":
            frame[1] += 1
        elif c == ")" and frame[1] == 0 and len(self.stack) > 1:
            self.stack.pop()
        elif c == ")":
            frame[1] = max(0, frame[1] - 1)

    def single_quoted(self, quote: int, ansi: bool) -> None:
        """'...' (no escapes) or $'...' (backslash escapes): the text between the quotes blanked."""
        k = quote + 1
        while k < len(self.text) and self.text[k] != "'":
            k += 2 if ansi and self.text[k] == "\\" else 1
        self.blank(quote + 1, k)
        self.i = k + 1

    def dq(self) -> None:
        c = self.text[self.i]
        name = re.compile(r"\$(\w+|[@#?$!*-])").match(self.text, self.i)
        if c == '"':
            self.stack.pop()
            self.i += 1
        elif c == "\\":
            self.blank(self.i, self.i + 2)
            self.i += 2
        elif self.expansion():
            return
        elif name:
            self.i = name.end()  # $name stays
        else:
            self.blank(self.i, self.i + 1)
            self.i += 1

    def brace(self) -> None:
        c = self.text[self.i]
        if c == "}":
            self.stack.pop()
        elif c == '"':
            self.stack.append(["dq", 0])
        elif self.expansion():
            return
        self.i += 1

    def heredoc_bodies(self) -> None:
        """The bodies of the here-documents opened on the line just ended: blanked, but for the expansions of an
        unquoted one, which run."""
        for delimiter, quoted, strip_tabs in self.heredocs:
            while self.i < len(self.text):
                end = self.text.find("\n", self.i)
                end = len(self.text) if end < 0 else end
                line = self.text[self.i : end]
                if (line.lstrip("\t") if strip_tabs else line) == delimiter:
                    self.i = min(end + 1, len(self.text))
                    break
                kept = [] if quoted else [m.span() for m in _KEPT_IN_HEREDOC.finditer(line)]
                edges = [0, *[e for span in kept for e in span], len(line)]
                for start, stop in zip(edges[::2], edges[1::2], strict=True):
                    self.blank(self.i + start, self.i + stop)
                self.i = end + 1
        self.heredocs = []


def code_of(text: str) -> str:
    """TEXT with comments and literal text blanked to spaces, line breaks kept (line numbers hold)."""
    return _Scanner(text).run()


def text_of(text: str) -> str:
    """TEXT with only its comments blanked: for rules about what quoted text holds (printf formats, awk programs)."""
    scanner = _Scanner(text)
    scanner.run()
    out = list(text)
    for start, end in scanner.comments:
        out[start:end] = " " * (end - start)
    return "".join(out)


@dataclass(frozen=True)
class Rule:
    name: str
    pattern: re.Pattern[str]
    on: str = "code"  # "code": code_of's view; "text": text_of's


def _rule(name: str, pattern: str, on: str = "code") -> Rule:
    return Rule(name, re.compile(pattern), on)


# A command word: not part of a longer word, path or option (--timeout, DTR_TIMEOUT, sub-command names).
_CMD = r"(?<![\w./=-])"
# The rest of one command: up to a pipe, a list operator or the end of the line.
_ARGS = r"\b[^|;&\n]*\s"

BASH4 = (
    _rule("declare/local -A, -n, -l, -u, -g (bash 4)", r"\b(declare|local|typeset|readonly)\s+-[a-zA-Z]*[Anlug]"),
    _rule("mapfile/readarray (bash 4)", r"\b(mapfile|readarray)\b"),
    _rule("${v,,} ${v^^} case conversion (bash 4)", r"\$\{[#!]?\w+(\[[^]]*\])?(\^|,)"),
    _rule("|& (bash 4)", r"\|&"),
    _rule("&>> (bash 4)", r"&>>"),
    _rule("wait -n/-f/-p (bash 4.3)", r"\bwait\s+-[a-z]*[nfp]"),
    _rule("${v@Q} transformations (bash 4.4)", r"\$\{[^}]*@[QEPAKaULuk]\}"),
    _rule("EPOCHSECONDS, EPOCHREALTIME, SRANDOM, BASH_ARGV0, BASHPID (bash 4-5)",
          r"\b(EPOCHSECONDS|EPOCHREALTIME|SRANDOM|BASH_ARGV0|BASHPID)\b"),
    _rule("negative array subscript ${a[-1]} (bash 4.3)", r"\$\{\w+\[\s*-"),
    _rule("${v:0:-1} negative length (bash 4.2)", r"\$\{\w+:[^}:]*:\s*-\d"),
    _rule("shopt option of bash 4+ (globstar, lastpipe, inherit_errexit...)",
          r"\bshopt\s+-[su]\b[^;\n]*\b(globstar|lastpipe|autocd|checkjobs|direxpand|dirspell|globasciiranges|"
          r"inherit_errexit|localvar_inherit|localvar_unset|assoc_expand_once|patsub_replacement|compat\d+)\b"),
    _rule("local - (bash 4.4)", r"\blocal\s+-(\s|;|$)"),
    _rule("printf %(...)T (bash 4.2)", r"%-?\d*\([^)\n]*\)T", on="text"),
    _rule("coproc (bash 4)", r"\bcoproc\b"),
    _rule("case ;;& or ;& (bash 4)", r";;&|(?<!;);&"),
    _rule("{1..9..2} or {01..10} brace expansion (bash 4)", r"\{-?\d+\.\.-?\d+\.\.-?\d+\}|\{0\d+\.\.\d+\}"),
    _rule("{fd}> named file descriptor (bash 4.1)", r"(?<!\$)\{[A-Za-z_]\w*\}[<>]"),
    _rule("[[ -v name ]] (bash 4.2)", r"(\[\[|\[|\btest)\s+(!\s+)?-v\s"),
    _rule("read -i/-N (bash 4)", r"\bread\s+(-\w+\s+)*-[a-zA-Z]*[iN]\b"),
    _rule("=~ with a literal pattern holding ( (bash 3.2 cannot parse it): put the pattern in a variable",
          r"=~\s*(?![\"'$])(?:(?!\s\]\]).)*\("),
)

GNU = (
    _rule("timeout (GNU coreutils, not on macOS): use with_timeout (deploy/lib.sh)", _CMD + r"timeout\s+[\d\"$]"),
    _rule("sha256sum (GNU coreutils, not on macOS): use sha256_hex (deploy/lib.sh)", _CMD + r"sha256sum\b"),
    _rule("realpath (macOS's has no options, and none before 13): use relative_path (deploy/lib.sh)",
          _CMD + r"realpath\b"),
    _rule("readlink -f/-e/-m (macOS's has -f only from 12.3)", _CMD + r"readlink\s+-\w*[fem]"),
    _rule("sed -i (BSD sed needs a suffix) or -r or a long option", _CMD + r"sed" + _ARGS + r"-(-\w|[a-zA-Z]*[ir])"),
    _rule("grep -P (not in BSD grep)", _CMD + r"grep" + _ARGS + r"-(-perl|[a-zA-Z]*P)"),
    _rule("date -d (BSD date sets the clock with -d)", _CMD + r"date" + _ARGS + r"-(-date|[a-zA-Z]*d\b)"),
    _rule("stat with flags (GNU -c and BSD -f differ)", _CMD + r"stat\s+-"),
    _rule("mktemp -p/-t/--/TEMPLATE (differ on BSD)", _CMD + r"mktemp" + _ARGS + r"(-[a-zA-Z]*[pt]\b|--\w|\S*XXX)"),
    _rule("xargs -r (GNU)", _CMD + r"xargs" + _ARGS + r"-(-no-run|[a-zA-Z]*r)"),
    _rule("find -printf/-regextype (GNU)", _CMD + r"find" + _ARGS + r"-(f?printf|regextype)\b"),
    _rule("sort -V (GNU; BSD sort only on newer systems)", _CMD + r"sort" + _ARGS + r"-(-version-sort|[a-zA-Z]*V)"),
    _rule("base64 -w/-d (GNU)", _CMD + r"base64" + _ARGS + r"-[a-zA-Z]*[wd]"),
    _rule("install -D (GNU)", _CMD + r"install\s+-[a-zA-Z]*D"),
    _rule("du -b (GNU)", _CMD + r"du\s+-[a-zA-Z]*b"),
    _rule("a coreutils/util-linux-only tool (nproc, setsid, mountpoint, tac, numfmt, shuf, getent, md5sum...)",
          _CMD + r"(nproc|setsid|mountpoint|tac|numfmt|shuf|getent|md5sum|sha1sum|sha512sum|stdbuf)\b"),
    _rule("a GNU long option of a basic tool (rm --one-file-system, cp --parents...)",
          _CMD + r"(rm|cp|mv|ln|mkdir|touch|chmod|chown|head|tail|cut|tr|wc|df|ls|cat|tee|uniq|env|id|uname|basename|"
          r"dirname|awk)" + _ARGS + r"--[a-z]"),
    _rule("a gawk-only function (macOS's awk is the BWK awk)",
          r"\b(gensub|strftime|systime|mktime|asorti?|patsplit)\s*\(|\b(PROCINFO|IGNORECASE)\b", on="text"),
)

_EMPTY_ARRAY = re.compile(r"(?<![\w\[])(\w+)=\(\)")
_GUARDED = re.compile(r'\$\{(\w+)\[@\]\+"\$\{\1\[@\]\}"\}')
_ARRAY_EXPANSION = re.compile(r"\$\{(\w+)\[[@*]\]")


@dataclass(frozen=True)
class Violation:
    line: int
    rule: str
    text: str  # the line as written

    def __str__(self) -> str:
        return f"line {self.line}: {self.rule}: {self.text.strip()}"


def _line_of(text: str, offset: int) -> int:
    return text.count("\n", 0, offset) + 1


def _empty_array_violations(code: str, lines: list[str]) -> list[Violation]:
    """Expansions of an array the script creates empty (NAME=()), not through the guard."""
    empty = {m.group(1) for m in _EMPTY_ARRAY.finditer(code)}
    unguarded = _GUARDED.sub(lambda m: " " * len(m.group(0)), code)
    found = []
    for match in _ARRAY_EXPANSION.finditer(unguarded):
        if match.group(1) in empty:
            line = _line_of(code, match.start())
            name = f"${{{match.group(1)}[@]}} of an array that may be empty (bash < 4.4: unbound under set -u)"
            found.append(Violation(line, name, lines[line - 1]))
    return found


def violations(script: str, rules: tuple[Rule, ...] = BASH4 + GNU) -> list[Violation]:
    """What in SCRIPT (its text) a bash 3.2 with BSD tools cannot run, by RULES and the empty-array check."""
    lines = script.splitlines()
    views = {"code": code_of(script), "text": text_of(script)}
    found = []
    for rule in rules:
        view = views[rule.on]
        for match in rule.pattern.finditer(view):
            line = _line_of(view, match.start())
            found.append(Violation(line, rule.name, lines[line - 1]))
    return sorted(found + _empty_array_violations(views["code"], lines), key=lambda v: v.line)
