"""Exception classes and every message the operation can raise.

The classes subclass the built-ins the sglang launcher raises (``TypeError`` for
a wrong dtype or a non-array, ``ValueError`` for the rest), so callers that
catch the built-ins keep working. Messages are complete format strings; the
frontends fill them and never write message text of their own.
"""

from __future__ import annotations

from typing import Mapping, NamedTuple

from shared_spec.arguments import OP_NAME, format_shape

PREFIX = f"kv-canary: {OP_NAME}"


class KvCanaryTypeError(TypeError):
    """An argument of the wrong kind: not an array, or the wrong dtype."""


class KvCanaryValueError(ValueError):
    """An argument of the right kind with a wrong shape, place or value."""


# A framework that is not installed, and what installs it: pyproject.toml's extras
# (tests/tools/test_packaging.py holds these names to it). The tools print the hint
# once, however many frameworks are missing.
NOT_INSTALLED = "{modules} {verb} not installed"
INSTALL_HINT = (
    "pip install 'kv-canary[cpu]' --extra-index-url https://download.pytorch.org/whl/cpu --retries 0 installs the "
    "tested CPU stack (torch's CPU build from PyTorch's CPU index); pip install 'kv-canary[{extras}]' installs "
    "the tested version ranges, keeping a build of your own within them (a CUDA torch, jax with its CUDA plugin)"
)
# The extra that installs each framework (module name -> extra).
EXTRA = {"torch": "torch", "triton": "torch", "jax": "jax", "jaxlib": "jax"}


def install_hint(modules) -> str:
    """How to install the frameworks ``modules`` (torch, triton, jax, jaxlib): the ``cpu`` extra, or theirs."""
    extras = dict.fromkeys(EXTRA[module] for module in modules)
    return INSTALL_HINT.format(extras=",".join(extras))


def not_installed(modules) -> str:
    """``"torch, triton and jax are not installed; "`` and the install hint, once."""
    modules = list(modules)
    names = modules[0] if len(modules) == 1 else f"{', '.join(modules[:-1])} and {modules[-1]}"
    missing = NOT_INSTALLED.format(modules=names, verb="is" if len(modules) == 1 else "are")
    return f"{missing}; {install_hint(modules)}"


# Argument checks (checks.py raises them, in checks.CHECK_ORDER).
NOT_AN_ARRAY = PREFIX + " {arg} must be an array, got {type_name}"
# The storage check (checks.STORAGE_MESSAGES says which ArrayView fact raises which): an array whose
# memory does not simply hold its values, which no kernel could read or write as it is.
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
WRONG_DTYPE = PREFIX + " {arg} must be {dtype}, got {got}"
OFFSETS_LENGTH = PREFIX + " offsets length {length} != bs+1 ({expected})"
START_COLS_LENGTH = PREFIX + " start_cols length {length} != bs ({bs})"
TOO_MANY_REQUESTS = PREFIX + " req_pool_indices has {bs} requests, more than the {limit} one call takes; split the batch"
DEVICE_MISMATCH = PREFIX + " {arg} is on {device} but pool_out is on {pool_device}; all arrays must be on one device"
# pool_out is host data (a numpy array, for the JAX frontend), which goes to the device the other arrays are on.
DEVICE_MISMATCH_HOST_POOL = (
    PREFIX + " {arg} is on {device} but {first} is on {first_device}; all arrays must be on one device "
    "(pool_out, host data, goes where they are)"
)
NOT_WRITABLE = PREFIX + " pool_out cannot be written in place: {reason}"
# check_values= is not a bool (checks.require_bool; after the choice of backend/implementation).
NOT_A_BOOL = PREFIX + " {option} must be a bool, got {type_name}"

# The reasons NOT_WRITABLE may give (a frontend picks one, never writes its own).
WRITE_IMMUTABLE = "it is an immutable {type_name}; pass a writable tensor"
WRITE_OVERLAP = "strides {strides} make several cells share memory"
# A torch inference tensor (made under torch.inference_mode()) outside inference mode: torch itself
# refuses to update it in place, after the kernel has written it; refused before, on every backend.
WRITE_INFERENCE = (
    "it is an inference tensor, used outside torch.inference_mode(); "
    "call inside inference mode, or make the pool outside it"
)
# numpy pools that torch cannot write in place (kv_canary_arrays.describe.numpy_write_problem).
WRITE_NEGATIVE_STRIDES = "strides {strides} are negative, which a torch tensor cannot have; pass the pool with positive strides"
WRITE_BYTE_ORDER = "it is a numpy.ndarray in non-native byte order ({dtype}), which torch cannot write"
WRITE_UNALIGNED = "its {itemsize}-byte items are not aligned in memory (byte strides {strides}), which torch cannot write"

