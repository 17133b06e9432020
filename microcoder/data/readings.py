"""What a statement says of how a program's output may differ from the recorded one.

Each reading is read one sentence at a time, by what the sentence is about rather than by
one fixed phrase, and says which words decided (the data pipeline records them as
`metadata.checker_rule`; benchmarks/statement_readings.py measures every rule on
hand-labelled real statements of every shared source):

- `read_tolerance`: an error bound on numbers ("absolute or relative error does not
  exceed 10^{-6}", "within 10^-5 of the actual answer", "differs from the correct one by
  at most 1e-9", "absolute error ... 0.01"), with the error it bounds: `absolute`,
  `relative` or `either`. A bound that names neither error ("within 10^-5 of the answer",
  "differs by at most") bounds the difference, which is the absolute error.
- `read_exact_decimals`: the output's decimals are fixed text ("rounded to exactly two
  digits after the decimal point", "without removing the trailing 0s").
- `read_letter_case`: a sentence that lets the output be printed in any letter case, and
  which answers it covers: the words the statement names as answers (YES/NO, "MAYBE",
  "Alice") where it names any, else every token.
- `read_several_answers`: the statement accepts any of several answers ("If there are
  multiple answers, print any of them", "Return any array that satisfies this condition",
  "Any correct answer will be accepted"): equality with one recorded answer cannot judge
  it, so the pipeline removes it.
- `read_stdin_order` and `read_result_order`: the printed items or the returned list may
  come in any order ("You may print the elements in any order", "the order of the
  elements in the result does not matter", "Return the answer in any order"); for stdin,
  whether the items are lines or each line's tokens (from the words, "one on each line",
  and from the expected outputs: one token a line in every one is lines), and whether a
  count printed before them stays in place ("print k, followed by the k indices").

A sentence that describes the task rather than the output frees nothing: "In any case, s
contains ..." (meaning anyway), "the tasks can be done in any order", "a permutation is
an array of n distinct integers in arbitrary order", "If there are several minima,
Yelisey can choose any of them".
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

_SENTENCE_END = re.compile(r"(?<=[.!?;])\s+(?=[A-Z$(\\\"'*-])|\n\s*\n|\n(?=\s*[-*•]|\s*[A-Z])")


def sentences(statement: str) -> Iterator[str]:
    """The statement's sentences (and list items, and lines that start with a capital),
    whitespace folded. A decimal point ("0.01", "1.5") does not end a sentence."""
    for part in _SENTENCE_END.split(statement):
        text = " ".join(part.split())
        if text:
            yield text


# ------------------------------------------------------------------ tolerance

# A power of ten with a negative exponent as statements write it, with or without a
# multiplier: 10^{-6}, 10^-6, 10^(-6), 10 ^ {-5}, $10^{-6}$, 10**-6, 2 \cdot 10^{-6},
# 5 x 10^-3, 1e-6, 1.5e-6, 1E-6, and LeetCode's "10-5" (a superscript lost in the text);
# or a plain decimal such as 0.01 or 0.000001, or a percentage ("0.5%").
_MULTIPLIER = r"(?:(\d+(?:\.\d+)?)\s*(?:\\cdot|\\times|\*|×|·|x)\s*)?"
_POWER = re.compile(_MULTIPLIER + r"\$?10\s*(?:\^|\*\*)\s*\{?\s*\(?\s*[-−–]\s*(\d+)\s*\)?\s*\}?"
                    r"|\b(\d+(?:\.\d+)?)\s*[eE]\s*[-−–]\s*(\d+)\b"
                    r"|\b10\s*[-−–]\s*(\d)\b(?![\d.])")
_DECIMAL_BOUND = re.compile(r"(?<![\d.])(0\.0*[1-9]\d*|\d+(?:\.\d+)?(?=\s*(?:%|percent\b)))\b\s*(%|percent\b)?")
# What makes a number in a sentence an error bound: the sentence speaks of an error, a
# difference from the right answer, a tolerance or precision, and of being accepted.
_ERROR_WORDS = re.compile(
    r"\b(?:absolute|relative)\b[^.]{0,60}?\b(?:error|difference|precision|accuracy)\b"
    r"|\berrors?\b[^.]{0,80}?\b(?:not exceed|at most|less than|no more than|no greater than|within|up to|"
    r"smaller than|below|of\b)"
    r"|\b(?:within|up to)\b[^.]{0,30}?\b(?:of|from) the (?:actual|correct|true|expected|right|jury's) (?:answer|value|result)s?"
    r"|\bdiffers? (?:from|by)\b[^.]{0,60}?\b(?:correct|actual|true|jury's|expected|right)\b"
    r"|\b(?:correct|accepted|precision|accuracy|tolerance)\b[^.]{0,60}?\b(?:up to|within|at most|not exceed)\b",
    re.IGNORECASE)
# ... and of the answer being accepted, or of the answer printed with an error ("Print the
# answer with an absolute or relative error of at most 10^{-9}"; not "if the total error
# is at most 0.5, print YES").
_ACCEPTANCE = re.compile(r"\b(?:correct|accepted|accept|allowed|permitted|tolerated|considered|checker|judged|precision|accuracy|tolerance|"
                         r"true value|actual answer)\b"
                         r"|\b(?:print|output)\b[^.]{0,80}?\bwith an?\b[^.]{0,40}?\berror\b", re.IGNORECASE)
_ERROR_KINDS = re.compile(r"\b(absolute|relative)\b", re.IGNORECASE)


@dataclass(frozen=True)
class Tolerance:
    value: float
    kind: str
    """`absolute`, `relative` or `either` (Checker.float_tolerance_kind)."""
    words: str


def read_tolerance(statement: str) -> Tolerance | None:
    """The error bound the statement sets on numeric answers, or None (see the module
    docstring). The first sentence that states one decides."""
    for sentence in sentences(statement):
        if not _ERROR_WORDS.search(sentence) or not _ACCEPTANCE.search(sentence):
            continue
        power = _POWER.search(sentence)  # a power of ten is the bound wherever it stands; a decimal
        decimal = None if power else _DECIMAL_BOUND.search(sentence)  # only when there is none
        if power is not None:
            value = _power_value(power)
        elif decimal is not None:
            value = float(decimal.group(1)) / (100 if decimal.group(2) else 1)
        else:
            continue
        if not 0 < value < 1:
            continue
        kinds = {word.lower() for word in _ERROR_KINDS.findall(sentence)}
        kind = kinds.pop() if len(kinds) == 1 else "either" if kinds else "absolute"
        return Tolerance(value, kind, sentence)
    return None


def _power_value(power: re.Match) -> float:
    """The value of a `_POWER` match: multiplier x 10^-exponent."""
    multiplier, exponent, mantissa, e_exponent, lost_exponent = power.groups()
    if e_exponent is not None:
        return float(f"{mantissa}e-{e_exponent}")
    if exponent is not None:
        return float(f"{multiplier or 1}e-{exponent}")
    return float(f"1e-{lost_exponent}")


# ------------------------------------------------------------------ rounding

_EXACT_DECIMALS = re.compile(
    r"\b(?:print|output|printed|outputs?|answer|rounded|round|truncate|truncating|with)\b[^.]{0,80}?"
    r"(?:\bexactly\s+\w+\s+(?:decimal places|digits after the (?:decimal )?point|digits after the decimal)"
    r"|\b(?:rounded|round(?:ing)?)\s+(?:it\s+)?(?:off\s+)?to\s+(?:exactly\s+)?\w+\s+(?:decimal places|digits after)"
    r"|\bto the \S+ decimal place\b)"
    r"|\b(?:without(?: removing)?|not have|do not remove|don't remove)\s+(?:the\s+|any\s+)?trailing\s+(?:0s|zeros|zeroes)\b",
    re.IGNORECASE)
_INPUT_SIDE = re.compile(r"\b(?:you are given|is given|are given|will have|has a maximum|input)\b", re.IGNORECASE)


def read_exact_decimals(statement: str) -> str | None:
    """The sentence that fixes the printed decimals' digits, or None."""
    for sentence in sentences(statement):
        if _EXACT_DECIMALS.search(sentence) and not _INPUT_SIDE.search(sentence):
            return sentence
    return None


