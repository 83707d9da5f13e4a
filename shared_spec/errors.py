"""Exception classes and every message the operations raise.

The classes subclass the built-ins sglang's launcher raises (``TypeError`` for a
wrong dtype or a non-array, ``ValueError`` for the rest). Messages are format
strings; the frontends fill them and write no message text of their own.
"""

from __future__ import annotations

from typing import Mapping, NamedTuple

OP_NAME = "scatter_req_token_ids"
ASSIGN_OP_NAME = "assign_req_to_token_pool"
PREFIX = f"kv-canary: {OP_NAME}"
ASSIGN_PREFIX = f"kv-canary: {ASSIGN_OP_NAME}"


class KvCanaryTypeError(TypeError):
    """An argument of the wrong kind: not an array, or the wrong dtype."""


class KvCanaryValueError(ValueError):
    """An argument of the right kind with a wrong shape, place or value."""


# A framework that is not installed, and the pyproject.toml extra that installs it.
EXTRA = {"torch": "torch", "triton": "torch", "jax": "jax", "jaxlib": "jax"}
INSTALL_HINT = (
    "pip install 'kv-canary[cpu]' --extra-index-url https://download.pytorch.org/whl/cpu installs the tested CPU "
    "stack; pip install 'kv-canary[{extras}]' keeps a build of your own within the tested ranges"
)
FRONTEND_NEEDS = "kv-canary: {frontend} needs {module}, which is not installed; {hint}"


def install_hint(modules) -> str:
    """How to install the frameworks ``modules`` (torch, triton, jax, jaxlib)."""
    return INSTALL_HINT.format(extras=",".join(dict.fromkeys(EXTRA[m] for m in modules)))


def not_installed(modules) -> str:
    """``"torch and jax are not installed; "`` and the install hint, once."""
    modules = list(modules)
    names = modules[0] if len(modules) == 1 else f"{', '.join(modules[:-1])} and {modules[-1]}"
    return f"{names} {'is' if len(modules) == 1 else 'are'} not installed; {install_hint(modules)}"


# The argument checks (checks.first_failure raises them in checks.CHECK_ORDER). Written for the scatter;
# the assignment's are the same text after its own prefix (for_assignment).
NOT_AN_ARRAY = PREFIX + " {arg} must be an array, got {type_name}"
NOT_STRIDED = PREFIX + " {arg} must be a strided tensor, got layout {layout}; pass a dense, strided tensor"
MASKED_ARRAY = (
    PREFIX + " {arg} is a numpy masked array, whose mask the operation cannot honour; "
    "pass {arg}.filled(value), or {arg}.data to use the masked values as they are"
)
NO_DATA = PREFIX + " {arg} is on meta, which holds no data; pass a tensor on a device with memory"
DELETED_ARRAY = PREFIX + " {arg} is a deleted jax.Array (donated or deleted); pass a live array"
NEGATIVE_BIT = PREFIX + " {arg} has its negative bit set (a lazily negated view); pass {arg}.resolve_neg()"
CONJUGATE_BIT = PREFIX + " {arg} has its conjugate bit set (a lazily conjugated view); pass {arg}.resolve_conj()"
NO_MEMORY = (
    PREFIX + " {arg} has elements that no memory holds (a freed or shrunk storage, a null data pointer, "
    "a zero tensor); pass a tensor whose storage holds every element it reads"
)
WRONG_RANK = PREFIX + " {arg} must be {rank}-D, got shape {shape}"
# {dtype}: what the frontend accepts for that argument (checks.accepted_dtypes): "int64", "int32 or int64", "int32".
WRONG_DTYPE = PREFIX + " {arg} must be {dtype}, got {got}"
OFFSETS_LENGTH = PREFIX + " offsets length {length} != bs+1 ({expected})"
START_COLS_LENGTH = PREFIX + " start_cols length {length} != bs ({bs})"
TOO_MANY_REQUESTS = PREFIX + " req_pool_indices has {bs} requests, more than the {limit} one call takes; split the batch"
DEVICE_MISMATCH = PREFIX + " {arg} is on {device} but pool_out is on {pool_device}; all arrays must be on one device"
# pool_out is host data (a numpy array, for the JAX frontend): the first argument with a device decides.
DEVICE_MISMATCH_HOST_POOL = (
    PREFIX + " {arg} is on {device} but {first} is on {first_device}; all arrays must be on one device "
    "(pool_out, host data, goes where they are)"
)
NOT_WRITABLE = PREFIX + " pool_out cannot be written in place: {reason}"
BOOL_OPTION = " {option} must be a bool, got {type_name}"
NOT_A_BOOL = PREFIX + BOOL_OPTION
# The JAX frontend with x64 off: a concrete int64 argument (host data, a torch tensor, a JAX array made with x64 on)
# whose values int32 holds becomes int32; one that int32 does not hold is refused.
NOT_INT32 = (
    PREFIX + " {arg}[{index}] = {value} does not fit int32, and JAX holds int64 only with x64 enabled; "
    "pass int32 values, or enable x64"
)