# Value checks of the checked mode (values.py raises them, in that order).
OFFSETS_START = PREFIX + " offsets[0] must be >= 0, got {value}"
OFFSETS_DECREASING = PREFIX + " offsets must be non-decreasing, got offsets[{i}]={a} > offsets[{j}]={b}"
OFFSETS_END = PREFIX + " offsets[bs] must be <= len(flat_in) ({n}), got {value}"
ROW_OUT_OF_RANGE = PREFIX + " req_pool_indices[{i}]={row} is outside [0, {rows})"
ROW_REPEATED = PREFIX + " req_pool_indices[{j}]={row} repeats req_pool_indices[{i}]"
START_COLS_NEGATIVE = PREFIX + " start_cols[{i}] must be >= 0, got {value}"

# Choosing a backend ("backend=" in torch, "implementation=" in JAX).
UNKNOWN_CHOICE = PREFIX + " unknown {option} {name!r}; expected one of {choices}"
CHOICE_UNAVAILABLE = PREFIX + " {option} {name!r} cannot run here: {reason}"
NONE_AVAILABLE = PREFIX + " none of the {option}s {names} can run here: {reasons}"
CHECK_VALUES_UNTRACEABLE = (
    PREFIX + " check_values=True under jax.jit needs jax.experimental.checkify: "
    "wrap the jitted function with checkify.checkify(..., errors=checkify.user_checks)"
)
X64_NOTE = (
    "kv-canary: JAX turns int64 arrays into int32 unless x64 is enabled; "
    "enable it with jax.config.update('jax_enable_x64', True) (the library never changes it)"
)

# The DLPack bridge between torch and JAX (kv_canary_arrays/bridge.py).
BRIDGE_X64 = "kv-canary: cannot move an int64 array into JAX while jax_enable_x64 is off (JAX would make it int32)"
BRIDGE_REFUSED = "kv-canary: cannot move a {source} array of shape {shape}, dtype {dtype} into {target} without a copy: {reason}"
BRIDGE_COPIED = "the imported array does not share the source's memory"
BRIDGE_COPY_FAILED = "it crosses only as a dense copy, which cannot be made ({error})"
BRIDGE_NEGATIVE_STRIDES = "its byte strides {strides} are negative, which a torch tensor cannot have"
BRIDGE_UNKNOWN = "kv-canary: cannot move a {type_name} into {target}: it is neither a torch tensor nor a JAX array nor exports DLPack"
# Reasons for CHOICE_UNAVAILABLE (backend="pallas" of the torch frontend: the JAX kernel on torch memory),
# written for a torch caller: JAX's own options (implementation=, interpret=) are not the launcher's.
PALLAS_NEEDS_JAX = f"jax is not installed; install it (pip install 'kv-canary[{EXTRA['jax']}]') or pass another backend"
PALLAS_BACKEND_DEVICE = "the JAX kernels take CUDA and CPU tensors, not {device} tensors; pass backend='torch'"
PALLAS_BACKEND_NO_JAX_GPU = (
    "JAX sees no CUDA GPU here (a jaxlib without its CUDA plugin, or none visible to it); "
    "install jax with its CUDA plugin, or pass backend='triton' or 'torch'"
)
# {device}: the tensors' device type; {causes}: one cause per Pallas kernel JAX's default tries there, "; "-joined.
PALLAS_BACKEND_NO_KERNEL = (
    "JAX can run none of its Pallas kernels on {device} tensors here ({causes}); "
    "pass another backend ('torch' runs on every device)"
)
# Causes: a kernel's JAX module does not import ({error}: "ClassName: message"), or the GPU is older than Mosaic GPU's.
PALLAS_BACKEND_NOT_IMPORTABLE = {
    "mosaic": "Mosaic GPU needs jax.experimental.pallas.mosaic_gpu, which does not import: {error}",
    "pallas": "the Triton-lowered kernel needs jax.experimental.pallas.triton, which does not import: {error}",
}
PALLAS_BACKEND_NEEDS_HOPPER = "Mosaic GPU needs compute capability 9.0 or newer, and this GPU's is {capability}"


def type_error(template: str, **fields) -> KvCanaryTypeError:
    return spec_error(KvCanaryTypeError, template, fields)


def value_error(template: str, **fields) -> KvCanaryValueError:
    return spec_error(KvCanaryValueError, template, fields)


