"""The launch rule (``kv_canary_torch.launch.plan``) and the native piece's (``native.cpp``'s ``plan``): equal everywhere.

The call path plans every remembered call in C from ``N`` and ``bs``; the
checked path plans in Python. Both must name the same kernel slot, grid and
ints for every input, or a remembered call would launch another kernel than
its first call did. Checked at every boundary of the rule (the small/large
shape, the tiled kernel's window, idleness and grid limits, the WIDE
and ONE switches, the int32 widths) and on random sizes and strides.
"""

from __future__ import annotations

import itertools
import subprocess
import sys

import pytest
from hypothesis import given, strategies as st

from kv_canary_torch.launch import native, plan as launch_plan
from tests.profiles import property_settings
from tests.torch_support import native_module, shared_native_cache

INT32_END = 2**31


def configured(c, rule=launch_plan.RULE):
    """``c`` configured with ``rule`` (its call path's memo empty): its ``plan`` plans under it."""
    c.configure(memo={}, tensor_type=object, hooks=None, raw_stream=lambda device: 0, current_device=None,
                rule=launch_plan.native_config(rule))
    return c


@pytest.fixture
def c_module(tmp_path_factory):
    return configured(native_module(tmp_path_factory))


def python_plan(*sizes, rule=launch_plan.RULE):
    plan = launch_plan.plan(*sizes, 0, rule=rule)
    return None if plan is launch_plan.NOTHING else (plan.slot, plan.grid, plan.ints, plan.small_ints)


def assert_twins(c, sizes, rule=launch_plan.RULE):
    assert c.plan(*sizes) == python_plan(*sizes, rule=rule), sizes


def around(x):
    return [v for v in (x - 1, x, x + 1) if v >= 0]


