"""forkgen's patches of upstream Keras: one package per patch, each a declaration on the engine
(:mod:`codemods.engine`) with the code it inserts; the series (:mod:`codemods.series`) lists them.

Pure: source text in, source text out; each patch's one libcst command runs it alone.
"""

from __future__ import annotations