# The reasons NOT_WRITABLE gives.
WRITE_IMMUTABLE = "it is an immutable {type_name}; pass a writable tensor"
WRITE_OVERLAP = "strides {strides} make several cells share memory"
WRITE_INFERENCE = (
    "it is an inference tensor, used outside torch.inference_mode(); call inside inference mode, or make the pool outside it"
)
WRITE_NEGATIVE_STRIDES = "strides {strides} are negative, which a torch tensor cannot have; pass the pool with positive strides"
WRITE_BYTE_ORDER = "it is a numpy.ndarray in non-native byte order ({dtype}), which torch cannot write"
WRITE_UNALIGNED = "its {itemsize}-byte items are not aligned in memory (byte strides {strides}), which torch cannot write"

# The checked mode's value rules (values.py, in this order).
OFFSETS_START = PREFIX + " offsets[0] must be >= 0, got {value}"
OFFSETS_DECREASING = PREFIX + " offsets must be non-decreasing, got offsets[{i}]={a} > offsets[{j}]={b}"
OFFSETS_END = PREFIX + " offsets[bs] must be <= len(flat_in) ({n}), got {value}"
ROW_OUT_OF_RANGE = PREFIX + " req_pool_indices[{i}]={row} is outside [0, {rows})"
ROW_REPEATED = PREFIX + " req_pool_indices[{j}]={row} repeats req_pool_indices[{i}]"
START_COLS_NEGATIVE = PREFIX + " start_cols[{i}] must be >= 0, got {value}"
VALUE_TEMPLATES = (OFFSETS_START, OFFSETS_DECREASING, OFFSETS_END, ROW_OUT_OF_RANGE, ROW_REPEATED, START_COLS_NEGATIVE)

# Choosing a backend (torch: backend=) or an implementation (JAX: implementation=).
UNKNOWN_CHOICE = PREFIX + " unknown {option} {name!r}; expected one of {choices}"
CHOICE_UNAVAILABLE = PREFIX + " {option} {name!r} cannot run here: {reason}"
NONE_AVAILABLE = PREFIX + " none of the {option}s {names} can run here: {reasons}"
CHECK_VALUES_UNTRACEABLE = (
    PREFIX + " check_values=True under jax.jit needs jax.experimental.checkify: "
    "wrap the jitted function with checkify.checkify(..., errors=checkify.user_checks)"
)
CHECK_VALUES_EXPLICIT_SHARDED = (
    PREFIX + " check_values=True under jax.jit on a pool split by rows in JAX's explicit sharding mode: checkify "
    "cannot carry the checks through jax.shard_map there; check the values outside jit, or use the automatic mode"
)
CHECK_VALUES_TRANSFORMED = (
    PREFIX + " check_values=True cannot read {arg}'s values inside this torch.func transform ({error}); "
    "check the values outside the transform, or pass check_values=False"
)

