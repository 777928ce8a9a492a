"""The static check generated code must pass before it runs: an allow-list over the syntax tree.

Why an allow-list: a deny-list has to foresee every way out of Python (dunder walks from a
literal, frame objects, string-dispatched methods, format-string attribute access...), and the
first one it misses is the escape. Here every node type, every name and every attribute name the
code uses must be on a list of things an analysis over dataframes needs, and anything else is
refused with the construct named, so the model can rewrite it once.

What is on the lists: expressions, assignments, loops, conditionals, comprehensions, plain
functions and lambdas; the names ``dfs``, ``pd``, ``np``, ``math``, a handful of side-effect-free
builtins, and names the code binds itself; attribute names of the pandas/numpy/str/list/dict API
that compute over data in memory. Nothing that reads or writes files, imports, reflects, formats
with attribute lookups (``str.format``), evaluates strings (``query``/``eval``), or reaches a
private or dunder name. Strings handed to the methods that dispatch on a name (``agg``, ``apply``,
``transform``...) must name an allowed method or be data (a column name), never a method off the
list such as ``to_pickle``; a string built at run time is refused there.

This is the first layer. The code then runs in a separate worker process with CPU, memory and
wall-clock limits (:mod:`context_engine.compute.worker`), which stops what a check cannot see
(an endless loop, a list of ten billion items).
"""

from __future__ import annotations

import ast
from functools import cache

from context_engine.compute.errors import UnsafeCode

MAX_CODE_CHARS = 20_000
MAX_NODES = 5_000

#: the names every program may read besides those it binds
PROVIDED = frozenset({"dfs", "pd", "np", "math", "result"})

SAFE_BUILTINS = frozenset(
    {
        "abs", "all", "any", "bool", "dict", "divmod", "enumerate", "filter", "float", "int", "isinstance",
        "len", "list", "map", "max", "min", "print", "range", "reversed", "round", "set", "sorted", "str",
        "sum", "tuple", "zip", "Exception", "ValueError", "KeyError", "TypeError", "IndexError",
        "ZeroDivisionError", "ArithmeticError", "LookupError",
    }
)  # fmt: skip

_NODES: tuple[type[ast.AST], ...] = (
    ast.Module, ast.Expr, ast.Assign, ast.AugAssign, ast.AnnAssign, ast.For, ast.While, ast.If, ast.Break,
    ast.Continue, ast.Pass, ast.FunctionDef, ast.Return, ast.Lambda, ast.arguments, ast.arg, ast.Try,
    ast.ExceptHandler, ast.Delete, ast.Name, ast.Load, ast.Store, ast.Del, ast.Constant, ast.JoinedStr,
    ast.FormattedValue, ast.List, ast.Tuple, ast.Set, ast.Dict, ast.ListComp, ast.SetComp, ast.DictComp,
    ast.GeneratorExp, ast.comprehension, ast.Attribute, ast.Subscript, ast.Slice, ast.Starred, ast.keyword,
    ast.Call, ast.BinOp, ast.UnaryOp, ast.BoolOp, ast.Compare, ast.IfExp, ast.NamedExpr,
    ast.operator, ast.unaryop, ast.boolop, ast.cmpop, ast.expr_context,
)  # fmt: skip