# ------------------------------------------------------------------ letter case

_ANY_CASE = re.compile(
    r"\b(?:print|output|printed|write|answer|letters?|strings?|words?|responses?|outputs?)\b[^.]{0,60}?"
    r"\b(?:in any (?:letter )?(?:case|register)|in (?:upper|lower)\s*case or (?:upper|lower)\s*case|"
    r"(?:upper|lower)\s*case or (?:upper|lower)\s*case letters? (?:are|is) (?:allowed|accepted))"
    r"|\b(?:case[- ]insensitive|regardless of (?:the )?(?:letter )?case)\b(?![^.]{0,40}\b(?:input|given|compar\w*|match\w*)\b)"
    r"|\b(?:will|would) (?:all )?be (?:recognized|accepted|considered) as (?:a )?(?:positive|negative)",
    re.IGNORECASE)
# A sentence that says what to print: where the answer words are named.
_PRINT_SENTENCE = re.compile(r"\b(?:print|printed|output|outputs|write)\b", re.IGNORECASE)
# "In any case" meaning anyway: at a sentence's or a clause's start, or before a comma ("In
# any case, s contains ...", "...; in any case print the number of steps first"); not
# "print YES or NO (in any case)".
_ANYWAY = re.compile(r"(?:^|[;:])\s*in any case\b|\bin any case\s*,", re.IGNORECASE)
# A sentence about the output says so; one about the input, or about how the task compares
# strings ("string comparison here is case-insensitive", "'Bob' and 'bob' are the same
# user"), frees nothing of the output.
_OUTPUT_WORDS = re.compile(r"\b(?:print|printed|output|outputs|write|answers?|respon\w*|recogni[sz]ed)\b", re.IGNORECASE)
_NOT_OUTPUT = re.compile(r"\b(?:you are given|input|compar\w*|match\w*|treat\w*|the same)\b", re.IGNORECASE)
# Words a statement names as answers: quoted, in \texttt{}, or in capitals.
_NAMED_WORD = re.compile(r"[\"“'«`]([A-Za-z]{2,})[\"”'»`]|\\texttt\{([A-Za-z]{2,})\}|\b([A-Z]{2,})\b")
_YES_NO = ("YES", "NO")


