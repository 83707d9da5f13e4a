"""Triton's interpreter without its repeated language patch: a launch patches ``triton.language`` once, not per device call.

Contract: ``patch_once()`` (tests/conftest.py calls it where the kernels are
interpreted, ``TRITON_INTERPRET=1``) wraps the interpreter's ``_patch_lang``
so that a device-function call (a ``@triton.jit`` helper called from a
kernel) inside a running launch, whose visible language modules the launch
has patched already, patches nothing; everything else (a launch, a helper
that sees a language module the launch did not patch, any other thread) runs
Triton's own ``_patch_lang`` as before. It returns whether it wrapped it:
False where this Triton has no ``_patch_lang`` returning a restorable scope
(``_LangPatchScope``, Triton 3.9), which is then left as it is.

Why it is the same interpreter: Triton 3.9's interpreter calls
``_patch_lang`` at the start of every launch (restored at its end) and again
at every device-function call, never restored. The second patch finds the
builtins replaced already (they are no longer builtins, so it skips them) and
sets the other attributes (``range``, ``reduce``, the tensor dunders) to
fresh copies of the same stateless replacements, so skipping it changes
nothing but time: it scans the language modules with ``inspect.getmembers``
each time (some tenths of a millisecond; the kernels' helpers are called once
or more per program): a quarter of the interpreted kernels' time.
"""

from __future__ import annotations

import threading


def patch_once() -> bool:
    try:
        import triton.language as tl
        from triton.runtime import interpreter
    except ImportError:
        return False
    original = getattr(interpreter, "_patch_lang", None)
    if original is None or not hasattr(interpreter, "_LangPatchScope") or getattr(original, "patched_once", False):
        return False
    state = threading.local()  # the language modules the running launch of this thread patched
    languages = (tl, tl.core)

    def visible(fn) -> frozenset:
        return frozenset(id(v) for v in fn.__globals__.values() if any(v is lang for lang in languages))

    def patch_lang(fn):
        patched = getattr(state, "languages", None)
        if patched is not None and visible(fn) <= patched:
            return interpreter._LangPatchScope()  # nothing set, nothing to restore
        scope = patch_lang.original(fn)
        if patched is None:  # a launch: its scope is restored when the launch ends
            state.languages = visible(fn)
            restore = scope.restore

            def restore_and_forget():
                state.languages = None
                restore()

            scope.restore = restore_and_forget
        return scope

    patch_lang.patched_once = True
    patch_lang.original = original
    interpreter._patch_lang = patch_lang
    return True
