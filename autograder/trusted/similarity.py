"""How much of one function's code another holds: winnowed fingerprints of canonical AST k-grams.

The method is MOSS's (Schleimer, Wilkerson and Aiken, "Winnowing: local algorithms for document
fingerprinting", SIGMOD 2003), run over a token stream that already ignores what a copier changes
for free:

- `tokens(function)`: the function's AST in preorder, one token per node (its type), with every
  local name (arguments, assigned names) one token `v`, docstring, annotations, decorators and the
  text of strings erased; names the function did not bind (`torch`, `F`) and attribute names
  (`.softmax`) stay, as do numbers. Renaming, rewording messages and reformatting change nothing.
- `kgrams(stream)`: a hash of every run of K consecutive tokens. A statement inserted (dead code)
  or two independent statements swapped only change the few k-grams that cross their edges.
- `winnow(hashes)`: the rightmost smallest hash of every window of W consecutive k-grams (section 3
  of the paper): any shared run of W + K - 1 tokens shares a fingerprint, and a function keeps
  about 2 / (W + 1) of its k-grams.
- `containment(reference, submitted)`: the share of the reference's fingerprints found among all
  the k-grams of the submitted code, in [0, 1]; 1.0 for a copy with dead code added anywhere.

The thresholds in `autograder.trusted.reference` (the similarity flag and `--copies zero`) and
`instructor.classmates` (similar pairs of students) come from `benchmarks/bench_similarity.py`,
which measures this score for the honest corpus (tests/corpus.py) and the near-copies
(tests/near_copies.py). `kgram_lines` says where a shared fingerprint lies, for the evidence.

Hashes can be salted (`salt`): a student edition ships the reference's fingerprints salted, never
its code.
"""

from __future__ import annotations

import ast
import hashlib

K = 8  # tokens per k-gram: about one short statement (`p = torch.softmax(v, dim=-1)` is 10)
W = 4  # k-grams per winnowing window: shared runs of W + K - 1 = 11 tokens are always seen
_DROPPED = (ast.Load, ast.Store, ast.Del)  # the context of a name is its position already


class _Locals(ast.NodeVisitor):
    """The names a function binds: its arguments, assigned names, loop and `with` targets."""

    def __init__(self):
        self.names: set[str] = set()

    def visit_arg(self, node):
        self.names.add(node.arg)

    def visit_Name(self, node):
        if isinstance(node.ctx, ast.Store):
            self.names.add(node.id)


def _emit(node: ast.AST, local: set[str], out: list[str],
          segments: list[tuple[int, list[str]]]) -> None:
    """Append `node`'s tokens to `out`; a statement nested in a block starts a segment of its
    own."""
    if isinstance(node, _DROPPED):
        return
    if isinstance(node, ast.Name):
        out.append("v" if node.id in local else node.id)
        return
    if isinstance(node, ast.arg):
        out.append("v")
        return
    if isinstance(node, ast.Constant):
        out.append("s" if isinstance(node.value, (str, bytes)) else repr(node.value))
        return
    if isinstance(node, ast.JoinedStr):
        out.append("s")
        return
    out.append(type(node).__name__)
    if isinstance(node, ast.Attribute):
        out.append("." + node.attr)
    elif isinstance(node, ast.keyword):
        out.append((node.arg or "**") + "=")
    for field, child in _fields(node):
        if field in ("annotation", "returns", "type_comment", "decorator_list"):
            continue
        if isinstance(child, ast.stmt):
            if field == "body" and child is node.body[0] and _is_docstring(child):
                continue
            segment: list[str] = []
            segments.append((child.lineno, segment))
            _emit(child, local, segment, segments)
        else:
            _emit(child, local, out, segments)


def _is_docstring(statement: ast.stmt) -> bool:
    return isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Constant) \
        and isinstance(statement.value.value, str)


def _fields(node: ast.AST):
    for field, value in ast.iter_fields(node):
        if isinstance(value, list):
            for item in value:
                if isinstance(item, ast.AST):
                    yield field, item
        elif isinstance(value, ast.AST):
            yield field, value


def lined_tokens(function: ast.FunctionDef | ast.AsyncFunctionDef) -> list[tuple[int, list[str]]]:
    """`tokens(function)`, each segment with the line its statement starts on."""
    finder = _Locals()
    finder.visit(function)
    signature: list[str] = []
    segments = [(function.lineno, signature)]
    _emit(function.args, finder.names, signature, segments)
    for statement in function.body[1:] if _is_docstring(function.body[0]) else function.body:
        segment: list[str] = []
        segments.append((statement.lineno, segment))
        _emit(statement, finder.names, segment, segments)
    return [(line, segment) for line, segment in segments if segment]


def tokens(function: ast.FunctionDef | ast.AsyncFunctionDef) -> list[list[str]]:
    """The canonical token stream of one function, one segment per statement (a compound
    statement's segment is its header: `If` and its test, `For` and its target and iterable);
    its name, decorators, docstring and annotations are left out."""
    return [segment for _, segment in lined_tokens(function)]


def _hash(run: list[str], salt: str) -> str:
    return hashlib.sha256((salt + "\x1f".join(run)).encode()).hexdigest()[:16]


def kgrams(segments: list[list[str]], salt: str = "") -> list[str]:
    """A hash of each run of K consecutive tokens within one segment, in order (a segment
    shorter than K: one hash of it whole). No k-gram spans two statements, so statements added
    or swapped leave every other statement's k-grams as they were."""
    return [_hash(segment[i:i + K], salt) for segment in segments
            for i in range(max(1, len(segment) - K + 1))]


def kgram_lines(function: ast.FunctionDef | ast.AsyncFunctionDef, salt: str = "") -> dict[str,
                                                                                          set[int]]:
    """{k-gram hash: the lines of `function` whose statements hold it}: where a fingerprint is."""
    lines: dict[str, set[int]] = {}
    for line, segment in lined_tokens(function):
        for i in range(max(1, len(segment) - K + 1)):
            lines.setdefault(_hash(segment[i:i + K], salt), set()).add(line)
    return lines


def winnow(hashes: list[str]) -> set[str]:
    """The rightmost smallest hash of every window of W consecutive hashes (all of them when
    there are fewer than W)."""
    if len(hashes) <= W:
        return set(hashes)
    chosen = set()
    for start in range(len(hashes) - W + 1):
        window = hashes[start:start + W]
        smallest = min(window)
        chosen.add(window[len(window) - 1 - window[::-1].index(smallest)])
    return chosen


def fingerprints(function: ast.FunctionDef | ast.AsyncFunctionDef, salt: str = "") -> set[str]:
    """The winnowed fingerprints of one function."""
    return winnow(kgrams(tokens(function), salt))


def containment(reference: set[str], submitted: set[str]) -> float:
    """The share of `reference`'s fingerprints among `submitted`'s k-grams (0 when the reference
    has none)."""
    return len(reference & submitted) / len(reference) if reference else 0.0


def resemblance(a: set[str], b: set[str]) -> float:
    """Shared fingerprints over the smaller set's: how much of the shorter function the other
    holds (symmetric; 0 when either is empty)."""
    return len(a & b) / min(len(a), len(b)) if a and b else 0.0