@dataclass(frozen=True)
class LetterCase:
    words: tuple[str, ...]
    """The answers whose case is free; empty: every token's."""
    sentence: str


def _frees_case(sentence: str) -> bool:
    """Whether the sentence lets the output be printed in any letter case."""
    return bool(_ANY_CASE.search(_ANYWAY.sub(" ", sentence)) and _OUTPUT_WORDS.search(sentence)
                and not _NOT_OUTPUT.search(sentence))


def read_letter_case(statement: str, outputs: Iterable[str] = ()) -> LetterCase | None:
    """Which answers may be printed in any letter case, or None when the statement frees
    none. The words are those that the sentence freeing the case, or a sentence saying
    what to print, names (quoted, \\texttt, capitals) and that the expected outputs print
    as whole tokens, YES and NO among them where the sentence speaks of a positive answer
    ("yEs ... will be recognized as a positive response"); without any, the whole
    output's case is free."""
    found = next((sentence for sentence in sentences(statement) if _frees_case(sentence)), None)
    if found is None:
        return None
    printed = {token.casefold() for output in outputs for token in output.split()}
    naming = [found] + [sentence for sentence in sentences(statement) if _PRINT_SENTENCE.search(sentence)]
    named = {next(group for group in match.groups() if group)
             for sentence in naming for match in _NAMED_WORD.finditer(sentence)}
    words = {word.upper() for word in named if word.casefold() in printed}
    speaks_of_yes = re.search(r"positive|negative|\byes\b", found, re.IGNORECASE) or words & set(_YES_NO)
    if speaks_of_yes and {"yes", "no"} & {w.casefold() for w in named}:
        words.update(_YES_NO)  # both answers, whichever the tests happen to print
    words = sorted(words)
    if not words and not printed and re.search(r"\byes\b|positive", found, re.IGNORECASE):
        words = list(_YES_NO)
    return LetterCase(tuple(words), found)


# ------------------------------------------------------------------ several answers

