"""No function of the Node path (services/node/*.js) is longer than 80
lines (issue 41): a 206-line serveFile had grown there, where the Python
paths' lab_http is split by concern. Node has no JavaScript parser to ask,
so a small scanner reads the files: strings, template literals, regular
expressions and comments skipped, braces matched, and a `{` taken as a
function's body after `=>` or after `name(...)` that is not a statement's
condition (if, for, while, switch, catch, with)."""
import re
from dataclasses import dataclass
from pathlib import Path

import pytest

NODE = Path(__file__).resolve().parent.parent / "services" / "node"
MAX_LINES = 80
NOT_FUNCTIONS = {"if", "for", "while", "switch", "catch", "with"}
# After these words a '/' starts a regular expression, not a division.
BEFORE_REGEX = {"return", "typeof", "case", "do", "else", "in", "of", "new", "delete", "void", "throw",
                "instanceof", "yield", "await"}
WORD = re.compile(r"[#$\w]+")


@dataclass
class Token:
    text: str
    line: int
    word: bool = False


@dataclass
class Function:
    name: str
    first: int
    last: int

    @property
    def lines(self) -> int:
        return self.last - self.first + 1


def _skip_quoted(source: str, i: int, quote: str) -> int:
    """The index past the string opened by the quote at source[i]."""
    i += 1
    while source[i] != quote:
        i += 2 if source[i] == "\\" else 1
    return i + 1


def _skip_regex(source: str, i: int) -> int:
    """The index past the regular expression (and its flags) opened at source[i]."""
    i += 1
    in_class = False
    while in_class or source[i] != "/":
        if source[i] == "\\":
            i += 1
        elif source[i] == "[":
            in_class = True
        elif source[i] == "]":
            in_class = False
        i += 1
    i += 1
    while i < len(source) and (source[i].isalnum() or source[i] == "_"):
        i += 1
    return i


def _skip_template(source: str, i: int) -> tuple[int, bool]:
    """From inside a template literal at source[i]: the index past its end
    (False) or past the next '${' (True: code follows until its '}')."""
    while source[i] != "`":
        if source[i] == "\\":
            i += 2
        elif source.startswith("${", i):
            return i + 2, True
        else:
            i += 1
    return i + 1, False


def tokens(source: str) -> list[Token]:
    """The words and punctuation of JavaScript source, each with its line."""
    out: list[Token] = []
    # One entry per open '{': whether it opened a template literal's ${...}.
    braces: list[bool] = []
    i = 0

    def line_at(index: int) -> int:
        return source.count("\n", 0, index) + 1

    while i < len(source):
        ch = source[i]
        if ch.isspace():
            i += 1
        elif source.startswith("//", i):
            i = source.find("\n", i) if "\n" in source[i:] else len(source)
        elif source.startswith("/*", i):
            i = source.index("*/", i) + 2
        elif ch in "'\"":
            i = _skip_quoted(source, i, ch)
            out.append(Token("string", line_at(i)))
        elif ch == "`" or (ch == "}" and braces and braces[-1]):
            if ch == "}":
                braces.pop()
            i, in_code = _skip_template(source, i + 1)
            if in_code:
                braces.append(True)
            else:
                out.append(Token("string", line_at(i)))
        elif ch == "/":
            previous = out[-1] if out else None
            divides = previous is not None and (previous.text in ")]" or (
                previous.word and previous.text not in BEFORE_REGEX))
            if divides:
                out.append(Token("/", line_at(i)))
                i += 1
            else:
                i = _skip_regex(source, i)
                out.append(Token("regex", line_at(i)))
        elif match := WORD.match(source, i):
            out.append(Token(match.group(), line_at(i), word=True))
            i = match.end()
        else:
            if ch == "{":
                braces.append(False)
            elif ch == "}":
                braces.pop()
            text = "=>" if source.startswith("=>", i) else ch
            out.append(Token(text, line_at(i)))
            i += len(text)
    return out


def functions(source: str) -> list[Function]:
    """Every function body in `source`: its name (or "arrow"), from its
    parameters' line to its closing brace's."""
    found: list[Function] = []
    open_parens: list[int] = []
    open_braces: list[tuple[int, Function | None]] = []
    paren_of: dict[int, int] = {}  # index of a ')' -> index of its '('
    toks = tokens(source)
    for index, token in enumerate(toks):
        if token.text == "(":
            open_parens.append(index)
        elif token.text == ")":
            paren_of[index] = open_parens.pop()
        elif token.text == "{":
            open_braces.append((index, _function_opened(toks, index, paren_of)))
        elif token.text == "}":
            _, function = open_braces.pop()
            if function is not None:
                function.last = token.line
                found.append(function)
    assert not open_parens and not open_braces, "unbalanced brackets: the scanner misread the source"
    return found


def _function_opened(toks: list[Token], index: int, paren_of: dict[int, int]) -> Function | None:
    """The function whose body the '{' at toks[index] opens, or None (a block, an object, a class)."""
    previous = toks[index - 1] if index > 0 else None
    if previous is None:
        return None
    if previous.text == "=>":
        before = toks[index - 2]
        first = toks[paren_of[index - 2]].line if before.text == ")" else before.line
        return Function("arrow", first, 0)
    if previous.text == ")":
        opening = paren_of[index - 1]
        name = toks[opening - 1] if opening > 0 else None
        if name is not None and name.word and name.text not in NOT_FUNCTIONS:
            return Function(name.text, toks[opening].line, 0)
    return None


def node_functions() -> dict[str, list[Function]]:
    return {path.name: functions(path.read_text()) for path in sorted(NODE.glob("*.js"))}


SAMPLE = """\
const re = /[{(}/]\\//g;
const text = '{(' + "'}" + `${a({ b: '}' })} {`;
function long(a) { // {
  if (a) {
    return a / 2;
  }
  return `x${`${a}`}}`;
}
class C {
  #m() {
    return [1].map((x) => {
      return { x };
    });
  }
}
"""


def test_the_scanner_finds_each_function_and_its_lines():
    found = [(f.name, f.first, f.last) for f in functions(SAMPLE)]
    assert sorted(found) == [("#m", 10, 14), ("arrow", 11, 13), ("long", 3, 8)]


def test_the_scanner_reads_every_file_of_the_node_path():
    found = {f.name for file in node_functions().values() for f in file}
    assert {"serveFile", "parseRange", "validHost", "openStore", "acquire", "takeSlot", "enter"} <= found


@pytest.mark.parametrize("file", sorted(path.name for path in NODE.glob("*.js")))
def test_no_node_function_is_longer_than_80_lines(file):
    too_long = [f for f in node_functions()[file] if f.lines > MAX_LINES]
    assert not too_long, [f"{file}:{f.first} {f.name}: {f.lines} lines" for f in too_long]
