"""pytree: flatten/unflatten nested inputs and outputs (tuples, lists, dicts, dataclasses-as-leaves) via optree.

`none_is_leaf=True` so that None positions survive a round trip (a function may return None gradients).
"""
from __future__ import annotations

import optree

NAMESPACE = "jitcore"


def tree_flatten(tree):
    return optree.tree_flatten(tree, none_is_leaf=True, namespace=NAMESPACE)


def tree_unflatten(spec, leaves):
    return optree.tree_unflatten(spec, leaves)


def tree_map(fn, tree):
    return optree.tree_map(fn, tree, none_is_leaf=True, namespace=NAMESPACE)


def tree_leaves(tree):
    return optree.tree_leaves(tree, none_is_leaf=True, namespace=NAMESPACE)