# Reasons for CHOICE_UNAVAILABLE and NONE_AVAILABLE.
TRITON_NOT_INSTALLED = f"triton is not installed; install it (pip install 'kv-canary[{EXTRA['triton']}]') or pass backend='torch'"
TRITON_NEEDS_CUDA = (
    "Triton kernels need CUDA tensors; on the CPU they run only in Triton's interpreter, "
    "which needs TRITON_INTERPRET=1 set before the first Triton launch (or pass backend='torch')"
)
TORCH_FUNC_TRANSFORMED = (
    "its kernel reads the tensors' memory, which the tensors of a torch.func transform (vmap, grad, ...) "
    "do not have; pass backend='torch' (or 'auto', which runs it there)"
)
TORCH_VMAP_BATCHED_SEGMENTS = (
    "under torch.func.vmap, a batched {segments} gives each example its own number of cells to write, which this "
    "path counts on the host; vmap over {output} and {values} only, or call once per example"
)
TORCH_VMAP_UNBATCHED_OUTPUT = (
    "under torch.func.vmap, {values} is batched but {output} is not, so every example would write its own values "
    "into one {output}; vmap over {output} too, or call once per example"
)
PALLAS_NEEDS_GPU = (
    "the Pallas kernel lowers through Triton and needs a CUDA GPU; "
    "pass interpret=True to run it in the Pallas interpreter, or implementation='xla'"
)
PALLAS_NOT_IMPORTABLE = (
    "the Pallas kernel needs jax.experimental.pallas.triton, which does not import here ({error}); "
    "pass implementation='mosaic' (Hopper and newer) or 'xla'"
)
MOSAIC_NOT_IMPORTABLE = (
    "the Mosaic GPU kernel needs jax.experimental.pallas.mosaic_gpu, which does not import here ({error}); "
    "install absl-py, or pass implementation='pallas' or 'xla'"
)
MOSAIC_MIN_CAPABILITY = (9, 0)  # Hopper: the warpgroup instructions the Mosaic GPU kernel lowers to
_MOSAIC_NEEDS = "the Mosaic GPU kernel needs a CUDA GPU of compute capability {}.{} or newer".format(
    *MOSAIC_MIN_CAPABILITY)
MOSAIC_NEEDS_GPU = (
    _MOSAIC_NEEDS + "; pass interpret=True to run it in the Pallas interpreter, or implementation='pallas' or 'xla'"
)
MOSAIC_NEEDS_HOPPER = _MOSAIC_NEEDS + ", but this GPU's is {capability}; pass implementation='pallas' or 'xla'"
MOSAIC_TPU_NOT_IMPORTABLE = (
    "the Mosaic TPU kernel needs jax.experimental.pallas.tpu, which does not import here ({error}); pass implementation='xla'"
)
MOSAIC_TPU_NEEDS_TPU = (
    "the Mosaic TPU kernel needs a TPU; pass interpret=True to run it in Pallas's TPU interpreter, or implementation='xla'"
)

# The DLPack bridge between torch and JAX (kv_canary_arrays.bridge).
BRIDGE_X64 = "kv-canary: cannot move an int64 array into JAX while jax_enable_x64 is off (JAX would make it int32)"
BRIDGE_REFUSED = "kv-canary: cannot move a {source} array of shape {shape}, dtype {dtype} into {target} without a copy: {reason}"
BRIDGE_COPIED = "the imported array does not share the source's memory"
BRIDGE_COPY_FAILED = "it crosses only as a dense copy, which cannot be made ({error})"
BRIDGE_NEGATIVE_STRIDES = "its byte strides {strides} are negative, which a torch tensor cannot have"
BRIDGE_UNKNOWN = "kv-canary: cannot move a {type_name} into {target}: it is neither a torch tensor nor a JAX array nor exports DLPack"

