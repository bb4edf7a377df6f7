"""IR: the one checked way into the IR's tables (proxies.TENSOR_METHODS, codegen.NAMESPACE_IMPORTS, ...). Each
table's own module offers a `register_*` function built on `enter`, so a duplicate key, a wrong key or a value of the
wrong type fails where it is registered, naming the table, instead of a silent overwrite found much later.
"""
from __future__ import annotations


def enter(table: dict, what: str, key, value, *, replace: bool = False, key_type=str, value_check=callable,
          value_kind: str = "a callable"):
    """table[key] = value, checked: key of key_type, value passing value_check, and key not there yet unless
    `replace` (the entry it replaces is then named by the caller's intent, not by import order). Returns value."""
    if not isinstance(key, key_type) or (key_type is str and not key):
        raise TypeError(f"{what}: the key must be a non-empty {key_type.__name__}, got {key!r}")
    if not value_check(value):
        raise TypeError(f"{what} {key!r}: expected {value_kind}, got {value!r}")
    if key in table and not replace:
        raise ValueError(f"{what} {key!r} is registered already (as {table[key]!r}); pass replace=True to replace it")
    table[key] = value
    return value