def choice_error(option: str, name, choices) -> KvCanaryValueError:
    """An unknown ``backend=``/``implementation=`` name."""
    return value_error(UNKNOWN_CHOICE, option=option, name=name, choices=", ".join(repr(c) for c in choices))


def unavailable_error(option: str, name: str, reason: str) -> KvCanaryValueError:
    """A known backend that cannot run on these arrays or this machine."""
    return value_error(CHOICE_UNAVAILABLE, option=option, name=name, reason=reason)


# torch frontend
# Reasons for CHOICE_UNAVAILABLE (backend="triton").
TRITON_NOT_INSTALLED = f"triton is not installed; install it (pip install 'kv-canary[{EXTRA['triton']}]') or pass backend='torch'"
TRITON_NEEDS_CUDA = (
    "Triton kernels need CUDA tensors; on the CPU they run only in Triton's interpreter, "
    "which needs TRITON_INTERPRET=1 set before the first Triton launch (or pass backend='torch')"
)
# Reason for CHOICE_UNAVAILABLE (backend="triton" or "pallas" on tensors wrapped by a torch.func transform).
TORCH_FUNC_TRANSFORMED = (
    "its kernel reads the tensors' memory, which the tensors of a torch.func transform (vmap, grad, ...) "
    "do not have; pass backend='torch' (or 'auto', which runs it there)"
)
# Reason for CHOICE_UNAVAILABLE (backend="torch", or "auto" which runs it, under torch.func.vmap with batched
# offsets, req_pool_indices or start_cols: each example writes its own number of cells, which the torch path sizes on
# the host).
TORCH_VMAP_BATCHED_SEGMENTS = (
    "under torch.func.vmap, a batched offsets, req_pool_indices or start_cols gives each example its own number of cells to "
    "write, which this path counts on the host; vmap over pool_out and flat_in only, or call once per example"
)
# pack_token_ids (and IncrementalWriter.step, whose argument is new_tokens): one request's token ids are not a 1-D
# sequence of integers. {where} is PACK_WHERE or INCREMENTAL_WHERE (the caller and its argument).
PACK_NOT_TOKEN_IDS = (
    "kv-canary: {where}[{index}] must be a 1-D sequence of integers, got {what}"
)
# The same callers: a token id that no int64 holds ({low} and {high} are the int64 bounds).
PACK_OUT_OF_RANGE = (
    "kv-canary: {where}[{index}][{position}] = {value} is outside the int64 range [{low}, {high}]"
)
PACK_WHERE = "pack_token_ids token_lists"
# IncrementalWriter (kv_canary_torch/incremental.py): a step beyond the capacity its buffers reserve, or whose
# per-request sequences disagree in length.
INCREMENTAL_WHERE = "IncrementalWriter.step {arg}"  # new_tokens, rows or start_cols
INCREMENTAL_TOO_MANY_REQUESTS = (
    "kv-canary: IncrementalWriter.step got {bs} requests, more than the {limit} it reserves (max_requests); "
    "make the writer with a larger max_requests, or split the step"
)
INCREMENTAL_TOO_MANY_TOKENS = (
    "kv-canary: IncrementalWriter.step got {count} new tokens, more than the {limit} it reserves (max_new_tokens); "
    "make the writer with a larger max_new_tokens, or split the step"
)
INCREMENTAL_LENGTHS = (
    "kv-canary: IncrementalWriter.step {arg} has {length} entries, but new_tokens has {bs} requests"
)
INCREMENTAL_NOT_INTS = (
    "kv-canary: IncrementalWriter.step {arg} must be a 1-D sequence of int64 integers, got {what}"
)
# IncrementalWriter.step(..., lengths=...): the flat form's per-request counts, and flat tokens they do not cut.
INCREMENTAL_FLAT_LENGTHS = (
    "kv-canary: IncrementalWriter.step lengths must be an int >= 1 (the tokens of every request) or a 1-D sequence of "
    "ints >= 0 (one per request), got {what}"
)
INCREMENTAL_FLAT_COUNT = (
    "kv-canary: IncrementalWriter.step new_tokens has {count} tokens, which lengths={lengths} does not cut into "
    "requests ({expected})"
)
INCREMENTAL_CAPACITY = (
    "kv-canary: IncrementalWriter {arg} must be an int >= 0, got {value!r}"
)