_MULTIPLE = r"\b(?:multiple|several|many|more than one|not unique|one or more)\b"
_SEVERAL = [
    # "If there are multiple answers, print any (of them)", "you may output any."
    re.compile(_MULTIPLE + r"[^.]{0,160}?\b(?:print|output|return|report|write|give)\s+any\b"
               r"(?!\s+(?:number|of the following|time))", re.IGNORECASE),
    # "If there are several correct answers, you may choose any of them"
    re.compile(_MULTIPLE + r"[^.]{0,80}?\b(?:answers|solutions)\b[^.]{0,60}?\b(?:choose|pick|find)\s+any\b",
               re.IGNORECASE),
    # "Return any array that satisfies this condition", "print any integer between 0 and
    # 9 that ...", "return any [i, j] with ...", "You can return any of them."
    re.compile(r"\b(?:print|output|return|report|construct|reconstruct)\s+any\b"
               r"(?!\s+(?:number of|other|of the following|one of the following))", re.IGNORECASE),
    # "any of them will be accepted", "Any correct answer will be accepted", "it will also
    # be recognized as 1"
    re.compile(r"\bany\s+(?:one\s+)?of\s+(?:them|those|these)\s+(?:will|would|is|are|can|shall)\s+(?:also\s+)?(?:be\s+)?"
               r"(?:accepted|considered correct|correct|judged)", re.IGNORECASE),
    # "Any correct answer will be accepted", "any sequence of length at most 20000 will be
    # accepted" (not an error bound: "any answer with an error less than 10-5 ...")
    re.compile(r"\bany\s+(?!(?:permutation|order|arrangement)\b)(?![^.]{0,60}\b(?:error|within|precision)\b)[^.]{0,80}?\b(?:will|would|is|are|shall)\s+"
               r"(?:also\s+)?(?:be\s+)?(?:accepted|considered correct)", re.IGNORECASE),
    # "Return the size of any such subarray", "find any peak element ... and return [i, j]"
    re.compile(r"\breturn\s+the\s+\w+\s+of\s+any\s+such\b|\bfind\s+any\b[^.]{0,80}?\band\s+return\b(?!\s+(?:true|false))",
               re.IGNORECASE),
    re.compile(_MULTIPLE + r"[^.]{0,80}?\byou\s+(?:can|may)\s+(?:pick|choose)\s+any\s+of\s+them\b", re.IGNORECASE),
    re.compile(r"\b(?:print|output)\s+any\s+other\b[^.]{0,120}?\bwill also be (?:recognized|accepted|considered)",
               re.IGNORECASE),
]
# "Find any array such that ...": a contest task (stdin) asks for one of several; in a call
# problem "find any substring ... Return true if" asks whether one exists.
_FIND_ANY = re.compile(r"\bfind\s+any\b(?!\s+(?:number of|other|of the following))", re.IGNORECASE)
_FIND_ANY_OF_SEVERAL = re.compile(r"\bfind\s+any\s+(?:valid|such|one|possible|of them)\b", re.IGNORECASE)
# A character of the story choosing, deleting, moving: the task, not the output.
_TASK_CHOICE = re.compile(r"\b(?:he|she|they|it|[A-Z][a-z]+)\s+(?:can|may|could)\s+(?:choose|pick|delete|remove|take)\s+any\b")


def read_several_answers(statement: str, kind: str = "stdin") -> str | None:
    """The sentence that accepts any of several answers of a `kind` ("stdin" or "call")
    problem, or None."""
    patterns = _SEVERAL + [_FIND_ANY if kind == "stdin" else _FIND_ANY_OF_SEVERAL]
    for sentence in sentences(statement):
        if _TASK_CHOICE.search(sentence) and not re.search(r"\byou\b", sentence, re.IGNORECASE):
            continue
        if any(pattern.search(sentence) for pattern in patterns):
            return sentence
    return None


# ------------------------------------------------------------------ order

_IN_ANY_ORDER = re.compile(r"\bin (?:any|an arbitrary|arbitrary|any arbitrary) order\b", re.IGNORECASE)
_ORDER_DOES_NOT_MATTER = re.compile(r"\border\b[^.]{0,80}?\b(?:does not|doesn't|do not|don't|won't|will not) matter\b"
                                    r"|\border\b[^.]{0,40}?\bis (?:not important|irrelevant|arbitrary)\b", re.IGNORECASE)
# Words between the result and "in any order" that show the order is another thing's:
# a clause ("that can be formed by concatenating ... in any order") or an action.
_OTHER_CLAUSE = re.compile(r"\b(?:if|when|whenever|while|until|so that|such that|"
                           r"(?:that|which|who)\s+(?:can|could|may|might|must|will|would|are|is)\b|"
                           r"done|completed|performed|processed|applied|visited|prepared|finished|concatenat\w*|"
                           r"arrang\w*|rearrang\w*|formed|taken|used|sold|bought|eaten|crossed|perform\w*|"
                           r"operations?|moves?|queries)\b", re.IGNORECASE)
