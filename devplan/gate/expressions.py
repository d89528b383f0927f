"""The symbolic size expressions a torch.export archive may hold, recognized without running them.

torch's deserializer hands every `expr_str` of a .pt2 to `sympy.sympify`, which evaluates the text
as Python: whatever an archive writes there runs. `check` accepts only the small language export
writes and refuses everything else, so that sympify sees nothing but arithmetic on size symbols.
It never evaluates the text itself.

What export writes (torch 2.13 saves sympy's `srepr`; older archives and range-constraint keys
use the infix `str` form):

    Add(Mul(Integer(2), Symbol('s74', positive=True, integer=True)), Integer(1))
    LessThan(Symbol('u0', integer=True), Integer(100))
    2*s74 + 1        Max(1, s0) // 2        Eq(Mod(s0, 4), 0)        s0 <= 64

The grammar:

    expression := sum [comparison sum]          comparison: == != < <= > >=
    sum        := product (('+' | '-') product)*
    product    := unary (('*' | '/' | '//' | '%') unary)*
    unary      := ('-' | '+') unary | power
    power      := primary ['**' exponent]
    primary    := integer | symbol | constant | FUNCTION '(' arguments ')' | '(' expression ')'

symbols are export's names (s0, u3, zf1 ...), constants True/False/oo, FUNCTION one of sympy's
and torch's integer functions below; only Symbol and Float take a quoted string, and only
`name=True/False/integer` keywords. Exponents and shifts are integer literals of at most 64 in
size, raising neither a number nor a power: sympy computes powers of numbers at once, and a
tower of them never finishes. Only spaces separate tokens.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Container

MAX_LENGTH = 10_000  # a real expression is a few dozen characters; sympy recurses on what it parses
MAX_DEPTH = 48
MAX_DIGITS = 20  # an int64 and a little more
MAX_EXPONENT = 64

SYMBOL = re.compile(r"(?:s|u|i|f|ps|zf|zuf)\d{1,9}")
DECIMAL = re.compile(r"-?\d{1,20}(?:\.\d{1,20})?(?:e[+-]?\d{1,3})?")
CONSTANTS = {"True", "False", "true", "false", "oo"}
# sympy's classes as srepr names them, their usual aliases, and the functions torch's
# deserializer defines for sympify (torch.utils._sympy.functions)
FUNCTIONS = {
    "Integer",
    "Rational",
    "Add",
    "Mul",
    "Pow",
    "Mod",
    "Min",
    "Max",
    "Abs",
    "Eq",
    "Ne",
    "Lt",
    "Le",
    "Gt",
    "Ge",
    "Equality",
    "Unequality",
    "LessThan",
    "GreaterThan",
    "StrictLessThan",
    "StrictGreaterThan",
    "And",
    "Or",
    "Not",
    "FloorDiv",
    "CeilDiv",
    "CleanDiv",
    "ModularIndexing",
    "PythonMod",
    "Where",
    "FloorToInt",
    "CeilToInt",
    "TruncToInt",
    "RoundToInt",
    "IntTrueDiv",
    "FloatTrueDiv",
    "PowByNatural",
    "FloatPow",
    "Identity",
    "ToFloat",
    "TruncToFloat",
    "RoundDecimal",
    "LShift",
    "RShift",
}
WITH_STRING = {"Symbol", "Float"}  # Symbol('s0', integer=True), Float('0.5', precision=53)
EXPONENTS = {"Pow", "PowByNatural", "FloatPow", "LShift", "RShift"}  # second argument: a small literal

_TOKEN = re.compile(
    r" *(?:(?P<number>\d+)|(?P<name>[A-Za-z_][A-Za-z0-9_]*)|(?P<string>'[^'\\]*')"
    r"|(?P<op>//|\*\*|==|!=|<=|>=|[-+*/%<>(),=]))"
)
_COMPARISONS = {"==", "!=", "<", "<=", ">", ">="}


class Refused(ValueError):
    """The text is not an expression export writes; the message says where and why."""


def check(text: str) -> None:
    """Raise Refused unless `text` is a symbolic expression as torch.export writes one."""
    if not isinstance(text, str) or not text.strip(" "):
        raise Refused("is empty")
    if len(text) > MAX_LENGTH:
        raise Refused(f"is {len(text)} characters long, more than an exported size expression ({MAX_LENGTH})")
    parser = _Parser(_tokens(text))
    parser.expression()
    if parser.peek() is not None:
        raise Refused(f"has {parser.peek()!r} after the expression")


def _tokens(text: str) -> list[tuple[str, str]]:
    tokens: list[tuple[str, str]] = []
    at = 0
    while at < len(text.rstrip(" ")):
        match = _TOKEN.match(text, at)
        if match is None or match.lastgroup is None:  # every alternative of _TOKEN is a named group
            raise Refused(f"has {text[at:].lstrip()[:1]!r}, which no size expression holds")
        tokens.append((match.lastgroup, match[match.lastgroup]))
        at = match.end()
    return tokens


LITERAL, POWER = 1, 2  # what a parsed piece is: numbers only; holds a power


class _Parser:
    """Recursive descent over the grammar in the module docstring. Each rule returns flags
    saying whether what it read is numbers only (LITERAL) and whether it holds a power
    (POWER): a power of numbers, or of a power, would make sympy compute a huge number."""

    def __init__(self, tokens: list[tuple[str, str]]) -> None:
        self.tokens, self.at, self.depth = tokens, 0, 0

    def peek(self) -> str | None:
        return self.tokens[self.at][1] if self.at < len(self.tokens) else None

    def take(self, kind: str | None = None, text: str | None = None) -> str:
        if self.at == len(self.tokens):
            raise Refused("ends in the middle of an expression")
        token_kind, token = self.tokens[self.at]
        if (kind and token_kind != kind) or (text and token != text):
            raise Refused(f"has {token!r} where {text or kind} belongs")
        self.at += 1
        return token

    def operands(self, operand: Callable[[], int], operators: Container[str]) -> int:
        """operand (operator operand)*: numbers only if every operand is, a power if any is."""
        flags = operand()
        while self.peek() in operators:
            self.take()
            flags = _joined(flags, operand())
        return flags

    def expression(self) -> int:
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise Refused(f"nests deeper than {MAX_DEPTH} levels")
        flags = self.sum()
        if self.peek() in _COMPARISONS:
            self.take()
            flags = _joined(flags, self.sum())
        self.depth -= 1
        return flags

    def sum(self) -> int:
        return self.operands(self.product, ("+", "-"))

    def product(self) -> int:
        return self.operands(self.unary, ("*", "/", "//", "%"))

    def unary(self) -> int:
        if self.peek() in ("-", "+"):
            self.take()
            return self.unary()
        return self.power()

    def power(self) -> int:
        flags = self.primary()
        if self.peek() != "**":
            return flags
        self.take()
        return self.raised(flags)

    def raised(self, base: int) -> int:
        """A power of `base`: its exponent a literal |n| <= 64 (Integer(n) or n), its base
        neither numbers only nor a power, so that the result stays small."""
        if base & (LITERAL | POWER):
            raise Refused("raises a number or a power to a power, which export never writes")
        if self.peek() == "-":
            self.take()
        wrapped = self.peek() == "Integer"
        if wrapped:
            self.take()
            self.take("op", "(")
            if self.peek() == "-":
                self.take()
        digits = self.take("number")
        if wrapped:
            self.take("op", ")")
        if len(digits) > 2 or int(digits) > MAX_EXPONENT:
            raise Refused(f"raises to or shifts by {digits}, more than {MAX_EXPONENT}")
        return POWER

    def primary(self) -> int:
        kind = self.tokens[self.at][0] if self.at < len(self.tokens) else None
        if kind == "number":
            return self.number()
        if self.peek() == "(":
            self.take()
            flags = self.expression()
            self.take("op", ")")
            return flags
        name = self.take("name")
        if self.peek() == "(":
            return self.call(name)
        if name in CONSTANTS:
            return LITERAL
        if not SYMBOL.fullmatch(name):
            raise Refused(f"names {name!r}, which is no size symbol (s0, u1, ...)")
        return 0

    def number(self) -> int:
        digits = self.take("number")
        if len(digits) > MAX_DIGITS:
            raise Refused(f"has a {len(digits)}-digit number")
        return LITERAL

    def call(self, name: str) -> int:
        if name not in FUNCTIONS and name not in WITH_STRING:
            raise Refused(f"calls {name!r}, which no size expression calls")
        self.take("op", "(")
        if name in WITH_STRING:
            flags = self.quoted(name)
            self.keywords()
        elif name == "Integer":
            if self.peek() == "-":
                self.take()
            flags = self.number()
        elif name in EXPONENTS:
            base = self.expression()
            self.take("op", ",")
            flags = self.raised(base)
        else:
            flags = self.operands(self.expression, (",",))
        self.take("op", ")")
        return flags

    def quoted(self, name: str) -> int:
        text = self.take("string")[1:-1]
        if name == "Symbol" and not SYMBOL.fullmatch(text):
            raise Refused(f"names symbol {text!r}, which is no size symbol (s0, u1, ...)")
        if name == "Float" and not DECIMAL.fullmatch(text):
            raise Refused(f"has Float({text!r}), which is no decimal number")
        return LITERAL if name == "Float" else 0

    def keywords(self) -> None:
        """`, name=True`, `, precision=53` ...: sympy's assumptions and a Float's precision."""
        while self.peek() == ",":
            self.take()
            if not re.fullmatch(r"[a-z][a-z_]*", self.take("name")):
                raise Refused(f"has keyword {self.tokens[self.at - 1][1]!r}; only sympy's assumptions are written")
            self.take("op", "=")
            value = self.take()
            if value not in ("True", "False") and not (value.isdigit() and len(value) <= 4):
                raise Refused(f"sets a keyword to {value!r}; only True, False and small numbers are written")


def _joined(left: int, right: int) -> int:
    """Flags of two operands combined: numbers only if both are, a power if either holds one."""
    return (left & right & LITERAL) | ((left | right) & POWER)