# Row-sharded JAX pools (kv_canary_jax.sharded).
SHARDED_NOT_A_MESH = PREFIX + " mesh must be a jax.sharding.Mesh, got {type_name}"
SHARDED_UNKNOWN_AXIS = PREFIX + " axis {axis!r} is not an axis of the mesh; its axes are {axes}"
SHARDED_LAYOUT_UNKNOWN = (
    PREFIX + " cannot tell which mesh axis splits pool_out's rows: {reason}; "
    "pass mesh= and axis=, or shard pool_out as NamedSharding(mesh, P(axis, None))"
)
SHARDED_LAYOUT_TRACED = "a pool traced under jax.jit carries its sharding only in JAX's explicit sharding mode"
SHARDED_LAYOUT_HOST = "it is a {type_name}, on no device"
SHARDED_LAYOUT_SHARDING = "its sharding {sharding} does not split the rows alone over a mesh axis"
SHARDED_EXPLICIT_SPLIT = (
    PREFIX + " {arg} is sharded as {spec} in JAX's explicit sharding mode, which this operation takes split by rows "
    "alone or whole on each device; jax.reshard it to one of those"
)
SHARDED_UNEVEN = (
    PREFIX + " pool_out has {rows} rows, which the {devices} devices of mesh axis {axis!r} cannot split evenly; "
    "give the pool a multiple of {devices} rows"
)

# pack_token_ids and IncrementalWriter.step: one request's token ids. {where}: PACK_WHERE or INCREMENTAL_WHERE.
PACK_NOT_TOKEN_IDS = "kv-canary: {where}[{index}] must be a 1-D sequence of integers, got {what}"
PACK_OUT_OF_RANGE = "kv-canary: {where}[{index}][{position}] = {value} is outside the int64 range [{low}, {high}]"
PACK_NOT_REQUESTS = "kv-canary: {where} must be a sequence of one token-id sequence per request, got {what}"
PACK_WHERE = "pack_token_ids token_lists"
INCREMENTAL_WHERE = "IncrementalWriter.step {arg}"
INCREMENTAL_TOO_MANY_REQUESTS = (
    "kv-canary: IncrementalWriter.step got {bs} requests, more than the {limit} it reserves (max_requests); "
    "make the writer with a larger max_requests, or split the step"
)
INCREMENTAL_TOO_MANY_TOKENS = (
    "kv-canary: IncrementalWriter.step got {count} new tokens, more than the {limit} it reserves (max_new_tokens); "
    "make the writer with a larger max_new_tokens, or split the step"
)
INCREMENTAL_LENGTHS = "kv-canary: IncrementalWriter.step {arg} has {length} entries, but new_tokens has {bs} requests"
INCREMENTAL_NOT_INTS = "kv-canary: IncrementalWriter.step {arg} must be a 1-D sequence of int64 integers, got {what}"
INCREMENTAL_FLAT_LENGTHS = (
    "kv-canary: IncrementalWriter.step lengths must be an int >= 1 (the tokens of every request) or a 1-D sequence of "
    "ints >= 0 (one per request), got {what}"
)
INCREMENTAL_FLAT_COUNT = (
    "kv-canary: IncrementalWriter.step new_tokens has {count} tokens, which lengths={lengths} does not cut into "
    "requests ({expected})"
)
INCREMENTAL_CAPACITY = "kv-canary: IncrementalWriter {arg} must be an int from 0 to {limit}, got {value!r}"
INCREMENTAL_POOL = "kv-canary: IncrementalWriter pool_out must be a 2-D int32 torch.Tensor not on meta, got {what}"
INCREMENTAL_NOT_A_BOOL = "kv-canary: IncrementalWriter" + BOOL_OPTION
PACK_NOT_A_BOOL = "kv-canary: pack_token_ids" + BOOL_OPTION
PACK_PIN_NEEDS_CUDA = "kv-canary: pack_token_ids pin_memory=True needs CUDA, which this machine lacks; pass False"
# A tensor of token ids or indices read on the host. {where}: PACK_WHERE[index] or INCREMENTAL_WHERE.
HOST_NO_MEMORY = (
    "kv-canary: {where} is a tensor with elements that no memory holds (a freed or shrunk storage, a meta tensor); "
    "pass a tensor whose storage holds every element"
)