# JAX frontend
# Reasons for CHOICE_UNAVAILABLE / NONE_AVAILABLE (implementation="pallas").
PALLAS_NEEDS_GPU = (
    "the Pallas kernel lowers through Triton and needs a CUDA GPU; "
    "pass interpret=True to run it in the Pallas interpreter, or implementation='xla'"
)
# jax.experimental.pallas.triton does not import (JAX 0.11 deprecates that lowering; a later JAX
# drops it); {error} is the exception, "ClassName: message".
PALLAS_NOT_IMPORTABLE = (
    "the Pallas kernel lowers through Triton and needs jax.experimental.pallas.triton, which does not import "
    "here ({error}): this JAX no longer ships Pallas' Triton lowering; pass implementation='mosaic' (Hopper and "
    "newer) or 'xla'"
)


def none_available_error(option: str, reasons) -> KvCanaryValueError:
    """A sequence of choices none of which can run here; ``reasons`` maps each name to why."""
    return value_error(
        NONE_AVAILABLE,
        option=option,
        names=", ".join(repr(name) for name in reasons),
        reasons="; ".join(f"{name!r}: {reason}" for name, reason in reasons.items()),
    )

# sharded JAX pools (kv_canary_jax/sharded.py: pool_out split by rows over a mesh axis)
# mesh= is not a mesh.
SHARDED_NOT_A_MESH = PREFIX + " mesh must be a jax.sharding.Mesh, got {type_name}"
# axis= names no axis of the mesh (or is not a name, or a tuple of names).
SHARDED_UNKNOWN_AXIS = PREFIX + " axis {axis!r} is not an axis of the mesh; its axes are {axes}"
# mesh= or axis= left out, and pool_out does not say how its rows are split; {reason} is one of SHARDED_LAYOUT_*.
SHARDED_LAYOUT_UNKNOWN = (
    PREFIX + " cannot tell which mesh axis splits pool_out's rows: {reason}; "
    "pass mesh= and axis=, or shard pool_out as NamedSharding(mesh, P(axis, None))"
)
SHARDED_LAYOUT_TRACED = "a pool traced under jax.jit carries its sharding only in JAX's explicit sharding mode"
SHARDED_LAYOUT_HOST = "it is a {type_name}, on no device"
SHARDED_LAYOUT_SHARDING = "its sharding {sharding} does not split the rows alone over a mesh axis"
# The rows do not divide among the devices of the axis (shard_map needs equal blocks).
SHARDED_UNEVEN = (
    PREFIX + " pool_out has {rows} rows, which the {devices} devices of mesh axis {axis!r} cannot split evenly; "
    "give the pool a multiple of {devices} rows"
)

# Mosaic GPU
# Reasons for CHOICE_UNAVAILABLE / NONE_AVAILABLE (implementation="mosaic", kv_canary_jax/pallas_mosaic_gpu.py).
# jax.experimental.pallas.mosaic_gpu does not import; {error} is the exception, "ClassName: message".
MOSAIC_NOT_IMPORTABLE = (
    "the Mosaic GPU kernel needs jax.experimental.pallas.mosaic_gpu, which does not import here ({error}); "
    "install absl-py, or a JAX that has it, or pass implementation='pallas' or 'xla'"
)
MOSAIC_NEEDS_GPU = (
    "the Mosaic GPU kernel needs a CUDA GPU of compute capability 9.0 or newer (Hopper on); "
    "pass interpret=True to run it in the Pallas interpreter, or implementation='pallas' or 'xla'"
)
# {capability} is "major.minor", e.g. "8.0".
MOSAIC_NEEDS_HOPPER = (
    "the Mosaic GPU kernel needs a CUDA GPU of compute capability 9.0 or newer (Hopper on), "
    "but this GPU's is {capability}; pass implementation='pallas' or 'xla'"
)

# Mosaic TPU
# Reasons for CHOICE_UNAVAILABLE / NONE_AVAILABLE (implementation="mosaic_tpu", kv_canary_jax/pallas_mosaic_tpu.py).
# jax.experimental.pallas.tpu does not import; {error} is the exception, "ClassName: message".
MOSAIC_TPU_NOT_IMPORTABLE = (
    "the Mosaic TPU kernel needs jax.experimental.pallas.tpu, which does not import here ({error}); "
    "pass implementation='xla'"
)
MOSAIC_TPU_NEEDS_TPU = (
    "the Mosaic TPU kernel needs a TPU; "
    "pass interpret=True to run it in Pallas's TPU interpreter, or implementation='xla'"
)