_RESULT_WORDS = re.compile(r"\b(?:return|returned|returns|answer|answers|result|results|output)\b", re.IGNORECASE)
_PRINT_WORDS = re.compile(r"\b(?:print|printed|output|outputs|outputted|write|written|answer|answers)\b", re.IGNORECASE)
_DEFINITION = re.compile(r"\b(?:is an? (?:array|sequence|set|string|list)|consisting of|is defined)\b", re.IGNORECASE)
# Things printed one a line, so that their order is the lines' order.
_LINE_THINGS = re.compile(r"\b(?:lines|pairs?|edges?|rows?|segments?|queries|operations?|moves?|triples?|intervals?|"
                          r"(?:each |one )?on (?:a )?separate lines?|one per line|one on each line|"
                          r"(?:each )?on (?:its|their) own lines?|(?:each |one )?on a new line)\b", re.IGNORECASE)
# A count printed before the items: "print k, followed by the k indices", "first print
# the number of ...", "print m, then the edges" (only a cue: the outputs must show it).
_COUNT_FIRST = re.compile(r"\bfollowed by\b|\bfirst\b[^.]{0,60}?\b(?:number|count|integer|size|how many)\b"
                          r"|\b(?:number|count|size|integer [a-z]|[kmn])\b[^.]{0,60}?\bthen\b", re.IGNORECASE)


def _frees_order(sentence: str, result_words: re.Pattern) -> str | None:
    """The words by which the sentence says the result (or output) named by
    `result_words` may come in any order, or None: "in any order" with a result word
    before it and no other clause or action between them (from the first result word
    within 100 characters and the same clause), or "the order of the output ... does
    not matter"."""
    if _DEFINITION.search(sentence) and not result_words.search(sentence):
        return None
    for match in _IN_ANY_ORDER.finditer(sentence):
        before = sentence[: match.start()]
        results = list(result_words.finditer(before))
        if results and not _OTHER_CLAUSE.search(before[results[-1].end():]):
            first = next((word for word in results if match.start() - word.end() <= 101
                          and "." not in sentence[word.end(): match.start()]), results[-1])
            return sentence[first.start(): match.end()]
    found = _ORDER_DOES_NOT_MATTER.search(sentence)
    if found and result_words.search(sentence[: found.end()]):
        return found.group(0)
    return None


# "The pairs can appear in any order": the items of a returned list, named by what they are.
_ITEMS_ANY_ORDER = re.compile(r"^(?:the|its)\s+(?:pairs|elements|values|indices|items|numbers|strings|words|lists|"
                              r"triplets|intervals)\s+(?:can|may)\s+(?:appear|be|come)\s+in any order\b", re.IGNORECASE)


def read_result_order(statement: str) -> str | None:
    """The words that free a call problem's returned list's order ("return the answer
    in any order"), or None."""
    for sentence in sentences(statement):
        words = _frees_order(sentence, _RESULT_WORDS)
        items = _ITEMS_ANY_ORDER.search(sentence)
        if words or items:
            return words or items.group(0)
    return None


@dataclass(frozen=True)
class StdinOrder:
    lines: bool
    """The printed lines may come in any order (else the tokens of each line)."""
    sentence: str
    leading_count: bool = False
    """A count printed before the items stays in place (`Checker.leading_count`)."""


def read_stdin_order(statement: str, outputs: Iterable[str] = ()) -> StdinOrder | None:
    """Whether a stdin problem's printed items may come in any order, and which: the
    lines ("You can print the pairs in any order", "print the indices in any order, one
    on each line", or any order where every expected output prints one token a line) or
    the tokens of each line ("print the indices in any order", "The order of the output
    does not matter"). A count printed before the items stays in place where the
    statement speaks of one ("print k, followed by ...") and every expected output has
    it: the first token of each line is the number of the line's other tokens (tokens),
    or the first line the number of the other lines (lines)."""
    for sentence in sentences(statement):
        if _frees_order(sentence, _PRINT_WORDS):
            lines_of = [[line.split() for line in output.splitlines() if line.split()] for output in outputs]
            lines_of = [lines for lines in lines_of if lines]
            lines = bool(_LINE_THINGS.search(sentence)) or bool(lines_of) and all(
                len(tokens) == 1 for lines in lines_of for tokens in lines)
            if lines:
                counted = all(lines[0] == [str(len(lines) - 1)] for lines in lines_of)
            else:
                counted = all(tokens[0] == str(len(tokens) - 1) for lines in lines_of for tokens in lines)
            counted = counted and bool(lines_of) and bool(_COUNT_FIRST.search(statement))
            return StdinOrder(lines, sentence, counted)
    return None