# assign_req_to_token_pool's own checks (the rest are the scatter's, for_assignment).
ASSIGN_BATCH_SIZE_TYPE = ASSIGN_PREFIX + " batch_size must be an int, got {type_name}"
ASSIGN_BATCH_SIZE_RANGE = ASSIGN_PREFIX + " batch_size {bs} is outside [0, {limit}]: len({arg}) is {limit}"
ASSIGN_TOO_MANY_SLOTS = (
    ASSIGN_PREFIX + " batch_size {bs} times len(out_cache_loc) {n} is 2**63 or more: the running sum of the lengths "
    "must fit int64"
)
ASSIGN_DEVICE_MISMATCH = (
    ASSIGN_PREFIX + " {arg} is on {device} but req_to_token is on {table_device}; all arrays must be on one device"
)
ASSIGN_DEVICE_MISMATCH_HOST_TABLE = (
    ASSIGN_PREFIX + " {arg} is on {device} but {first} is on {first_device}; all arrays must be on one device "
    "(req_to_token, host data, goes where they are)"
)
ASSIGN_NOT_WRITABLE = ASSIGN_PREFIX + " req_to_token cannot be written in place: {reason}"


class Message(NamedTuple):
    """A message not yet formatted (a reason whose fields are sizes); ``str()`` formats it."""

    template: str
    fields: Mapping

    def __str__(self) -> str:
        return format_message(self.template, self.fields)


def format_shape(shape) -> str:
    """A shape as a Python tuple: ``(2, 3)``, ``(5,)``, ``()``."""
    return "{}".format(tuple(int(d) for d in shape))  # str.format: TorchDynamo formats a symbolic size lazily


def format_message(template: str, fields: Mapping) -> str:
    """``template`` filled with ``fields``: a ``Message`` formatted first, a tuple of ints as ``format_shape``."""
    return template.format(**{name: _field_text(value) for name, value in fields.items()})


def _field_text(value):
    if isinstance(value, Message):
        return format_message(value.template, value.fields)
    if isinstance(value, tuple) and not any(isinstance(v, str) for v in value):
        return format_shape(value)
    return value


def spec_error(cls, template: str, fields: Mapping):
    """``cls(format_message(template, fields))``, keeping ``template`` and ``fields`` (for a compiled torch graph)."""
    error = cls(format_message(template, fields))
    error.template, error.fields = template, fields
    return error


def type_error(template: str, **fields) -> KvCanaryTypeError:
    return spec_error(KvCanaryTypeError, template, fields)


def value_error(template: str, **fields) -> KvCanaryValueError:
    return spec_error(KvCanaryValueError, template, fields)


def choice_error(option: str, name, choices) -> KvCanaryValueError:
    """An unknown ``backend=`` or ``implementation=``."""
    return value_error(UNKNOWN_CHOICE, option=option, name=name, choices=", ".join(repr(c) for c in choices))


def unavailable_error(option: str, name: str, reason: str) -> KvCanaryValueError:
    """A known backend that cannot run on these arrays or this machine."""
    return value_error(CHOICE_UNAVAILABLE, option=option, name=name, reason=reason)


def none_available_error(option: str, reasons: Mapping[str, str]) -> KvCanaryValueError:
    """A sequence of choices none of which can run here; ``reasons`` maps each name to why."""
    return value_error(
        NONE_AVAILABLE, option=option, names=", ".join(repr(n) for n in reasons),
        reasons="; ".join(f"{n!r}: {r}" for n, r in reasons.items()),
    )


def for_assignment(template: str) -> str:
    """A scatter template as the assignment's: the same text after ``ASSIGN_PREFIX``."""
    if not template.startswith(PREFIX):
        raise ValueError(f"not a template of {OP_NAME}: {template!r}")
    return ASSIGN_PREFIX + template[len(PREFIX):]


def retitled(error: Exception) -> Exception:
    """A spec error of the scatter as the assignment's (same class and fields); any other error as it is."""
    template = getattr(error, "template", None)
    if template is None or not template.startswith(PREFIX):
        return error
    return spec_error(type(error), for_assignment(template), error.fields)