_ATTRIBUTES_TEXT = """
loc iloc at iat columns index values dtypes dtype shape size ndim empty T name names
head tail copy sum mean median min max count nunique unique value_counts std var prod sem skew kurt mode
cumsum cumprod cummax cummin abs round describe quantile idxmax idxmin nlargest nsmallest
sort_values sort_index groupby agg aggregate apply transform map filter merge join concat pivot
pivot_table melt stack unstack reset_index set_index rename rename_axis drop drop_duplicates duplicated
dropna fillna ffill bfill isna isnull notna notnull astype where mask isin between clip rank diff
pct_change shift rolling expanding ewm resample corr cov any all items iterrows itertuples tolist
to_list to_dict to_numpy to_frame to_numeric to_datetime to_timedelta to_period keys get assign
explode squeeze select_dtypes insert pop replace nth first last size ngroups groups get_group
cumcount ngroup cut qcut crosstab DataFrame Series Index Timestamp Timedelta NaT NA isna notna
date_range Grouper NamedAgg factorize interpolate combine_first add sub mul div truediv floordiv mod pow
eq ne lt le gt ge dot align reindex sample str dt cat
contains startswith endswith lower upper strip lstrip rstrip split rsplit len slice extract extractall
findall match fullmatch zfill title capitalize casefold isdigit isnumeric isalpha isalnum isspace
isdecimal islower isupper center ljust rjust pad partition rpartition count_nonzero get_dummies cat
year month day hour minute second microsecond dayofweek day_of_week weekday quarter dayofyear
day_of_year date time strftime floor ceil normalize days seconds total_seconds month_name day_name
is_month_end is_month_start is_quarter_end is_year_end is_year_start days_in_month isocalendar week
tz_localize tz_convert now today isoformat timestamp components codes categories
append extend remove sort reverse setdefault update add discard union intersection difference
issubset issuesuperset symmetric_difference real imag is_integer
array arange linspace sqrt log log10 log2 log1p exp expm1 power sign maximum minimum percentile average
nan inf pi e isnan isinf isfinite nansum nanmean nanmedian nanmax nanmin nanstd nanpercentile
argmax argmin argsort unique_counts histogram corrcoef select concatenate zeros ones full cumulative
int64 int32 float64 float32 bool_ object_ datetime64 timedelta64 fsum isclose fabs trunc comb
gcd lcm hypot ndarray nonzero flatten ravel reshape ptp digitize searchsorted bincount
intersect1d union1d setdiff1d in1d triu tril
"""
ATTRIBUTES = frozenset(_ATTRIBUTES_TEXT.split())

#: methods that accept a function NAME and look it up on the object (or on numpy)
DISPATCHING = frozenset({"agg", "aggregate", "apply", "transform", "map", "pipe", "applymap"})


@cache
def _api_names() -> frozenset[str]:
    """Public names of the objects a dispatched string is looked up on (pandas objects and numpy)."""
    import numpy as np
    import pandas as pd
    from pandas.api.typing import DataFrameGroupBy, Resampler, Rolling, SeriesGroupBy

    names: set[str] = set(dir(np))
    for kind in (pd.DataFrame, pd.Series, DataFrameGroupBy, SeriesGroupBy, Resampler, Rolling, pd.Index):
        names.update(dir(kind))
    return frozenset(n for n in names if not n.startswith("_"))


def check_code(code: str) -> None:
    """Refuse ``code`` (``UnsafeCode`` listing each reason) unless every construct is on the lists."""
    if not isinstance(code, str) or not code.strip():
        raise UnsafeCode(["the code is empty"])
    if len(code) > MAX_CODE_CHARS:
        raise UnsafeCode([f"the code is longer than {MAX_CODE_CHARS} characters"])
    try:
        tree = ast.parse(code, mode="exec")
    except SyntaxError as exc:
        raise UnsafeCode([f"the code does not parse: {exc.msg} (line {exc.lineno})"]) from None
    except (RecursionError, MemoryError, ValueError):
        raise UnsafeCode(["the code is nested too deeply to check"]) from None
    reasons = _Checker(tree).run()
    if reasons:
        raise UnsafeCode(reasons)


