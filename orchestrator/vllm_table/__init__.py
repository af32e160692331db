"""vLLM 0.33.0's `serve` options as data (options_table.py) and its parser's type functions (argtypes.py).

The core package owns them so `validate` checks flags offline without the `sim` extra; the vLLM stand-in
(orchestrator/sim/standin/) builds its parser from the same modules, and its image carries them beside it
(sim/images_spec.py), so the two cannot drift. Stdlib only: the stand-in image has nothing else.
gen_options.py writes options_table.py from tests/data/vllm.
"""