def boundary_sizes():
    """(bs, N, R, C, stride_row, stride_col, flat_stride, offsets_stride, rows_stride) at every edge of the rule."""
    small, large = launch_plan.SMALL[0], launch_plan.LARGE[0]
    cells = launch_plan.SMALL_CELLS
    out = []
    for bs in (1, 2, 64, 4097):  # the small/large switch at bs * min(C, N) == SMALL_CELLS
        for window in around(cells // bs):
            out += [(bs, window, 4, window, window, 1, 1, 1, 1), (bs, 10**6, 4, window, window, 1, 1, 1, 1)]
    for width in around(launch_plan.TILED_MIN_TILES * large) + around((launch_plan.TILED_MIN_TILES - 1) * large):
        bs = 2000  # bs * width past TILED_MIN_TOKENS
        out += [(bs, bs * width, bs + 1, width, width + 1, 1, 1, 1, 1), (bs, bs * width, bs + 1, width, width, 1, 2, 1, 1),
                (bs, bs * width, bs + 1, width, width * 3, 3, 1, 1, 1)]  # the tiled kernel's window; flat or columns strided
    for n in around(launch_plan.TILED_MIN_TOKENS):  # full batches of 512 x 8192 around the least N that takes it
        out += [(512, n, 513, 8192, 8192, 1, 1, 1, 1), (n // 8193, n, n // 8193 + 1, 8193, 8193, 1, 1, 1, 1)]
    for bs in (10, 100, 1000):  # a full batch: 100 * N against TILED_FILL * bs * min(C, N)
        width = 10 * large + 1
        for n in around(launch_plan.TILED_FILL * bs * width // 100) + around(bs * width) + [bs, bs * 7]:
            out.append((bs, n, bs + 1, width, width, 1, 1, 1, 1))
    for bs in (3, 64, 1000):  # ONE: the lanes, cdiv(TARGET_PROGRAMS, bs), against the window's tiles
        for width in around(-(-launch_plan.LARGE[2] // bs) * large):
            out.append((bs, 2 * width, bs + 1, width, width, 1, 1, 1, 1))  # 2 windows' tokens: not full, not tiled
    for width in around((launch_plan.GRID_AXIS_1 - 1) * large):  # grid axis 1: tiles == cdiv(window, BLOCK) + 1
        out.append((1, width, 2, width, width, 1, 1, 1, 1))
    for width, stride in ((INT32_END // 2, 2), (INT32_END - 1, 1), (INT32_END // 3, 3), (INT32_END - small, 1)):
        for w in around(width):  # WIDE: C * max(strides) or C + lanes * BLOCK reaching 2**31
            out += [(1, 10, 2, w, w * stride, stride, 1, 1, 1), (1, 10, 2, w, w, 1, stride, 1, 1),
                    (100, 10**6, 2, w, w, 1, 1, 1, 1), (2, 20000, 2, w, w * stride, stride, 1, 1, 1)]
    for big in around(INT32_END):  # each int, and bs, at the int32 width
        out += [(4, big, 5, 100, 100, 1, 1, 1, 1), (4, 100, big, 100, 100, 1, 1, 1, 1), (4, 100, 5, big, big, 1, 1, 1, 1),
                (4, 100, 5, 100, big, 1, 1, 1, 1), (4, 100, 5, 100, 100, big, 1, 1, 1), (4, 100, 5, 100, 100, 1, big, 1, 1),
                (4, 100, 5, 100, 100, 1, 1, big, 1), (4, 100, 5, 100, 100, 1, 1, 1, big), (big, 100, 5, 100, 100, 1, 1, 1, 1),
                (big, 10**6, 5, 10**4, 10**4, 1, 1, 1, 1)]
    for zero in range(4):  # bs, N, R or C zero: nothing
        sizes = [4, 100, 5, 100, 100, 1, 1, 1, 1]
        sizes[zero] = 0
        out.append(tuple(sizes))
    out += [(2**62, 2**62, 2**62, 2**62, 2**62, 2**62, 2**62, 2**62, 2**62), (1, 1, 1, 1, 0, 0, 0, 0, 0)]  # no overflow
    return out


def test_the_twins_agree_at_every_boundary(c_module):
    sizes = boundary_sizes()
    kinds = {python_plan(*s)[0] if python_plan(*s) else None for s in sizes}
    assert kinds == {None, *range(launch_plan.SLOTS)}, kinds  # every slot, and nothing, reached
    for s in sizes:
        assert_twins(c_module, s)


def test_the_twins_agree_on_random_sizes(c_module):
    @property_settings(300)
    @given(
        bs=st.integers(0, 5000), n=st.integers(0, 10**7), rows=st.integers(0, 4000),
        width=st.one_of(st.integers(0, 70000), st.integers(0, 2**40)),
        strides=st.tuples(*[st.one_of(st.just(1), st.integers(0, 4), st.integers(0, 2**33))] * 5),
    )
    def check(bs, n, rows, width, strides):
        assert_twins(c_module, (bs, n, rows, width, *strides))

    check()


def test_the_native_rule_takes_the_configured_numbers(c_module):
    # The rule's numbers reach C++ through plan.native_config(rule) at configure, so another rule (the tests' small
    # tiles) changes both.
    rule = launch_plan.RULE._replace(large_block=16, small_cells=-1, tiled_min_tokens=0, tiled_min_tiles=0, tiled_fill=0)
    configured(c_module, rule)
    for sizes in itertools.product((1, 7, 300), (1, 50, 4000), (3,), (1, 33, 100)):
        full = (*sizes[:3], sizes[3], sizes[3], 1, 1, 1, 1)
        assert_twins(c_module, full, rule)
    assert python_plan(64, 4000, 65, 100, 100, 1, 1, 1, 1, rule=rule)[0] == launch_plan.TILED_SLOT
    assert python_plan(64, 4000, 65, 100, 100, 1, 1, 1, 1)[0] != launch_plan.TILED_SLOT


def test_the_native_rule_needs_a_configuration(tmp_path_factory):
    path = native.build(shared_native_cache(tmp_path_factory))
    # A fresh process: the piece's configuration is process-wide, and this one's is configured.
    script = ("import pathlib, sys, torch; from kv_canary_torch.launch import native\n"
              "c = native.load_module(pathlib.Path(sys.argv[1]))\n"
              "try:\n    c.plan(1, 1, 1, 1, 1, 1, 1, 1, 1)\nexcept RuntimeError:\n    print('refused')\n")
    done = subprocess.run([sys.executable, "-c", script, str(path)], capture_output=True, text=True, timeout=300)
    assert done.stdout.strip() == "refused", done.stderr[-2000:]


def test_the_rule_refuses_shapes_the_slots_cannot_tell_apart():
    with pytest.raises(ValueError):
        launch_plan.RULE._replace(small_block=launch_plan.LARGE[0]).checked()


def test_every_small_launch_has_lanes_for_its_tiles():
    # No slot holds a SMALL kernel with the tile loop: the rule refuses numbers that would need one.
    block, _, target = launch_plan.SMALL
    for bs in (1, 2, 3, 5, 64, 1000, launch_plan.SMALL_CELLS):
        window = launch_plan.SMALL_CELLS // bs
        plan = launch_plan.plan(bs, window, 2, window, window, 1, 1, 1, 1, 0)
        assert plan.constexprs[0] == block and dict(zip(launch_plan.LANES_CONSTEXPRS, plan.constexprs))["ONE"]
    with pytest.raises(ValueError, match="SMALL_CELLS"):
        launch_plan.RULE._replace(small_cells=block * target + 1).checked()


@pytest.mark.parametrize("bs, grid", [(0, None), (1, (1, 64)), (16, (1, 64)), (17, (2, 64)), (64, (4, 64)),
                                      (65, (5, 52)), (256, (16, 16)), (1024, (64, 4)), (1025, (65, 4)),
                                      (4096, (256, 1)), (20000, (1250, 1)), (2**31 - 1, (2**27, 1))])
def test_the_assignment_grid_is_a_function_of_bs_alone(bs, grid):
    """Groups of ASSIGN_GROUP requests, programs per group filling ASSIGN_TARGET_PROGRAMS, at most ASSIGN_MAX_SPLIT."""
    assert launch_plan.assign_grid(bs) == grid


@pytest.mark.parametrize("name", ["assign_group", "assign_target_programs", "assign_max_split"])
def test_the_native_piece_refuses_an_assignment_grid_it_cannot_plan(c_module, name):
    with pytest.raises(ValueError):
        c_module.configure(memo={}, tensor_type=object, hooks=None, raw_stream=lambda device: 0, current_device=None,
                           rule=dict(launch_plan.native_config(), **{name: 0}))
    with pytest.raises(KeyError):
        c_module.configure(memo={}, tensor_type=object, hooks=None, raw_stream=lambda device: 0, current_device=None,
                           rule={k: v for k, v in launch_plan.native_config().items() if k != name})