# Messages as data: a template of this module and its fields, formatted by format_message alone. The spec's
# exceptions keep both (``template``, ``fields``), so a frontend that cannot format a message yet (a compiled
# torch graph, whose sizes are symbolic while it is traced) passes them on, formatted when the values are known.
class Message(NamedTuple):
    """A message not yet formatted (a ``NOT_WRITABLE`` reason whose fields are sizes); ``str()`` formats it."""

    template: str
    fields: Mapping

    def __str__(self) -> str:
        return format_message(self.template, self.fields)


def format_message(template: str, fields: Mapping) -> str:
    """The one formatting rule of every message: ``template`` filled with ``fields``.

    A ``Message`` field is formatted first; a tuple of integers (a shape,
    strides) is written as ``arguments.format_shape`` writes it; any other
    field (a tuple of axis names too) as ``str.format`` writes it.
    """
    return template.format(**{name: _field_text(value) for name, value in fields.items()})


def _field_text(value):
    if isinstance(value, Message):  # a NamedTuple: asked before tuple
        return format_message(value.template, value.fields)
    if isinstance(value, tuple) and not any(isinstance(v, str) for v in value):  # isinstance: TorchDynamo traces it
        return format_shape(value)
    return value


def spec_error(cls, template: str, fields: Mapping):
    """``cls`` (``KvCanaryTypeError`` or ``KvCanaryValueError``) with ``format_message(template, fields)``, keeping both."""
    error = cls(format_message(template, fields))
    error.template = template
    error.fields = fields
    return error

# check_values=True inside a torch.func transform whose wrappers this torch cannot unwrap to read the values
# (kv_canary_torch/values.py); {error} is why, "ClassName: message".
CHECK_VALUES_TRANSFORMED = (
    PREFIX + " check_values=True cannot read {arg}'s values inside this torch.func transform ({error}); "
    "check the values outside the transform, or pass check_values=False"
)

# assign_req_to_token_pool (shared_spec/assignment.py): sglang's assignment of out_cache_loc into req_to_token, the
# windowed scatter with offsets from the requests' lengths. Its checks share the scatter's templates, retitled
# (for_assignment); these are its own.
ASSIGN_OP_NAME = "assign_req_to_token_pool"
ASSIGN_PREFIX = f"kv-canary: {ASSIGN_OP_NAME}"
ASSIGN_WRONG_DTYPE = ASSIGN_PREFIX + " {arg} must be int32 or int64, got {got}"
ASSIGN_BATCH_SIZE_TYPE = ASSIGN_PREFIX + " batch_size must be an int, got {type_name}"
ASSIGN_BATCH_SIZE_RANGE = ASSIGN_PREFIX + " batch_size {bs} is outside [0, {limit}]: len({arg}) is {limit}"
# The "slots" check (shared_spec.assignment.SLOTS_LIMIT): each length is clipped to len(out_cache_loc), so the bound
# keeps their running sum in int64.
ASSIGN_TOO_MANY_SLOTS = (
    ASSIGN_PREFIX + " batch_size {bs} times len(out_cache_loc) {n} is 2**63 or more: the running sum of the lengths "
    "must fit int64"
)
ASSIGN_DEVICE_MISMATCH = (
    ASSIGN_PREFIX + " {arg} is on {device} but req_to_token is on {table_device}; all arrays must be on one device"
)
# req_to_token is host data (a numpy array, for the JAX frontend), which goes to the device the other arrays are on.
ASSIGN_DEVICE_MISMATCH_HOST_TABLE = (
    ASSIGN_PREFIX + " {arg} is on {device} but {first} is on {first_device}; all arrays must be on one device "
    "(req_to_token, host data, goes where they are)"
)
ASSIGN_NOT_WRITABLE = ASSIGN_PREFIX + " req_to_token cannot be written in place: {reason}"


def for_assignment(template: str) -> str:
    """A scatter template (``PREFIX`` and its text) as the assignment's: the same text after ``ASSIGN_PREFIX``."""
    if not template.startswith(PREFIX):
        raise ValueError(f"not a template of {OP_NAME}: {template!r}")
    return ASSIGN_PREFIX + template[len(PREFIX):]


def retitled(error: Exception) -> Exception:
    """A spec error of the scatter (``spec_error``'s, with its template) as the assignment's, same class and fields."""
    return spec_error(type(error), for_assignment(error.template), error.fields)
# The JAX frontend's assignment with x64 off: its offsets are int64, which JAX then cannot hold.
ASSIGN_NEEDS_X64 = (
    ASSIGN_PREFIX + " computes its offsets in int64, which JAX has only with x64 enabled; enable it with "
    "jax.config.update('jax_enable_x64', True) (the library never changes it)"
)