class _Checker:
    """One walk over the tree; collects every refusal rather than stopping at the first."""

    def __init__(self, tree: ast.Module):
        self.tree = tree
        self.reasons: list[str] = []
        self.functions: set[str] = set()
        self.bound: set[str] = set()

    def refuse(self, node: ast.AST, what: str) -> None:
        line = getattr(node, "lineno", None)
        reason = f"{what} (line {line})" if line else what
        if reason not in self.reasons:
            self.reasons.append(reason)

    def run(self) -> list[str]:
        nodes = list(ast.walk(self.tree))
        if len(nodes) > MAX_NODES:
            return [f"the code has more than {MAX_NODES} syntax nodes"]
        for node in nodes:  # names the program binds, anywhere, may be read anywhere
            self.collect_binding(node)
        for node in nodes:
            self.check(node)
        return self.reasons

    def collect_binding(self, node: ast.AST) -> None:
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            self.bound.add(node.id)
        elif isinstance(node, ast.arg):
            self.bound.add(node.arg)
        elif isinstance(node, ast.FunctionDef):
            self.bound.add(node.name)
            self.functions.add(node.name)
        elif isinstance(node, ast.ExceptHandler) and node.name:
            self.bound.add(node.name)

    def check(self, node: ast.AST) -> None:
        if not isinstance(node, _NODES):
            self.refuse(node, f"{type(node).__name__} is not allowed ({_hint(node)})")
            return
        if isinstance(node, ast.Name):
            self.check_name(node, node.id)
        elif isinstance(node, ast.arg):
            self.check_name(node, node.arg)
        elif isinstance(node, ast.Attribute):
            self.check_attribute(node)
        elif isinstance(node, ast.FunctionDef):
            self.check_name(node, node.name)
            if node.decorator_list:
                self.refuse(node, "decorators are not allowed")
        elif isinstance(node, ast.ExceptHandler) and node.name:
            self.check_name(node, node.name)
        elif isinstance(node, ast.Call):
            self.check_call(node)
        elif isinstance(node, ast.Constant) and isinstance(node.value, bytes):
            self.refuse(node, "bytes literals are not allowed")

    def check_name(self, node: ast.AST, name: str) -> None:
        if name.startswith("_"):
            self.refuse(node, f"the name {name!r} is not allowed: names starting with '_' are private")
        elif name not in PROVIDED and name not in SAFE_BUILTINS and name not in self.bound:
            self.refuse(node, f"the name {name!r} is not available (use dfs, pd, np, math and plain builtins)")

    def check_attribute(self, node: ast.Attribute) -> None:
        if node.attr.startswith("_"):
            self.refuse(node, f"the attribute {node.attr!r} is not allowed: private and dunder attributes are off")
        elif node.attr not in ATTRIBUTES:
            self.refuse(node, f"the attribute {node.attr!r} is not on the allowed list")
        if isinstance(node.ctx, ast.Store | ast.Del):
            self.refuse(node, f"assigning to the attribute {node.attr!r} is not allowed (use df['col'] = ...)")

    def check_call(self, node: ast.Call) -> None:
        func = node.func
        if not isinstance(func, ast.Attribute) or func.attr not in DISPATCHING:
            return
        for arg in [*node.args, *(k.value for k in node.keywords)]:
            self.check_dispatched(arg, func.attr)

    def check_dispatched(self, node: ast.AST, method: str) -> None:
        """A value handed to a name-dispatching method: a function, or a string that is safe to look up."""
        if isinstance(node, ast.Constant):
            if isinstance(node.value, str) and node.value in _api_names() and node.value not in ATTRIBUTES:
                self.refuse(node, f"{method}() may not dispatch to {node.value!r}, which is not on the allowed list")
        elif isinstance(node, ast.List | ast.Tuple | ast.Set):
            for item in node.elts:
                self.check_dispatched(item, method)
        elif isinstance(node, ast.Dict):
            for value in node.values:
                self.check_dispatched(value, method)
        elif isinstance(node, ast.Starred):
            self.check_dispatched(node.value, method)
        elif isinstance(node, ast.Name):
            if node.id in self.bound and node.id not in self.functions:
                self.refuse(node, f"{method}() takes a function, a lambda or a literal name here, not the variable "
                            f"{node.id!r}")
        elif isinstance(node, ast.JoinedStr | ast.BinOp | ast.Subscript | ast.Call | ast.IfExp | ast.BoolOp):
            if not isinstance(node, ast.Call) or not _builds_data(node):
                self.refuse(node, f"{method}() takes a function, a lambda or a literal name, not a computed value")


def _builds_data(node: ast.Call) -> bool:
    """A call that can only build data, never a name (``pd.Series(...)``, ``dict(...)``)."""
    func = node.func
    if isinstance(func, ast.Name):
        return func.id in {"dict", "list", "tuple", "set"}
    return isinstance(func, ast.Attribute) and func.attr in {"Series", "DataFrame", "Index", "to_dict"}


def _hint(node: ast.AST) -> str:
    if isinstance(node, ast.Import | ast.ImportFrom):
        return "no imports: pd, np and math are already provided"
    if isinstance(node, ast.ClassDef):
        return "no class definitions"
    if isinstance(node, ast.Global | ast.Nonlocal):
        return "no global or nonlocal"
    if isinstance(node, ast.Yield | ast.YieldFrom | ast.Await | ast.AsyncFunctionDef | ast.AsyncFor | ast.AsyncWith):
        return "no generators or async code"
    if isinstance(node, ast.With):
        return "no context managers"
    return "outside the allowed subset"
