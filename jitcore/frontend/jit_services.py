"""Frontend: the tracing services (jitcore/ir/services.py) a recording of the user's function gets, answered by the
frontend's JitContext and the interpreter's runtime it is attached to. trace_function (tracing.py) hands JitServices
down with the trace it records; a saved-tensor hook's recording (transforms/saved_hooks.py) gets HookServices: its
user frames only.
"""
from __future__ import annotations

from jitcore.frontend.alignment import Addresses
from jitcore.frontend.rebind import rebind_tensor
from jitcore.ir.services import TracingServices
from jitcore.runtime.autograd import refuse_inference_saves


class HookServices(TracingServices):
    """The interpreter's user frames, for a recording that reads no call's values (the defaults otherwise)."""

    def __init__(self, ctx):
        self.ctx = ctx  # the JitContext interpreting (its runtime, attached by the interpreter, has the frames)

    def user_stack(self) -> tuple:
        rt = self.ctx._runtime
        return rt.user_stack() if rt is not None else ()

    def user_globals(self) -> tuple:
        rt = self.ctx._runtime
        return rt.user_globals() if rt is not None else ()


class JitServices(HookServices):
    """Every service, for the interpreter's recording of the user's function (trace_function, tracing.py): the
    JitContext answers from this call's real inputs and guards what it answers."""

    records_user_code = True

    def __init__(self, ctx, layouts):
        super().__init__(ctx)
        self.layouts = layouts  # jitcore/frontend/layouts.py Layouts(ctx): its `used` replays go with the trace
        self.inference_tensors = ctx.inference_tensors
        self.default_device = None  # the default device a tensor was made on (the prologue checks it), if any
        self.addresses = Addresses(ctx, layouts)  # the alignment of `t.data_ptr()` (jitcore/frontend/alignment.py)

    def concrete_value(self, proxy, kind: str, what: str):
        return self.ctx.concrete_value(proxy, kind)

    def real_values(self, proxies, guard=None):
        return self.ctx.real_values(proxies, guard)

    def run_time_value(self, number, convert, what: str):
        return self.ctx.run_time_value(number, convert, what)

    def eager_layout(self, proxy, level: str):
        return self.layouts(proxy, level)

    def data_ptr(self, proxy):
        return self.addresses.address(proxy)

    def leaf_input(self, proxy):
        return self.ctx.leaf_input(proxy)

    def input_attribute(self, proxy, name: str, default):
        return self.ctx.input_attribute(proxy, name, default)

    def input_bit(self, proxy, name: str) -> bool | None:
        return self.ctx.input_bit(proxy, name)

    def inference_of(self, proxy) -> bool:
        return self.ctx.inference_of(proxy)

    def refuse_inference_saves(self, bsym) -> None:
        refuse_inference_saves(bsym, self.inference_tensors, self.ctx.guard_not_inference)

    def input_proxy(self, tensor):
        return self.ctx.input_proxy(tensor)

    def note_default_device(self, device) -> None:
        self.default_device = device

    def rebind_tensor(self, proxy, view, change) -> None:
        rebind_tensor(self.ctx, proxy, view, change)
