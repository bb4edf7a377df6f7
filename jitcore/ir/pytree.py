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


def register_containers(tree):
    """Register with optree the container classes in `tree` that torch's pytree knows (e.g. transformers'
    ModelOutput) and plain dataclasses, so outputs holding tensors in them flatten and rebuild (called on outputs)."""
    import dataclasses

    from torch.utils import _pytree as torch_pytree

    stack, seen = [tree], set()
    while stack:
        obj = stack.pop()
        cls = type(obj)
        if cls in (tuple, list):
            stack.extend(obj)
            continue
        if isinstance(obj, dict) and cls in (dict,):
            stack.extend(obj.values())
            continue
        if cls in seen or cls in _REGISTERED:
            if cls in _REGISTERED:
                stack.extend(_REGISTERED[cls](obj))
            continue
        seen.add(cls)
        node = torch_pytree.SUPPORTED_NODES.get(cls)
        if node is not None and not optree.is_structseq_class(cls) and cls.__module__.split(".")[0] != "torch":
            _register(cls, lambda o, node=node: node.flatten_fn(o), lambda ctx, leaves, node=node:
                      node.unflatten_fn(leaves, ctx))
        elif dataclasses.is_dataclass(obj) and not isinstance(obj, type):
            names = tuple(f.name for f in dataclasses.fields(obj) if f.init)
            _register(cls, lambda o, names=names: ([getattr(o, n) for n in names], names),
                      lambda ctx, leaves, cls=cls: cls(**dict(zip(ctx, leaves))))
        elif isinstance(obj, tuple):
            stack.extend(obj)
            continue
        else:
            continue
        stack.extend(_REGISTERED[cls](obj))


_REGISTERED: dict = {}  # class -> children(obj), for the classes register_containers added


def _register(cls, flatten, unflatten):
    try:
        optree.register_pytree_node(cls, lambda o: flatten(o), lambda ctx, leaves: unflatten(ctx, leaves),
                                    namespace=NAMESPACE)
    except ValueError:  # registered already (another module did it)
        pass
    _REGISTERED[cls] = lambda o: list(flatten(o)[0])


# slices are nodes (their bounds may be symbolic sizes: `x[: i0 // 2]`), so passes see the proxies inside them
optree.register_pytree_node(slice, lambda s: ((s.start, s.stop, s.step), None, None), lambda _, c: slice(*c),
                            namespace=NAMESPACE)

