"""IR: the services the recording of a user's function needs from above (the frontend's JitContext answers them),
declared method by method. The frontend hands an implementation down with the trace it records
(`tracectx(trace, services)`, jitcore/ir/context.py); proxies, number arithmetic and ops ask `services()`.
`TracingServices()` itself is the documented default: what every question gets outside the interpreter's recording.
"""
from __future__ import annotations

from jitcore.errors import DataDependentError, UnsupportedError


class TracingServices:
    """What the IR and the ops ask the frontend while the interpreter records the user's function. Each method's body
    here is its answer outside that recording (passes recording into other traces, a printed trace run as a program,
    code that asks with no trace active): the default object NO_SERVICES is an instance of this class itself. The
    frontend's implementation (jitcore/frontend/jit_services.py) overrides every method."""

    # whether the trace being recorded is the interpreter's recording of the user's function: autocast is then the
    # user's state, recorded as explicit casts (jitcore/ir/symbol.py); passes that record ops later never cast
    records_user_code: bool = False
    # name -> True for the tensors eager makes as inference tensors while the function runs (under
    # torch.inference_mode(), or views of one), False for views of an inference tensor the function was given;
    # None: not tracked (jitcore/ir/symbol.py _in_context notes them)
    inference_tensors: dict | None = None

    def concrete_value(self, proxy, kind: str, what: str):
        """The value Python needs of a tensor's data (`if mask.all():`, `.item()`; kind: "bool", "int", "float",
        "index", "item", "tolist"), computed from this call's inputs and guarded. Default: DataDependentError,
        `what` naming the conversion."""
        raise DataDependentError(f"{what} needs its value")

    def real_values(self, proxies, guard=None) -> list | None:
        """This call's values of some tensors of the trace (an op with no meta kernel: jitcore/ops/opaque.py; the
        count of a nonzero), or None where they are not at hand. guard: (convert, text): convert(*values) instead,
        guarded by the prologue. Default: None."""
        return None

    def run_time_value(self, number, convert, what: str):
        """What Python needs of a number that depends on a run-time size (`if u0 > 0:`), computed from this call's
        inputs and guarded (jitcore/ir/arith.py run_time_answer). Default: DataDependentError."""
        raise DataDependentError(f"{what} needs the value of a size known only at run time (a data-dependent size)")

    def eager_layout(self, proxy, level: str):
        """A meta tensor with the sizes and strides eager's value of `proxy` would have, its inputs guarded at
        `level` ("contiguous" or "exact": jitcore/frontend/layouts.py), or None when unknown. Default: None."""
        return None

    def data_ptr(self, proxy):
        """`t.data_ptr()`: an Address (jitcore/ir/data_ptr.py) answering its alignment as eager's tensor has it,
        guarded (jitcore/frontend/alignment.py). Default: UnsupportedError (no address, nor its alignment, known)."""
        raise UnsupportedError("tensor memory", f"{proxy.name}.data_ptr() outside the recording of a jitted function: "
                               "there is no memory address, nor its alignment, to give",
                               hint="read the address outside the jitted function")

    def leaf_input(self, proxy) -> bool | None:
        """`x.is_leaf` of a tensor that requires grad: for an input, what the tensor it stands for is (guarded);
        None for a tensor the function computed. Default: True (no autograd history known)."""
        return True

    def input_attribute(self, proxy, name: str, default):
        """`x.grad` (and other autograd attributes) of an input, read from the tensor it stands for and reported as
        a value read from that input; `default` for tensors the function computed. Default: `default`."""
        return default

    def input_bit(self, proxy, name: str) -> bool | None:
        """`x.is_conj()` / `x.is_neg()` (name) of an input: the lazy bit of the tensor it stands for (guarded); None
        for a tensor the function computed (jitcore/ops/torch_complex.py derives those). Default: None."""
        return None

    def inference_of(self, proxy) -> bool:
        """`x.is_inference()`: an input is what the tensor it stands for is (guarded); a tensor the function made is
        one when made under torch.inference_mode(). Default: False."""
        return False

    def refuse_inference_saves(self, bsym) -> None:
        """For a line of the user's recorded with grad on: raise eager's error where eager's autograd would save an
        inference tensor for the op's backward (jitcore/runtime/autograd.py). Default: nothing (asked only when
        inference_tensors is tracked)."""

    def input_proxy(self, tensor):
        """The proxy of a tensor the program already reads as an input (by identity), else None. Default: an error
        (only a traced module's stand-ins ask: jitcore/runtime/fsdp_units.py)."""
        raise RuntimeError("input_proxy: only the interpreter's recording of a function knows its inputs")

    def user_stack(self) -> tuple:
        """((code, instruction), ...) of the interpreted frames, outermost first: where the line being recorded comes
        from (Trace.record keeps it on the line). Default: () (no user frames)."""
        return ()

    def user_globals(self) -> tuple:
        """The module globals of the interpreted frames, as user_stack lists them (warnings' registries). Default:
        ()."""
        return ()

    def rebind_tensor(self, proxy, view, change) -> None:
        """`x.unsqueeze_(0)`, `x.t_()`, ...: the tensor object the user's code holds (`proxy`) becomes `view` (a view
        just recorded), keeping its identity; change: (method name, args, kwargs, grad mode) for the caller's tensor
        when it is an input (jitcore/frontend/rebind.py). Default: refused (only the recording of a user's function
        has tensor objects to change)."""
        raise UnsupportedError("in-place metadata change", f"Tensor.{change[0]} outside the recording of a function")

    def note_default_device(self, device) -> None:
        """A tensor was made on torch's default device: the frontend has the prologue check it (a call after
        torch.set_default_device is another program). Default: nothing."""


NO_SERVICES = TracingServices()
