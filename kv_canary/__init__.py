"""kv-canary's tools: the ``kv-canary`` command (``cli``): ``check`` (``check``), ``bench`` (``bench/``), ``plot``.

They sit above both frontends and may import either; nothing below imports them.
"""
